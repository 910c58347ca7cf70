"""The generation stage: engines, prompts, oracle contexts, the cell runner, answer extraction and the tool agent."""

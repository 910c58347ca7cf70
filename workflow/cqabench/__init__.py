"""cqabench: how much does retrieval decide the answers an LLM gives to complex questions."""

__version__ = "0.1.0"

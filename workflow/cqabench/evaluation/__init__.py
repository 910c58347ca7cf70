"""The evaluation stage: retrieval and answer metrics, and scoring a cell's predictions against its split."""

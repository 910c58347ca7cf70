"""The report stage: the fact table (`aggregate`), paper-layout tables checked against published
numbers (`tables`, `expected`), plots, paired significance tests and provenance stamps.

Everything here reads only the metric-file contract of docs/architecture.md, so it works on any
subset of the matrix and never needs the models that produced the numbers.
"""

"""Errors that name where bad input sits, so a user can open the file and fix it."""

from __future__ import annotations

from pathlib import Path


class CqaError(Exception):
    """Base of every error cqabench raises on purpose; the CLI prints it and exits 1."""


class DataError(CqaError):
    """A raw or prepared file is malformed: names the file, the record and the field."""

    def __init__(self, path: str | Path, record: object, field: str, problem: str) -> None:
        self.path = str(path)
        self.record = record
        self.field = field
        self.problem = problem
        super().__init__(f"{self.path}: record {record!r}, field {field!r}: {problem}")


class ConfigError(CqaError):
    """A config value is unknown or inconsistent."""

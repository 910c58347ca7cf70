"""`cqabench` subcommands of the report stage."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    """Add this stage's subcommands (each sets `func`)."""

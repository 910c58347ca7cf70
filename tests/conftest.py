"""Shared fixtures: the read-only real data slices next to the repository."""

from __future__ import annotations

from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The real dataset slices (/work/shared/data); tests that need them skip where absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data slices not found at {SHARED_DATA}")
    return SHARED_DATA

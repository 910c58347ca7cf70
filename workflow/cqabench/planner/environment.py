"""What a plan needs to know beyond the config: kept apart so every stage's planning can name it.

The same config plans different shell words and finds different files depending on where the
rules run and with which interpreters; `Environment` carries exactly that, so planning reads no
process state of its own and tests can plan a config for any checkout.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Environment:
    """What planning needs to know beyond the config: where relative paths are, which Python.

    `root` is the working directory the rules run in (raw files, templates, external runs and
    expected-number files are looked up under it); `python`, `vllm_python` (vLLM's CPU build,
    `make setup`) and `vllm_gpu_python` (its CUDA build, `make setup-gpu`) are the shell words of
    the interpreters jobs run the package with; `conda` is true under `--sdm conda`. Planning never
    reads the vLLM ones (a vLLM job checks its own when it starts: cqabench.generation.vllm_env).
    """

    root: Path = Path(".")
    python: str = "python"
    vllm_python: str = ".venv-vllm/bin/python"
    conda: bool = False
    vllm_gpu_python: str = ".venv-vllm-gpu/bin/python"

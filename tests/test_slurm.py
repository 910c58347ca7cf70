"""The SLURM profile: flag building (pure) and a real submission to a one-node local cluster.

The integration test starts SLURM with scripts/slurm_local.sh (root, Debian's slurm-wlm and
munge) and is skipped, with the reason, where that cannot run. The local cluster has no GPUs,
so its profile is the shipped one with GPU requests mapped to nothing (slurm_gpu_request='none'),
no conda, and memory requests capped to what the node has.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
PROFILE = REPO / "profiles" / "slurm"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, PROFILE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


submit = _load("sbatch_submit")
status = _load("slurm_status")

SITE = {"slurm_partition": "cpu", "slurm_gpu_partition": "gpu", "slurm_account": "", "slurm_gpu_request": "gres"}


def test_cpu_job_goes_to_cpu_partition_without_gpu() -> None:
    args = submit.sbatch_args({"rule": "prepare", "threads": 2, "resources": {**SITE, "mem_mb": 8000, "runtime": 90, "gpu": 0}})
    assert "--partition=cpu" in args and "--cpus-per-task=2" in args
    assert "--mem=8000M" in args and "--time=90" in args
    assert not any(a.startswith(("--gres", "--gpus", "--account")) for a in args)
    assert "--output=logs/slurm/prepare/%j.out" in args


@pytest.mark.parametrize("mode, flag", [("gres", "--gres=gpu:1"), ("gpus", "--gpus=1"), ("none", None)])
def test_gpu_job_request_follows_site_mode(mode: str, flag: str | None) -> None:
    res = {**SITE, "slurm_gpu_request": mode, "slurm_account": "proj42", "gpu": 1, "slurm_extra": "--qos=short"}
    args = submit.sbatch_args({"rule": "generate", "threads": 4, "resources": res})
    assert "--partition=gpu" in args and "--account=proj42" in args and args[-1] == "--qos=short"
    gpu_flags = [a for a in args if a.startswith(("--gres", "--gpus"))]
    assert gpu_flags == ([flag] if flag else [])


def test_unknown_gpu_mode_is_refused() -> None:
    with pytest.raises(SystemExit, match="slurm_gpu_request"):
        submit.sbatch_args({"rule": "g", "resources": {**SITE, "gpu": 1, "slurm_gpu_request": "cuda"}})


def test_properties_line_is_read(tmp_path: Path) -> None:
    script = tmp_path / "job.sh"
    script.write_text('#!/bin/sh\n# properties = {"rule": "x", "threads": 3, "resources": {"gpu": 0}}\necho\n')
    assert submit.read_properties(script)["threads"] == 3


@pytest.mark.parametrize("state, word", [
    ("COMPLETED", "success"), ("RUNNING", "running"), ("PENDING", "running"), ("COMPLETING", "running"),
    ("FAILED", "failed"), ("CANCELLED by 0", "failed"), ("TIMEOUT", "failed"), ("OUT_OF_MEMORY", "failed"),
    ("NODE_FAIL", "failed"), ("COMPLETED+", "success"),
])
def test_status_words(state: str, word: str) -> None:
    assert status.classify(state) == word


def test_profile_is_site_neutral() -> None:
    """Rules carry no site values; the profile holds them, as documented placeholders."""
    profile = yaml.safe_load((PROFILE / "config.yaml").read_text())
    assert profile["executor"] == "cluster-generic"
    defaults = "\n".join(profile["default-resources"])
    for key in ("slurm_partition", "slurm_gpu_partition", "slurm_account", "slurm_gpu_request", "gpu=0"):
        assert key in defaults
    for smk in (REPO / "workflow" / "rules").glob("*.smk"):
        text = smk.read_text()
        assert "slurm_" not in text and "partition" not in text, smk.name


# --------------------------------------------------------------------------- real SLURM

def _start_slurm() -> str | None:
    """None when the local cluster is up, else why it is not."""
    if os.geteuid() != 0:
        return "needs root to start munged/slurmctld/slurmd"
    try:
        done = subprocess.run(["bash", str(REPO / "scripts" / "slurm_local.sh")], capture_output=True,
                              text=True, timeout=600)
    except subprocess.TimeoutExpired:
        return "scripts/slurm_local.sh timed out"
    if done.returncode != 0:
        return f"scripts/slurm_local.sh failed: {done.stderr.strip()[-500:]}"
    return None


def _workdir(tmp: Path, name: str) -> Path:
    work = tmp / name
    work.mkdir()
    for entry in ("resources", "config", "profiles"):
        (work / entry).symlink_to(REPO / entry)
    return work


def _test_profile(tmp: Path) -> Path:
    profile = yaml.safe_load((PROFILE / "config.yaml").read_text())
    profile.pop("software-deployment-method", None)
    profile.pop("conda-frontend", None)
    profile["jobs"] = 2
    profile["default-resources"] = [
        "slurm_gpu_request='none'" if r.startswith("slurm_gpu_request") else r
        for r in profile["default-resources"]
    ]
    for resources in profile.get("set-resources", {}).values():
        resources["mem_mb"] = min(int(resources.get("mem_mb", 1000)), 1000)  # the node's RAM, not a server's
    folder = tmp / "profile-local-slurm"
    folder.mkdir()
    (folder / "config.yaml").write_text(yaml.safe_dump(profile))
    return folder


TARGETS = [f"results/data/musique/train/{t}.parquet" for t in ("queries", "corpus", "qrels", "answers")]


def _snakemake(work: Path, *extra: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--directory", str(work),
           "--configfile", str(REPO / "config" / "config.yaml"), *extra, *TARGETS]
    # Rules call `cqabench`: the environment running Snakemake (this venv) must be on PATH,
    # as it is for a user who activated it; sbatch exports it to the jobs.
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PATH": path}
    return subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=600, env=env)


@pytest.mark.slow
def test_slurm_run_equals_local_run(tmp_path: Path) -> None:
    why = _start_slurm()
    if why:
        pytest.skip(why)
    if shutil.which("sbatch") is None:
        pytest.skip("sbatch not on PATH")
    local = _workdir(tmp_path, "local")
    done = _snakemake(local, "--cores", "1")
    assert done.returncode == 0, done.stderr[-3000:]
    cluster = _workdir(tmp_path, "cluster")
    done = _snakemake(cluster, "--profile", str(_test_profile(tmp_path)))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Submitted job" in done.stderr or "external jobid" in done.stderr, done.stderr[-2000:]
    logs = list((cluster / "logs" / "slurm").rglob("*.out"))
    assert logs, "sbatch wrote no job logs: jobs did not run through SLURM"
    for target in TARGETS:
        assert pq.read_table(cluster / target).equals(pq.read_table(local / target)), target

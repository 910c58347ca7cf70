"""The SLURM profile: Snakemake's standard SLURM executor plugin, checked on our profile values and
on a real one-node cluster.

The unit tests feed the shipped profile's values (default-resources, set-resources, the partition
file) through the plugin's own code (partition choice, sbatch flags, GPU request), so they test
what the plugin will submit rather than a copy of its logic. The integration test starts SLURM
with scripts/slurm_local.sh (root, Debian's slurm-wlm and munge) and is skipped, with the reason,
where that cannot run. The local cluster has no accounting database (no slurmdbd), so its profile
reads job states with the plugin's `squeue` mode. Its one GPU (type rtx3090) is a gres.conf entry
without a real device: SLURM allocates it, no job computes on it, so a CPU job stands in for a GPU
job and must reach the gpu partition with the shipped typed request, while a CPU job carries
`--gpus=rtx3090:0` and gets no GPU.
"""

from __future__ import annotations

import ast
import contextlib
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml
from snakemake_executor_plugin_slurm import ExecutorSettings
from snakemake_executor_plugin_slurm.partitions import get_best_partition, read_partition_file
from snakemake_executor_plugin_slurm.submit_string import get_submit_command
from snakemake_executor_plugin_slurm.utils import set_gres_string

REPO = Path(__file__).resolve().parents[2]
PROFILE = REPO / "profiles" / "slurm"
PROFILE_CONFIG = yaml.safe_load((PROFILE / "config.yaml").read_text())
LOG = logging.getLogger("test_slurm")


class _Resources(dict):
    """Job resources as the plugin reads them: `.get(key)` and attribute access."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError as err:
            raise AttributeError(name) from err


class PluginJobStandIn:
    """Test double at the plugin's job boundary (JobExecutorInterface): a rule's name, threads and
    its resources merged as Snakemake merges them (profile default-resources < the rule's own
    resources < profile set-resources)."""

    def __init__(self, rule: str, threads: int, **rule_resources: Any) -> None:
        self.name = rule
        self.threads = threads
        merged: dict[str, Any] = {}
        for entry in PROFILE_CONFIG["default-resources"]:
            key, value = str(entry).split("=", 1)
            merged[key] = ast.literal_eval(value)
        merged.update(rule_resources)
        merged.update(PROFILE_CONFIG.get("set-resources", {}).get(rule, {}))
        self.resources = _Resources(merged)

    def is_group(self) -> bool:
        return False


def _sbatch(job: PluginJobStandIn) -> str:
    """The sbatch line the plugin builds for `job` (without account, partition and wrap, which it
    adds from cluster queries at submit time)."""
    params = {
        "run_uuid": "RUN",
        "slurm_logfile": "logs/slurm/x/%j.log",
        "comment_str": "c",
        "account": "",
        "partition": "",
        "workdir": "/work",
    }
    return get_submit_command(job, params, settings=ExecutorSettings(status_command="squeue")) + set_gres_string(job)


def test_profile_uses_the_standard_plugin_and_no_scripts() -> None:
    assert PROFILE_CONFIG["executor"] == "slurm"
    assert not any(key.startswith("cluster-generic") for key in PROFILE_CONFIG)
    assert sorted(p.name for p in PROFILE.iterdir()) == ["config.yaml", "partitions.yaml"]
    assert (REPO / PROFILE_CONFIG["slurm-partition-config"]).resolve() == PROFILE / "partitions.yaml"


def test_profile_is_site_neutral() -> None:
    """Rules carry no site values; the profile holds them, as documented placeholders."""
    defaults = {str(r).split("=", 1)[0] for r in PROFILE_CONFIG["default-resources"]}
    assert {"slurm_account", "gpu_model", "gpu", "mem_mb", "runtime"} <= defaults
    # A default slurm_partition would override the partition file for every job.
    assert "slurm_partition" not in defaults
    for smk in (REPO / "workflow" / "rules").glob("*.smk"):
        text = smk.read_text()
        assert "slurm_" not in text and "partition" not in text and "rtx" not in text, smk.name


def test_partition_file_sends_cpu_jobs_to_cpu_and_gpu_jobs_to_gpu() -> None:
    partitions = read_partition_file(PROFILE / "partitions.yaml")
    assert [p.name for p in partitions] == ["cpu", "gpu"]
    cpu_job = PluginJobStandIn("prepare", 2, gpu=0)
    gpu_job = PluginJobStandIn("generate", 2, gpu=1, mem_mb=16000, runtime=240)
    assert get_best_partition(partitions, cpu_job, LOG) == "cpu"
    assert get_best_partition(partitions, gpu_job, LOG) == "gpu"
    # The model is checked too: a job asking for a type the GPU partition lacks fits nowhere.
    other_model = PluginJobStandIn("generate", 2, gpu=1, gpu_model="a100")
    assert get_best_partition(partitions, other_model, LOG) is None
    # Two cards exceed the partition's per-job limit.
    assert get_best_partition(partitions, PluginJobStandIn("generate", 2, gpu=2), LOG) is None


def test_gpu_job_asks_for_one_rtx3090_with_its_memory_and_time() -> None:
    line = _sbatch(PluginJobStandIn("index_dense", 4, gpu=1, mem_mb=16000, runtime=240))
    assert line.endswith(" --gpus=rtx3090:1")
    assert " --mem 16000" in line and " -t 240" in line and " --cpus-per-task=4" in line
    assert "--ntasks=" not in line  # GPU jobs get no implicit task geometry


def test_cpu_job_gets_its_own_sizes_and_a_zero_gpu_request() -> None:
    line = _sbatch(PluginJobStandIn("prepare", 2, gpu=0, mem_mb=1000, runtime=10))
    # the rule's own memory and runtime (its estimate, cqabench.estimate): the profile sets none
    assert " --mem 1000" in line and " -t 10" in line
    assert " --ntasks=1" in line and " --cpus-per-task=2" in line
    # gpu_model is a default resource, so CPU jobs carry a count of 0: SLURM allocates no GPU
    # (the integration test runs such a job on a node that has an rtx3090 and it gets none).
    assert line.endswith(" --gpus=rtx3090:0")


def test_without_gpu_model_the_request_is_untyped() -> None:
    job = PluginJobStandIn("generate", 2, gpu=1)
    del job.resources["gpu_model"]
    assert set_gres_string(job) == " --gpus=1"
    del job.resources["gpu"]
    job.resources["gres"] = "gpu:rtx3090:1"  # the gres form, for rules set through set-resources
    assert set_gres_string(job) == " --gres=gpu:rtx3090:1"


# --------------------------------------------------------------------------- real SLURM


def _start_slurm() -> str | None:
    """None when the local cluster is up, else why it cannot start here (a checked machine
    condition: not root, or SLURM neither installed nor installable). Where it could start and
    does not, the test fails with the script's output (issue 21: no error becomes a skip)."""
    if os.geteuid() != 0:
        return "needs root to start munged/slurmctld/slurmd"
    if shutil.which("slurmctld") is None and shutil.which("apt-get") is None:
        return "SLURM is not installed and there is no apt-get to install slurm-wlm and munge"
    try:
        done = subprocess.run(
            ["bash", str(REPO / "scripts" / "slurm_local.sh")], capture_output=True, text=True, timeout=600
        )
    except subprocess.TimeoutExpired:
        pytest.fail("scripts/slurm_local.sh ran past 600 s", pytrace=False)
    if done.returncode != 0:
        pytest.fail(
            f"scripts/slurm_local.sh failed (exit {done.returncode}): {done.stderr.strip()[-1500:]}", pytrace=False
        )
    return None


# What scripts/slurm_local.sh starts, in the order they are stopped (clients before the controller,
# munged, which both authenticate through, last).
DAEMONS = ("slurmd", "slurmctld", "munged")


def _daemon_pids(names: tuple[str, ...] = DAEMONS) -> dict[str, set[int]]:
    """{name: pids of live processes so named} from /proc (a zombie is not live)."""
    found: dict[str, set[int]] = {name: set() for name in names}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and _alive(int(entry.name)):
            try:
                comm = (entry / "comm").read_text().strip()
            except OSError:  # it just ended
                continue
            if comm in found:
                found[comm].add(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat_line.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def _stop_daemons_started_since(before: dict[str, set[int]], wait_s: float = 30.0) -> list[int]:
    """Stop every daemon of `before`'s names that was not running then; return the pids stopped.

    The daemons fork away from the test (they are not its children), so they are found by name
    and told apart from a cluster that was already up by their pids. SIGTERM lets slurmctld save
    its state; one still alive after `wait_s` gets SIGKILL.
    """
    stopped: list[int] = []
    now = _daemon_pids(tuple(before))
    for name in before:
        for pid in sorted(now[name] - before[name]):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + wait_s
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            if _alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            stopped.append(pid)
    return stopped


@pytest.fixture
def slurm_cluster(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The local cluster for one test; every daemon it started is stopped afterwards, pass or fail
    (issue 21: munged, slurmctld and slurmd outlived the suite). One that was already up stays.
    Its clients read the machine's SLURM config, not the session's fail-fast copy (conftest.py)."""
    from conftest import MACHINE_SLURM_CONF

    if MACHINE_SLURM_CONF is None:
        monkeypatch.delenv("SLURM_CONF", raising=False)
    else:
        monkeypatch.setenv("SLURM_CONF", MACHINE_SLURM_CONF)
    before = _daemon_pids()
    try:
        why = _start_slurm()
        if why:
            pytest.skip(why)  # inside the try: a half-started cluster is stopped too
        yield
    finally:
        stopped = _stop_daemons_started_since(before)
        LOG.info("stopped the local cluster's daemons %s", stopped)


def test_teardown_stops_only_the_daemons_started_since(tmp_path: Path) -> None:
    """A stand-in daemon (a copy of `sleep` under a unique name, detached from the test like munged
    is) started after the snapshot is stopped; one running before it is left alone."""
    name = f"cqabfake{os.getpid()}"  # /proc/<pid>/comm keeps 15 characters
    name = name[:15]
    fake = tmp_path / name
    shutil.copy(shutil.which("sleep"), fake)

    def spawn() -> int:
        # `&` in a shell that exits: the daemon is reparented away from the test, like a real one.
        out = subprocess.run(
            ["sh", "-c", f'"{fake}" 300 >/dev/null 2>&1 & echo $!'], capture_output=True, text=True, check=True
        )
        return int(out.stdout)

    old = spawn()
    try:
        before = _daemon_pids((name,))
        assert before == {name: {old}}
        new = spawn()
        assert _daemon_pids((name,)) == {name: {old, new}}
        assert _stop_daemons_started_since(before, wait_s=5) == [new]
        assert not _alive(new) and _alive(old)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(old, signal.SIGKILL)


def _workdir(tmp: Path, name: str) -> Path:
    work = tmp / name
    work.mkdir()
    for entry in ("resources", "config", "profiles"):
        (work / entry).symlink_to(REPO / entry)
    return work


def _test_profile(tmp: Path) -> Path:
    """The shipped profile, changed only where the one-node test cluster must be."""
    profile = dict(PROFILE_CONFIG)
    profile.pop("software-deployment-method", None)
    profile.pop("conda-frontend", None)
    profile["jobs"] = 2
    profile["slurm-status-command"] = "squeue"  # no slurmdbd, so sacct has no records; MinJobAge=3600
    # Real queues warrant the defaults. Snakemake's first status check comes after
    # seconds-between-status-checks, each later one 10 s later than the one before while nothing
    # ends; once a job ends the plugin resets the wait to slurm-init-seconds-before-status-checks,
    # and the run ends only after that wait. These two jobs take 25-30 s side by side on 2 cores:
    # one check at 35 s finds both done (the next would be at 80 s), and the run ends 1 s later.
    profile["seconds-between-status-checks"] = 35
    profile["slurm-init-seconds-before-status-checks"] = 1
    profile["set-resources"] = {
        rule: {**res, "mem_mb": min(int(res.get("mem_mb", 1000)), 1000)}  # the node's RAM, not a server's
        for rule, res in profile.get("set-resources", {}).items()
    }
    # A stand-in GPU job: the sample's GPU rules need a real card, so one of the two CPU jobs asks
    # for the node's (count-only) rtx3090 and must go to the gpu partition with the shipped GPU
    # request; a per-job expression, as the rules' own gpu resources are.
    profile["set-resources"].setdefault("prepare", {})["gpu"] = "1 if wildcards.dataset == 'tatqa' else 0"
    folder = tmp / "profile-local-slurm"
    folder.mkdir()
    (folder / "config.yaml").write_text(yaml.safe_dump(profile))
    return folder


TABLES = ("queries", "corpus", "qrels", "answers")
# Two prepare jobs, run side by side: musique on the cpu partition, tatqa as the stand-in GPU job.
TARGETS = [
    f"results/sample/data/{ds}/{split}/{t}.parquet"
    for ds, split in (("musique", "train"), ("tatqa", "dev"))
    for t in TABLES
]


def _snakemake(work: Path, *extra: str) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "-s",
        str(REPO / "Snakefile"),
        "--directory",
        str(work),
        "--configfile",
        str(REPO / "config" / "config.yaml"),
        *extra,
        *TARGETS,
    ]
    # Rules call `cqabench`: the environment running Snakemake (this venv) must be on PATH,
    # as it is for a user who activated it; sbatch exports it to the jobs (--export=ALL).
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PATH": path}
    return subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=600, env=env)


def _job_fields(job_id: str) -> dict[str, str]:
    """`scontrol show job` of one job as a dict (finished jobs stay for MinJobAge)."""
    done = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True, check=True)
    return dict(field.split("=", 1) for field in done.stdout.split() if "=" in field)


@pytest.mark.parametrize(
    "named",
    [(), ("--workflow-profile", "profiles/default"), ("--workflow-profile=default",)],
    ids=["implicit", "explicit-path", "explicit-name"],
)
@pytest.mark.snakemake
def test_slurm_run_refuses_the_workflow_profile(tmp_path: Path, named: tuple[str, ...]) -> None:
    """Without --workflow-profile none, profiles/default would override profiles/slurm key by key
    (its default-resources drop slurm_account and gpu_model): the run stops before submitting,
    also when the flag names profiles/default itself (issue 21: it used to pass then)."""
    work = _workdir(tmp_path, "cluster")
    done = _snakemake(work, *named, "--profile", str(_test_profile(tmp_path)))
    assert done.returncode == 1, done.stderr[-3000:]
    assert "workflow specific profile profiles/default" in done.stderr  # Snakemake says it loaded it
    assert "profiles/default applied as Snakemake's workflow profile" in done.stderr
    assert "--workflow-profile none --profile profiles/slurm" in done.stderr
    assert "has been submitted" not in done.stderr and not (work / "logs").exists()


def test_the_guard_finds_the_workflow_profile_snakemake_applies(tmp_path: Path) -> None:
    """cqabench.planner.cluster_profile follows snakemake.cli.parse_args's search: hand-listed cases."""
    from cqabench.planner.cluster_profile import workflow_profile_flag, workflow_profile_in_effect

    (tmp_path / "profiles" / "default").mkdir(parents=True)
    (tmp_path / "profiles" / "default" / "config.yaml").write_text("latency-wait: 5\n")
    snakefile = tmp_path / "repo" / "Snakefile"
    default = tmp_path / "profiles" / "default"
    assert workflow_profile_flag(["--workflow-profile", "a", "--workflow-profile=b", "-n"]) == "b"  # the last wins
    assert workflow_profile_flag(["--workflow-prof", "c"]) == "c"  # argparse's abbreviation
    assert workflow_profile_flag(["-n"]) is None
    cases = {
        None: default,
        "default": default,
        "profiles/default": default,
        "none": None,
        "nowhere": None,
        "profiles/default/config.yaml": default / "config.yaml",
        str(default): default,
    }
    for flag, expected in cases.items():
        assert workflow_profile_in_effect(flag, snakefile, [tmp_path / "elsewhere", tmp_path]) == expected, flag
    # beside the Snakefile (Snakemake's third place), whatever the directory it was started in
    assert workflow_profile_in_effect(None, tmp_path / "Snakefile", [tmp_path / "elsewhere"]) == default


@pytest.mark.snakemake
@pytest.mark.daemon
def test_slurm_run_equals_local_run(tmp_path: Path, slurm_cluster: None) -> None:
    assert shutil.which("sbatch"), "the local cluster is up but sbatch is not on PATH"
    local = _workdir(tmp_path, "local")
    done = _snakemake(local, "--cores", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    cluster = _workdir(tmp_path, "cluster")
    done = _snakemake(cluster, "--workflow-profile", "none", "--profile", str(_test_profile(tmp_path)))
    assert done.returncode == 0, done.stderr[-3000:]
    run_ids = [
        line.split("SLURM run ID:", 1)[1].strip() for line in done.stderr.splitlines() if "SLURM run ID:" in line
    ]
    assert len(run_ids) == 1, done.stderr[-2000:]
    submitted = re.findall(r"Job \d+ has been submitted with SLURM jobid (\d+) \(log: (\S+)\)", done.stderr)
    assert len(submitted) == 2, done.stderr[-3000:]
    jobs = {job_id: _job_fields(job_id) for job_id, _ in submitted}
    seen = sorted((f["Comment"], f["Partition"], f["JobState"], f.get("TresPerJob")) for f in jobs.values())
    assert seen == [
        ("rule_prepare_wildcards_musique_train", "cpu", "COMPLETED", "gres:gpu:rtx3090:0"),
        ("rule_prepare_wildcards_tatqa_dev", "gpu", "COMPLETED", "gres:gpu:rtx3090:1"),
    ], seen
    assert {f["JobName"] for f in jobs.values()} == set(run_ids)  # what the squeue status mode filters on
    for _job_id, log in submitted:  # kept (slurm-keep-successful-logs), under slurm-logdir
        assert Path(log).is_file() and Path(log).resolve().is_relative_to((cluster / "logs" / "slurm").resolve()), log
    for target in TARGETS:
        assert pq.read_table(cluster / target).equals(pq.read_table(local / target)), target

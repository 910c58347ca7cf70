"""Memory-hungry rules retry with more memory: the helper, a real Snakemake run that uses it, and
the workflow's rules declaring it."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cqabench.common.job_memory import MEMORY_RETRIES, memory_mb

ROOT = Path(__file__).resolve().parents[2]
HUNGRY = (
    "prepare",
    "pool_corpus",
    "export_beir",
    "index",
    "encode_part",
    "gather_index",
    "search",
    "decompose_search",
    "convert_model",
    "generate_batch",
    "generate",
)


def test_memory_doubles_per_attempt() -> None:
    assert [memory_mb(16000, a) for a in (1, 2, 3)] == [16000, 32000, 64000]
    assert memory_mb("4000", 2) == 8000  # config values may arrive as strings
    with pytest.raises(ValueError):
        memory_mb(4000, 0)
    with pytest.raises(ValueError):
        memory_mb(0, 1)


@pytest.mark.snakemake
def test_snakemake_retries_a_failed_job_with_more_memory(tmp_path: Path) -> None:
    # A job that "runs out of memory" (exits 1) unless it was given 4000 MB: it succeeds on its
    # third attempt, and each attempt records the memory Snakemake reserved for it.
    (tmp_path / "Snakefile").write_text(
        "from cqabench.common.job_memory import MEMORY_RETRIES, memory_mb\n\n"
        "rule hungry:\n"
        "    output: 'done.txt'\n"
        "    retries: MEMORY_RETRIES\n"
        "    resources:\n"
        "        mem_mb=lambda w, attempt: memory_mb(1000, attempt),\n"
        "    shell: 'echo {resources.mem_mb} >> attempts.txt; test {resources.mem_mb} -ge 4000 && touch {output}'\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "workflow"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "1", "--quiet", "progress"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "attempts.txt").read_text().split() == ["1000", "2000", "4000"]
    assert MEMORY_RETRIES == 2


@pytest.mark.snakemake
def test_the_memory_hungry_rules_declare_the_retries() -> None:
    from snakemake.api import SnakemakeApi
    from snakemake.settings.types import ConfigSettings, OutputSettings, ResourceSettings, StorageSettings

    with SnakemakeApi(OutputSettings(quiet=True)) as api:
        workflow = api.workflow(
            resource_settings=ResourceSettings(),
            config_settings=ConfigSettings(),
            storage_settings=StorageSettings(),
            snakefile=ROOT / "Snakefile",
            workdir=ROOT,
        )
        rules = {r.name: r for r in workflow._workflow.rules}
    # `_restart_times` is the rule's `retries:` (the public property also needs executor settings)
    assert {name: rules[name]._restart_times for name in HUNGRY} == {name: MEMORY_RETRIES for name in HUNGRY}
    for name in HUNGRY:
        assert "mem_mb" in rules[name].resources
    # mem_mb doubles per attempt in exactly the rules that retry (`job_resources(rule, retries=True)`,
    # cqabench.estimate.rule_resources): Snakemake passes `attempt` only to a function that takes it
    doubling = {
        name
        for name, rule in rules.items()
        if "mem_mb" in rule.resources
        and rule.resources["mem_mb"].is_evaluable()
        and "attempt" in inspect.signature(rule.resources["mem_mb"]._evaluator).parameters
    }
    retried = {name for name, rule in rules.items() if rule._restart_times == MEMORY_RETRIES}
    assert doubling == retried and set(HUNGRY) <= retried


# ---- retries for out-of-memory failures only (issue 21): cqabench.common.job_memory.run_job ----

JOB = '''import os, signal, sys
from pathlib import Path
from cqabench.common.errors import ConfigError
from cqabench.common.job_memory import run_job


def main(argv):
    """A stand-in `cqabench` that records each real run; 'hungry' dies by SIGKILL (what the
    kernel's or SLURM's OOM killer does) unless it was given 4000 MB; 'broken' is a bad setting."""
    mem = int(os.environ["MEM"])
    with open("runs.txt", "a") as fh:
        fh.write(f"{argv[0]} {mem}\\n")
    if argv[0] == "hungry" and mem < 4000:
        os.kill(os.getpid(), signal.SIGKILL)
    if argv[0] == "broken":
        print("cqabench broken: error: llms.m.device: 'gpu' is not a device name", file=sys.stderr)
        return 1
    Path(argv[1]).touch()
    return 0


sys.exit(run_job(sys.argv[1:], main=main))
'''

SNAKEFILE = """from cqabench.common.job_memory import MEMORY_RETRIES, memory_mb, start_run

start_run(workflow.is_main_process)

rule hungry:
    output: "hungry.txt"
    retries: MEMORY_RETRIES
    resources:
        mem_mb=lambda w, attempt: memory_mb(1000, attempt),
    log: "hungry.log"
    shell: "MEM={resources.mem_mb} python job.py hungry {output} 2> {log}"

rule broken:
    output: "broken.txt"
    retries: MEMORY_RETRIES
    resources:
        mem_mb=lambda w, attempt: memory_mb(1000, attempt),
    log: "broken.log"
    shell: "echo attempt >> attempts.txt; MEM={resources.mem_mb} python job.py broken {output} 2> {log}"
"""


def _run_snakemake(work: Path, *targets: str) -> subprocess.CompletedProcess:
    bin_dir = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        "PATH": os.pathsep.join([bin_dir, os.environ.get("PATH", "")]),
        "PYTHONPATH": os.pathsep.join([str(ROOT / "workflow"), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "1", *targets],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.snakemake
def test_snakemake_retries_an_oom_kill_and_runs_a_deterministic_failure_once(tmp_path: Path) -> None:
    """Hand count: the SIGKILLed job really runs 3 times (1000, 2000, 4000 MB) and succeeds; the
    broken one really runs once: Snakemake still starts its two retries (it has no exit-code
    filter), each stops at once with the first attempt's exit status and error line. A second
    `snakemake` (a new run id: the setting may have been fixed) runs it again, once."""
    (tmp_path / "job.py").write_text(JOB)
    (tmp_path / "Snakefile").write_text(SNAKEFILE)
    done = _run_snakemake(tmp_path, "hungry")
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "runs.txt").read_text().split("\n")[:-1] == ["hungry 1000", "hungry 2000", "hungry 4000"]
    (tmp_path / "runs.txt").unlink()
    done = _run_snakemake(tmp_path, "broken")
    assert done.returncode == 1
    assert (tmp_path / "runs.txt").read_text().split("\n")[:-1] == ["broken 1000"]
    assert (tmp_path / "attempts.txt").read_text().split() == ["attempt"] * 3  # Snakemake's own count
    log = (tmp_path / "broken.log").read_text()  # the third attempt's log
    assert log.strip() == (
        "cqabench broken: not retried: an earlier attempt of this job in this run exited 1, not for "
        "lack of memory, and would again (Snakemake retries are for out-of-memory kills: "
        "cqabench/common/job_memory.py); its error: cqabench broken: error: llms.m.device: 'gpu' is not a "
        "device name"
    )
    done = _run_snakemake(tmp_path, "broken")
    assert done.returncode == 1
    assert (tmp_path / "runs.txt").read_text().split("\n")[:-1] == ["broken 1000", "broken 1000"]


def _fake_main(calls: list[list[str]], outcome: object):
    def main(argv: list[str]) -> int:
        calls.append(argv)
        if isinstance(outcome, BaseException):
            raise outcome
        return int(outcome)  # type: ignore[call-overload]

    return main


@pytest.mark.parametrize(
    ("outcome", "marked"),
    [
        (1, True),  # a CqaError: cli.main printed it and returned 1
        (SystemExit(2), True),  # argparse's usage error
        (RuntimeError("a bug"), True),
        (MemoryError(), False),  # Python out of memory: a retry with more may pass
        (OSError("pyarrow"), False),  # ... also when another error wraps it (set below)
        (0, False),
    ],
)
def test_only_failures_that_are_not_out_of_memory_leave_a_marker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, outcome: object, marked: bool
) -> None:
    from cqabench.common.job_memory import RUN_ENV, failure_marker, run_job

    monkeypatch.chdir(tmp_path)
    if isinstance(outcome, OSError):
        outcome.__cause__ = MemoryError()
    env = {RUN_ENV: "run1"}
    calls: list[list[str]] = []
    try:
        run_job(["prepare", "--x"], main=_fake_main(calls, outcome), environ=env)
    except BaseException:  # noqa: BLE001 - re-raised by run_job on purpose; what it left is checked below
        pass
    assert failure_marker("run1", ["prepare", "--x"]).is_file() is marked
    again = run_job(["prepare", "--x"], main=_fake_main(calls, 0), environ=env)
    assert len(calls) == (1 if marked else 2) and again == (_exit(outcome) if marked else 0)
    assert run_job(["prepare", "--y"], main=_fake_main(calls, 0), environ=env) == 0  # another command runs
    assert run_job(["prepare", "--x"], main=_fake_main(calls, 0), environ={RUN_ENV: "run2"}) == 0  # a new run


def _exit(outcome: object) -> int:
    return outcome.code if isinstance(outcome, SystemExit) else 1  # type: ignore[return-value]


def test_a_new_snakemake_process_gets_a_new_run_id_and_jobs_keep_theirs(tmp_path: Path) -> None:
    from cqabench.common.job_memory import RUN_ENV, start_run

    env: dict[str, str] = {RUN_ENV: "stale"}  # e.g. left in a test process by an earlier parse
    first = start_run(True, env, root=tmp_path)
    assert first != "stale" and env[RUN_ENV] == first
    assert start_run(False, env, root=tmp_path) == first  # a cluster job's Snakemake (remote mode)
    assert start_run(False, {}, root=tmp_path) != first  # nothing inherited: a new id


def test_without_snakemake_the_cli_runs_unguarded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cqabench.common.job_memory import FAILURES_DIR, run_job

    monkeypatch.chdir(tmp_path)
    calls: list[list[str]] = []
    assert run_job(["x"], main=_fake_main(calls, 1), environ={}) == 1
    assert run_job(["x"], main=_fake_main(calls, 1), environ={}) == 1
    assert len(calls) == 2 and not (tmp_path / FAILURES_DIR).exists()


_HOLD = """
import subprocess, sys
from cqabench.common.job_memory import run_job

def main(argv):
    held = b"x" * (300 << 20)  # written, so resident: 300 MB in this process
    subprocess.run([sys.executable, "-c", "held = b'x' * (500 << 20)"], check=True)  # 500 MB in a child
    return 0 if held else 1

sys.exit(run_job(["x"], main=main))
"""


def test_a_job_states_its_peak_memory_the_kernel_measured(tmp_path: Path) -> None:
    """Snakemake's benchmark samples; the log's line is the kernel's peak RSS (ru_maxrss), which a
    read of the log (cqabench.estimate.measured) takes when the sample missed it."""
    from cqabench.common.job_memory import PEAK_PREFIX, RUN_ENV, logged_peak_mb

    env = {**os.environ, RUN_ENV: "run1", "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "workflow")}
    # Started by a parent that holds 800 MB, as Snakemake or a test process holding models would:
    # Linux carries a replaced image's ru_maxrss across execve, and the job must not report it.
    parent = (
        "import subprocess, sys; big = b'y' * (800 << 20); "
        "sys.exit(subprocess.run([sys.executable, '-c', sys.argv[1]]).returncode)"
    )
    done = subprocess.run(
        [sys.executable, "-c", parent, _HOLD], cwd=tmp_path, env=env, capture_output=True, text=True, check=True
    )
    (tmp_path / "job.log").write_text(done.stderr)
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith(PEAK_PREFIX), done.stderr
    own = float(line.split("this process ")[1].split(" MB")[0])
    child = float(line.split("largest child ")[1].split(" MB")[0])
    # 300 MB held plus the interpreter (tens of MB); the child 500 MB plus its interpreter
    assert 300 <= own < 300 + 150 and 500 <= child < 500 + 150, line
    assert logged_peak_mb(tmp_path / "job.log") == child  # the larger of the two
    # without Snakemake's run id the CLI runs unguarded and states nothing
    quiet = subprocess.run(
        [sys.executable, "-c", _HOLD],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
        env={k: v for k, v in env.items() if k != RUN_ENV},
    )
    assert PEAK_PREFIX not in quiet.stderr
    assert logged_peak_mb(tmp_path / "missing.log") is None

"""Memory of the memory-hungry rules per attempt, and retries for out-of-memory failures only.

A job killed for exceeding its memory is retried with more, instead of failing the whole run (on
a cluster, where memory is a hard limit). The rules (prepare, pool_corpus, export_beir, index,
search, decompose_search, convert_model, generate_batch, generate) declare
`retries: MEMORY_RETRIES` and `resources: **job_resources(rule, retries=True)`, whose mem_mb is
`memory_mb(base, attempt)` (cqabench.estimate.rule_resources); Snakemake passes `attempt` (1 on
the first try). Doubling keeps a badly sized base cheap to recover from: a
job that needs 3x its base runs on the third attempt, with at most 4x reserved.

Snakemake's `retries` restarts a job whatever made it fail (it has no exit-code filter; Snakemake
9's scheduler compares only the attempt with the rule's count), so a bad setting or a bad record
ran three times. Every `cqabench` call of a job therefore runs under `run_job` (the `cqabench`
shell function of workflow/rules/common.smk): when the command fails for any reason other than
running out of memory, it leaves a marker keyed by this Snakemake run and the command's
arguments, and a retry of the same command in the same run stops at once with the first
attempt's exit status and error line, without doing the work again. An out-of-memory failure
leaves no marker: a kernel / cgroup OOM kill (SLURM's `--mem`) is a SIGKILL, exit 137, that no
code of ours outlives, and a Python MemoryError is let through unmarked. A new `snakemake`
invocation has a new run id, so a fixed config is tried afresh. The key is the arguments, so they
must not depend on the attempt (no rule passes `{resources.mem_mb}`). docs/cluster.md, "Out of memory".

A command that succeeds under Snakemake ends its log with its peak memory (`PEAK_PREFIX`): the
kernel's peak resident size of the job's process and of its largest child. Snakemake's benchmark
file samples the job's processes every second for 30 s and then every 30 s, so a job of 40 s can
miss its peak (a small vLLM cell read 534 MB there against 1.2-1.4 GB in other runs); the estimate's
comparison (cqabench.estimate.measured) takes the larger of the two.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import resource
import shutil
import sys
import time
import traceback
import uuid
from collections.abc import Callable, MutableMapping, Sequence
from pathlib import Path
from typing import Any, TextIO

MEMORY_RETRIES = 2  # attempts 1, 2, 3 with 1x, 2x, 4x the base memory
RUN_ENV = "CQABENCH_RUN_ID"  # set by the Snakemake process; jobs (local or sbatch --export=ALL) inherit it
FAILURES_DIR = Path(".snakemake") / "cqabench-failures"  # in the working directory (shared on SLURM)
KEEP_FAILURES_S = 7 * 24 * 3600
TAIL_CHARS = 2000
PEAK_PREFIX = "cqabench job: peak resident memory"
_PEAK = re.compile(re.escape(PEAK_PREFIX) + r" ([0-9.]+) MB")


def memory_mb(base_mb: int | float | str, attempt: int) -> int:
    """`base_mb` (the rule's size for a first attempt) doubled per retry: base * 2 ** (attempt - 1)."""
    base = int(float(base_mb))
    if base < 1:
        raise ValueError(f"base memory must be >= 1 MB, got {base_mb!r}")
    if attempt < 1:
        raise ValueError(f"attempt counts from 1, got {attempt!r}")
    return base * 2 ** (attempt - 1)


def start_run(main_process: bool, environ: MutableMapping[str, str] | None = None, root: Path = Path(".")) -> str:
    """This Snakemake run's id, for markers to belong to: a new one in the process the user started
    (even if its environment holds an older run's id), the inherited one in the job processes a
    cluster starts (Snakemake's remote mode re-reads the workflow there). Called when the workflow
    is parsed; the first process also prunes the markers of runs older than a week.
    """
    env = os.environ if environ is None else environ
    if not main_process and env.get(RUN_ENV):
        return env[RUN_ENV]
    env[RUN_ENV] = uuid.uuid4().hex
    folder = root / FAILURES_DIR
    if folder.is_dir():
        now = time.time()
        for run in folder.iterdir():
            if now - run.stat().st_mtime > KEEP_FAILURES_S:
                shutil.rmtree(run, ignore_errors=True)
    return env[RUN_ENV]


def failure_marker(run_id: str, argv: Sequence[str], root: Path = Path(".")) -> Path:
    """Where a non-memory failure of this exact command in this run is recorded."""
    key = hashlib.sha256(json.dumps(list(argv)).encode()).hexdigest()[:32]
    return root / FAILURES_DIR / run_id / key


def is_out_of_memory(exc: BaseException | None) -> bool:
    """A MemoryError anywhere in the exception's chain (pyarrow's ArrowMemoryError is one)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, MemoryError):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


class _Tail:
    """stderr, passed through, with its last characters kept for the marker's error line."""

    def __init__(self, inner: TextIO) -> None:
        self.inner = inner
        self.text = ""

    def write(self, s: str) -> int:
        self.text = (self.text + s)[-TAIL_CHARS:]
        return self.inner.write(s)

    def last_line(self) -> str:
        lines = [ln for ln in self.text.splitlines() if ln.strip()]
        return lines[-1].strip() if lines else ""

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _record(marker: Path, code: int, error: str) -> None:
    from cqabench.common.redact import redact

    marker.parent.mkdir(parents=True, exist_ok=True)
    tmp = marker.with_suffix(".tmp")
    tmp.write_text(json.dumps({"exit": code, "error": redact(error)}))
    tmp.replace(marker)


def _own_peak_kib() -> float:
    """This process's peak RSS since its exec: /proc/self/status VmHWM (Linux).

    Not getrusage(RUSAGE_SELF).ru_maxrss: Linux carries the high-water mark of the process image
    an execve replaces into the new one, so a job started by a large parent (Snakemake, a pytest
    process holding models) would report the parent's size (3,344 MB for a job that held 300 MB).
    """
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return float(line.split()[1])
    except OSError:
        pass
    return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def peak_mb() -> tuple[float, float]:
    """Kernel peak RSS in MB of this process and of its largest waited-for child (Linux: KiB).

    A child's figure includes this process's size when it was started (the execve carry-over
    above), so it is at most an overstatement by what this process held then; the stated peak is
    the larger of the two either way.
    """
    return (_own_peak_kib() / 1024, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)


def peak_line() -> str:
    own, child = peak_mb()
    return (
        f"{PEAK_PREFIX} {max(own, child):.1f} MB (kernel peak RSS: this process {own:.1f} MB, "
        f"its largest child {child:.1f} MB)"
    )


def logged_peak_mb(log: Path) -> float | None:
    """The largest peak a job's log states (`peak_line`; a rule may call cqabench more than once)."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return None
    found = [float(m.group(1)) for m in _PEAK.finditer(text)]
    return max(found) if found else None


def peak_with_log(sampled: float, log: Path) -> float:
    """A benchmark file's sampled max_rss, or the job's logged kernel peak when that is larger
    (or the sample is missing: NaN)."""
    logged = logged_peak_mb(log)
    return logged if logged is not None and not logged <= sampled else sampled


def _exit_code(exc: SystemExit) -> int:
    return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)


def run_job(
    argv: Sequence[str], main: Callable[[list[str]], int], environ: MutableMapping[str, str] | None = None
) -> int:
    """`main(ARGV)` (the `cqabench` command, `python -m cqabench`) as a job runs it: a repeat of a
    non-memory failure of this run is not redone."""
    env = os.environ if environ is None else environ
    run_id = env.get(RUN_ENV)
    if not run_id:  # not under Snakemake: nothing to retry
        return main(list(argv))
    marker = failure_marker(run_id, argv)
    if marker.is_file():
        seen = json.loads(marker.read_text())
        print(
            f"cqabench {argv[0] if argv else ''}: not retried: an earlier attempt of this job in this run exited "
            f"{seen['exit']}, not for lack of memory, and would again (Snakemake retries are for out-of-memory "
            f"kills: cqabench/common/job_memory.py); its error: {seen['error']}",
            file=sys.stderr,
        )
        return int(seen["exit"]) or 1
    tail = _Tail(sys.stderr)
    sys.stderr = tail
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = _exit_code(exc)
        if code:
            _record(marker, code, tail.last_line() or f"exit {code}")
        else:
            print(peak_line(), file=tail.inner)
        raise
    except BaseException as exc:
        if not is_out_of_memory(exc):
            _record(marker, 1, traceback.format_exception_only(type(exc), exc)[-1].strip())
        raise
    finally:
        sys.stderr = tail.inner
    if code:
        _record(marker, code, tail.last_line() or f"exit {code}")
    else:
        print(peak_line(), file=sys.stderr)
    return code

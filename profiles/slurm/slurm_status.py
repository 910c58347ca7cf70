#!/usr/bin/env python3
"""Tell Snakemake (cluster-generic status command) whether a SLURM job is running, or ended well or badly.

Asks `scontrol` first: it needs no accounting database, and finished jobs stay visible for
MinJobAge seconds. Falls back to `sacct` where the site keeps accounting. Prints exactly one of
`running`, `success`, `failed`.
"""

from __future__ import annotations

import subprocess
import sys

RUNNING = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED",
           "REQUEUE_FED", "REQUEUE_HOLD", "RESIZING", "SIGNALING", "STAGE_OUT", "RESV_DEL_HOLD",
           "STOPPED", "PREEMPTED"}
SUCCESS = {"COMPLETED"}


def classify(state: str) -> str:
    """SLURM job state (possibly 'CANCELLED by 0' or 'COMPLETED+') -> running | success | failed."""
    word = state.strip().split()[0].rstrip("+") if state.strip() else ""
    if word in SUCCESS:
        return "success"
    if word in RUNNING:
        return "running"
    return "failed"  # FAILED, CANCELLED, TIMEOUT, NODE_FAIL, OUT_OF_MEMORY, BOOT_FAIL, DEADLINE


def scontrol_state(jobid: str) -> str | None:
    done = subprocess.run(["scontrol", "show", "job", "-o", jobid], capture_output=True, text=True)
    if done.returncode != 0:
        return None
    for field in done.stdout.split():
        if field.startswith("JobState="):
            return field.split("=", 1)[1]
    return None


def sacct_state(jobid: str) -> str | None:
    try:
        done = subprocess.run(["sacct", "-j", jobid, "-X", "-n", "-P", "-o", "State"],
                              capture_output=True, text=True)
    except FileNotFoundError:
        return None
    lines = [ln for ln in done.stdout.splitlines() if ln.strip()]
    return lines[0] if done.returncode == 0 and lines else None


def main(argv: list[str]) -> int:
    jobid = argv[1]
    state = scontrol_state(jobid) or sacct_state(jobid)
    if state is None:
        print(f"slurm_status: job {jobid} unknown to scontrol and sacct", file=sys.stderr)
        print("failed")
        return 0
    print(classify(state))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

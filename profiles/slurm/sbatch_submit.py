#!/usr/bin/env python3
"""Submit one Snakemake job script to SLURM (cluster-generic executor's submit command).

Why a script instead of a one-line `sbatch` template: CPU rules carry no `gpu` resource and
the site decides how a GPU is asked for (`--gres=gpu:N`, `--gpus=N`, or not at all on a
CPU-only test cluster), so the command line depends on the job. Everything site-specific comes
from the job's resources, which the profile sets (default-resources / set-resources):

  slurm_partition      partition for CPU jobs            slurm_gpu_partition  partition for GPU jobs
  slurm_account        account (empty: none)             slurm_gpu_request    gres | gpus | none
  slurm_extra          further sbatch flags (one string)  mem_mb, runtime (minutes), gpu, threads

Prints the SLURM job id on stdout, as the executor expects. Standard library only, so it runs
with any python3 on the login node.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path


def read_properties(jobscript: Path) -> dict:
    """The job's properties: Snakemake writes them as JSON on the script's `# properties =` line."""
    for line in jobscript.read_text(encoding="utf-8").splitlines():
        if line.startswith("# properties = "):
            return json.loads(line[len("# properties = ") :])
    raise SystemExit(f"sbatch_submit: no '# properties =' line in {jobscript}")


def _int(value: object, default: int = 0) -> int:
    try:
        return int(float(value))  # resources may arrive as "1" or 1.0
    except (TypeError, ValueError):
        return default


def sbatch_args(props: dict) -> list[str]:
    """The sbatch flags for one job (pure: tested without SLURM)."""
    res = props.get("resources") or {}
    rule = props.get("rule") or "group"
    gpus = _int(res.get("gpu"))
    mode = str(res.get("slurm_gpu_request") or "gres")
    partition = res.get("slurm_gpu_partition") if gpus > 0 else res.get("slurm_partition")
    args = ["--parsable", f"--job-name=smk-{rule}", f"--cpus-per-task={max(1, _int(props.get('threads'), 1))}"]
    if partition:
        args.append(f"--partition={partition}")
    if res.get("slurm_account"):
        args.append(f"--account={res['slurm_account']}")
    if _int(res.get("mem_mb")) > 0:
        args.append(f"--mem={_int(res['mem_mb'])}M")
    if _int(res.get("runtime")) > 0:
        args.append(f"--time={_int(res['runtime'])}")
    if gpus > 0:
        if mode == "gres":
            args.append(f"--gres=gpu:{gpus}")
        elif mode == "gpus":
            args.append(f"--gpus={gpus}")
        elif mode != "none":
            raise SystemExit(f"sbatch_submit: slurm_gpu_request must be gres, gpus or none, not {mode!r}")
    log_dir = Path("logs") / "slurm" / rule
    args.append(f"--output={log_dir}/%j.out")
    if res.get("slurm_extra"):
        args.extend(shlex.split(str(res["slurm_extra"])))
    return args


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: sbatch_submit.py JOBSCRIPT", file=sys.stderr)
        return 2
    jobscript = Path(argv[-1])
    props = read_properties(jobscript)
    args = sbatch_args(props)
    rule = props.get("rule") or "group"
    (Path("logs") / "slurm" / rule).mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["sbatch", *args, str(jobscript)], capture_output=True, text=True, env=os.environ.copy()
    )
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        return done.returncode
    print(done.stdout.strip().split(";")[0])  # --parsable prints "jobid[;cluster]"
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

#!/usr/bin/env python3
"""How long Snakemake takes to plan the paper's full matrix, and to find it has nothing to do.

Goals (docs/cluster.md): planning `snakemake -n --configfile config/dexter.yaml` < 15 s; a no-op
run over an up-to-date matrix < 5 s. The no-op case needs every output to exist, which a real
run of the matrix takes days and GPUs to make, so this script builds a throw-away copy of the
checkout whose outputs are stand-ins: it lists every job's outputs from a forced dry run,
creates them empty (folders for `directory()` outputs), lets `snakemake --touch` put their
times in DAG order, and then times the run that should do nothing. Nothing is written in the
checkout itself. Usage:  .venv/bin/python benchmarks/plan_matrix.py [--configfile config/dexter.yaml]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LINKED = ("Snakefile", "workflow", "config", "resources", "profiles", "prompts")


def snakemake(workdir: Path, configfile: str, *args: str) -> tuple[float, subprocess.CompletedProcess]:
    cmd = [sys.executable, "-m", "snakemake", "--configfile", configfile, "--cores", "1", *args]
    env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, env=env)
    return time.perf_counter() - start, done


def job_count(text: str) -> int:
    m = re.search(r"^total\s+(\d+)\s*$", text, re.M)
    return int(m.group(1)) if m else 0


def outputs_of_dry_run(text: str) -> list[str]:
    """Every path on the `output:` lines of a dry run."""
    found = []
    for m in re.finditer(r"^\s+output: (.+)$", text, re.M):
        found += [p.strip() for p in m.group(1).split(", ") if p.strip()]
    return found


def make_standins(workdir: Path, outputs: list[str], directories: set[str]) -> None:
    for rel in outputs:
        path = workdir / rel
        if rel in directories:
            path.mkdir(parents=True, exist_ok=True)
            (path / "settings.json").write_text("{}\n")
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configfile", default="config/dexter.yaml")
    args = parser.parse_args()

    plan_s, plan = snakemake(REPO, args.configfile, "-n", "--quiet", "rules")
    if plan.returncode != 0:
        print(plan.stderr[-3000:], file=sys.stderr)
        return 1
    print(
        f"plan   snakemake -n --configfile {args.configfile}: {plan_s:6.2f} s  ({job_count(plan.stdout + plan.stderr)} jobs; goal < 15 s)"
    )

    with tempfile.TemporaryDirectory(prefix="cqabench-plan-") as tmp:
        work = Path(tmp)
        for name in LINKED:
            if (REPO / name).exists():
                (work / name).symlink_to(REPO / name)
        _, forced = snakemake(work, args.configfile, "-n", "--forceall")
        text = forced.stdout + forced.stderr
        outputs = outputs_of_dry_run(text)
        # directory() outputs (retriever indexes) are the extension-less paths under results/<name>/index/.
        dirs = {o for o in outputs if "/index/" in o and not Path(o).suffix}
        make_standins(work, outputs, dirs)
        touch_s, touched = snakemake(work, args.configfile, "--touch")
        if touched.returncode != 0:
            print(touched.stderr[-3000:], file=sys.stderr)
            return 1
        noop_s, noop = snakemake(work, args.configfile)
        left = job_count(noop.stdout + noop.stderr)
        status = "nothing to do" if "Nothing to be done" in noop.stdout + noop.stderr else f"{left} jobs would run"
        print(
            f"no-op  snakemake --configfile {args.configfile} over {len(outputs)} stand-in outputs: "
            f"{noop_s:6.2f} s  ({status}; goal < 5 s)"
        )
        if left:
            print(noop.stdout[-2000:], noop.stderr[-2000:], file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

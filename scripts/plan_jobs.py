"""Every job a config plans, one sorted line each, to compare plans across a refactor.

    python scripts/plan_jobs.py config/dexter.yaml > before.txt   # ... change common.smk / cqabench.planner ...
    python scripts/plan_jobs.py config/dexter.yaml > after.txt && diff before.txt after.txt

Runs `snakemake -n --forceall -p --configfile CONFIG` and keeps, per job, the rule, its input,
output, log, benchmark, wildcards, resources (sorted: Snakemake's order varies) and shell
command; job ids, dates and reasons are dropped. Used to check that moving the planning logic
into cqabench.planner left the three shipped configs' plans unchanged (docs/architecture.md).
"""

from __future__ import annotations

import re
import subprocess
import sys


def normalize(text: str) -> list[str]:
    """One line per job block of a dry run's output, sorted."""
    jobs = []
    for block in re.split(r"\n\[[A-Z][a-z]{2} [A-Z][a-z]{2} .*?\]\n", text)[1:]:
        fields = []
        for line in block.splitlines():
            if line.startswith(("Job stats:", "Reasons:")) or re.match(r"job\s+count\s*$", line):
                break  # the summary after the last job
            line = line.strip()
            if not line or re.match(r"(jobid|reason|dependencies):", line):
                continue
            if line.startswith("resources:"):
                line = "resources: " + ", ".join(sorted(x.strip() for x in line[len("resources:") :].split(",")))
            fields.append(line)
        jobs.append(" | ".join(fields))
    return sorted(jobs)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    cmd = [sys.executable, "-m", "snakemake", "-n", "--forceall", "-p", "--configfile", argv[0]]
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
    if done.returncode != 0:
        sys.stderr.write(done.stdout[-3000:])
        return done.returncode
    print("\n".join(normalize(done.stdout)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

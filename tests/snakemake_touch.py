"""`python tests/snakemake_touch.py <snakemake arguments>`: Snakemake's own command line, with the
touch executor's wait of 0.1 s before each job's touch set to none. Tests start `snakemake
--touch` through it to make their stand-ins up to date.

Why: Snakemake (9.27, snakemake/executors/touch.py, `Executor.SLEEPING_TIME`) sleeps 0.1 s
before touching each job's outputs, so that on a file system with coarse timestamps each job's
outputs end up newer than its inputs. That wait was most of the Snakemake-level tests' time:
`cProfile` of `snakemake --touch --forceall --configfile config/dexter.yaml` (2,126 jobs) spent
213 s of its run in 2,048 `time.sleep` calls. Nothing tested depends on it: the touch executor
still touches every job in the DAG's order, so no output is older than an input of its job, and
Snakemake reruns a job only for an input strictly newer than its outputs (`_IOFile.is_newer`),
so equal times are up to date. The dry runs after the touch (`snakemake -n`, started as usual)
check exactly that, as before.
"""

from __future__ import annotations

import snakemake.executors.touch
from snakemake.cli import main

if __name__ == "__main__":
    snakemake.executors.touch.Executor.SLEEPING_TIME = 0
    main()

"""`python -m cqabench ARGS`: the `cqabench` command as a Snakemake job runs it.

Every rule calls `cqabench` through this entry (the shell function of workflow/rules/common.smk),
so a job that failed for any reason but memory is not redone by Snakemake's retries
(cqabench.common.job_memory.run_job).
"""

import sys

from cqabench.cli import main
from cqabench.common.job_memory import run_job

sys.exit(run_job(sys.argv[1:], main=main))

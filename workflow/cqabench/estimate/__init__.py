"""The bill before you pay: what a config's jobs will cost, from measured rates, before any runs.

`cqabench estimate --configfile CONFIG --gpus N --cores M` prints, per rule, the jobs, the work
items they process, wall time per job, CPU- and GPU-hours, peak memory and disk written, then
totals and a makespan bound; the same numbers size every rule's `mem_mb` and `runtime`
(workflow/rules/*.smk through `JobCosts.request`), so a paper-scale job asks for what it uses.

- `sizes`: item counts — counted from a split's raw files when they are on disk (the bundled
  sample), else the published sizes in config/sizes.yaml (DEXTER Table 1, TANQ, StrategyQA);
- `rates`: benchmarks/rates.yaml, one versioned file of per-item costs per rule family, model
  and device class, each with the machine, date and command that measured it, or marked as an
  assumption with its published source; the benchmarks in benchmarks/ write it (`--write-rates`);
- `jobs`: the plan's jobs (the rules' wildcards and dependencies) from `cqabench.planner.Plan`;
- `model`: rates x items -> cost per job, and the resource request derived from it;
- `schedule`: critical path and a makespan bound on N GPUs and M cores;
- `tables`: the per-rule table (text, Parquet/CSV, Markdown for docs/costs.md);
- `measured`: the estimate beside a run's Snakemake `benchmark:` files, per rule family.
"""

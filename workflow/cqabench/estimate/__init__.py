"""The bill before you pay: what a config's jobs will cost, from measured rates, before any runs.

`cqabench estimate --configfile CONFIG --gpus N --cores M` prints, per rule, the jobs, the work
items they process, wall time per job, CPU- and GPU-hours (with their range), peak memory and disk
written, then totals, GPU-hours and makespan as a range, the machine assumed, the critical path
and the money API tokens cost at a given price; the same numbers size every rule's `mem_mb` and `runtime`
(workflow/rules/*.smk through `JobCosts.request`), so a paper-scale job asks for what it uses.

- `dag`: the jobs, their wildcards and dependencies: Snakemake's own DAG of the config;
- sizes (`cqabench.planner.sizes`, the plan sizes its encode parts with them too): item counts,
  counted from a split's raw files when they are on disk, else the sizes of the files the config
  loads in config/sizes.yaml, each with its source;
- `rates`: benchmarks/rates.yaml, one versioned file of per-item costs per rule family, model
  and device class, each with the machine, date and command that measured it, or marked as an
  assumption with its published source and its low / high spread; the benchmarks in benchmarks/
  write it (`--write-rates`);
- `model` (and `generation_costs`): rates x items -> cost per job, and the resource request
  derived from it; `JobCosts.on_gpu` decides which jobs hold a GPU;
- `spread`: the estimate at both ends of the rates' ranges, and API money;
- `schedule`: critical path and a makespan bound on N GPUs and M cores;
- `tables`: the per-rule table (text, Parquet/CSV, Markdown for docs/costs.md);
- `measured`: the estimate beside a run's Snakemake `benchmark:` files, per rule family.
"""

# Models stage: fetch every Hugging Face checkpoint the plan's jobs load into models_dir/<org>/<name>
# at its configured revision (cqabench.planner.needed_models, cqabench.models.fetch). Run it where there is
# network: `snakemake fetch_models --configfile config/dexter.yaml` on a login node (a local rule:
# also under --profile profiles/slurm it runs there, not on a compute node). Jobs never download.


rule fetch_models:
    input:
        config=CONFIG_FILE,
    log:
        f"{RESULTS}/logs/fetch_models.log",
    localrule: True
    conda:
        "../../envs/generation.yaml"  # huggingface_hub
    shell:
        # Planning imports the encoders, which set HF_HUB_OFFLINE=1 for every job: not for this one.
        "export HF_HUB_OFFLINE=0; "
        "cqabench fetch-models --configfile {input.config:q} 2>&1 | tee {log:q}"

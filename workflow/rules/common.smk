# Config validation, matrix expansion and path helpers shared by every stage's rules.
import json
import shlex
import sys
from pathlib import Path

from snakemake.utils import validate

validate(config, schema="../schemas/config.schema.yaml")

RESULTS = "results"

# Rules run the package from this checkout, with the Python of the environment they run in: the
# project venv's (the one running Snakemake), or a per-rule conda env's under `--sdm conda`
# (those envs hold dependencies only). Cluster jobs see the same checkout on the shared filesystem.
_CONDA = any("conda" in str(m).lower() for m in workflow.deployment_settings.deployment_method)
CQABENCH = "PYTHONPATH={} {} -m cqabench.cli".format(
    shlex.quote(str(Path(workflow.basedir) / "workflow")), "python" if _CONDA else shlex.quote(sys.executable)
)
RAW_DIR = config["raw_dir"]
DATASETS = list(config["datasets"])
SERIALIZATIONS = list(config["serializations"])
POOLED = {name: list(members) for name, members in config.get("corpora", {}).items()}


def _check_config():
    unknown = [m for members in POOLED.values() for m in members if m not in DATASETS]
    if unknown:
        raise ValueError(f"corpora: datasets {unknown} are not configured; configured: {DATASETS}")
    for ds, spec in config["datasets"].items():
        for split in spec["splits"]:
            if split not in spec["files"]:
                raise ValueError(f"datasets.{ds}: split {split!r} has no entry under files")


_check_config()


def splits(dataset):
    return list(config["datasets"][dataset]["splits"])


def corpus_of(dataset):
    """The corpus a dataset is searched in: explicit `corpus`, else its pooled corpus, else its own."""
    explicit = config["datasets"][dataset].get("corpus")
    if explicit:
        return explicit
    for name, members in POOLED.items():
        if dataset in members:
            return name
    return dataset


def corpus_members(corpus):
    return POOLED.get(corpus, [corpus])


CORPORA = sorted({corpus_of(ds) for ds in DATASETS})


def as_arg(obj):
    """A JSON value as one shell word, for passing settings to `cqabench`."""
    return shlex.quote(json.dumps(obj, sort_keys=True))


def data_path(dataset, split, table):
    return f"{RESULTS}/data/{dataset}/{split}/{table}.parquet"


def corpus_path(corpus):
    return f"{RESULTS}/corpora/{corpus}/corpus.parquet"


def raw_spec(dataset, split, role):
    return config["datasets"][dataset]["files"][split][role]


def raw_input(path):
    """A raw file from resources/raw when it is there, else the download rule's output."""
    local = Path(RAW_DIR) / path
    return str(local) if local.exists() else f"{RESULTS}/raw/{path}"


def raw_specs_by_path():
    return {
        spec["path"]: spec
        for ds in DATASETS
        for split in splits(ds)
        for spec in config["datasets"][ds]["files"][split].values()
    }


def _one_of(names):
    import re

    return "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))


wildcard_constraints:
    dataset=_one_of(DATASETS),
    split="train|dev|test",
    serialization="pipe|markdown|linear",
    corpus=_one_of(set(CORPORA) | set(POOLED)),


# ---- data stage ----


def data_targets():
    targets = [
        data_path(ds, split, table)
        for ds in DATASETS
        for split in splits(ds)
        for table in ("queries", "corpus", "qrels", "answers")
    ]
    targets += [corpus_path(c) for c in CORPORA]
    targets += [
        f"{RESULTS}/beir/{ds}/{ser}/{split}/qrels/{split}.tsv"
        for ds in DATASETS
        for split in splits(ds)
        for ser in SERIALIZATIONS
    ]
    return targets


def prepare_inputs(w):
    return {
        role: raw_input(spec["path"])
        for role, spec in config["datasets"][w.dataset]["files"][w.split].items()
    }


def prepare_file_args(w, input):
    return " ".join(f"--file {shlex.quote(f'{role}={path}')}" for role, path in input.items())

# Config validation, matrix expansion and path helpers shared by every stage's rules.
import glob
import json
import os
import shlex
import sys
from pathlib import Path
from types import SimpleNamespace

import yaml
from snakemake.utils import validate

# The package of this checkout, for planning-time checks (it need not be installed).
sys.path.insert(0, str(Path(workflow.basedir) / "workflow"))
from cqabench.agent.tools import SEARCH_DEPTH as TOOL_SEARCH_DEPTH
from cqabench.errors import ConfigError
from cqabench.prompts import FAMILIES, SETTINGS, STRATEGIES, family_of, file_hash
from cqabench.datasets import has_gold_evidence
from cqabench.llm.convert import CONVERTER_VERSION
from cqabench.retrievers import resolve as resolve_retriever
from cqabench.report.provenance import config_hash

validate(config, schema="../schemas/config.schema.yaml")
# Every fact-table row records the config of the run that built the table (canonical JSON, so
# key order and comments do not change it); docs/report.md, "Provenance columns".
CONFIG_HASH = config_hash(config)
# Paired tests of the report: the correction over each family, the level, the retrieval baseline.
SIGNIFICANCE = {"correction": "holm", "alpha": 0.05, "baseline": "bm25",
                **(config.get("report") or {}).get("significance", {})}  # fmt: skip

RESULTS = "results"

# Rules call `cqabench`, defined for every job's shell as the package of this checkout run with
# the Python of the environment the job runs in: the project venv's (the one running Snakemake),
# or a per-rule conda env's under `--sdm conda` (those envs hold dependencies only). Cluster jobs
# see the same checkout on the shared filesystem.
_CONDA = any("conda" in str(m).lower() for m in workflow.deployment_settings.deployment_method)
_PYTHON = "python" if _CONDA else shlex.quote(sys.executable)
_PACKAGE_DIR = shlex.quote(str(Path(workflow.basedir) / "workflow"))
# (The prefix is formatted like a shell command, hence the doubled braces.)
# CQABENCH_PYTHON, when a job sets it, runs the package with another interpreter (vLLM jobs do,
# vLLM needs transformers 5 and lives in its own environment, see `python_for`).
# CQABENCH_EXPORT_CACHE: one ONNX export of an encoder serves the indexes of every corpus.
shell.prefix(
    "set -euo pipefail; cqabench() {{ PYTHONPATH=%s \"${{CQABENCH_PYTHON:-%s}}\" -m cqabench.cli \"$@\"; }}; "
    "export CQABENCH_EXPORT_CACHE=\"${{CQABENCH_EXPORT_CACHE:-%s}}\"; "
    # open-book jobs in vLLM's environment search the tool corpus through this one (Java BM25)
    "export CQABENCH_SEARCH_PYTHON=\"${{CQABENCH_SEARCH_PYTHON:-%s}}\"; "
    % (_PACKAGE_DIR, _PYTHON, shlex.quote(f"{RESULTS}/cache/onnx"), _PYTHON)
)


RAW_DIR = config["raw_dir"]
DATASETS = list(config["datasets"])
SERIALIZATIONS = list(config["serializations"])
POOLED = {name: list(members) for name, members in config.get("corpora", {}).items()}
# The open-book agent's tool corpus: pooled like `corpora:` but searched by no dataset's retrieval.
OPEN_BOOK = (config.get("generation") or {}).get("open_book") or {}
TOOL_CORPORA = {OPEN_BOOK["corpus"]["name"]: list(OPEN_BOOK["corpus"]["datasets"])} if OPEN_BOOK else {}
TOOL_RETRIEVERS = [OPEN_BOOK["retriever"]] if OPEN_BOOK else []  # open-book cells name it in their path


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
    return POOLED.get(corpus) or TOOL_CORPORA.get(corpus) or [corpus]


CORPORA = sorted({corpus_of(ds) for ds in DATASETS})


def as_arg(obj):
    """A JSON value as one shell word, for passing settings to `cqabench`."""
    return shlex.quote(json.dumps(obj, sort_keys=True))


def data_path(dataset, split, table):
    return f"{RESULTS}/data/{dataset}/{split}/{table}.parquet"


def corpus_path(corpus):
    return f"{RESULTS}/corpora/{corpus}/corpus.parquet"


def beir_dir(dataset, serialization, split):
    """The export folder of one split (BEIR, TREC qrels, Pyserini collection, export.json)."""
    return f"{RESULTS}/beir/{dataset}/{serialization}/{split}"


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
    corpus=_one_of(set(CORPORA) | set(POOLED) | set(TOOL_CORPORA)),


# ---- data stage ----


def data_targets():
    targets = [
        data_path(ds, split, table)
        for ds in DATASETS
        for split in splits(ds)
        for table in ("queries", "corpus", "qrels", "answers")
    ]
    targets += [corpus_path(c) for c in CORPORA]
    targets += [beir_dir(ds, ser, split) for ds in DATASETS for split in splits(ds) for ser in SERIALIZATIONS]
    return targets


def corpus_splits(dataset):
    """The splits whose documents make up a dataset's corpus: `corpus_splits` (e.g. train + dev,
    as DEXTER pooled every paragraph of MuSiQue and 2WikiMultihopQA), else the evaluated splits."""
    return list(config["datasets"][dataset].get("corpus_splits") or splits(dataset))


def _check_corpus_splits():
    for ds in DATASETS:
        missing = [sp for sp in corpus_splits(ds) if sp not in config["datasets"][ds]["files"]]
        if missing:
            raise ValueError(f"datasets.{ds}: corpus_splits {missing} have no entry under files")


_check_corpus_splits()


def question_selection_args(dataset, split):
    """`cqabench prepare` flags of a dataset's explicit question selection (limit, hops,
    answerable_only), for the splits it evaluates; a corpus-only split is prepared whole."""
    spec = config["datasets"][dataset]
    args = []
    if split not in splits(dataset):
        return ""
    if spec.get("limit") is not None:
        args.append(f"--limit {int(spec['limit'])}")
    if spec.get("hops"):
        args.append("--hops " + " ".join(str(int(h)) for h in spec["hops"]))
    if spec.get("answerable_only"):
        args.append("--answerable-only")
    return " ".join(args)


def prepare_inputs(w):
    return {
        role: raw_input(spec["path"])
        for role, spec in config["datasets"][w.dataset]["files"][w.split].items()
    }


def prepare_file_args(w, input):
    return " ".join(f"--file {shlex.quote(f'{role}={path}')}" for role, path in input.items())


# ---- retrieval stage ----

RETRIEVER_CONFIGS = config.get("retrievers", {}) or {}
RETRIEVAL = config.get("retrieval", {}) or {}
RETRIEVAL_K = int(RETRIEVAL.get("k", 100))
RETRIEVAL_RETRIEVERS = list(RETRIEVAL.get("retrievers", []))
# Datasets searched by the configured retrievers (default: all; a dataset without a corpus, such
# as the sample's TANQ, is left out here rather than indexed empty).
RETRIEVAL_DATASETS = list(RETRIEVAL.get("datasets") or DATASETS)
DECOMPOSITION = RETRIEVAL.get("decomposition", {}) or {}
EXTERNAL_RUNS = config.get("external_runs", {}) or {}
# IR-Q / IR-D run names are "{retriever}-{suffix}" (cqabench.retrievers.decomposition.RUN_SUFFIX).
DECOMPOSITION_SUFFIX = {"question": "irq", "gold": "ird-gold", "predicted": "ird-pred"}
_SUFFIX_KIND = {v: k for k, v in DECOMPOSITION_SUFFIX.items()}
for _kind in DECOMPOSITION.get("queries", []):
    if _kind not in DECOMPOSITION_SUFFIX:
        raise ValueError(f"retrieval.decomposition.queries: {_kind!r} is not one of {list(DECOMPOSITION_SUFFIX)}")


_NEVER = "(?!x)x"  # a wildcard constraint no name matches (for an empty list of names)


def _check_retrieval_config():
    # Each retriever family validates its own settings (unknown keys, enums, sizes) at planning
    # time, so a typo stops the workflow before any job starts.
    for name, settings in RETRIEVER_CONFIGS.items():
        try:
            resolve_retriever(settings)
        except ConfigError as exc:
            raise ValueError(f"retrievers.{name}: {exc}") from None
    named = set(RETRIEVAL_RETRIEVERS) | set(DECOMPOSITION.get("retrievers", []))
    unknown = sorted(named - set(RETRIEVER_CONFIGS))
    if unknown:
        raise ValueError(f"retrieval: retrievers {unknown} are not defined under `retrievers:`")
    clash = sorted(set(EXTERNAL_RUNS) & set(RETRIEVER_CONFIGS))
    if clash:
        raise ValueError(f"external_runs: names {clash} are also retriever names; rename them")
    for name, spec in EXTERNAL_RUNS.items():
        if spec["dataset"] not in DATASETS or spec["split"] not in splits(spec["dataset"]):
            raise ValueError(f"external_runs.{name}: {spec['dataset']}/{spec['split']} is not configured")


_check_retrieval_config()


def _names(names):
    return _one_of(names) if names else _NEVER


def is_neural(retriever):
    return RETRIEVER_CONFIGS[retriever]["type"] != "bm25"


def index_dir(corpus, serialization, retriever):
    return f"{RESULTS}/index/{corpus}/{serialization}/{retriever}"


def run_file(dataset, split, serialization, run, ext="parquet"):
    return f"{RESULTS}/runs/{dataset}/{split}/{serialization}/{run}.{ext}"


DECOMPOSITION_RUNS = {
    f"{r}-{DECOMPOSITION_SUFFIX[kind]}": (r, kind)
    for r in DECOMPOSITION.get("retrievers", [])
    for kind in DECOMPOSITION.get("queries", list(DECOMPOSITION_SUFFIX))
}


def decomposition_runs(dataset):
    return list(DECOMPOSITION_RUNS) if dataset in DECOMPOSITION.get("datasets", []) else []


def external_runs_of(dataset, split):
    return [n for n, spec in EXTERNAL_RUNS.items() if spec["dataset"] == dataset and spec["split"] == split]


def run_names(dataset, split):
    """Every run of a (dataset, split): what the evaluation and generation stages iterate over."""
    ours = RETRIEVAL_RETRIEVERS if dataset in RETRIEVAL_DATASETS else []
    return ours + decomposition_runs(dataset) + external_runs_of(dataset, split)


def _run_settings(run):
    """The retriever_settings recorded in a cell: the retriever's config, or what made the run."""
    if run in EXTERNAL_RUNS:
        return {"external": True, **EXTERNAL_RUNS[run]}
    if run in RETRIEVER_CONFIGS:
        return {**RETRIEVER_CONFIGS[run], "k": RETRIEVAL_K}
    retriever, kind = DECOMPOSITION_RUNS[run]
    return {**RETRIEVER_CONFIGS[retriever], "queries": kind, "k": int(DECOMPOSITION.get("k", 10))}


def _resources(retriever, neural_mb, bm25_mb, neural_min, bm25_min):
    # A GPU only where the settings put the model on one: the default's CPU encoders must not
    # queue behind each other in the gpu pool of profiles/default.
    neural = is_neural(retriever)
    on_gpu = neural and str(RETRIEVER_CONFIGS[retriever].get("device", "cpu")) != "cpu"
    return {"gpu": 1 if on_gpu else 0, "mem_mb": neural_mb if neural else bm25_mb,
            "runtime": neural_min if neural else bm25_min}  # fmt: skip


ALL_RUN_NAMES = sorted({n for ds in DATASETS for sp in splits(ds) for n in run_names(ds, sp)})


def _external_input(w):
    spec = EXTERNAL_RUNS[w.name]
    if (spec["dataset"], spec["split"]) != (w.dataset, w.split):
        raise ValueError(f"external run {w.name} belongs to {spec['dataset']}/{spec['split']}, not {w.dataset}/{w.split}")
    return spec["path"]


def retrieval_targets():
    return [
        f"{RESULTS}/retrieval/{ds}/{sp}/{ser}/{run}/metrics.json"
        for ds in DATASETS
        for sp in splits(ds)
        for ser in SERIALIZATIONS
        for run in run_names(ds, sp)
    ]


# ---- report stage ----

REPORT = config.get("report", {})
EXPECTED_FILES = list(REPORT.get("expected") or sorted(glob.glob("config/expected/*.yaml")))
REPORT_DIR = f"{RESULTS}/report"
# The run is on the papers' full data (config/dexter.yaml, config/tanq.yaml): no sample caveat.
PAPER_DATA = bool(REPORT.get("paper_data", False))


def _expected_table_ids():
    ids = []
    for path in EXPECTED_FILES:
        with open(path, encoding="utf-8") as fh:
            ids += [str(t["id"]) for t in (yaml.safe_load(fh) or {}).get("tables", [])]
    return ids


TABLE_IDS = _expected_table_ids()
PLOTS = {"k_effect": "k_effect.rst", "retriever_heatmap": "heatmap.rst", "tanq_skills": "skills.rst"}


def _metric_files():
    """The metrics.json of every cell the other stages build (per-question files sit beside them)."""
    return sorted({t for t in retrieval_targets() + evaluation_targets() if Path(t).name == "metrics.json"})


def report_targets():
    return (
        [f"{RESULTS}/metrics.parquet", f"{RESULTS}/per_question.parquet", f"{REPORT_DIR}/tables/summary.json"]
        + [f"{REPORT_DIR}/tables/{t}.{ext}" for t in TABLE_IDS for ext in ("md", "html")]
        + [f"{REPORT_DIR}/plots/{name}.png" for name in PLOTS]
        + [f"{REPORT_DIR}/index.html"]
    )


# ---- generation stage ----

# Generation stage: GGUF models converted once -> one job per cell -> predictions.parquet + summary.json.
# A cell is (dataset, split, serialization, retriever|none, llm, prompt, setting, k). Finished items
# live in the item cache (generation.cache_dir, outside every declared output), so a failed or
# killed job that is started again only generates what is missing.
GENERATION = config.get("generation", {}) or {}
LLMS = config.get("llms", {}) or {}
GEN_LLMS = list(GENERATION.get("llms", []))
GEN_PROMPTS = list(GENERATION.get("prompts", []))
GEN_SETTINGS = list(GENERATION.get("settings", []))
GEN_RAG_RUNS = list(GENERATION.get("rag_retrievers", []))
GEN_K = [int(k) for k in GENERATION.get("k", [5])]
PROMPTS_DIR = GENERATION.get("prompts_dir", "resources/prompts")
LLM_CACHE_DIR = GENERATION.get("cache_dir", f"{RESULTS}/cache/llm")
MODELS_DIR = f"{RESULTS}/models"
GEN_ENVS = {"vllm": "../../envs/vllm.yaml", "hf": "../../envs/generation.yaml", "openai": "../../envs/generation.yaml"}


GEN_BATCH_LLMS = list(GENERATION.get("batch_llms", []))
ORACLE_DISTRACTORS = dict(GENERATION.get("oracle_distractors") or {})
GEN_SEED = int(GENERATION.get("seed", 0))
# The vLLM environment (Makefile: `make setup`); conda runs use envs/vllm.yaml instead.
# (Beside the real checkout, also when the Snakefile is reached through a symlink.)
VLLM_PYTHON = os.environ.get("CQABENCH_VLLM_PYTHON") or str(
    Path(workflow.main_snakefile).resolve().parent / ".venv-vllm" / "bin" / "python"
)


def _is_gguf(llm):
    return str(LLMS[llm]["source"]).startswith(("gguf-package:", "gguf:"))


GGUF_LLMS = [n for n in LLMS if _is_gguf(n)]


def _check_generation_config():
    unknown = sorted(set(GEN_LLMS) - set(LLMS))
    if unknown:
        raise ValueError(f"generation.llms: {unknown} are not defined under `llms:`")
    bad = sorted(set(GEN_PROMPTS) - set(STRATEGIES))
    if bad:
        raise ValueError(f"generation.prompts: unknown {bad}; valid: {list(STRATEGIES)}")
    bad = sorted(set(GEN_SETTINGS) - set(SETTINGS))
    if bad:
        raise ValueError(f"generation.settings: unknown {bad}; valid: {list(SETTINGS)}")
    if "rag" in GEN_SETTINGS and not (GEN_RAG_RUNS and GEN_K):
        raise ValueError("generation.settings has rag: set generation.rag_retrievers and generation.k")
    for ds in DATASETS:
        family_of(ds, GENERATION.get("families"))  # every dataset must map to a template family
    bad = sorted(set(GEN_BATCH_LLMS) - set(LLMS))
    if bad:
        raise ValueError(f"generation.batch_llms: {bad} are not defined under `llms:`; defined: {sorted(LLMS)}")
    bad = sorted(set(GEN_RAG_RUNS) - set(ALL_RUN_NAMES))
    if "rag" in GEN_SETTINGS and bad:
        raise ValueError(f"generation.rag_retrievers: {bad} name no run; runs: {ALL_RUN_NAMES}")
    bad = sorted(set(ORACLE_DISTRACTORS) - set(DATASETS))
    if bad:
        raise ValueError(f"generation.oracle_distractors: datasets {bad} are not configured; configured: {DATASETS}")
    if "open-book" in GEN_SETTINGS:
        _check_open_book()
    if not _CONDA and any(LLMS[n]["backend"] == "vllm" for n in GEN_LLMS) and not Path(VLLM_PYTHON).exists():
        raise ValueError(
            f"backend vllm runs in its own environment, {VLLM_PYTHON} is missing: run `make setup` "
            "(or set CQABENCH_VLLM_PYTHON, or use --sdm conda with envs/vllm.yaml)"
        )


def _check_open_book():
    if not OPEN_BOOK:
        raise ValueError("generation.settings has open-book: set generation.open_book (datasets, corpus, retriever)")
    where = "generation.open_book"
    for key in ("datasets", "corpus.datasets"):
        named = OPEN_BOOK["datasets"] if key == "datasets" else OPEN_BOOK["corpus"]["datasets"]
        bad = sorted(set(named) - set(DATASETS))
        if bad:
            raise ValueError(f"{where}.{key}: datasets {bad} are not configured; configured: {DATASETS}")
    name = OPEN_BOOK["corpus"]["name"]
    if name in set(DATASETS) | set(POOLED):
        raise ValueError(f"{where}.corpus.name: {name!r} is already a dataset or pooled corpus; pick another name")
    retriever = OPEN_BOOK["retriever"]
    if RETRIEVER_CONFIGS.get(retriever, {}).get("type") != "bm25":
        raise ValueError(f"{where}.retriever: {retriever!r} must name a bm25 retriever under `retrievers:`")


_check_generation_config()


def python_for(llm):
    """The interpreter of an LLM's generation jobs: vLLM's own environment, else this one."""
    if LLMS[llm]["backend"] == "vllm":
        return "python" if _CONDA else VLLM_PYTHON
    return _PYTHON


def _evidence_of(ds, sp):
    """(bool, reason): whether the split has gold documents an oracle prompt can show."""
    files = {role: Path(raw_input(spec["path"])) for role, spec in config["datasets"][ds]["files"][sp].items()}
    return has_gold_evidence(ds, files)


GOLD_EVIDENCE = {(ds, sp): _evidence_of(ds, sp) for ds in DATASETS for sp in splits(ds)}


def not_planned_cells():
    """Configured cells left out of the plan, with the reason the report prints."""
    out = []
    for ds in DATASETS:
        for sp in splits(ds):
            has, reason = GOLD_EVIDENCE[(ds, sp)]
            if "oracle" in GEN_SETTINGS and not has:
                out.append({"dataset": ds, "split": sp, "setting": "oracle", "reason": reason})
            if "rag" in GEN_SETTINGS and not [r for r in GEN_RAG_RUNS if r in run_names(ds, sp)]:
                out.append({"dataset": ds, "split": sp, "setting": "rag",
                            "reason": "no run of generation.rag_retrievers exists for it (not in retrieval.datasets)"})
    return out


def check_api_keys():
    """Called from `onstart:`: a missing API key stops a real run before any job starts.

    Planning (`-n`, `--lint`, `--touch`) needs no credentials; the key itself is never read
    into a log, only whether its variable is set.
    """
    missing = [
        (name, LLMS[name].get("api_key_env") or "OPENAI_API_KEY")
        for name in GEN_LLMS
        if LLMS[name]["backend"] == "openai"
    ]
    missing = [(name, env) for name, env in missing if not os.environ.get(env)]
    if missing:
        for name, env in missing:
            print(f"llms.{name}: backend openai reads its API key from ${env}, which is not set", file=sys.stderr)
        raise SystemExit(1)


def generation_cells():
    """(dataset, split, serialization, retriever, llm, prompt, setting, k) of every configured cell.

    closed and oracle take retriever "none" and k 0 (oracle = every gold document); rag takes
    each configured run that exists for the (dataset, split), with each k.
    """
    cells = []
    for ds in DATASETS:
        for sp in splits(ds):
            runs = [r for r in GEN_RAG_RUNS if r in run_names(ds, sp)]
            for ser in SERIALIZATIONS:
                for llm in GEN_LLMS:
                    for prompt in GEN_PROMPTS:
                        for setting in GEN_SETTINGS:
                            if setting == "rag":
                                cells += [(ds, sp, ser, r, llm, prompt, "rag", k) for r in runs for k in GEN_K]
                            elif setting == "open-book":  # the tool retriever; k 1: WikiSearch shows one article
                                if ds in OPEN_BOOK.get("datasets", []):
                                    cells.append((ds, sp, ser, OPEN_BOOK["retriever"], llm, prompt, "open-book", 1))
                            elif setting == "oracle" and not GOLD_EVIDENCE[(ds, sp)][0]:
                                continue  # no gold documents: an "oracle" cell would be closed-book
                            else:
                                cells.append((ds, sp, ser, "none", llm, prompt, setting, 0))
    return cells


def cell_dir(ds, sp, ser, retriever, llm, prompt, setting, k):
    return f"{ds}/{sp}/{ser}/{retriever}/{llm}/{prompt}/{setting}-k{k}"


def generation_targets():
    return [f"{RESULTS}/generation/{cell_dir(*c)}/predictions.parquet" for c in generation_cells()]


def template_file(dataset, prompt, setting=None):
    """The cell's template; open-book cells have their own (`<family>.open-book.txt`: the tool format)."""
    suffix = ".open-book" if setting == "open-book" else ""
    return f"{PROMPTS_DIR}/{prompt}/{family_of(dataset, GENERATION.get('families'))}{suffix}.txt"


def _generation_inputs(w):
    inputs = {
        "queries": data_path(w.dataset, w.split, "queries"),
        "template": template_file(w.dataset, w.prompt, w.setting),
    }
    if _is_gguf(w.llm):
        inputs["model"] = f"{MODELS_DIR}/{w.llm}"
    if w.setting in ("rag", "oracle"):
        inputs["corpus"] = corpus_path(corpus_of(w.dataset))
    if w.setting == "oracle":
        inputs["qrels"] = data_path(w.dataset, w.split, "qrels")
    if w.setting == "rag":
        inputs["run"] = run_file(w.dataset, w.split, w.serialization, w.retriever, "parquet")
    if w.setting == "open-book":
        tool_corpus = OPEN_BOOK["corpus"]["name"]
        inputs["tool_corpus"] = corpus_path(tool_corpus)
        inputs["tool_index"] = index_dir(tool_corpus, w.serialization, w.retriever)
    return inputs


def _cell_inputs(w):
    inputs = _generation_inputs(w)
    if w.llm in GEN_BATCH_LLMS and w.llm in GEN_LLMS:
        # a rerun batch reassembles every cell of its model from the cache (seconds each)
        inputs["batch"] = batch_manifest(w.llm)
    return inputs


def batch_manifest(llm):
    return f"{RESULTS}/generation/_batches/{llm}.json"


_CELL_FIELDS = ("dataset", "split", "serialization", "retriever", "llm", "prompt", "setting", "k")


def _batch_cells(llm):
    """The model's cells as the generate rule's wildcards would name them (k as text)."""
    return [
        SimpleNamespace(**dict(zip(_CELL_FIELDS, (*c[:7], str(c[7]))))) for c in generation_cells() if c[4] == llm
    ]


def batch_inputs(w):
    """Every file any cell of the batch reads."""
    return sorted({str(p) for c in _batch_cells(w.llm) for p in _generation_inputs(c).values()})


PER_CELL_SETTINGS = ("max_questions", "oracle_distractors", "open_book")


def batch_members(w):
    """The --cells JSON of `cqabench generate-batch`: each cell's label, files and own settings."""
    members = []
    for c in _batch_cells(w.llm):
        settings = _generation_settings(c)
        members.append({
            "cell": cell_dir(c.dataset, c.split, c.serialization, c.retriever, c.llm, c.prompt, c.setting, c.k),
            "inputs": {k: str(v) for k, v in _generation_inputs(c).items() if k != "model"},
            "settings": {k: settings[k] for k in PER_CELL_SETTINGS if k in settings},
        })
    return as_arg(members)


def batch_settings(w):
    """What every cell of a batch shares (the model, sampling, document cut)."""
    settings = _generation_settings(_batch_cells(w.llm)[0])
    return as_arg({k: v for k, v in settings.items() if k not in PER_CELL_SETTINGS})


def _generation_args(w, input):
    flags = {"corpus": "--corpus", "qrels": "--qrels", "run": "--run", "tool_corpus": "--tool-corpus",
             "tool_index": "--tool-index"}
    return " ".join(f"{flag} {shlex.quote(str(input[name]))}" for name, flag in flags.items() if name in input.keys())


def max_questions_of(dataset):
    """The explicit question cap of a dataset: its own entry, else the general one (None = all)."""
    by_dataset = GENERATION.get("max_questions_by_dataset") or {}
    return by_dataset[dataset] if dataset in by_dataset else GENERATION.get("max_questions")


def _generation_settings(w):
    """Everything besides the cell that decides the answers; a change reruns the job (params)."""
    return {
        "llm": LLMS[w.llm],
        "sampling": GENERATION.get("sampling", {}),
        "max_questions": max_questions_of(w.dataset),
        "max_doc_chars": GENERATION.get("max_doc_chars"),
        "models_dir": MODELS_DIR,
        "oracle_distractors": int(ORACLE_DISTRACTORS.get(w.dataset, 0)) if w.setting == "oracle" else 0,
        "oracle_seed": GEN_SEED,
        **({"open_book": _open_book_settings(w)} if w.setting == "open-book" else {}),
    }


OPEN_BOOK_LIMITS = {"max_steps": 4, "max_tool_chars": 600, "max_total_tokens": 4096, "max_new_tokens": None}


def _open_book_settings(w):
    """The loop's limits (defaults filled in) and the WikiSearch retriever's settings."""
    limits = {k: OPEN_BOOK.get(k, default) for k, default in OPEN_BOOK_LIMITS.items()}
    return {**limits, "retriever_settings": RETRIEVER_CONFIGS[w.retriever]}


def _uses_gpu(llm):
    backend, device = LLMS[llm]["backend"], str(LLMS[llm].get("device", ""))
    if backend == "vllm":
        return device != "cpu"  # vLLM's own default is the GPU build
    return backend == "hf" and (device or "cpu") != "cpu"


# ---- evaluation stage ----

# Evaluation of generation: one job per generation cell -> metrics.json + per_question.parquet
# (answer metrics of cqabench.scoring, via `cqabench evaluate-generation`).


def evaluation_targets():
    return [f"{RESULTS}/metrics/{cell_dir(*c)}/metrics.json" for c in generation_cells()]


def _generation_cell(w):
    """The cell as recorded in metrics.json (docs/architecture.md), everything that names it."""
    llm = LLMS[w.llm]
    cell = {
        "stage": "generation",
        "dataset": w.dataset,
        "split": w.split,
        "corpus": corpus_of(w.dataset),
        "serialization": w.serialization,
        "retriever": w.retriever,
        "retriever_settings": _run_settings(w.retriever) if w.retriever != "none" else {},
        "llm": w.llm,
        "backend": llm["backend"],
        "dtype": llm.get("dtype", "auto"),
        "prompt": w.prompt,
        "template_hash": file_hash(template_file(w.dataset, w.prompt, w.setting)),
        "setting": w.setting,
        "k": int(w.k),
        "max_questions": max_questions_of(w.dataset),
        "max_doc_chars": GENERATION.get("max_doc_chars"),
        "oracle_distractors": int(ORACLE_DISTRACTORS.get(w.dataset, 0)) if w.setting == "oracle" else 0,
        "sampling": {**(GENERATION.get("sampling") or {}), **(llm.get("sampling") or {})},
    }
    if w.setting == "open-book":  # the tool corpus, and the loop's limits as columns of every result row
        cell["corpus"] = OPEN_BOOK["corpus"]["name"]
        cell["retriever_settings"] = {**RETRIEVER_CONFIGS[w.retriever], "k": TOOL_SEARCH_DEPTH}
        settings = _open_book_settings(w)
        cell.update({f"open_book_{k}": settings[k] for k in OPEN_BOOK_LIMITS})
        if settings["max_new_tokens"] is not None:
            cell["sampling"]["max_new_tokens"] = settings["max_new_tokens"]
    return cell

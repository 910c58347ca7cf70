"""Gather every cell's metrics.json (and per-question scores) into two flat fact tables.

The fact tables are what people load into pandas, polars or DuckDB to slice the matrix any way
they like, so they hold plain columns only: strings, int64, float64, bool. Nested settings
become JSON strings. A metric file that lacks a key yields a null, and a switch we did not know
about when this was written becomes one more column, so a new stage or switch never breaks the
report.

Provenance: every row carries what produced its number as plain columns (docs/report.md lists
them one by one): the run's config hash, the commit and package versions the producing job
recorded about its own environment (`pkg_<name>` per key package), the model's source, hash
and revision, sampling parameters (`sampling_<key>`), retriever settings (`retriever_<key>`,
overlaid by the index's effective settings.json), and a breakdown row's dimension
(`breakdown`, `breakdown_value`) apart from its metric name. A file written before a value
was recorded gets "unknown (not recorded)" rather than a null, so a null always means "does
not apply" (no sampling in a retrieval cell).

Units: every `value` is a fraction in 0..1 (`unit` column: "fraction"). A metric file entry
says its unit (`"unit": "fraction"` or `"percent"`, converted here once); an entry without one
is from before units were recorded: answer metrics (stage generation) were then percentages and
are divided by 100, retrieval metrics were already fractions. A null value (nothing evaluable)
keeps its `reason` column; a value that is present has reason null.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from cqabench.common.errors import DataError
from cqabench.common.io import write_parquet
from cqabench.common import provenance as prov_mod
from cqabench.evaluation.cell_provenance import generation_summary_provenance
from cqabench.models.provenance import MODEL_KEYS, retriever_model

log = logging.getLogger(__name__)

# The switches every cell may carry, in the order the fact table shows them, with their types.
CELL_COLUMNS: dict[str, pa.DataType] = {
    "stage": pa.string(),
    "dataset": pa.string(),
    "split": pa.string(),
    "corpus": pa.string(),
    "relevance": pa.string(),  # the dataset's relevance mode (datasets.<name>.relevance); null: a run before it existed
    "serialization": pa.string(),
    "retriever": pa.string(),
    "retriever_settings": pa.string(),  # JSON
    "llm": pa.string(),
    "backend": pa.string(),
    "dtype": pa.string(),
    "prompt": pa.string(),
    "template_hash": pa.string(),
    "setting": pa.string(),
    # what the prompts showed: none | retrieved | gold | facts (StrategyQA's annotators' facts) | tools
    "context_source": pa.string(),
    "k": pa.int64(),
    "identical_id_policy": pa.string(),
}
METRIC_COLUMNS: dict[str, pa.DataType] = {
    "metric": pa.string(),
    "breakdown": pa.string(),  # TANQ: the dimension of a breakdown row (null: the whole cell)
    "breakdown_value": pa.string(),  # its bucket
    "variant": pa.string(),
    # the dataset's primary metric and variant (one row per cell and dataset; primary_metric())
    "primary": pa.bool_(),
    "value": pa.float64(),
    "unit": pa.string(),
    "n": pa.int64(),
    "reason": pa.string(),
    # answer metrics: questions whose generation failed, left out of the mean (n + n_failed were asked);
    # null on retrieval rows and in metric files written before failed items were counted
    "n_failed": pa.int64(),
}
# How an answer cell's predictions spread (cqabench.evaluation.answer_spread, metrics.json `answers`): the most
# frequent answer and its share, and the flags the report shows; null on retrieval rows.
ANSWER_COLUMNS: dict[str, pa.DataType] = {
    "n_answers": pa.int64(),
    "top_answer": pa.string(),
    "top_answer_count": pa.int64(),
    "top_answer_share": pa.float64(),
    "constant_answer": pa.bool_(),
    "low_parse_rate": pa.bool_(),
}
UNIT = "fraction"
UNIT_FACTORS = {"fraction": 1.0, "percent": 0.01}
SETTINGS_WITHOUT_RETRIEVAL = ("closed", "oracle")
PROVENANCE_COLUMNS: dict[str, pa.DataType] = {
    "config_hash": pa.string(),
    "git_commit": pa.string(),
    "generation_git_commit": pa.string(),
    "aggregate_git_commit": pa.string(),
    "python": pa.string(),
    **{f"pkg_{key}": pa.string() for key in prov_mod.KEY_PACKAGES},
    "package_versions": pa.string(),  # JSON {distribution: version}: the complete record
    "model_source": pa.string(),
    "model_hash": pa.string(),
    "model_revision": pa.string(),
    # generation rows: the generate job (summary.json); retrieval rows: the job that scored the run
    "wall_time_s": pa.float64(),
    "wall_time_note": pa.string(),  # what wall_time_s covers (items from the cache), or why it is missing
    "prompt_tokens": pa.int64(),
    "output_tokens": pa.int64(),
    # documents the prompts gave per question (cqabench.evaluation.evaluate.docs_given): RAG@k may give fewer than k
    "docs_given_min": pa.int64(),
    "docs_given_mean": pa.float64(),
    "docs_given_max": pa.int64(),
}
# Generation settings that decide the output; null on retrieval rows (nothing is sampled).
SAMPLING_COLUMNS: dict[str, pa.DataType] = {
    "sampling_temperature": pa.float64(),
    "sampling_top_p": pa.float64(),
    "sampling_max_new_tokens": pa.int64(),
    "sampling_seed": pa.int64(),
    "sampling_frequency_penalty": pa.float64(),
    "sampling_presence_penalty": pa.float64(),
    "sampling_stop": pa.string(),  # JSON list of stop strings (a list has no plain column type)
}
# Common retriever settings; any other key becomes `retriever_<key>` too (nested keys joined by
# "_"). The search depth `k` is `retriever_depth`, so it is not read as the RAG `k`.
# Null on closed-book and oracle rows (nothing was retrieved).
RETRIEVER_COLUMNS: dict[str, pa.DataType] = {
    "retriever_type": pa.string(),
    "retriever_model": pa.string(),
    "retriever_depth": pa.int64(),
    "retriever_k1": pa.float64(),
    "retriever_b": pa.float64(),
    "retriever_stemmer": pa.string(),
    "retriever_language": pa.string(),
    "retriever_similarity": pa.string(),
    "retriever_backend": pa.string(),
    "retriever_max_length": pa.int64(),
}
RETRIEVER_RENAMES = {"k": "depth"}
# Provenance every row must have (a value or a string saying why it is unknown).
REQUIRED_PROVENANCE = ("config_hash", "git_commit", "aggregate_git_commit", "python",
                       *(f"pkg_{key}" for key in prov_mod.KEY_PACKAGES), "model_source", "model_hash",
                       "model_revision")
ID_COLUMNS: dict[str, pa.DataType] = {"cell_id": pa.string(), "source": pa.string()}
PER_QUESTION_COLUMNS: dict[str, pa.DataType] = {
    "qid": pa.string(),
    "metric": pa.string(),
    "variant": pa.string(),
    "primary": pa.bool_(),  # as in metrics.parquet: the cell's primary metric and variant
    "value": pa.float64(),
    "unit": pa.string(),
}
# Joined from the prepared queries so reports can break scores down by type or skill.
# The gold answer table's size (TANQ: Table 8 groups by relations = columns - 1, Table 9 by rows).
QUESTION_COLUMNS: dict[str, pa.DataType] = {"question_type": pa.string(), "skills": pa.string(),
                                            "answer_columns": pa.int64(), "answer_rows": pa.int64()}

PER_QUESTION_NAMES = ("per_question.parquet", "per_query.parquet")

# A retrieval cell's primary metric: nDCG@10 as trec_eval computes it (DEXTER Table 2, the
# heatmap, the retrieval significance tests). Answer cells take their dataset's first entry of
# cqabench.evaluation.scoring.PRIMARY (the k-effect plot's metric).
PRIMARY_RETRIEVAL = ("ndcg_cut_10", "trec_eval")
RETRIEVAL_WALL_NOTE = "the eval-retrieval job that scored the run (metrics.json wall_time_s)"


def primary_metric(stage: Any, dataset: Any) -> tuple[str, str] | None:
    """(metric, variant) that is a cell's one headline number, or None for a dataset without one.

    AmbigQA and FinQA carry two variants of their main metric (official / DEXTER's), StrategyQA
    two metrics; a pivot that does not pick one takes whichever comes first. `primary` in the
    fact table marks the pick, so `WHERE "primary"` gives one value per (cell, dataset).
    """
    if stage == "retrieval":
        return PRIMARY_RETRIEVAL
    if stage == "generation":
        from cqabench.evaluation.scoring import PRIMARY

        first = PRIMARY.get(str(dataset))
        return tuple(first[0]) if first else None
    return None


def is_primary(stage: Any, dataset: Any, metric: Any, variant: Any, breakdown: Any = None) -> bool:
    """Whether a fact row is its cell's primary metric (a breakdown row never is)."""
    return breakdown is None and primary_metric(stage, dataset) == (metric, variant)


def find_metric_files(results_dir: str | Path) -> list[Path]:
    """Every metrics.json under the retrieval and answer-metric trees, sorted for stable output."""
    root = Path(results_dir)
    found = [p for sub in ("retrieval", "metrics") for p in (root / sub).rglob("metrics.json")]
    return sorted(found)


def cell_id(path: Path, results_dir: str | Path | None = None) -> str:
    """A cell's name: its folder, relative to the results tree (results/<name>/) when it lies below it."""
    folder = path.parent
    if results_dir is not None:
        try:
            return folder.resolve().relative_to(Path(results_dir).resolve()).as_posix()
        except ValueError:
            pass
    parts = folder.parts
    for anchor in ("retrieval", "metrics"):
        if anchor in parts:
            return "/".join(parts[parts.index(anchor) :])
    return folder.as_posix()


def read_metric_file(path: str | Path) -> dict[str, Any]:
    """Parse one metrics.json, checking only what the fact table cannot do without."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DataError(path, None, "(file)", f"not valid JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise DataError(path, None, "(file)", "expected a JSON object")
    cell = doc.get("cell") or {}
    metrics = doc.get("metrics")
    prov = doc.get("provenance") or {}
    if not isinstance(cell, dict):
        raise DataError(path, None, "cell", "expected an object")
    if not isinstance(prov, dict):
        raise DataError(path, None, "provenance", "expected an object")
    if not isinstance(metrics, list):
        raise DataError(path, None, "metrics", "expected a list of {metric, variant, value, n}")
    answers = doc.get("answers") or {}
    if not isinstance(answers, dict):
        raise DataError(path, None, "answers", "expected an object (cqabench.evaluation.answer_spread)")
    for i, m in enumerate(metrics):
        if not isinstance(m, dict) or not m.get("metric"):
            raise DataError(path, i, "metrics", "each entry needs a 'metric' name")
    return {"cell": cell, "metrics": metrics, "provenance": prov, "answers": answers}


def _plain(value: Any) -> Any:
    """A value a Parquet column can hold without extension types: nested -> JSON text."""
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, sort_keys=True, ensure_ascii=False)
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def _as_number(value: Any, kind: type) -> Any:
    if value is None or value == "":
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    if math.isnan(number):
        return None
    return int(number) if kind is int else number


def to_fraction(value: Any, unit: Any, stage: Any, where: Path, index: int) -> float | None:
    """A metric value in 0..1: `unit` converted once; files without a unit read as they were written."""
    number = _as_number(value, float)
    if unit is None or unit == "":
        unit = "percent" if stage == "generation" else "fraction"  # the convention before units were recorded
        if unit == "percent" and index == 0:
            log.warning("%s: no unit recorded (written before units were); answer metrics read as percent "
                        "and divided by 100", where)
    factor = UNIT_FACTORS.get(str(unit))
    if factor is None:
        raise DataError(where, index, "metrics.unit", f"unknown unit {unit!r}; known: {sorted(UNIT_FACTORS)}")
    return None if number is None else number * factor


def _normalize_setting(row: dict[str, Any]) -> None:
    """Closed-book and oracle cells retrieve nothing: retriever "none" and k 0 in every row."""
    if row.get("stage") == "generation" and row.get("setting") in SETTINGS_WITHOUT_RETRIEVAL:
        if row.get("retriever") in (None, ""):
            row["retriever"] = "none"
        if row.get("k") in (None, ""):
            row["k"] = 0


def split_breakdown(name: str) -> tuple[str, str | None, str | None]:
    """A summary entry's name -> (metric, breakdown, breakdown_value).

    TANQ's scorer names breakdown rows "<metric>/<dimension>=<bucket>" (cqabench.evaluation.scoring);
    a query filters on a column far more easily than on a name pattern.
    """
    metric, sep, rest = name.partition("/")
    if not sep or "=" not in rest:
        return name, None, None
    dimension, _, bucket = rest.partition("=")
    return metric, dimension, bucket


def _flatten(prefix: str, value: Any, out: dict[str, Any]) -> None:
    if isinstance(value, dict):
        for key, inner in value.items():
            _flatten(f"{prefix}_{key}", inner, out)
    else:
        out[prefix] = _plain(value)


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    return doc if isinstance(doc, dict) else None


def index_settings(results_dir: str | Path | None, cell: dict[str, Any]) -> dict[str, Any]:
    """The effective settings the index job wrote (defaults filled in, e.g. BM25's stemmer)."""
    if results_dir is None or not all(cell.get(k) for k in ("corpus", "serialization", "retriever")):
        return {}
    path = Path(results_dir) / "index" / str(cell["corpus"]) / str(cell["serialization"]) / str(cell["retriever"])
    return _read_json(path / "settings.json") or {}


def retriever_columns(settings: dict[str, Any]) -> dict[str, Any]:
    """`retriever_<key>` columns of a retriever's settings; `retriever_model` names its model."""
    out: dict[str, Any] = {}
    for key, value in settings.items():
        _flatten(f"retriever_{RETRIEVER_RENAMES.get(key, key)}", value, out)
    model = next((settings[k] for k in MODEL_KEYS if settings.get(k)), None)
    out["retriever_model"] = str(model) if model else "none"
    return out


def generation_summary(results_dir: str | Path | None, cid: str) -> dict[str, Any] | None:
    """summary.json of the generation job behind an answer-metric cell (same path under generation/)."""
    if results_dir is None or not cid.startswith("metrics/"):
        return None
    return _read_json(Path(results_dir) / "generation" / cid.removeprefix("metrics/") / "summary.json")


def provenance_columns(
    prov: dict[str, Any], cell: dict[str, Any], settings: dict[str, Any], stage: Any,
    summary: dict[str, Any] | None,
) -> dict[str, Any]:
    """The row's provenance as plain columns, each one filled or saying why it is unknown."""
    prov = dict(prov)
    if stage == "generation" and summary is not None:  # files written before evaluation copied it
        for key, value in generation_summary_provenance(summary).items():
            prov.setdefault(key, value)
    out: dict[str, Any] = {}
    versions = prov.pop("package_versions", None)
    out.update(prov_mod.package_columns(versions if isinstance(versions, dict) else None))
    out["package_versions"] = _plain(versions) if versions else prov_mod.NOT_RECORDED
    out["git_commit"] = str(prov.pop("git_commit", None) or prov_mod.NOT_RECORDED)
    out["python"] = str(prov.pop("python", None) or prov_mod.NOT_RECORDED)
    if stage == "generation":
        out["generation_git_commit"] = str(prov.pop("generation_git_commit", None) or prov_mod.NOT_RECORDED)
    model = {k: prov.pop(k) for k in ("model_source", "model_hash", "model_revision") if prov.get(k)}
    if len(model) < 3:
        if stage == "retrieval" and not any(settings.get(k) for k in MODEL_KEYS):
            fallback = retriever_model(settings)  # no model: nothing environment-dependent
        else:
            spec = next((settings[k] for k in MODEL_KEYS if settings.get(k)), None)
            source = str(spec) if stage == "retrieval" and spec else prov_mod.NOT_RECORDED
            fallback = {"model_source": source, "model_hash": prov_mod.NOT_RECORDED,
                        "model_revision": prov_mod.NOT_RECORDED}
        model = {**fallback, **model}
    out.update(model)
    sampling = prov.pop("sampling", None) or cell.get("sampling")
    if isinstance(sampling, dict):
        for key, value in sampling.items():
            _flatten(f"sampling_{key}", value, out)
    for key, value in prov.items():  # counts and costs: wall_time_s, tokens, queries evaluated...
        out[key] = _plain(value)
    return out


def benchmark_wall_time(results_dir: str | Path | None, cid: str) -> dict[str, Any]:
    """A generation cell's wall time from its generate job's Snakemake benchmark file, for
    summaries written before the job recorded one; {} when there is none."""
    if results_dir is None or not cid.startswith("metrics/"):
        return {}
    path = Path(results_dir) / "benchmarks" / "generate" / (cid.removeprefix("metrics/") + ".tsv")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
        header, first = lines[0].split("\t"), lines[1].split("\t")
        seconds = float(first[header.index("s")])
    except (OSError, IndexError, ValueError):
        return {}
    return {"wall_time_s": seconds, "wall_time_note": f"the generate job, from Snakemake's benchmark file {path}"}


def wall_time_columns(row: dict[str, Any], results_dir: str | Path | None, summary: dict[str, Any] | None) -> None:
    """Fill `wall_time_s` / `wall_time_note`: a generation row always says what its time is or why
    there is none (never a bare null)."""
    if row.get("wall_time_s") is not None:
        if not row.get("wall_time_note"):
            row["wall_time_note"] = RETRIEVAL_WALL_NOTE if row.get("stage") == "retrieval" else "the job that wrote the metric file"
        return
    if row.get("stage") != "generation":
        return
    found = benchmark_wall_time(results_dir, row["cell_id"])
    if found:
        row.update(found)
    elif summary is None:
        row["wall_time_note"] = ("not recorded: no generation summary.json beside this cell "
                                 "(predictions scored by `cqabench evaluate`, or made elsewhere)")
    else:
        row["wall_time_note"] = ("not recorded: the cell's summary.json has no wall_time_s and its generate job "
                                 "left no benchmark file")


def fact_rows(
    path: str | Path, results_dir: str | Path | None = None, config_hash: str | None = None,
    aggregate_commit: str | None = None,
) -> list[dict[str, Any]]:
    """One row per (cell, metric) of one metric file; values as fractions, nulls with their reason."""
    path = Path(path)
    doc = read_metric_file(path)
    cell, prov = dict(doc["cell"]), doc["provenance"]
    base: dict[str, Any] = {"cell_id": cell_id(path, results_dir), "source": str(path)}
    for key, value in cell.items():
        if key != "sampling":  # sampling becomes sampling_<key> columns
            base[key] = _plain(value)
    if not base.get("stage"):  # older files: the tree a cell lives in names its stage
        first = base["cell_id"].split("/", 1)[0]
        base["stage"] = {"retrieval": "retrieval", "metrics": "generation"}.get(first)
    _normalize_setting(base)
    settings: dict[str, Any] = {}
    if base.get("retriever") not in (None, "", "none"):
        cell_settings = cell.get("retriever_settings") if isinstance(cell.get("retriever_settings"), dict) else {}
        settings = {**index_settings(results_dir, cell), **cell_settings}
        base.update(retriever_columns(settings))
        base["retriever_settings"] = _plain(settings) if settings else base.get("retriever_settings")
    summary = generation_summary(results_dir, base["cell_id"]) if base["stage"] == "generation" else None
    for key, value in provenance_columns(prov, cell, settings, base["stage"], summary).items():
        name = key if key not in base and key not in METRIC_COLUMNS else f"provenance_{key}"
        base[name] = value
    base.update({key: doc["answers"].get(key) for key in ANSWER_COLUMNS if key in doc["answers"]})
    wall_time_columns(base, results_dir, summary)
    base["config_hash"] = config_hash or NO_CONFIG_HASH
    base["aggregate_git_commit"] = aggregate_commit or prov_mod.git_commit()
    rows = []
    for i, m in enumerate(doc["metrics"]):
        row = dict(base)
        row["metric"], row["breakdown"], row["breakdown_value"] = split_breakdown(str(m["metric"]))
        row["variant"] = None if m.get("variant") is None else str(m.get("variant"))
        row["primary"] = is_primary(base.get("stage"), base.get("dataset"), row["metric"], row["variant"],
                                    row["breakdown"])
        row["value"] = to_fraction(m.get("value"), m.get("unit"), base.get("stage"), path, i)
        row["unit"] = UNIT
        row["n"] = _as_number(m.get("n"), int)
        row["n_failed"] = _as_number(m.get("n_failed"), int)
        reason = m.get("reason")
        if row["value"] is None:
            row["reason"] = str(reason) if reason else "no value in the metric file"
        else:
            row["reason"] = None
        rows.append(row)
    return rows


def _infer_type(values: Iterable[Any]) -> pa.DataType:
    """Type of an unknown column: the one Python type its values share, else string."""
    kinds = {type(v) for v in values if v is not None}
    if not kinds:
        return pa.string()
    if kinds == {bool}:
        return pa.bool_()
    if kinds <= {int}:
        return pa.int64()
    if kinds <= {int, float}:
        return pa.float64()
    return pa.string()


def _coerce(value: Any, dtype: pa.DataType) -> Any:
    if value is None:
        return None
    if pa.types.is_string(dtype):
        return value if isinstance(value, str) else json.dumps(value) if isinstance(value, bool) else str(value)
    if pa.types.is_int64(dtype):
        return _as_number(value, int)
    if pa.types.is_float64(dtype):
        return _as_number(value, float)
    if pa.types.is_boolean(dtype):
        return bool(value)
    return value


def to_table(rows: Sequence[dict[str, Any]], known: dict[str, pa.DataType]) -> pa.Table:
    """Rows -> Arrow table: known columns first with fixed types, unknown ones after, sorted."""
    extra = sorted({k for r in rows for k in r} - set(known))
    types = dict(known)
    for name in extra:
        types[name] = _infer_type(r.get(name) for r in rows)
    columns = {
        name: pa.array([_coerce(r.get(name), dtype) for r in rows], type=dtype) for name, dtype in types.items()
    }
    return pa.table(columns)


FACT_COLUMNS = {**ID_COLUMNS, **CELL_COLUMNS, **RETRIEVER_COLUMNS, **METRIC_COLUMNS, **ANSWER_COLUMNS,
                **PROVENANCE_COLUMNS, **SAMPLING_COLUMNS}
NO_CONFIG_HASH = "unknown (no config given to aggregate)"
PQ_COLUMNS = {**ID_COLUMNS, **CELL_COLUMNS, **PER_QUESTION_COLUMNS, **QUESTION_COLUMNS}


def build_metrics_table(
    files: Sequence[str | Path], results_dir: str | Path | None = None, config_hash: str | None = None,
    aggregate_commit: str | None = None,
) -> pa.Table:
    """The fact table of metric files; `config_hash` is the run's config (every row gets it)."""
    commit = aggregate_commit or prov_mod.git_commit()  # once, not per file
    rows = [row for f in files for row in fact_rows(f, results_dir, config_hash, commit)]
    return to_table(rows, FACT_COLUMNS)


def _question_info(data_dir: Path | None, dataset: Any, split: Any, cache: dict) -> dict[str, dict[str, Any]]:
    """qid -> {question_type, skills JSON, answer_columns, answer_rows} from the prepared split.

    Type and skills come from queries.parquet, the gold table's size from answers.parquet
    (questions whose answer is a table); what a split does not have is simply absent.
    """
    if data_dir is None or not dataset or not split:
        return {}
    key = (dataset, split)
    if key not in cache:
        folder = data_dir / str(dataset) / str(split)
        info: dict[str, dict[str, Any]] = {}
        path = folder / "queries.parquet"
        if path.exists():
            cols = set(pq.read_schema(path).names)
            wanted = [c for c in ("qid", "question_type", "skills") if c in cols]
            for r in pq.read_table(path, columns=wanted).to_pylist():
                skills = r.get("skills")
                info[str(r["qid"])] = {"question_type": r.get("question_type") or None,
                                       "skills": json.dumps(list(skills)) if skills else None}
        path = folder / "answers.parquet"
        if path.exists() and {"qid", "table_header", "table_rows"} <= set(pq.read_schema(path).names):
            for r in pq.read_table(path, columns=["qid", "table_header", "table_rows"]).to_pylist():
                if r.get("table_header"):
                    entry = info.setdefault(str(r["qid"]), {})
                    entry["answer_columns"] = len(r["table_header"])
                    entry["answer_rows"] = len(r.get("table_rows") or [])
        cache[key] = info
    return cache[key]


def per_question_rows(
    metric_file: str | Path, results_dir: str | Path | None = None, data_dir: str | Path | None = None,
    _cache: dict | None = None,
) -> list[dict[str, Any]]:
    """The per-question scores beside one metric file, tagged with the cell's switches."""
    metric_file = Path(metric_file)
    pq_path = next((metric_file.parent / n for n in PER_QUESTION_NAMES if (metric_file.parent / n).exists()), None)
    if pq_path is None:
        return []
    cell = read_metric_file(metric_file)["cell"]
    base = {"cell_id": cell_id(metric_file, results_dir), "source": str(pq_path)}
    base.update({k: _plain(v) for k, v in cell.items()})
    table = pq.read_table(pq_path)
    missing = {"qid", "metric", "value"} - set(table.column_names)
    if missing:
        raise DataError(pq_path, None, ",".join(sorted(missing)), "per-question file lacks these columns")
    info = _question_info(Path(data_dir) if data_dir else None, cell.get("dataset"), cell.get("split"),
                          _cache if _cache is not None else {})
    if not base.get("stage"):  # older files: the tree a cell lives in names its stage (as in fact_rows)
        base["stage"] = {"retrieval": "retrieval", "metrics": "generation"}.get(base["cell_id"].split("/", 1)[0])
    _normalize_setting(base)
    rows = []
    for r in table.to_pylist():
        row = dict(base)
        for key, value in r.items():
            row[key if key not in base else f"pq_{key}"] = _plain(value)
        row["qid"] = str(r["qid"])
        row["unit"] = UNIT  # per-question scores are 0..1 in every stage
        row["primary"] = is_primary(row.get("stage"), row.get("dataset"), row.get("metric"), row.get("variant"))
        for name, value in info.get(row["qid"], {}).items():
            if row.get(name) is None:
                row[name] = value
        rows.append(row)
    return rows


def build_per_question_table(
    files: Sequence[str | Path], results_dir: str | Path | None = None, data_dir: str | Path | None = None
) -> pa.Table:
    cache: dict = {}
    rows = [row for f in files for row in per_question_rows(f, results_dir, data_dir, cache)]
    return to_table(rows, PQ_COLUMNS)


def aggregate(
    files: Sequence[str | Path],
    out_metrics: str | Path,
    out_per_question: str | Path,
    results_dir: str | Path | None = None,
    data_dir: str | Path | None = None,
    config_hash: str | None = None,
) -> tuple[int, int]:
    """Write both fact tables atomically; returns their row counts."""
    metrics = build_metrics_table(files, results_dir, config_hash)
    per_question = build_per_question_table(files, results_dir, data_dir)
    write_parquet(metrics, out_metrics)
    write_parquet(per_question, out_per_question)
    log.info("aggregate: %d metric files -> %d metric rows, %d per-question rows",
             len(files), metrics.num_rows, per_question.num_rows)
    return metrics.num_rows, per_question.num_rows

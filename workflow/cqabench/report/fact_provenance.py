"""The provenance columns of a fact row: what produced its number, each filled or saying why not.

Every row carries, as plain columns (docs/report.md lists them one by one): the commit and package
versions the producing job recorded about its own environment (`pkg_<name>` per key package),
the model's source, hash and revision, sampling parameters (`sampling_<key>`), retriever
settings (`retriever_<key>`, overlaid by the index's effective settings.json) and the job's wall
time. A file written before a value was recorded gets "unknown (not recorded)" rather than a
null, so a null always means "does not apply" (no sampling in a retrieval cell). An answer
cell's generation summary.json (or its generate job's Snakemake benchmark file) fills what its
metric file lacks.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cqabench.common import provenance as prov_mod
from cqabench.evaluation.cell_provenance import generation_summary_provenance
from cqabench.models.provenance import MODEL_KEYS, retriever_model
from cqabench.report.fact_columns import plain_value

RETRIEVER_RENAMES = {"k": "depth"}
RETRIEVAL_WALL_NOTE = "the evaluate-retrieval job that scored the run (metrics.json wall_time_s)"


def _flatten(prefix: str, value: Any, out: dict[str, Any]) -> None:
    if isinstance(value, dict):
        for key, inner in value.items():
            _flatten(f"{prefix}_{key}", inner, out)
    else:
        out[prefix] = plain_value(value)


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
    prov: dict[str, Any],
    cell: dict[str, Any],
    settings: dict[str, Any],
    stage: Any,
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
    out["package_versions"] = plain_value(versions) if versions else prov_mod.NOT_RECORDED
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
            fallback = {
                "model_source": source,
                "model_hash": prov_mod.NOT_RECORDED,
                "model_revision": prov_mod.NOT_RECORDED,
            }
        model = {**fallback, **model}
    out.update(model)
    sampling = prov.pop("sampling", None) or cell.get("sampling")
    if isinstance(sampling, dict):
        for key, value in sampling.items():
            _flatten(f"sampling_{key}", value, out)
    for key, value in prov.items():  # counts and costs: wall_time_s, tokens, queries evaluated...
        out[key] = plain_value(value)
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
            row["wall_time_note"] = (
                RETRIEVAL_WALL_NOTE if row.get("stage") == "retrieval" else "the job that wrote the metric file"
            )
        return
    if row.get("stage") != "generation":
        return
    found = benchmark_wall_time(results_dir, row["cell_id"])
    if found:
        row.update(found)
    elif summary is None:
        row["wall_time_note"] = (
            "not recorded: no generation summary.json beside this cell "
            "(predictions scored by `cqabench evaluate`, or made elsewhere)"
        )
    else:
        row["wall_time_note"] = (
            "not recorded: the cell's summary.json has no wall_time_s and its generate job left no benchmark file"
        )

"""The hub models a plan needs: which checkpoints its jobs load, and which are not fetched yet.

Jobs run offline and read a hub model only from `models/<org>/<name>/` (`cqabench.models.store`),
filled on a node with network by `cqabench fetch-models` or the `fetch_models` rule
(`cqabench.models.fetch`). This module enumerates, from a `Plan`, every hub model a planned job
loads: the encoders of every retriever the plan indexes or searches with (dense, SPLADE, ColBERT;
BM25 has none), the cross-encoder of every rerank pipeline (`retrieval.pipelines`, type rerank),
and every planned hf / vllm LLM (TANQ's
open-book agent is the planned LLM itself; its WikiSearch tool is BM25). `package:` models
(inside PyPI packages, the default config's), GGUF sources (converted by a rule), local folders
and API models are not fetched.

Each hub model needs its `revision` key (`revision` / `query_revision` / `doc_revision` of a
retriever, the first the fallback of the other two; `revision` of an LLM): a commit, or a branch such as `main` that the fetch locks
into `models/<org>/<name>/REVISION`. A missing key is a planning error (`problems`); a model
not in the folder is a planning-time message naming it and the command that fetches it
(`missing_message`), and a real run whose jobs load it stops before any job starts
(`needed_by_jobs`, called from `onstart`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cqabench.models.fetch import ModelRequest
from cqabench.models.store import (
    COMMIT,
    DEFAULT_MODELS_DIR,
    REVISION_KEYS,
    damage,
    fetched_revision,
    is_hub_id,
    revision_of,
)

# Rules whose jobs load a model, and the wildcard that names whose model (workflow/rules/).
MODEL_RULES = {
    "index": "retriever", "colbert_codec": "retriever", "encode_part": "retriever", "gather_index": "retriever",
    "search": "retriever", "decompose_search": "retriever", "generate": "llm", "generate_batch": "llm",
    "generate_batch_share": "llm",
    "rerank_run": "name",
}  # fmt: skip
FETCH_RULE = "fetch_models"
# A gated model needs a token; said in the missing-model message so nobody learns it from a 401.
KNOWN_GATED_ORGS = ("meta-llama/",)


@dataclass(frozen=True)
class HubModel:
    """One config key naming a hub model: who (retriever / llm name), which key, which revision key."""

    kind: str  # "retrievers" | "llms" | "retrieval.pipelines"
    owner: str
    key: str  # model | query_model | doc_model | source
    repo_id: str
    revision_key: str
    revision: str | None

    @property
    def where(self) -> str:
        return f"{self.kind}.{self.owner}.{self.key}"


def models_dir_of(config: Mapping[str, Any]) -> str:
    """The config's `models_dir` (default `models`): shared by every config, outside results/."""
    return str(config.get("models_dir") or DEFAULT_MODELS_DIR)


def used_retrievers(plan: Any) -> list[str]:
    """Retrievers whose index or search jobs the plan has: retrieval's, IR-Q/IR-D's, the tool agent's."""
    names = (
        list(plan.retrieval_retrievers) + list(plan.decomposition.get("retrievers") or []) + list(plan.tool_retrievers)
    )
    return [n for n in dict.fromkeys(names) if n in plan.retriever_configs]


def retriever_models(name: str, settings: Mapping[str, Any], root: Path) -> list[HubModel]:
    out = []
    for key, revision_key in REVISION_KEYS.items():
        spec = settings.get(key)
        if is_hub_id(spec, root):
            out.append(HubModel("retrievers", name, key, str(spec), revision_key, revision_of(settings, key)))
    return out


def llm_models(name: str, cfg: Mapping[str, Any], root: Path) -> list[HubModel]:
    if cfg.get("backend") == "openai" or not is_hub_id(cfg.get("source"), root):
        return []
    revision = cfg.get("revision")
    return [HubModel("llms", name, "source", str(cfg["source"]), "revision", str(revision) if revision else None)]


def pipeline_models(name: str, spec: Mapping[str, Any], root: Path) -> list[HubModel]:
    """A rerank pipeline's cross-encoder when it is a hub model (`revision` pins it)."""
    if spec.get("type") != "rerank" or not is_hub_id(spec.get("model"), root):
        return []
    revision = spec.get("revision")
    return [
        HubModel(
            "retrieval.pipelines", name, "model", str(spec["model"]), "revision", str(revision) if revision else None
        )
    ]


def hub_models(plan: Any) -> list[HubModel]:
    """Every config key of the plan that names a hub model a planned job loads."""
    root = plan.env.root
    out = [m for r in used_retrievers(plan) for m in retriever_models(r, plan.retriever_configs[r], root)]
    out += [m for n, spec in (getattr(plan, "pipelines", None) or {}).items() for m in pipeline_models(n, spec, root)]
    out += [m for n in dict.fromkeys(plan.gen_llms) if n in plan.llms for m in llm_models(n, plan.llms[n], root)]
    return out


def problems(plan: Any) -> list[str]:
    """Planning errors: a hub model without its revision key, one repository at two revisions."""
    out = []
    by_repo: dict[str, list[HubModel]] = {}
    for m in hub_models(plan):
        by_repo.setdefault(m.repo_id, []).append(m)
        if m.revision is None:
            out.append(
                f"{m.kind}.{m.owner}.{m.revision_key}: {m.key} {m.repo_id!r} is a Hugging Face hub model and needs "
                "a revision: a commit (40 hex digits), or a branch such as main, which `cqabench fetch-models` "
                f"locks into {models_dir_of(plan.config)}/{m.repo_id}/REVISION"
            )
    for repo, uses in by_repo.items():
        revisions = sorted({m.revision for m in uses if m.revision})
        if len(revisions) > 1:
            keys = ", ".join(f"{m.kind}.{m.owner}.{m.revision_key}" for m in uses)
            out.append(f"{keys}: {repo!r} at revisions {revisions}; its one folder holds one revision")
    return out


def requests(plan: Any) -> list[ModelRequest]:
    """What `cqabench fetch-models` fetches for the plan: each repository once, with every key naming it."""
    keys: dict[str, list[str]] = {}
    revision: dict[str, str] = {}
    for m in hub_models(plan):
        keys.setdefault(m.repo_id, []).append(m.where)
        revision.setdefault(m.repo_id, m.revision or "")
    return [ModelRequest(repo, revision[repo], tuple(keys[repo])) for repo in keys]


def status(plan: Any, directory: str | None = None) -> dict[str, str | None]:
    """repo_id -> the reason it cannot be loaded ('not fetched', 'commit X, the config pins Y'), None when ready."""
    folder_root = plan.env.root / (directory or models_dir_of(plan.config))
    out: dict[str, str | None] = {}
    for req in requests(plan):
        commit = fetched_revision(folder_root / req.repo_id)
        if commit is None:
            why = damage(folder_root / req.repo_id)
            out[req.repo_id] = f"not whole: {why}; fetch it again" if why else "not fetched"
        elif COMMIT.match(req.revision) and commit != req.revision:
            out[req.repo_id] = f"fetched at {commit}, the config pins {req.revision}"
        else:
            out[req.repo_id] = None
    return out


def missing(plan: Any, only: Iterable[str] | None = None) -> dict[str, str]:
    """The plan's hub models that a job could not load now (all, or those in `only`), with why."""
    wanted = None if only is None else set(only)
    return {repo: why for repo, why in status(plan).items() if why and (wanted is None or repo in wanted)}


def needed_by_jobs(plan: Any, jobs: Iterable[tuple[str, Mapping[str, str]]]) -> set[str]:
    """The hub repositories the given (rule, wildcards) jobs load (MODEL_RULES)."""
    root = plan.env.root
    out: set[str] = set()
    for rule, wildcards in jobs:
        wildcard = MODEL_RULES.get(rule)
        name = wildcards.get(wildcard) if wildcard else None
        if name is None:
            continue
        if wildcard == "retriever" and name in plan.retriever_configs:
            out |= {m.repo_id for m in retriever_models(name, plan.retriever_configs[name], root)}
        elif wildcard == "name" and name in (getattr(plan, "pipelines", None) or {}):
            out |= {m.repo_id for m in pipeline_models(name, plan.pipelines[name], root)}
        elif wildcard == "llm" and name in plan.llms:
            out |= {m.repo_id for m in llm_models(name, plan.llms[name], root)}
    return out


def _shown(path: str | Path) -> str:
    """A config file as the user would type it: relative to the working directory when inside it."""
    p = Path(path)
    try:
        return str(p.resolve().relative_to(Path.cwd().resolve())) if p.is_absolute() else str(p)
    except ValueError:
        return str(p)


def missing_message(plan: Any, absent: Mapping[str, str], configfiles: Sequence[str] = ()) -> str:
    """The planning-time message: each model not loadable, who names it, and the command that fetches it."""
    config = " ".join(_shown(c) for c in configfiles) or "<your config>"
    directory = models_dir_of(plan.config)
    by_repo = {r.repo_id: r for r in requests(plan)}
    lines = [
        f"{len(absent)} Hugging Face model(s) this config needs are not in {directory}/ (jobs run offline "
        f"and load hub models only from {directory}/<org>/<name>):"
    ]
    for repo, why in absent.items():
        req = by_repo.get(repo)
        named = ", ".join(req.keys) if req else "?"
        gated = "; gated: the fetch needs HF_TOKEN" if repo.startswith(KNOWN_GATED_ORGS) else ""
        lines.append(f"  {repo} (revision {req.revision if req else '?'}; {named}): {why}{gated}")
    lines.append(
        f"fetch them on a node with network (a login node): `cqabench fetch-models --configfile {config}` "
        f'or `snakemake {FETCH_RULE} --configfile {config}` (docs/cluster.md, "Getting models onto offline nodes")'
    )
    return "\n".join(lines)

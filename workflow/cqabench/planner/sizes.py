"""Item counts of a config: questions, documents and text lengths per (dataset, split) and corpus
(the plan sizes its encode parts by them, cqabench.estimate costs its jobs with them).

A split whose raw files are all on disk (the bundled sample, or a full release already placed
under raw_dir) is counted by reading them with the dataset's own loader (`records`, as `prepare`
streams them) and the config's question selection (`prepare.select_questions`): its questions,
the selected ones, its documents, the mean characters of a document as a prompt shows it, of a
question, the gold documents per question and decomposition steps per question. A split that is
not on disk is sized from the published sizes in config/sizes.yaml (DEXTER Table 1 and friends,
each with its source), its text lengths from the sample's measured statistics (rates.yaml,
family `text`). Each count says where it comes from (`source`), so the estimate's output can
show it.

Counting reads every document once (about a second for the whole sample); a split whose raw
files total more than `COUNT_MAX_BYTES` is not read at planning time (a full corpus takes
minutes): it is sized from the published sizes too, saying so.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from cqabench.common.errors import ConfigError, CqaError

SIZES_FILE = Path(__file__).resolve().parents[3] / "config/sizes.yaml"  # this checkout's
COUNT_MAX_BYTES = 200 * 2**20  # raw files larger than this are sized from the published sizes
KEEP_DOCIDS_MAX = 1_000_000  # pooled corpora are deduplicated by docid only below this size
TEXT_STATS = ("doc_chars", "question_chars", "gold_per_question", "gold_steps", "predicted_steps")


@dataclass(frozen=True)
class SplitCounts:
    """What one (dataset, split) holds; `counted`: read from its files, else published."""

    dataset: str
    split: str
    questions: int  # in the raw file
    selected: int  # after the config's selection (limit, hops, answerable_only)
    documents: int  # the split's corpus documents
    raw_bytes: int | None
    stats: Mapping[str, float]  # TEXT_STATS that are known (counted splits: all)
    source: str
    counted: bool
    upper_bound: bool = False


def load_published(path: str | Path = SIZES_FILE) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: the published sizes file is missing")
    with open(path, encoding="utf-8") as fh:
        return yaml.safe_load(fh) or {}


@functools.lru_cache(maxsize=256)
def _count_files(
    dataset: str,
    split: str,
    files: tuple[tuple[str, str], ...],
    relevance: str,
    limit: int | None,
    hops: tuple[int, ...],
    answerable_only: bool,
    stamp: tuple[tuple[int, int], ...],
) -> tuple[SplitCounts, frozenset[str] | None]:
    """Read the split with its loader; `stamp` (sizes, mtimes) keys the cache to the files' state."""
    from cqabench.data.datasets import loader
    from cqabench.data.prepare import select_questions
    from cqabench.data.schema import CanonicalData, Document, Qrel, Query
    from cqabench.data.tables import document_text

    module = loader(dataset)
    paths = {role: Path(p) for role, p in files}
    data = CanonicalData()
    n_docs, doc_chars = 0, 0
    docids: set[str] | None = set()
    for rec in module.records(paths, split, limit=None, relevance=relevance):
        if isinstance(rec, Document):
            n_docs += 1
            title = (rec.title or "").strip()
            doc_chars += len(document_text(asdict(rec), "pipe")) + (len(title) + 6 if title else 4)
            if docids is not None:
                docids.add(rec.docid)
                if len(docids) > KEEP_DOCIDS_MAX:
                    docids = None
        elif isinstance(rec, Query):
            data.queries.append(rec)
        elif isinstance(rec, Qrel):
            data.qrels.append(rec)
    selected = select_questions(data, dataset, limit=limit, hops=list(hops) or None, answerable_only=answerable_only)
    n_sel = len(selected.queries)
    gold = sum(1 for r in selected.qrels if r.relevance > 0)
    stats: dict[str, float] = {
        "doc_chars": doc_chars / n_docs if n_docs else 0.0,
        "question_chars": sum(len(q.question) for q in selected.queries) / n_sel if n_sel else 0.0,
        "gold_per_question": gold / n_sel if n_sel else 0.0,
        "gold_steps": sum(len(q.decomposition or []) for q in selected.queries) / n_sel if n_sel else 0.0,
        "predicted_steps": sum(_predicted_steps(q.meta) for q in selected.queries) / n_sel if n_sel else 0.0,
    }
    where = ", ".join(str(p) for p in paths.values())
    counts = SplitCounts(
        dataset, split, len(data.queries), n_sel, n_docs, sum(s for s, _ in stamp), stats, f"counted from {where}", True
    )
    return counts, (frozenset(docids) if docids is not None else None)


def _predicted_steps(meta: str | None) -> int:
    import json

    try:
        steps = json.loads(meta or "{}").get("predicted_decomposition") or []
    except ValueError:
        return 0
    return len(steps) if isinstance(steps, list) else 0


class Sizes:
    """Counts for every (dataset, split) and corpus a plan uses (see the module docstring)."""

    def __init__(
        self,
        plan: Any,
        text_stats: Mapping[str, Mapping[str, float]],
        published: Mapping[str, Any] | None = None,
        count_max_bytes: int = COUNT_MAX_BYTES,
    ) -> None:
        self.plan = plan
        self.published = load_published() if published is None else published
        self.text_stats = text_stats  # dataset -> TEXT_STATS measured on the sample (rates file)
        self.count_max_bytes = count_max_bytes
        self._splits: dict[tuple[str, str], SplitCounts] = {}
        self._docids: dict[tuple[str, str], frozenset[str] | None] = {}

    # ---- splits ----

    def split(self, dataset: str, split: str) -> SplitCounts:
        key = (dataset, split)
        if key not in self._splits:
            self._splits[key] = self._split(dataset, split)
        return self._splits[key]

    def _files(self, dataset: str, split: str) -> dict[str, Path]:
        root = self.plan.env.root
        spec = self.plan.config["datasets"][dataset]["files"][split]
        return {role: root / self.plan.raw_input(raw["path"]) for role, raw in spec.items()}

    def _selection(self, dataset: str, split: str) -> tuple[int | None, tuple[int, ...], bool]:
        spec = self.plan.config["datasets"][dataset]
        if split not in self.plan.splits(dataset):  # a corpus-only split is prepared whole
            return None, (), False
        return spec.get("limit"), tuple(int(h) for h in spec.get("hops") or ()), bool(spec.get("answerable_only"))

    def _split(self, dataset: str, split: str) -> SplitCounts:
        files = self._files(dataset, split)
        limit, hops, answerable = self._selection(dataset, split)
        on_disk = all(p.is_file() for p in files.values())
        total = sum(p.stat().st_size for p in files.values()) if on_disk else 0
        unreadable = ""
        if on_disk and total <= self.count_max_bytes:
            stamp = tuple((p.stat().st_size, p.stat().st_mtime_ns) for p in files.values())
            try:
                counts, docids = _count_files(
                    dataset,
                    split,
                    tuple((r, str(p)) for r, p in files.items()),
                    self.plan.relevance_of(dataset),
                    limit,
                    hops,
                    answerable,
                    stamp,
                )
            except (CqaError, OSError, ValueError) as exc:
                # a file still downloading, truncated or empty: planning goes on with the published
                # sizes (the prepare job itself reports the broken file when it runs)
                unreadable = f" (raw files on disk but unreadable while planning: {exc})"
            else:
                self._docids[(dataset, split)] = docids
                names = ", ".join(
                    self.plan.raw_input(raw["path"])
                    for raw in self.plan.config["datasets"][dataset]["files"][split].values()
                )
                return replace(counts, source=f"counted from {names}")
        self._docids[(dataset, split)] = None
        counts = self._published_split(dataset, split, limit)
        if unreadable:
            counts = replace(counts, source=counts.source + unreadable)
        elif on_disk:
            counts = SplitCounts(
                **{
                    **asdict(counts),
                    "raw_bytes": total,
                    "source": f"{counts.source} (raw files on disk, {total / 1e9:.1f} GB: too large to read while planning)",
                }
            )
        return counts

    def _published_split(self, dataset: str, split: str, limit: int | None) -> SplitCounts:
        pub = (self.published.get("datasets") or {}).get(dataset) or {}
        entry = (pub.get("splits") or {}).get(split)
        if entry is None:
            raise ConfigError(
                f"datasets.{dataset}.files.{split}: the raw files are not on disk and config/sizes.yaml "
                f"has no published size for {dataset}/{split}; place the files under raw_dir (or "
                "results/raw) or add the published counts to config/sizes.yaml with their source"
            )
        questions = int(entry["questions"])
        selected = int(entry.get("selected", questions)) if split in self.plan.splits(dataset) else questions
        if limit is not None:
            selected = min(selected, int(limit))
        docs_total = pub.get("documents")
        share = 0
        if docs_total:
            corpus_splits = [s for s in self.plan.corpus_splits(dataset) if s in (pub.get("splits") or {})]
            if split in corpus_splits:
                weights = {s: int(pub["splits"][s]["questions"]) for s in corpus_splits}
                share = round(int(docs_total) * weights[split] / sum(weights.values()))
        stats = dict(self.text_stats.get(dataset) or {})
        source = f"published: {entry.get('source', '?')}; documents: {pub.get('source', '?')}"
        return SplitCounts(
            dataset, split, questions, selected, share, None, stats, source, False, bool(pub.get("upper_bound"))
        )

    def stat(self, dataset: str, split: str, name: str) -> float:
        """A text statistic of the split: counted, else the sample's measurement (rates.yaml `text`)."""
        counts = self.split(dataset, split)
        if name in counts.stats:
            return float(counts.stats[name])
        stats = self.text_stats.get(dataset) or {}
        if name not in stats:
            raise ConfigError(
                f"benchmarks/rates.yaml: no text statistic rates.text.data.{dataset}.{name} "
                "(benchmarks/text_stats.py --write-rates measures them on the sample)"
            )
        return float(stats[name])

    # ---- corpora ----

    def corpus_documents(self, corpus: str) -> int:
        """Documents of a retrieval or tool corpus: its members' corpus splits, deduplicated where
        they were counted (and small), else their sum, or the published pooled size."""
        members = self.plan.corpus_members(corpus)
        keys = [(ds, sp) for ds in members for sp in self.plan.corpus_splits(ds)]
        parts = [self.split(ds, sp) for ds, sp in keys]
        if len(keys) == 1:
            return parts[0].documents
        if all(p.counted for p in parts) and all(self._docids.get(k) is not None for k in keys):
            return len(frozenset[str]().union(*(self._docids[k] or () for k in keys)))
        pooled = (self.published.get("corpora") or {}).get(corpus) or {}
        if (
            pooled.get("documents")
            and sorted(pooled.get("members") or []) == sorted(members)
            and not any(p.counted for p in parts)
        ):
            return int(pooled["documents"])
        return sum(p.documents for p in parts)

    def corpus_source(self, corpus: str) -> str:
        members = self.plan.corpus_members(corpus)
        parts = [self.split(ds, sp) for ds in members for sp in self.plan.corpus_splits(ds)]
        return (
            "counted"
            if all(p.counted for p in parts)
            else "published" + (" (upper bound)" if any(p.upper_bound for p in parts) else "")
        )

    def corpus_doc_chars(self, corpus: str) -> float:
        """Mean characters of a corpus document: the members' means weighted by their documents."""
        members = self.plan.corpus_members(corpus)
        weighted, n = 0.0, 0
        for ds in members:
            for sp in self.plan.corpus_splits(ds):
                docs = self.split(ds, sp).documents
                if docs:
                    weighted += docs * self.stat(ds, sp, "doc_chars")
                    n += docs
        return weighted / n if n else 0.0

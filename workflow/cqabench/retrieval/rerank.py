"""Reranked runs: a cross-encoder reorders the top `depth` documents of another run.

A rerank is a run declared under `retrieval.pipelines` (`{type: rerank, of: bm25, model: ...,
depth: 100}`); it has no index: it reads its input run, the corpus and the questions. Each
question is paired with each of its run's first `depth` documents (the input's order: score
descending, ties by docid descending), every pair is scored by sentence-transformers'
`CrossEncoder` in batches of `batch_size`, and the output holds exactly those `depth` documents
(fewer where the input has fewer), ordered by the cross-encoder's score. Documents below
`depth` are dropped, not appended: the run holds what the reranker judged, so its depth is
`depth` (the planner refuses a RAG k above it, `cqabench.planner.pipelines`).

- **Scores** are the model's raw logits (`activation_fn` Identity): the sigmoid that
  `CrossEncoder.predict` applies by default to one-label models is monotone, so it changes no
  order, but in float32 it rounds large logits to 1.0 and would turn distinct scores into ties.
- **Ties** (equal logits) are broken by docid descending, the project's rule (`base.rank`, what
  trec_eval does with any run), not by the input's order: the rank column must be the order
  trec_eval scores.
- **Documents** are the corpus text in the run's serialization (tables serialized as the index
  of the input run saw them, `cqabench.data.documents.iter_documents`), joined to the title by `doc_format`
  (`{title} {text}` by default; an empty title drops the join, as the dense retriever does).
- **Truncation**: the pair is cut to `max_length` tokens (the tokenizer's `longest_first`,
  which the CrossEncoder applies); how many pairs were cut, and by how many tokens at most, is
  counted on the untruncated pairs and written to the run's `.rerank.json` beside the run files.
  A text far longer than max_length tokens is cut at a whole-word character bound first
  (`CrossEncoderScorer.bounded`), which changes no token the model reads.
- **Model**: `model` is a hub name fetched into `models/` (with its `revision`), a `package:`
  model or a local folder, resolved as the dense retriever resolves its encoders
  (`encoders.resolve_model`); it must be a `*ForSequenceClassification` checkpoint with one
  label (a relevance score): a bare encoder would get a randomly initialised head and rerank at
  random, so it is refused. `device: cuda` without a visible GPU stops with the reason
  (`encoders.require_device`), never falls back to the CPU.
- **Precision**: `dtype` (float32, float16, bfloat16) is what the model's weights run in, float16
  on a GPU and float32 on the CPU by default (`encoders.check_dtype`); `batch_size` defaults to
  32 pairs on the CPU and 128 on a GPU. Both are recorded in every row and in `.rerank.json`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from cqabench.common.errors import ConfigError
from cqabench.models.store import revision_settings
from cqabench.retrieval.base import Results, check_device, check_positive_int, rank
from cqabench.retrieval.encoders import check_dtype, default_batch_size

log = logging.getLogger(__name__)

DEFAULTS: dict[str, Any] = {"depth": 100, "device": "cpu", "max_length": 512, "doc_format": "{title} {text}"}
BATCH_SIZE = {"cpu": 32, "gpu": 128}  # pairs per batch by device (not measured on a GPU yet: issue 37)
KEYS = frozenset({"type", "of", "model", "revision", "threads", "batch_size", "dtype", *DEFAULTS})
# A prefix of this many characters per token of max_length is tokenized first (`bounded`): English
# runs at about 4-5 characters a token, so one try settles almost every long text.
CHARS_PER_TOKEN = 16


def resolve(settings: Mapping[str, Any]) -> dict[str, Any]:
    """Every setting a rerank reads, defaults filled in and checked (what every result row records)."""
    unknown = sorted(set(settings) - KEYS)
    if unknown:
        raise ConfigError(f"unknown key(s) {', '.join(unknown)}; a rerank takes {', '.join(sorted(KEYS))}")
    of = settings.get("of")
    if not isinstance(of, str) or not of:
        raise ConfigError(f"of: needs the name of the run to rerank, got {of!r}")
    model = settings.get("model")
    if not isinstance(model, str) or not model:
        raise ConfigError(f"model: needs a cross-encoder (hub name, package: or folder), got {model!r}")
    out: dict[str, Any] = {"type": "rerank", "of": of, "model": model, **DEFAULTS}
    out.update({k: settings[k] for k in DEFAULTS if settings.get(k) is not None})
    out.update(revision_settings(settings, ("model",), "rerank"))
    check_device("rerank", out["device"])
    batch = settings.get("batch_size")
    out["batch_size"] = (
        default_batch_size(out["device"], BATCH_SIZE["cpu"], BATCH_SIZE["gpu"]) if batch is None else batch
    )
    out["dtype"] = check_dtype("rerank", settings.get("dtype"), out["device"])
    check_positive_int("rerank", out, "depth", "batch_size", "max_length")
    if settings.get("threads") is not None:
        check_positive_int("rerank", settings, "threads")
        out["threads"] = settings["threads"]
    fmt = out["doc_format"]
    if not isinstance(fmt, str) or "{text}" not in fmt or fmt.replace("{text}", "").replace("{title}", "").count("{"):
        raise ConfigError(f"doc_format: {fmt!r} must use {{text}} and optionally {{title}}, nothing else")
    return out


def doc_text(doc_format: str, title: str, text: str) -> str:
    """What the cross-encoder reads as the document; an empty title drops the join."""
    if not title.strip():
        return text.strip()
    return doc_format.format(title=title, text=text).strip()


class CrossEncoderScorer:
    """The cross-encoder of a rerank's settings, loaded once, offline, on the asked device."""

    def __init__(self, settings: Mapping[str, Any]) -> None:
        from cqabench.retrieval import encoders

        encoders.set_threads(settings.get("threads"))
        spec = str(settings["model"])
        device = encoders.require_device(str(settings["device"]), f"rerank model {spec!r}")
        path = encoders.resolve_model(spec)
        config = _check_classifier(spec, path)
        from sentence_transformers import CrossEncoder

        # The CrossEncoder takes an explicit max_length as it is; past the model's position
        # embeddings it would fail mid-run, so the cut is capped here (the record says which).
        limit = int(getattr(config, "max_position_embeddings", 0) or settings["max_length"])
        self.max_length = min(int(settings["max_length"]), limit)
        try:
            self.dtype = encoders.check_dtype(f"rerank model {spec!r}", settings.get("dtype"), device)
            self.model = CrossEncoder(path, max_length=self.max_length, device=device, local_files_only=True,
                                      model_kwargs={"dtype": encoders.torch_dtype(self.dtype)})  # fmt: skip
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot load rerank model {spec!r} offline ({type(exc).__name__}: {exc})") from None
        self.batch_size = int(settings["batch_size"])
        self.device = device
        self._bounded: dict[str, str] = {}  # text -> what the tokenizer is given (`bounded`)

    def bounded(self, text: str) -> str:
        """`text`, or a prefix of its whole words that already holds more than max_length tokens.

        Why: a fast tokenizer truncates only after tokenizing the whole string, so one 10 MB
        question made a depth-10 rerank tokenize 100 MB twice (6 min, 10.5 GB). Nothing past
        max_length tokens of either text can reach the model (`longest_first` keeps a prefix of
        each), and a prefix of whole words tokenizes to a prefix of the tokens (the pre-tokenizer
        splits at whitespace), so the pair the model reads is the same; only the count of tokens
        cut becomes a lower bound (`texts_cut_before_tokenizing` in the record says how often).
        The prefix starts at CHARS_PER_TOKEN characters per token and grows fourfold while it
        holds too few tokens (long words), up to the whole text.
        """
        cached = self._bounded.get(text)
        if cached is not None:
            return cached
        chars, out = CHARS_PER_TOKEN * self.max_length, text
        while len(text) > chars:
            cut = max(text.rfind(space, 0, chars + 1) for space in " \n\t")
            head = text[: cut if cut > 0 else chars]
            if len(self.model.tokenizer(head, add_special_tokens=False, verbose=False)["input_ids"]) > self.max_length:
                out = head
                break
            chars *= 4
        self._bounded[text] = out
        return out

    def _pairs(self, pairs: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
        return [(self.bounded(q), self.bounded(d)) for q, d in pairs]

    def truncation(self, pairs: Sequence[tuple[str, str]]) -> dict[str, int]:
        """How many pairs exceed max_length tokens (counted untruncated, special tokens included;
        a text longer than `bounded` keeps counted up to that prefix, so the excess is at least
        the one recorded)."""
        cut, most = 0, 0
        short = self._pairs(pairs)
        for start in range(0, len(short), 1024):
            chunk = short[start : start + 1024]
            enc = self.model.tokenizer([q for q, _ in chunk], [d for _, d in chunk], truncation=False, verbose=False)
            for ids in enc["input_ids"]:
                over = len(ids) - self.max_length
                if over > 0:
                    cut += 1
                    most = max(most, over)
        shortened = sum(1 for text, kept in self._bounded.items() if kept is not text)
        return {
            "pairs": len(pairs),
            "truncated_pairs": cut,
            "max_tokens_cut": most,
            "texts_cut_before_tokenizing": shortened,
        }

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        """Raw logits, one per pair, in input order (batched by the CrossEncoder; each text cut
        by `bounded` first, which changes nothing the model reads)."""
        if not pairs:
            return []
        import torch

        out = self.model.predict(self._pairs(pairs), batch_size=self.batch_size, activation_fn=torch.nn.Identity(),
                                 convert_to_numpy=True, show_progress_bar=False)  # fmt: skip
        return [float(s) for s in out.reshape(-1)]


def _check_classifier(spec: str, path: str) -> Any:
    """A cross-encoder is a sequence-classification checkpoint with one label (module docstring)."""
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(path)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot load rerank model {spec!r} offline ({type(exc).__name__}: {exc})") from None
    architectures = list(getattr(config, "architectures", None) or [])
    if not any(a.endswith("ForSequenceClassification") for a in architectures):
        raise ConfigError(f"rerank model {spec!r} is no cross-encoder (architectures {architectures}, no "
                          "*ForSequenceClassification head): its relevance head would be randomly initialised")  # fmt: skip
    if int(getattr(config, "num_labels", 1)) != 1:
        raise ConfigError(f"rerank model {spec!r} has {config.num_labels} labels; a reranker scores relevance with one")
    return config


def candidates(results: Results, depth: int) -> Results:
    """Each query's first `depth` documents of the input, in its order (score desc, docid desc)."""
    return {qid: rank(pairs, depth) for qid, pairs in results.items()}


def rerank(
    results: Results, questions: Mapping[str, str], documents: Mapping[str, tuple[str, str]],
    settings: Mapping[str, Any], scorer: Any | None = None,
) -> tuple[Results, dict[str, Any]]:  # fmt: skip
    """The reranked run and what the job records (pairs, truncation, speed).

    `results`: the input run; `questions`: qid -> question; `documents`: docid -> (title, text)
    of at least every candidate; `scorer`: a `CrossEncoderScorer` (built from `settings` when
    None; tests pass one). Every query of `results` is in the output (empty when it had none).
    """
    depth = int(settings["depth"])
    tops = candidates(results, depth)
    missing_q = sorted(q for q in tops if tops[q] and q not in questions)
    if missing_q:
        raise ConfigError(
            f"rerank: {len(missing_q)} query id(s) of the input run have no question (first: {missing_q[:3]})"
        )
    pairs: list[tuple[str, str]] = []
    owners: list[tuple[str, str]] = []
    for qid, ranking in tops.items():
        for docid, _ in ranking:
            if docid not in documents:
                raise ConfigError(f"rerank: document {docid!r} of query {qid!r} is not in the corpus")
            title, text = documents[docid]
            pairs.append((questions[qid], doc_text(str(settings["doc_format"]), title, text)))
            owners.append((qid, docid))
    scorer = scorer or CrossEncoderScorer(settings)
    started = time.perf_counter()
    truncation = scorer.truncation(pairs)
    scores = scorer.score(pairs)
    wall = time.perf_counter() - started
    by_query: dict[str, list[tuple[str, float]]] = {qid: [] for qid in tops}
    for (qid, docid), s in zip(owners, scores, strict=True):
        by_query[qid].append((docid, s))
    out = {qid: rank(scored, depth) for qid, scored in by_query.items()}
    record = {
        "depth": depth, "queries": len(tops), **truncation,
        "max_length": int(getattr(scorer, "max_length", settings["max_length"])),
        "device": str(getattr(scorer, "device", settings["device"])),
        "dtype": str(getattr(scorer, "dtype", settings.get("dtype"))),
        "batch_size": int(settings["batch_size"]), "score": "logit (no activation)",
        "wall_s": round(wall, 3), "pairs_per_s": round(len(pairs) / wall, 1) if wall > 0 else None,
    }  # fmt: skip
    log.info("rerank: %d pairs of %d queries in %.1f s (%d truncated to %d tokens)", len(pairs), len(tops), wall,
             truncation["truncated_pairs"], record["max_length"])  # fmt: skip
    return out, record


def needed_docids(results: Results, depth: int) -> set[str]:
    """The documents a rerank reads: every query's first `depth`."""
    return {docid for pairs in candidates(results, depth).values() for docid, _ in pairs}


def collect_documents(rows: Iterable[tuple[str, str, str]], wanted: set[str]) -> dict[str, tuple[str, str]]:
    """docid -> (title, text) of the wanted documents, from one pass over the corpus."""
    return {docid: (title, text) for docid, title, text in rows if docid in wanted}

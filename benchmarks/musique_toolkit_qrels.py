"""MuSiQue qrels as the original toolkit's loader builds them, against ours, on one ranking.

The toolkit's MusiqueQaDataLoader (dexter-cqa 1.0.9, MusiqueQaDataLoader.py:47) does not keep a
question's own paragraph as its gold document: it takes the *first* corpus paragraph whose title
(cut at the first " - ") equals the paragraph's title (cut the same way). Where a title is shared
by several paragraphs (a page cut into paragraphs, a title repeated across questions), the qrel
points at another paragraph, one that depends on the corpus order. That order is the order of
DEXTER's own `wiki_musique_corpus.json`, which no released file or script reproduces, so cqabench
keeps the question's own paragraphs (DEXTER §3.1) and this script measures the gap on a corpus
order we do have: the corpus file as given (`--corpus`, e.g. the pooled wiki-multihop corpus, in
its docid order) and, with `--file-order`, MuSiQue's paragraphs in question-file order first.

    python benchmarks/musique_toolkit_qrels.py --questions resources/raw/musique/musique_train_100.jsonl \
        --corpus results/sample/corpora/wiki-multihop/corpus.parquet \
        --qrels results/sample/data/musique/train/qrels.parquet \
        --run results/sample/runs/musique/train/pipe/bm25.parquet

Prints the (question, paragraph) pairs and questions whose toolkit qrel differs, and nDCG@10
(pytrec_eval `ndcg_cut_10`, the mean over the questions in the run) with our qrels and with the
toolkit's, for each corpus order.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytrec_eval

from cqabench.data.datasets.common import text_docid


def title_key(title: str) -> str:
    """The toolkit's lookup key: the title up to its first ' - '."""
    return title.split(" - ")[0]


def questions(path: Path) -> list[dict]:
    """MuSiQue records from a .jsonl file or a JSON list."""
    text = path.read_text(encoding="utf-8")
    if text.lstrip().startswith("["):
        return json.loads(text)
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def toolkit_qrels(records: list[dict], corpus_order: list[tuple[str, str]]) -> tuple[dict[str, dict[str, int]], int]:
    """(qid -> {docid: 1}, pairs moved): each paragraph's gold = the first corpus document (docid,
    title) whose title key equals the paragraph's (a title absent from the corpus raises, as
    list.index does); a pair is moved when that document is not the paragraph itself."""
    first: dict[str, str] = {}
    for docid, title in corpus_order:
        first.setdefault(title_key(title), docid)
    out: dict[str, dict[str, int]] = {}
    moved = 0
    for rec in records:
        gold = out.setdefault(rec["id"], {})
        for par in rec["paragraphs"]:
            docid = first[title_key(par["title"])]
            moved += docid != text_docid(par["title"], par["paragraph_text"])
            gold[docid] = 1
    return out, moved


def own_qrels(path: Path) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for row in pq.read_table(path).to_pylist():
        if row["relevance"] > 0:
            out.setdefault(row["qid"], {})[row["docid"]] = int(row["relevance"])
    return out


def ndcg10(qrels: dict[str, dict[str, int]], run: dict[str, dict[str, float]]) -> float:
    scores = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(run)
    return sum(s["ndcg_cut_10"] for s in scores.values()) / len(scores)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--questions", type=Path, required=True)
    ap.add_argument("--corpus", type=Path, required=True, help="corpus.parquet the run searched")
    ap.add_argument("--qrels", type=Path, required=True, help="our qrels.parquet (mode paper)")
    ap.add_argument("--run", type=Path, required=True, help="run parquet (qid, docid, rank, score)")
    args = ap.parse_args()

    records = questions(args.questions)
    corpus = pq.read_table(args.corpus, columns=["docid", "title"]).to_pylist()
    as_given = [(d["docid"], d["title"]) for d in corpus]
    own_docs = {}
    for rec in records:  # the question file's paragraphs in file order (cqabench's content ids)
        for par in rec["paragraphs"]:
            own_docs.setdefault(text_docid(par["title"], par["paragraph_text"]), par["title"])
    file_order = list(own_docs.items()) + [(d, t) for d, t in as_given if d not in own_docs]

    run: dict[str, dict[str, float]] = {}
    for row in pq.read_table(args.run).to_pylist():
        run.setdefault(row["qid"], {})[row["docid"]] = float(row["score"])
    ours = own_qrels(args.qrels)
    run = {q: docs for q, docs in run.items() if q in ours}
    print(
        f"questions {len(ours)}, pairs {sum(len(g) for g in ours.values())}, "
        f"nDCG@10 with our qrels {ndcg10(ours, run):.4f}"
    )
    for name, order in (("corpus file order", as_given), ("question-file order first", file_order)):
        theirs, pairs = toolkit_qrels(records, order)
        differ = sum(set(ours[q]) != set(theirs[q]) for q in ours)
        print(
            f"toolkit lookup, {name}: {pairs} of {sum(len(g) for g in ours.values())} pairs point at another "
            f"paragraph, {differ} of {len(ours)} questions differ, nDCG@10 {ndcg10(theirs, run):.4f}"
        )


if __name__ == "__main__":
    main()

"""Raw files in the official shapes, at any size, from real passage text (shared by the benchmarks).

Why: the data stage must be measured on files shaped like DPR's `psgs_w100.tsv` (21M passages)
and StrategyQA's `strategyqa_train_paragraphs.json` (36.6M paragraphs), which cannot be brought
here. These writers recombine the real passages that are here with new ids, so the text, its
length distribution and its quoting are real and only the ids (and the count) are made up.
Nothing is random: the same arguments give the same bytes.

Used by `prepare_memory.py` (psgs_w100 TSV of the sample + OTT-QA passages, cycled) and
`scale_corpus.py` (both shapes, from every passage source below).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from urllib.parse import unquote

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
SAMPLE_TSV = ROOT / "resources/raw/ambigqa/psgs_w100_sample.tsv"
OTT_PASSAGES = SHARED / "ottqa/dev_passages.json"
TWOWIKI_CORPUS = SHARED / "2wikimultihopqa/distractor_corpus.json"
MUSIQUE = SHARED / "musique/musique_train_100.json"

Passage = tuple[str, str]  # (text, title)


def _flat(text: str) -> str:
    """Whitespace collapsed to single spaces: no tab or newline may reach a TSV field."""
    return " ".join(text.split())


def sample_passages() -> Iterator[Passage]:
    """The 1,100 passages of the bundled psgs_w100 sample (DPR's own text and titles)."""
    with open(SAMPLE_TSV, encoding="utf-8", newline="") as fh:
        rows = csv.reader(fh, delimiter="\t")
        next(rows)
        for _pid, text, title in rows:
            yield text, title


def ottqa_passages() -> Iterator[Passage]:
    """OTT-QA's 17,841 dev passages; title from the "/wiki/Title" key as the OTT-QA loader makes it."""
    for key, text in json.loads(OTT_PASSAGES.read_text(encoding="utf-8")).items():
        yield _flat(text), unquote(key.removeprefix("/wiki/")).replace("_", " ")


def twowiki_passages() -> Iterator[Passage]:
    """The 6,119 passages of the 2WikiMultihopQA distractor corpus (`[{title, text}]`)."""
    for rec in json.loads(TWOWIKI_CORPUS.read_text(encoding="utf-8")):
        yield _flat(rec["text"]), _flat(rec["title"])


def musique_passages() -> Iterator[Passage]:
    """The paragraphs of the 100 MuSiQue train records, each (title, text) once."""
    seen: set[Passage] = set()
    for rec in json.loads(MUSIQUE.read_text(encoding="utf-8")):
        for par in rec["paragraphs"]:
            p = (_flat(par["paragraph_text"]), _flat(par["title"]))
            if p not in seen:
                seen.add(p)
                yield p


SOURCES = {"sample": sample_passages, "ottqa": ottqa_passages, "2wiki": twowiki_passages, "musique": musique_passages}


def real_passages(sources: Sequence[str] = ("sample", "ottqa")) -> list[Passage]:
    """(text, title) of the named sources, in that order (the default is prepare_memory.py's pool)."""
    return [p for name in sources for p in SOURCES[name]()]


def _tsv_field(value: str) -> str:
    """A field as DPR's TSV (and Python's csv module) quotes it: in quotes, quotes doubled, when needed."""
    if '"' in value or "\t" in value or "\n" in value:
        return '"' + value.replace('"', '""') + '"'
    return value


def write_psgs_tsv(path: Path, n: int, cycle: Sequence[Passage], head: Sequence[Passage] = ()) -> None:
    """A psgs_w100.tsv-shaped file of `n` passages with ids 1..n (DPR's ids are integers too).

    Passages 1..len(head) are `head` once (e.g. the pages some questions viewed), then passage i
    is `cycle[(i - len(head) - 1) mod len(cycle)]`. The text is always quoted, as DPR quotes it."""
    with open(path, "w", encoding="utf-8", newline="") as fh:
        fh.write("id\ttext\ttitle\n")
        for i in range(n):
            text, title = head[i] if i < len(head) else cycle[(i - len(head)) % len(cycle)]
            fh.write(f'{i + 1}\t"{text.replace(chr(34), chr(34) * 2)}"\t{_tsv_field(title)}\n')


def write_strategyqa_paragraphs(path: Path, n: int, cycle: Sequence[Passage], evidence_ids: Iterable[str]) -> None:
    """A strategyqa_train_paragraphs.json-shaped file of `n` paragraphs: one JSON object
    `{"Title-N": {"title", "section", "headers", "para_index", "content"}}`, one member a line.

    The first members are the given evidence ids (so every question's qrels resolve), with the
    title the id names and the text of `cycle[j]` in turn; then paragraph j takes the title and
    text of `cycle[j mod len(cycle)]` and the id "Title-k", k counting that title's paragraphs
    from 0 and skipping any evidence id, so no id repeats."""
    evidence = list(dict.fromkeys(evidence_ids))
    taken = set(evidence)
    counts: dict[str, int] = {}
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("{\n")
        for j in range(n):
            text, title = cycle[j % len(cycle)]
            if j < len(evidence):
                pid = evidence[j]
                title, index = pid.rsplit("-", 1)[0], int(pid.rsplit("-", 1)[1])
            else:
                index = counts.get(title, 0)
                while f"{title}-{index}" in taken:
                    index += 1
                counts[title] = index + 1
                pid = f"{title}-{index}"
            member = {"title": title, "section": "", "headers": [], "para_index": index, "content": text}
            sep = ",\n" if j else ""
            fh.write(f"{sep}{json.dumps(pid, ensure_ascii=False)}: {json.dumps(member, ensure_ascii=False)}")
        fh.write("\n}\n")

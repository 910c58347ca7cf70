"""Build every data-stage output of the bundled sample and compare two builds file by file.

Why: the streaming data stage (docs/data.md, "Memory and disk at scale") must write the same
tables as the in-memory one it replaced. Run it once with the old code and once with the new
and compare:

    PYTHONPATH=/path/to/old/workflow python benchmarks/data_outputs_check.py build /tmp/before
    PYTHONPATH=workflow              python benchmarks/data_outputs_check.py build /tmp/after
    python benchmarks/data_outputs_check.py compare /tmp/before /tmp/after

`build` runs `cqabench prepare` on all eight sample datasets plus two cases the sample lacks
(StrategyQA with a paragraphs file in the official `{"Title-N": {...}}` shape naming every
evidence id; AmbigQA's DEXTER fixture with viewed_doc_titles against its 1,100 passages as a
psgs_w100 TSV, so both have qrels), then `pool-corpus` for every corpus the default config
plans and `export-beir` for every split. `compare` prints, per file, whether the bytes are
equal; for a Parquet table that differs, whether the rows are equal in order or only as a set.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RAW = ROOT / "resources" / "raw"
SHARED = ROOT.parent / "shared" / "data"

PREPARE: dict[str, tuple[str, dict[str, Path]]] = {
    "musique": ("train", {"questions": RAW / "musique/musique_train_100.jsonl"}),
    "2wikimultihopqa": ("dev", {"questions": RAW / "2wikimultihopqa/dev.json"}),
    "strategyqa": (
        "dev",
        {
            "questions": RAW / "strategyqa/dev.json",
            "decompositions": RAW / "strategyqa/bart_decomp_dev_predictions.jsonl",
        },
    ),
    "ambigqa": (
        "dev",
        {"questions": RAW / "ambigqa/dev_light_40.json", "passages": RAW / "ambigqa/psgs_w100_sample.tsv"},
    ),
    "ottqa": (
        "dev",
        {
            "questions": RAW / "ottqa/dev.traced.sample.json",
            "tables": RAW / "ottqa/dev_tables.sample.json",
            "passages": RAW / "ottqa/dev_passages.sample.json",
        },
    ),
    "tatqa": ("dev", {"questions": RAW / "tatqa/tatqa_dataset_dev.sample.json"}),
    "finqa": ("dev", {"questions": RAW / "finqa/dev.json"}),
    "tanq": ("test", {"questions": RAW / "tanq/test_questions_10.jsonl"}),
}


def _extra_inputs(work: Path) -> dict[str, tuple[str, str, dict[str, Path]]]:
    """(name -> dataset, split, files) of the two cases with qrels the sample lacks."""
    work.mkdir(parents=True, exist_ok=True)
    raw = json.loads((RAW / "strategyqa/dev.json").read_text(encoding="utf-8"))
    ids = sorted(
        {
            p
            for r in raw
            for ann in r["evidence"]
            for step in ann
            for item in step
            if isinstance(item, list)
            for p in item
        }
    )
    paragraphs = {
        pid: {
            "title": pid.rsplit("-", 1)[0],
            "section": "",
            "headers": [],
            "para_index": int(pid.rsplit("-", 1)[1]),
            "content": f"text of {pid}",
        }
        for pid in ids
    }
    ppath = work / "strategyqa_train_paragraphs.json"
    ppath.write_text(json.dumps(paragraphs, indent=1), encoding="utf-8")
    fx = json.loads((SHARED / "ambigqa/fixture_passages.json").read_text(encoding="utf-8"))
    lines = ["id\ttext\ttitle"]
    for pid, text in fx["passages"].items():
        lines.append(f'{pid}\t"{text.replace(chr(34), chr(34) * 2)}"\t{fx["titles"][pid]}')
    tsv = work / "psgs_w100_fixture.tsv"
    tsv.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return {
        "strategyqa-paragraphs": ("strategyqa", "dev", {"questions": RAW / "strategyqa/dev.json", "paragraphs": ppath}),
        "ambigqa-fixture": ("ambigqa", "dev", {"questions": SHARED / "ambigqa/fixture_dev_11.json", "passages": tsv}),
    }


def _run(args: list[str]) -> None:
    subprocess.run(["cqabench", *args], check=True)


def build(out: Path) -> None:
    out = out.resolve()
    cases = {name: (name, split, files) for name, (split, files) in PREPARE.items()}
    cases.update(_extra_inputs(out / "inputs"))
    for name, (dataset, split, files) in cases.items():
        file_args = [a for role, p in files.items() for a in ("--file", f"{role}={p}")]
        _run(["prepare", "--dataset", dataset, "--split", split, *file_args, "--out-dir", str(out / "data" / name)])
    corpora = {
        "wiki-multihop": ["musique", "2wikimultihopqa"],
        **{name: [name] for name in cases if name not in ("musique", "2wikimultihopqa", "strategyqa")},
    }
    for corpus, members in corpora.items():
        args = [a for m in members for a in ("--corpus", str(out / "data" / m / "corpus.parquet"))]
        _run(["pool-corpus", *args, "--out", str(out / "corpora" / corpus / "corpus.parquet")])
    corpus_of = {name: next(c for c, m in corpora.items() if name in m) for name in cases if name != "strategyqa"}
    corpus_of["strategyqa"] = "wiki-multihop"
    for name, (_dataset, split, _files) in cases.items():
        if name == "strategyqa-paragraphs":  # its ids ("Albany, Georgia-1") hold spaces: no TREC export
            continue
        for serialization in ("pipe", "linear"):
            data = out / "data" / name
            _run(
                [
                    "export-beir",
                    "--corpus",
                    str(out / "corpora" / corpus_of[name] / "corpus.parquet"),
                    "--queries",
                    str(data / "queries.parquet"),
                    "--qrels",
                    str(data / "qrels.parquet"),
                    "--split",
                    split,
                    "--serialization",
                    serialization,
                    "--out-dir",
                    str(out / "beir" / name / serialization),
                ]
            )


def _files(root: Path) -> dict[str, Path]:
    return {
        str(p.relative_to(root)): p
        for p in sorted(root.rglob("*"))
        if p.is_file() and "inputs" not in p.relative_to(root).parts
    }


def compare(a: Path, b: Path) -> int:
    import pyarrow.parquet as pq

    fa, fb = _files(a), _files(b)
    bad = 0
    for rel in sorted(set(fa) | set(fb)):
        if rel not in fa or rel not in fb:
            print(f"MISSING  {rel} (only in {'A' if rel in fa else 'B'})")
            bad += 1
            continue
        if rel.endswith("export.json"):  # holds the absolute source paths of its build
            ma, mb = (json.loads(p.read_text()) for p in (fa[rel], fb[rel]))
            ma.pop("sources"), mb.pop("sources")
            verdict = "same" if ma == mb else "DIFFERENT"
        elif hashlib.sha256(fa[rel].read_bytes()).digest() == hashlib.sha256(fb[rel].read_bytes()).digest():
            verdict = "same bytes"
        elif rel.endswith(".parquet"):
            ra, rb = pq.read_table(fa[rel]).to_pylist(), pq.read_table(fb[rel]).to_pylist()

            def key(r: dict) -> str:
                return json.dumps(r, sort_keys=True, default=str)

            verdict = (
                "same rows, same order"
                if ra == rb
                else "same rows, OTHER ORDER"
                if sorted(map(key, ra)) == sorted(map(key, rb))
                else "DIFFERENT"
            )
        else:
            la, lb = fa[rel].read_text().splitlines(), fb[rel].read_text().splitlines()
            verdict = "same lines, OTHER ORDER" if sorted(la) == sorted(lb) else "DIFFERENT"
        bad += verdict == "DIFFERENT"
        print(f"{verdict:24s} {rel}")
    print(f"{len(set(fa) | set(fb))} files, {bad} different or missing")
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "build":
        build(Path(sys.argv[2]))
    elif len(sys.argv) == 4 and sys.argv[1] == "compare":
        sys.exit(compare(Path(sys.argv[2]), Path(sys.argv[3])))
    else:
        sys.exit(__doc__)

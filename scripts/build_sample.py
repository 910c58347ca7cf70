"""Rebuild the bundled sample in resources/raw from the real dataset slices in ../shared/data.

The sample keeps every dataset in its official raw format (so the default run exercises
the real loaders) and is small enough that the embedded default finishes in minutes on
2 CPU cores. Run: python scripts/build_sample.py [--shared ../shared/data]
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OTTQA_QUESTIONS = 40
OTTQA_TABLES = 80
TATQA_CONTEXTS = 40
AMBIGQA_QUESTIONS = 40  # the first 11 are the DEXTER fixture whose passages are bundled
FINQA_RECORDS = 30  # of the 200 dev records
# 2Wiki: HippoRAG's distractor corpus lists the passages question by question (its 1,000 dev
# questions), so its first passages are the contexts of the sample's 38 questions (334 distinct
# ones), then those of the next questions: the 2Wiki side of DEXTER's pooled corpus, cut to the
# size MuSiQue's 100 records bring (every passage of all 6,119 would quadruple the pooled corpus
# the dense encoder indexes on 2 CPU cores)
TWOWIKI_PASSAGES = 1000


def _dump(obj: object, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


def build(shared: Path, out: Path) -> None:
    # MuSiQue: the official release is JSON lines; the shared slice is a JSON list.
    musique = json.loads((shared / "musique/musique_train_100.json").read_text())
    (out / "musique").mkdir(parents=True, exist_ok=True)
    with open(out / "musique/musique_train_100.jsonl", "w", encoding="utf-8") as fh:
        for rec in musique:
            fh.write(json.dumps(rec, ensure_ascii=False) + "\n")

    for rel in (
        "strategyqa/dev.json",
        "strategyqa/bart_decomp_dev_predictions.jsonl",
        "finqa/dev.json",
        "tanq/test_questions_10.jsonl",
    ):
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shared / rel, out / rel)
    (out / "2wikimultihopqa").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(shared / "2wikimultihopqa/dev_2.json", out / "2wikimultihopqa/dev.json")
    shutil.copyfile(shared / "2wikimultihopqa/dev_38.json", out / "2wikimultihopqa/dev_38.json")
    passages = json.loads((shared / "2wikimultihopqa/distractor_corpus.json").read_text(encoding="utf-8"))
    (out / f"2wikimultihopqa/distractor_corpus_{TWOWIKI_PASSAGES}.json").write_text(
        json.dumps(passages[:TWOWIKI_PASSAGES], indent=4), encoding="utf-8"
    )  # the source's own layout

    # FinQA: the first records of the 200 dev records, in the release's format (one line).
    finqa = json.loads((shared / "finqa/dev_200.json").read_text(encoding="utf-8"))[:FINQA_RECORDS]
    (out / "finqa" / f"dev_{FINQA_RECORDS}.json").write_text(json.dumps(finqa, ensure_ascii=False), encoding="utf-8")

    # AmbigQA: the 11-question fixture, its passages cast to DPR's psgs_w100.tsv shape.
    (out / "ambigqa").mkdir(parents=True, exist_ok=True)
    _dump(
        json.loads((shared / "ambigqa/dev_light.json").read_text())[:AMBIGQA_QUESTIONS],
        out / "ambigqa/dev_light_40.json",
    )
    fixture = json.loads((shared / "ambigqa/fixture_passages.json").read_text())
    with open(out / "ambigqa/psgs_w100_sample.tsv", "w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh, delimiter="\t", lineterminator="\n")
        writer.writerow(["id", "text", "title"])
        for pid, text in fixture["passages"].items():
            writer.writerow([pid, text, fixture["titles"][pid]])

    # OTT-QA: the first questions, their tables plus distractor tables, and every linked passage.
    traced = json.loads((shared / "ottqa/released_data/dev.traced.json").read_text())[:OTTQA_QUESTIONS]
    tables = json.loads((shared / "ottqa/dev_tables.json").read_text())
    passages = json.loads((shared / "ottqa/dev_passages.json").read_text())
    keep = list(dict.fromkeys([q["table_id"] for q in traced] + list(tables)))[:OTTQA_TABLES]
    kept_tables = {tid: tables[tid] for tid in keep}
    links = {link for t in kept_tables.values() for row in t["data"] for _, cell_links in row for link in cell_links}
    links |= {node[2] for q in traced for node in q.get("answer-node", []) if node[3] == "passage"}
    _dump(traced, out / "ottqa/dev.traced.sample.json")
    _dump(kept_tables, out / "ottqa/dev_tables.sample.json")
    _dump({k: v for k, v in passages.items() if k in links}, out / "ottqa/dev_passages.sample.json")

    tatqa = json.loads((shared / "tatqa/tatqa_dataset_dev.json").read_text())[:TATQA_CONTEXTS]
    _dump(tatqa, out / "tatqa/tatqa_dataset_dev.sample.json")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--out", type=Path, default=ROOT / "resources" / "raw")
    args = parser.parse_args()
    build(args.shared, args.out)


if __name__ == "__main__":
    main()

"""Text statistics of the bundled sample's real records, for the estimate's prompt and file sizes.

Per dataset (its first evaluated split in the config), read with the dataset's own loader as
`cqabench estimate` counts a split (cqabench.planner.sizes): mean characters of a document as a
prompt shows it (title and numbering included), of a question, gold documents per question,
gold and predicted decomposition steps per question (StrategyQA), and the question file's bytes
per question. Where the sample split has no gold documents (the light AmbigQA release, the TANQ
sample without proofs) nothing is written for gold_per_question: the rates file keeps its
assumption. StrategyQA's sample has no paragraph file: its gold_per_question is the number of
distinct evidence paragraph ids the annotators cited (a lower bound: mode `paper` takes every
paragraph of their titles).

With --model-dir (a converted model folder, e.g. results/models/smollm2-135m), also the
characters per token of that tokenizer over the sample's documents and questions (the estimate
applies it to every model; SmolLM2's tokenizer is a stand-in for Llama's and Mistral's).

    python benchmarks/text_stats.py [--config config/config.yaml] [--model-dir DIR] [--write-rates benchmarks/rates.yaml]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflow"))


def main() -> int:
    import yaml

    from cqabench.data.datasets import loader
    from cqabench.data.schema import Document, Query
    from cqabench.estimate.rates import provenance, update_rates
    from cqabench.planner.sizes import _count_files

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", type=Path, default=ROOT / "config/config.yaml")
    ap.add_argument("--model-dir", type=Path, default=None)
    ap.add_argument("--write-rates", type=Path, default=None)
    args = ap.parse_args()
    config = yaml.safe_load(args.config.read_text(encoding="utf-8"))
    raw_dir = ROOT / config["raw_dir"]
    prov = provenance()
    texts: list[str] = []
    for ds, spec in config["datasets"].items():
        split = spec["splits"][0]
        files = {role: raw_dir / f["path"] for role, f in spec["files"][split].items()}
        stamp = tuple((p.stat().st_size, p.stat().st_mtime_ns) for p in files.values())
        counts, _ = _count_files(
            ds,
            split,
            tuple((r, str(p)) for r, p in files.items()),
            spec.get("relevance", "paper"),
            None,
            (),
            False,
            stamp,
        )
        stats = dict(counts.stats)
        values = {
            "doc_chars": (stats["doc_chars"], "characters per document as a prompt shows it"),
            "question_chars": (stats["question_chars"], "characters per question"),
            "gold_steps": (stats["gold_steps"], "gold decomposition steps per question"),
            "predicted_steps": (stats["predicted_steps"], "predicted decomposition steps per question"),
            "question_file_bytes_per_question": (
                files["questions"].stat().st_size / counts.questions,
                "bytes of the raw question file per question",
            ),
        }
        if stats["gold_per_question"] > 0:
            values["gold_per_question"] = (stats["gold_per_question"], "gold documents per question")
        if ds == "strategyqa" and not stats["gold_per_question"]:
            evidence = []
            for rec in loader(ds).records(files, split, relevance=spec.get("relevance", "paper")):
                if isinstance(rec, Query):
                    ids = {p for annotator in rec.evidence or [] for step in annotator for p in step}
                    evidence.append(len(ids))
            values["gold_per_question"] = (
                sum(evidence) / len(evidence),
                "distinct evidence paragraph ids per question (lower bound, see the benchmark)",
            )
        if not counts.documents:
            del values["doc_chars"]
        print(
            f"{ds}/{split}: {counts.questions} questions, {counts.documents} documents, "
            + ", ".join(f"{k} {v:.2f}" for k, (v, _) in values.items())
        )
        if args.write_rates:
            update_rates(
                args.write_rates, "text", "data", ds, values, {**prov, "from": f"{args.config} ({ds}/{split})"}
            )
        if args.model_dir:
            for rec in loader(ds).records(files, split, relevance=spec.get("relevance", "paper")):
                if isinstance(rec, Document):
                    texts.append(f"{rec.title}\n{rec.text}")
                elif isinstance(rec, Query):
                    texts.append(rec.question)
    if args.model_dir:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(args.model_dir))
        chars = sum(len(t) for t in texts)
        tokens = sum(len(tok(t, add_special_tokens=False)["input_ids"]) for t in texts)
        print(f"chars per token ({args.model_dir.name}): {chars / tokens:.3f} over {len(texts)} texts")
        if args.write_rates:
            update_rates(
                args.write_rates,
                "text",
                "data",
                "any",
                {"chars_per_token": (chars / tokens, f"characters per token ({args.model_dir.name}'s tokenizer)")},
                {**prov, "from": f"the sample's documents and questions ({args.config})"},
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

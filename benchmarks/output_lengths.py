"""Answer lengths per prompt template, measured on a finished run's predictions, for the estimate.

Every template ends its answer on a stop string (`generation.sampling.stop`, e.g. "\\nQuestion:");
an answer that does not reach one runs to `max_new_tokens` (finish_reason "length"). Per
template (the `prompt` column of every predictions.parquet under RUN_DIR/generation) this
measures the mean output tokens of the answers that stopped on a stop string and the share of
answers cut at the length limit. The estimate (cqabench.estimate.generation_costs) costs an
answer between the stopped mean (fast end) and share x max_new_tokens + (1 - share) x stopped
mean (slow end), instead of max_new_tokens for every answer. A template the run did not
generate with keeps max_new_tokens (no measurement, said so in the estimate's output).

    python benchmarks/output_lengths.py --run-dir results/sample [--write-rates benchmarks/rates.yaml]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflow"))


def measure(run_dir: Path) -> dict[str, dict[str, float]]:
    """template -> {answers, stop_tokens, length_share} over every prediction file of the run."""
    import pandas as pd

    files = sorted((run_dir / "generation").rglob("predictions.parquet"))
    if not files:
        raise SystemExit(f"{run_dir}/generation: no predictions.parquet (run the workflow's generation first)")
    frame = pd.concat([pd.read_parquet(f, columns=["prompt", "output_tokens", "finish_reason"]) for f in files])
    out = {}
    for prompt, rows in frame.groupby("prompt"):
        stopped = rows[rows["finish_reason"] == "stop"]
        if stopped.empty:
            continue
        out[str(prompt)] = {
            "answers": float(len(rows)),
            "stop_tokens": float(stopped["output_tokens"].mean()),
            "length_share": float((rows["finish_reason"] == "length").mean()),
        }
    return out


def main() -> int:
    from cqabench.estimate.rates import provenance, update_rates

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run-dir", type=Path, required=True, help="a finished run's results folder (results/<name>)")
    ap.add_argument("--write-rates", type=Path, default=None)
    args = ap.parse_args()
    prov = provenance()
    for prompt, m in measure(args.run_dir).items():
        print(
            f"{prompt}: {m['answers']:.0f} answers, {m['stop_tokens']:.1f} tokens on a stop string, "
            f"{m['length_share']:.1%} cut at max_new_tokens"
        )
        if args.write_rates:
            update_rates(
                args.write_rates,
                "output",
                "data",
                prompt,
                {
                    "stop_tokens": (m["stop_tokens"], "output tokens of an answer ended by a stop string (mean)"),
                    "length_share": (m["length_share"], "share of answers cut at max_new_tokens"),
                },
                {**prov, "from": f"{args.run_dir}/generation/**/predictions.parquet ({m['answers']:.0f} answers)"},
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())

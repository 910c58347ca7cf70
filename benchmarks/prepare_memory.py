"""Peak memory of `prepare` on AmbigQA against the size of its psgs_w100 passage file.

Why: the in-memory data stage grew by about 3.4 KB of peak RSS per passage (issue 10: 387 MB
at 50k extra passages, 893 MB at 200k), which is 70 GB at DPR's 21M. The streaming one must
stay flat. This builds psgs_w100-shaped TSV files (header `id<TAB>text<TAB>title`, DPR's
quoting) with N extra passages, runs `prepare` on AmbigQA's 40-question light sample with each,
once with this tree's code and once with a baseline git ref's (default `main`), each in a fresh
process that reports its own peak RSS (getrusage ru_maxrss), and prints the growth per passage
and the ratio between the two.

The passages are real text: the 1,100 of resources/raw/ambigqa/psgs_w100_sample.tsv followed by
the 17,841 OTT-QA dev passages of ../shared/data/ottqa/dev_passages.json (title from the
"/wiki/Title" key as the OTT-QA loader makes it), cycled in that order with new ids 1..N
(DPR's ids are integers too) until N are written (`raw_corpora.py`). Nothing is random.

    python benchmarks/prepare_memory.py                    # 50k and 200k, this tree vs main
    python benchmarks/prepare_memory.py --sizes 50000 200000 --baseline-ref main --work /tmp/pm
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from raw_corpora import ROOT, real_passages, write_psgs_tsv

QUESTIONS = ROOT / "resources/raw/ambigqa/dev_light_40.json"

# Runs in a fresh interpreter with the code under test first on sys.path; prints peak RSS (KiB).
_CHILD = """
import resource, sys, time
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from cqabench.data.prepare import prepare
t = time.perf_counter()
prepare("ambigqa", "dev", {"questions": Path(sys.argv[2]), "passages": Path(sys.argv[3])}, Path(sys.argv[4]))
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, time.perf_counter() - t)
"""


def write_tsv(path: Path, n: int) -> None:
    """A psgs_w100.tsv-shaped file of `n` passages (ids 1..n): the sample's and OTT-QA's, cycled."""
    write_psgs_tsv(path, n, real_passages(("sample", "ottqa")))


def peak_rss_mb(code: Path, tsv: Path, out: Path) -> tuple[float, float]:
    """(peak RSS in MiB, seconds) of one prepare run with the package at `code`."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    res = subprocess.run(
        [sys.executable, "-c", _CHILD, str(code), str(QUESTIONS), str(tsv), str(out)],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    )
    kib, seconds = res.stdout.split()
    return int(kib) / 1024, float(seconds)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs=2, default=[50_000, 200_000], metavar=("SMALL", "LARGE"))
    ap.add_argument("--baseline-ref", default="main", help="git ref whose workflow/ is the baseline (none: skip)")
    ap.add_argument("--work", type=Path, default=None, help="folder for the passage files and outputs")
    args = ap.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="prepare_memory."))
    work.mkdir(parents=True, exist_ok=True)
    codes = {"this tree": ROOT / "workflow"}
    if args.baseline_ref != "none":
        base = work / "baseline"
        if not base.exists():
            base.mkdir()
            archive = subprocess.run(
                ["git", "-C", str(ROOT), "archive", args.baseline_ref, "workflow"], check=True, capture_output=True
            ).stdout
            subprocess.run(["tar", "-x", "-C", str(base)], input=archive, check=True)
        codes[f"{args.baseline_ref}"] = base / "workflow"
    tsvs = {}
    for n in args.sizes:
        tsvs[n] = work / f"psgs_w100_{n}.tsv"
        if not tsvs[n].exists():
            write_tsv(tsvs[n], n)
    print(f"prepare ambigqa dev ({QUESTIONS.name}) + psgs_w100-shaped passages; peak RSS of the process")
    print(f"{'code':12s} {'passages':>9s} {'file MB':>8s} {'peak MiB':>8s} {'seconds':>8s}")
    growth: dict[str, float] = {}
    for name, code in codes.items():
        peaks = []
        for n in args.sizes:
            t0 = time.perf_counter()
            mb, seconds = peak_rss_mb(code, tsvs[n], work / "out" / name.replace(" ", "_") / str(n))
            peaks.append(mb)
            print(
                f"{name:12s} {n:9d} {tsvs[n].stat().st_size / 1e6:8.1f} {mb:8.1f} {seconds:8.1f}"
                f"   (wall {time.perf_counter() - t0:.1f} s)"
            )
        small, large = args.sizes
        growth[name] = (peaks[1] - peaks[0]) * 2**20 / (large - small)  # bytes per passage
        print(
            f"{name:12s} growth {growth[name]:.0f} bytes of peak RSS per extra passage "
            f"({peaks[1] / peaks[0]:.2f}x from {small} to {large})"
        )
    if len(growth) == 2:
        ours, base = growth["this tree"], growth[args.baseline_ref]
        ratio = ours / base if base else float("nan")
        print(f"per-passage growth, this tree / {args.baseline_ref}: {ratio:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Issue 36 item 5: a rates file or an estimate argument that cannot give a true bill is one line
naming the file and key (or the flag), a non-zero exit, no traceback.

Before: negative rates gave rc 0 and "-1 s" jobs; nan, inf, a YAML list, a syntax error, a missing
config, `--cores 0` and a plan with GPU jobs under `--gpus 0` ended in tracebacks; a syntax error
in benchmarks/rates.yaml broke every `snakemake -n` with one.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cqabench.cli import main
from cqabench.common.errors import ConfigError
from cqabench.estimate.dag import Job
from cqabench.estimate.model import Cost
from cqabench.estimate.rates import RATES_FILE, load_rates
from cqabench.estimate.schedule import makespan

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "config" / "config.yaml"
FIRST = "          value: 30\n"  # rates.download.cpu.any.fixed_s, the file's first rate
KEY = "rates.download.cpu.any.fixed_s"


def _rates(tmp_path: Path, value: str) -> Path:
    text = RATES_FILE.read_text(encoding="utf-8")
    assert text.count(FIRST) >= 1 and text.index(FIRST) < text.index("bm25_search:")
    path = tmp_path / "rates.yaml"
    path.write_text(text.replace(FIRST, f"          value: {value}\n", 1), encoding="utf-8")
    return path


def _estimate(capsys: pytest.CaptureFixture, *args: str) -> tuple[int, str]:
    rc = main(["estimate", "--root", str(REPO), "--quiet", *args])
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return rc, err


@pytest.mark.parametrize("value", ["-30", "-0.5", ".nan", ".inf", "-.inf", "true", "'fast'"])
def test_a_rate_that_is_no_finite_cost_is_named(value: str, tmp_path: Path) -> None:
    rates = _rates(tmp_path, value)
    with pytest.raises(ConfigError, match=rf"{rates}: {KEY}\.value (must be a finite number >= 0|is not a number)"):
        load_rates(rates)


def test_zero_is_a_cost(tmp_path: Path) -> None:
    """0.0 is in the file today (e.g. a fitted intercept): still read."""
    assert load_rates(_rates(tmp_path, "0")).value("download", "cpu", "any", "fixed_s") == 0.0


def test_negative_rates_through_the_command_exit_1_without_a_bill(tmp_path: Path, capsys) -> None:
    rates = _rates(tmp_path, "-1")
    out = tmp_path / "est"
    rc, err = _estimate(capsys, "--configfile", str(CONFIG), "--rates", str(rates), "--out-dir", str(out))
    assert rc == 1 and f"{rates}: {KEY}.value must be a finite number >= 0, got -1" in err
    assert not out.exists()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("- a\n- b\n", "the rates file holds a mapping (version, device_classes, rates), got list"),
        ("rates: [\n", "line 2, column 1: while parsing a flow node"),
        ("rates:\n  download: [1, 2]\n", "rates.download must be a mapping, got list"),
        (
            "device_classes: {cpu: x}\nrates:\n  download:\n    cpu:\n      any:\n        fixed_s: 3\n",
            "rates.download.cpu.any.fixed_s must be a mapping with value, unit and measured or assumed",
        ),
        ("version: 1\nversion: 2\n", "duplicated key 'version'"),
    ],
)
def test_a_malformed_rates_file_is_one_line(text: str, message: str, tmp_path: Path, capsys) -> None:
    rates = tmp_path / "rates.yaml"
    rates.write_text(text, encoding="utf-8")
    rc, err = _estimate(capsys, "--configfile", str(CONFIG), "--rates", str(rates))
    assert rc == 1 and str(rates) in err and message in err


def test_a_missing_config_file_is_named(tmp_path: Path, capsys) -> None:
    rc, err = _estimate(capsys, "--configfile", str(tmp_path / "nope.yaml"))
    assert rc == 1 and f"{tmp_path / 'nope.yaml'}: config file not found" in err


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--cores", "0", "argument --cores: expected a whole number >= 1, got 0"),
        ("--cores", "-3", "argument --cores: expected a whole number >= 1, got -3"),
        ("--gpus", "-1", "argument --gpus: expected a whole number >= 0, got -1"),
        ("--gpus", "two", "argument --gpus: expected a whole number >= 0, got 'two'"),
    ],
)
def test_counts_are_whole_numbers_checked_by_argparse(flag: str, value: str, message: str, capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["estimate", "--configfile", str(CONFIG), flag, value])
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_gpu_jobs_without_gpus_name_the_flag() -> None:
    """--gpus 0 is a CPU-only machine: right for a CPU plan, refused (not a traceback) for GPU jobs."""
    jobs = [Job("a", {"i": "1"}), Job("b", {"i": "2"})]
    costs = [Cost("a", {"i": "1"}, "g", gpus=1, wall_s=10), Cost("b", {"i": "2"}, "cpu", wall_s=4)]
    with pytest.raises(ConfigError, match=r"the plan has 1 GPU job\(s\): give --gpus N with N >= 1"):
        makespan(jobs, costs, gpus=0, cores=2)
    assert makespan(jobs[1:], costs[1:], gpus=0, cores=2).list_schedule_s == 4


@pytest.mark.snakemake
def test_a_broken_rates_file_stops_snakemake_n_with_one_line(tmp_path: Path) -> None:
    """Every rule's resources read benchmarks/rates.yaml of the checkout the workflow lies in:
    a copy of the workflow beside a broken one."""
    work = tmp_path / "work"
    work.mkdir()
    shutil.copytree(REPO / "workflow", work / "workflow", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("Snakefile", "config", "profiles", "resources", "envs"):
        (work / name).symlink_to(REPO / name)
    (work / "benchmarks").mkdir()
    (work / "benchmarks" / "rates.yaml").write_text(RATES_FILE.read_text(encoding="utf-8") + "rates: [\n")
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "--cores", "1"], cwd=work, capture_output=True, text=True, timeout=600
    )
    lines = [line for line in proc.stderr.splitlines() if line.startswith("cqabench:")]
    assert proc.returncode == 1 and "Traceback" not in proc.stderr and 'File "' not in proc.stderr, proc.stderr[-2000:]
    assert len(lines) == 1 and f"{work}/benchmarks/rates.yaml: line " in lines[0] and "while parsing" in lines[0]

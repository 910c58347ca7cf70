"""Strict config reading (issue 21, WEAK): duplicated keys refused, YAML errors with line and column."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cqabench.common.errors import ConfigError
from cqabench.planner.config_files import check_files, load_file, load_text

ROOT = Path(__file__).resolve().parents[2]
SNAKEMAKE = [sys.executable, "-m", "snakemake"]


def _error(text: str) -> str:
    with pytest.raises(ConfigError) as err:
        load_text(text, "bad.yaml")
    return str(err.value)


def test_duplicated_key_is_refused_with_both_lines() -> None:
    # Hand check: the second `musique:` is on line 4 (1-based), indented 2 columns -> column 3;
    # the first on line 2, column 3.
    text = "datasets:\n  musique:\n    splits: [dev]\n  musique:\n    splits: [test]\n"
    assert _error(text) == "bad.yaml: line 4, column 3: duplicated key 'musique' (first at line 2, column 3)"


def test_duplicated_top_level_key_is_refused() -> None:
    assert (
        _error("seed: 1\nk: 5\nseed: 2\n")
        == "bad.yaml: line 3, column 1: duplicated key 'seed' (first at line 1, column 1)"
    )


def test_tab_indentation_names_line_and_column() -> None:
    # The tab is the first character of line 2.
    msg = _error("datasets:\n\tmusique: {}\n")
    assert msg.startswith("bad.yaml: line 2, column 1: ")
    assert "'\\t'" in msg


def test_unclosed_bracket_names_where_it_opened() -> None:
    # `[` is column 4 of line 1; the parser notices at line 2, column 2 (the `:` after `b`).
    msg = _error("a: [1, 2\nb: 3\n")
    assert msg == (
        "bad.yaml: line 2, column 2: while parsing a flow sequence (started at line 1, column 4): "
        "expected ',' or ']', but got ':'"
    )


def test_equal_keys_in_different_mappings_are_fine() -> None:
    assert load_text("a: {x: 1}\nb: {x: 2}\n") == {"a": {"x": 1}, "b": {"x": 2}}


def test_non_utf8_config_names_the_byte(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_bytes(b"seed: 1\nname: caf\xe9\n")  # \xe9 is byte 17 (8 + 9)
    with pytest.raises(ConfigError, match=r"c\.yaml: byte 17: not UTF-8"):
        load_file(path)


def test_shipped_configs_are_strictly_valid() -> None:
    check_files(sorted((ROOT / "config").glob("*.yaml")))


@pytest.mark.snakemake
def test_duplicated_dataset_stops_snakemake_with_file_and_line(tmp_path: Path) -> None:
    """Run in a temporary working directory: Snakemake alone would keep the last value silently."""
    text = (ROOT / "config/config.yaml").read_text()
    lines = text.splitlines(keepends=True)
    top = next(i for i, line in enumerate(lines) if line.startswith("raw_dir:"))
    bad = "".join(lines) + lines[top]  # the same top-level key again, at the end
    path = tmp_path / "bad.yaml"
    path.write_text(bad)
    key = lines[top].split(":")[0]
    cmd = SNAKEMAKE + [
        "-n",
        "-s",
        str(ROOT / "Snakefile"),
        "--directory",
        str(tmp_path / "work"),
        "--configfile",
        str(path),
    ]
    proc = subprocess.run(cmd, cwd=ROOT, check=False, capture_output=True, text=True)
    assert proc.returncode != 0
    expected = (
        f"cqabench: {path}: line {len(lines) + 1}, column 1: duplicated key '{key}' (first at line {top + 1}, column 1)"
    )
    assert expected in proc.stdout + proc.stderr, (proc.stdout + proc.stderr)[-2000:]


@pytest.mark.snakemake
def test_snakemake_reads_a_broken_config_first_and_check_config_names_the_position(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Snakemake 9 parses `--configfile` before the Snakefile, so no code of ours can add the line
    to its message (checked here: it has none); `cqabench check-config` gives file, line, column."""
    from cqabench.cli import main

    tab = tmp_path / "tab.yaml"
    tab.write_text("datasets:\n\tb: 1\n")
    bracket = tmp_path / "bracket.yaml"
    bracket.write_text("datasets:\n  a: [1, 2\n")
    (tmp_path / "Snakefile").write_text("rule all:\n    shell: 'true'\n")
    done = subprocess.run(SNAKEMAKE + ["-n", "--configfile", str(tab)], cwd=tmp_path, capture_output=True, text=True)
    said = done.stdout + done.stderr
    assert done.returncode == 1 and "Config file is not valid JSON or YAML" in said
    assert "line 2" not in said
    assert main(["check-config", str(tab)]) == 1
    assert capsys.readouterr().err.strip() == (
        f"cqabench check-config: error: {tab}: line 2, column 1: while scanning "
        "for the next token: found character '\\t' that cannot start any token"
    )
    assert main(["check-config", str(bracket)]) == 1
    assert (
        f"{bracket}: line 3, column 1: while parsing a flow sequence (started at line 2, column 6)"
        in capsys.readouterr().err
    )
    assert main(["check-config", str(ROOT / "config" / "config.yaml")]) == 0
    assert "valid YAML, no duplicated key" in capsys.readouterr().out


def test_a_schema_error_is_one_line_naming_the_key() -> None:
    """Issue 36 item 9: Snakemake's `validate` printed the whole schema (1,135 lines) for one bad
    key; check_schema names the key path and the problem in one line."""
    import yaml

    from cqabench.planner.config_files import ONE_SETTING, check_schema

    schema = ROOT / "workflow" / "schemas" / "config.schema.yaml"
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    check_schema(config, schema)  # the shipped default is valid
    config["generation"]["max_questions"] = "thirty"
    with pytest.raises(ConfigError) as caught:
        check_schema(config, schema)
    assert str(caught.value) == (
        "config: generation.max_questions: 'thirty' is not of type 'integer', 'null' "
        "(every key is explained in config/README.md)"
    )
    with pytest.raises(ConfigError) as caught:
        check_schema({"max_questions": 2}, schema, overrides={"max_questions": 2})
    assert "`--config max_questions` sets top-level keys only" in str(caught.value)
    assert str(caught.value).endswith(ONE_SETTING + ")") and "\n" not in str(caught.value)


@pytest.mark.snakemake
def test_config_key_value_stops_snakemake_with_one_line(workdir: Path) -> None:
    """`snakemake -n --config max_questions=2`: a non-zero exit and a few lines, no schema dump,
    saying to use a second config file; that second file plans (the doc's recipe works)."""
    proc = subprocess.run(
        SNAKEMAKE + ["-n", "--config", "max_questions=2"], cwd=workdir, check=False, capture_output=True, text=True
    )
    said = proc.stdout + proc.stderr
    assert proc.returncode != 0 and len(said.splitlines()) < 5, said[-2000:]
    assert (
        "cqabench: config: the top level: Additional properties are not allowed ('max_questions' was unexpected)"
        in said
    )
    assert "snakemake --configfile config/config.yaml extra.yaml -- TARGET" in said
    (workdir / "extra.yaml").write_text("generation:\n  max_questions: 2\n")
    target = "results/sample/data/tatqa/dev/queries.parquet"
    done = subprocess.run(
        SNAKEMAKE + ["-n", "--configfile", "config/config.yaml", "extra.yaml", "--", target],
        cwd=workdir,
        check=False,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0 and "prepare" in done.stdout, (done.stdout + done.stderr)[-2000:]

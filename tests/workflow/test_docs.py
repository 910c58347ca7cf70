"""Documented commands cannot rot: README.md and docs/*.md are checked against the code.

Three checks, each on the fenced code blocks of the Markdown files:

- a block whose info string is `bash runnable` (or `sh runnable`) is run, command by command
  (a trailing backslash continues a line; `#` lines are comments), in a throw-away folder whose
  workflow files are links into this checkout, so a documented dry run or `--help` writes
  nothing here; each must exit 0. Mark a doc's main commands this way, in their `-n` / `--help`
  form where a real run would be long;
- every `cqabench <subcommand>` line of any shell block names a subcommand the parser has, and
  each `--flag` on it is one of that subcommand's options (checked in process, no run);
- a block whose info string is `yaml excerpt=<path>` must still be what that YAML file says:
  every key it shows, with the same value.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from cqabench.cli import build_parser, subcommand_parsers

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SHELLS = {"bash", "sh", "shell", "console", ""}
# What a documented command may read: the workflow and its inputs, linked, never copied.
LINKED = (
    "Snakefile",
    "workflow",
    "config",
    "profiles",
    "resources",
    "envs",
    "scripts",
    "benchmarks",
    "Makefile",
    "requirements.txt",
    "constraints.txt",
    "pyproject.toml",
)
TIMEOUT_S = 600


@dataclass(frozen=True)
class Block:
    doc: Path
    line: int  # 1-based line of the opening fence
    info: str
    body: list[tuple[int, str]]  # (line, text)

    @property
    def words(self) -> list[str]:
        return self.info.split()

    @property
    def language(self) -> str:
        return self.words[0] if self.words else ""


def fenced_blocks(text: str, doc: Path) -> list[Block]:
    """The ``` fenced blocks of a Markdown text, with their info strings and line numbers."""
    blocks, opened, info, body = [], None, "", []
    for number, line in enumerate(text.splitlines(), 1):
        fence = re.match(r"^\s*```(.*)$", line)
        if fence and opened is None:
            opened, info, body = number, fence.group(1).strip(), []
        elif fence and not fence.group(1).strip():
            blocks.append(Block(doc, opened, info, body))
            opened = None
        elif opened is not None:
            body.append((number, line))
    assert opened is None, f"{doc.name}:{opened}: a code block is never closed"
    return blocks


def commands(block: Block) -> list[tuple[int, str]]:
    """(line, command) of a shell block: continuations joined, comments and blank lines dropped."""
    out: list[tuple[int, str]] = []
    pending: tuple[int, str] | None = None
    for number, line in block.body:
        if pending is None and (not line.strip() or line.lstrip().startswith("#")):
            continue
        start, text = pending or (number, "")
        text += line.rstrip()
        if text.endswith("\\"):
            pending = (start, text[:-1] + " ")
            continue
        pending = None
        out.append((start, " ".join(text.split())))
    assert pending is None, f"{block.doc.name}:{block.line}: the block ends inside a continued line"
    return out


def all_blocks() -> list[Block]:
    return [b for doc in DOCS for b in fenced_blocks(doc.read_text(encoding="utf-8"), doc)]


def runnable() -> list[tuple[str, str]]:
    return [
        (f"{b.doc.relative_to(REPO)}:{line}", cmd)
        for b in all_blocks()
        if b.language in SHELLS and "runnable" in b.words[1:]
        for line, cmd in commands(b)
    ]


# ---- the parser itself -----------------------------------------------------------------------


def test_blocks_and_commands_are_read_as_written(tmp_path: Path) -> None:
    doc = tmp_path / "x.md"
    text = (
        "intro\n```bash runnable\n# a comment\nsnakemake -n \\\n    --configfile c.yaml   # why\n\n"
        "cqabench --help\n```\n```yaml excerpt=config/config.yaml\nname: sample\n```\n```\nplain\n```\n"
    )
    blocks = fenced_blocks(text, doc)
    assert [(b.line, b.language, b.words[1:]) for b in blocks] == [
        (2, "bash", ["runnable"]),
        (9, "yaml", ["excerpt=config/config.yaml"]),
        (12, "", []),
    ]
    assert commands(blocks[0]) == [(4, "snakemake -n --configfile c.yaml # why"), (7, "cqabench --help")]
    with pytest.raises(AssertionError, match="never closed"):
        fenced_blocks("```bash\nx\n", doc)


def test_the_main_docs_mark_commands_runnable() -> None:
    marked = {where.split(":")[0] for where, _ in runnable()}
    for doc in ("README.md", "docs/slurm_quickstart.md", "docs/troubleshooting.md", "docs/add_dataset.md"):
        assert doc in marked, f"{doc} has no ```bash runnable block"


# ---- 1. runnable blocks ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def docs_workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder that sees the workflow through links, so documented commands write only here."""
    work = tmp_path_factory.mktemp("docs-commands")
    for name in LINKED:
        if (REPO / name).exists():
            (work / name).symlink_to(REPO / name)
    return work


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"  # cqabench, snakemake
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "workflow"), env.get("PYTHONPATH")]))
    return env


_RESULTS: dict[str, subprocess.CompletedProcess] = {}  # a command documented twice runs once


def _git_status() -> str:
    done = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"], cwd=REPO, capture_output=True, text=True, check=False
    )
    return done.stdout if done.returncode == 0 else ""


@pytest.mark.parametrize(("where", "command"), runnable(), ids=[w for w, _ in runnable()])
@pytest.mark.snakemake
def test_documented_command_runs(where: str, command: str, docs_workdir: Path) -> None:
    before = _git_status()
    if command not in _RESULTS:
        _RESULTS[command] = subprocess.run(
            ["bash", "-o", "pipefail", "-c", command],
            cwd=docs_workdir,
            env=_env(),
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            check=False,
        )
    done = _RESULTS[command]
    assert done.returncode == 0, (
        f"{where}: `{command}` exited {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    )
    assert _git_status() == before, f"{where}: `{command}` changed the checkout:\n{_git_status()}"


# ---- 2. cqabench flags -----------------------------------------------------------------------


@cache
def _subcommands() -> dict[str, argparse.ArgumentParser]:
    """'name' and 'name action' -> parser, for every subcommand of `cqabench`."""
    return subcommand_parsers(build_parser())


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {opt for action in parser._actions for opt in action.option_strings}


def documented_cqabench_calls() -> list[tuple[str, list[str]]]:
    calls = []
    for block in all_blocks():
        if block.language not in SHELLS:
            continue
        for line, cmd in commands(block):
            try:
                words = shlex.split(cmd, comments=True)
            except ValueError:
                words = cmd.split()
            if words and words[0] == "cqabench":
                calls.append((f"{block.doc.relative_to(REPO)}:{line}", words))
    return calls


def test_documented_cqabench_commands_and_flags_exist() -> None:
    calls = documented_cqabench_calls()
    assert len(calls) >= 10  # README and docs show many; an empty list would check nothing
    subs, problems = _subcommands(), []
    for where, words in calls:
        args = [w for w in words[1:] if not w.startswith("-")]
        name = next(
            (f"{args[0]} {args[1]}" for _ in [0] if len(args) > 1 and f"{args[0]} {args[1]}" in subs),
            args[0] if args else "",
        )
        if name not in subs:
            if words[1:] not in (["--help"], ["-h"]):
                problems.append(f"{where}: `cqabench {name}` is no subcommand")
            continue
        if name == "pyserini":  # passes its arguments on to Pyserini's own commands
            continue
        known = _options(subs[name])
        for word in words:
            flag = word.split("=", 1)[0]
            if re.fullmatch(r"--[a-z][a-z0-9-]*", flag) and flag not in known:
                problems.append(f"{where}: `cqabench {name}` has no option {flag}")
    assert not problems, "\n".join(problems)


# ---- 3. YAML excerpts ------------------------------------------------------------------------


def _missing(excerpt: Any, actual: Any, path: str = "") -> list[str]:
    """Where the excerpt says something the file does not (keys absent, values differing)."""
    if isinstance(excerpt, dict):
        if not isinstance(actual, dict):
            return [f"{path or '/'}: the file has {actual!r}"]
        return [
            p
            for key, value in excerpt.items()
            for p in (
                _missing(value, actual[key], f"{path}.{key}".lstrip("."))
                if key in actual
                else [f"{path}.{key}".lstrip(".") + ": not in the file"]
            )
        ]
    return [] if excerpt == actual else [f"{path}: the excerpt says {excerpt!r}, the file {actual!r}"]


def excerpts() -> list[Block]:
    return [b for b in all_blocks() if any(w.startswith("excerpt=") for w in b.words[1:])]


@pytest.mark.parametrize("block", excerpts(), ids=lambda b: f"{b.doc.relative_to(REPO)}:{b.line}")
def test_yaml_excerpts_are_what_the_file_says(block: Block) -> None:
    source = next(w for w in block.words if w.startswith("excerpt=")).split("=", 1)[1]
    excerpt = yaml.safe_load("\n".join(text for _, text in block.body))
    actual = yaml.safe_load((REPO / source).read_text(encoding="utf-8"))
    problems = _missing(excerpt, actual)
    assert not problems, f"{block.doc.relative_to(REPO)}:{block.line} (excerpt of {source}):\n" + "\n".join(problems)


def test_excerpt_check_finds_a_stale_value() -> None:
    assert _missing({"generation": {"k": [1, 3, 5], "llms": ["m"]}}, {"generation": {"k": [5], "llms": ["m"]}}) == [
        "generation.k: the excerpt says [1, 3, 5], the file [5]"
    ]
    assert _missing({"a": {"b": 1}}, {"a": {}}) == ["a.b: not in the file"]


def test_threads_is_a_generation_key_not_an_llm_option() -> None:
    """docs/generation.md says so: `llms.<name>.threads` is refused, `generation.threads` taken."""
    from snakemake.exceptions import WorkflowError
    from snakemake.utils import validate

    schema = str(REPO / "workflow/schemas/config.schema.yaml")
    config = yaml.safe_load((REPO / "config/config.yaml").read_text(encoding="utf-8"))
    config["generation"]["threads"] = 4
    validate(config, schema)
    config["llms"]["smollm2-135m"]["threads"] = 4
    with pytest.raises(WorkflowError, match=r"'threads' was unexpected"):
        validate(config, schema)

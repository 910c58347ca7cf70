"""Every `cqabench` subcommand and every one of its options says what it is for in `--help`
(issue 39): a flag without help text is one a user has to read the source to use.

The check walks the real parser (`cqabench.cli.build_parser`), nested subcommands included
(`cache drop`, `cache import`), so a flag added later without `help=` fails here by name.
"""

from __future__ import annotations

import argparse

import pytest

from cqabench.cli import build_parser, subcommand_parsers


def undocumented(parser: argparse.ArgumentParser) -> list[str]:
    """'<command> <option>' for each subcommand or option of `parser` (nested ones included)
    whose help text is missing, empty or suppressed; `-h` is argparse's own and documented."""
    parsers = {
        parser.prog: parser,
        **{f"{parser.prog} {name}": sub for name, sub in subcommand_parsers(parser).items()},
    }
    missing = []
    for command, p in parsers.items():
        for action in p._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            if isinstance(action, argparse._SubParsersAction):
                # add_parser records a choice only when given help=
                helped = {choice.dest for choice in action._choices_actions if (choice.help or "").strip()}
                missing += [f"{command} {name}" for name in action.choices if name not in helped]
                continue
            if not (action.help or "").strip() or action.help == argparse.SUPPRESS:
                missing.append(f"{command} {'/'.join(action.option_strings) or action.dest}")
    return missing


def test_every_option_of_every_subcommand_has_help() -> None:
    assert undocumented(build_parser()) == []


def test_the_walk_reaches_nested_subcommands() -> None:
    # the nested ones are where a walk that stops at the first level would miss flags
    names = set(subcommand_parsers(build_parser()))
    assert {"search", "fetch-models", "list-models", "cache verify", "cache drop", "cache import"} <= names


def test_the_check_names_an_option_or_subcommand_without_help() -> None:
    parser = argparse.ArgumentParser(prog="tool")
    parser.add_argument("--quiet", action="store_true", help="print nothing")
    sub = parser.add_subparsers(dest="command")
    run = sub.add_parser("run", help="run it")
    run.add_argument("--out", help="")  # empty: no help either
    run.add_argument("files", nargs="+")
    run.add_argument("--hidden", help=argparse.SUPPRESS)
    sub.add_parser("silent")  # a subcommand without help
    assert undocumented(parser) == ["tool silent", "tool run --out", "tool run files", "tool run --hidden"]


@pytest.mark.parametrize("name", sorted(subcommand_parsers(build_parser())))
def test_help_renders(name: str) -> None:
    """argparse formats help lazily: a stray `%` in a help text (or a bad `%(default)s`) raises
    only when someone asks for `--help`."""
    text = subcommand_parsers(build_parser())[name].format_help()
    assert text.startswith("usage: cqabench ")


def test_help_shows_the_default_from_the_parser() -> None:
    """Helps say `(default %(default)s)`: the number shown is the parser's, never restated."""
    subs = subcommand_parsers(build_parser())
    assert "torch dtype of the written weights (default float32)" in " ".join(
        subs["convert-model"].format_help().split()
    )
    assert "(default 9999)" in " ".join(subs["report-answers"].format_help().split())

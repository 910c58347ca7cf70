"""Doc gaps a user hits first (issue 36 item 9): a synopsis that leaves out an option, a pointer
to a folder a clone does not have.

A synopsis is a line `cqabench <subcommand> ...` in a fenced block without a language (the
docs' command summaries), with its indented continuation lines; it lists every option of the
subcommand, so that reading it tells what the command can do (`--help` has the details).
"""

from __future__ import annotations

import re
from pathlib import Path

from test_docs import _subcommands  # 'name' / 'name action' -> parser

REPO = Path(__file__).resolve().parents[2]
USER_FILES = [
    REPO / "README.md",
    REPO / "config" / "README.md",
    REPO / "resources" / "README.md",
    *sorted((REPO / "docs").glob("*.md")),
    *sorted((REPO / "config").glob("*.yaml")),
    *sorted((REPO / "config" / "expected").glob("*.yaml")),
]


def _plain_blocks(text: str) -> list[list[str]]:
    """The lines of each fenced block that names no language."""
    blocks, current, plain = [], None, False
    for line in text.splitlines():
        if line.startswith("```"):
            if current is None:
                current, plain = [], line.strip() == "```"
            else:
                if plain:
                    blocks.append(current)
                current = None
        elif current is not None:
            current.append(line)
    return blocks


def synopses() -> list[tuple[str, str, str]]:
    """(where, subcommand, text) of every synopsis in README.md and docs/*.md."""
    subs = _subcommands()
    out = []
    for doc in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for lines in _plain_blocks(doc.read_text(encoding="utf-8")):
            for i, line in enumerate(lines):
                words = line.split()
                if len(words) < 2 or words[0] != "cqabench":
                    continue
                name = f"{words[1]} {words[2]}" if len(words) > 2 and f"{words[1]} {words[2]}" in subs else words[1]
                if name not in subs:
                    continue
                text = [line.split("#")[0]]
                for more in lines[i + 1 :]:
                    if not more.startswith(" ") or more.lstrip().startswith("cqabench "):
                        break
                    text.append(more.split("#")[0])
                out.append((f"{doc.relative_to(REPO)}", name, " ".join(text)))
    return out


def test_every_synopsis_lists_every_option() -> None:
    """evaluate-retrieval's synopsis lacked --corpus, evaluate-generation's --summary."""
    subs = _subcommands()
    found = synopses()
    assert {"evaluate-retrieval", "evaluate-generation"} <= {name for _, name, _ in found}
    missing = []
    for where, name, text in found:
        options = {o for a in subs[name]._actions for o in a.option_strings if o.startswith("--")} - {"--help"}
        shown = set(re.findall(r"--[a-z][a-z0-9-]*", text))
        if options - shown:
            missing.append(f"{where}: cqabench {name} lacks {sorted(options - shown)}")
    assert not missing, "\n".join(missing)


def test_no_user_file_points_outside_the_clone() -> None:
    """`../shared/` is the maintainers' workplace; a clone has no such folder."""
    bad = [
        f"{p.relative_to(REPO)}:{i}"
        for p in USER_FILES
        for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if "../shared" in line
    ]
    assert not bad, bad

"""One name per step (issue 39 item 4): the `cqabench` command a rule runs is the rule's name with
`-` for `_` (rule `fuse_runs` runs `cqabench fuse-runs`), so a job in Snakemake's log, its log and
benchmark folders, the estimate's rates and the command a user reruns by hand all carry one name.

The one family that cannot follow it is the per-table targets: rule `table_<id>` (one job per
paper table, the id in its name) runs `cqabench paper-table --table <id>`. The rules are read as
text (no Snakemake start), so the check also holds for a rule no config plans.
"""

from __future__ import annotations

import re
from pathlib import Path

from cqabench.cli import build_parser

REPO = Path(__file__).resolve().parents[2]
RULE_FILES = [REPO / "Snakefile", *sorted((REPO / "workflow" / "rules").glob("*.smk"))]
# the rule whose name holds an argument: `rule: name: f"table_{_table}"` in report.smk
FAMILIES = {"table_{_table}": "paper-table"}
# names the commands had before the convention; no alias keeps them
OLD_NAMES = {"fuse", "rerank", "train-codec", "eval-retrieval", "report-table", "models"}


def rule_commands() -> dict[str, set[str]]:
    """Each rule's name -> the `cqabench` subcommands the string literals of its `shell:` name."""
    out: dict[str, set[str]] = {}
    for path in RULE_FILES:
        parts = re.split(r"^[ \t]*rule[ \t]*(\w*)[ \t]*:[ \t]*$", path.read_text(encoding="utf-8"), flags=re.M)
        for name, body in zip(parts[1::2], parts[2::2]):
            if not name:  # `rule:` with its name given by `name:` (a loop's rules)
                name = re.search(r'name:\s*f?"([^"]+)"', body).group(1)
            shell = body.split("shell:", 1)[1] if "shell:" in body else ""
            literals = [line for line in shell.splitlines() if line.strip().startswith(('"', "'"))]
            out[name] = set(re.findall(r"\bcqabench ([a-z][a-z-]*)", "\n".join(literals)))
    return out


def test_every_rule_runs_the_command_of_its_name() -> None:
    found = rule_commands()
    # read by hand from `git grep -n "cqabench " workflow/rules/`: 24 rules call cqabench; cell_spec
    # writes its spec with printf, estimate is a run: job (it needs Snakemake, which no rule
    # environment has), `all` only collects targets
    assert {name for name, commands in found.items() if not commands} == {"all", "cell_spec", "estimate"}
    assert len([name for name, commands in found.items() if commands]) == 24
    assert found["fuse_runs"] == {"fuse-runs"} and found["evaluate_retrieval"] == {"evaluate-retrieval"}
    wrong = {name: sorted(commands) for name, commands in found.items()
             if commands and commands != {FAMILIES.get(name, name.replace("_", "-"))}}  # fmt: skip
    assert not wrong, f"rule -> the commands it runs, not its own name: {wrong}"


def test_the_command_line_has_each_rules_command_and_no_old_name() -> None:
    (sub,) = [a for a in build_parser()._actions if a.dest == "command"]
    names = set(sub.choices)
    assert set().union(*rule_commands().values()) <= names
    assert not OLD_NAMES & names
    # the two evaluations share one verb
    assert {"evaluate-retrieval", "evaluate-generation"} <= names

"""docs/architecture.md's package map is the tree: a newcomer finds every stage by its folder.

The map's rows name the package's first-level folders in the DAG's order (the order the import
check enforces, test_import_graph.LAYERS), each stage's rule file (named as the folder, with a
`commands/` module of the same name), and every module and sub-package the folder holds.
"""

from __future__ import annotations

import re
from pathlib import Path

from test_import_graph import LAYERS

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "workflow" / "cqabench"
DOC = REPO / "docs" / "architecture.md"


def _map_rows() -> list[list[str]]:
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("## Package map") :]
    section = section[: section.index("\n## ", 3)]
    rows = [line.strip().strip("|").split(" | ") for line in section.splitlines() if line.startswith("| `")]
    assert rows, "no package map table in docs/architecture.md"
    return rows


def _folder(cell: str) -> str:
    m = re.fullmatch(r"`([a-z_]+)/`", cell.strip())
    assert m, f"first column {cell!r} is not a `folder/`"
    return m.group(1)


def test_every_first_level_folder_is_mapped_in_the_dags_order() -> None:
    folders = [_folder(row[0]) for row in _map_rows()]
    on_disk = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file())
    assert sorted(folders) == on_disk
    assert folders == [layer for layer in LAYERS if layer in folders]  # the import check's order


def test_a_stage_shares_its_name_with_its_rule_file_and_commands_module() -> None:
    stages = 0
    for row in _map_rows():
        folder = _folder(row[0])
        rule = re.search(r"`([a-z_]+)\.smk`", row[2])
        if rule and rule.group(1) != "common":
            stages += 1
            assert rule.group(1) == folder, row[:3]
            assert (REPO / "workflow" / "rules" / f"{folder}.smk").is_file()
            assert (PACKAGE / "commands" / f"{folder}.py").is_file()
    rule_files = sorted(p.stem for p in (REPO / "workflow" / "rules").glob("*.smk") if p.stem != "common")
    assert stages == len(rule_files), rule_files  # every rule file is a mapped stage


def test_every_module_of_a_folder_is_named_in_its_row() -> None:
    for row in _map_rows():
        folder = _folder(row[0])
        named = set(re.findall(r"`([a-z_0-9]+/?)`", row[-1]))
        for path in sorted((PACKAGE / folder).iterdir()):
            if path.name == "__init__.py" or path.name == "__pycache__":
                continue
            name = path.stem if path.suffix == ".py" else f"{path.name}/"
            if path.suffix == ".py" or (path / "__init__.py").is_file():
                assert name in named, f"docs/architecture.md's map does not name {folder}/{name}"

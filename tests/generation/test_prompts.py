"""Prompt templates: the 20 shipped files, their hashes, and how a chat is assembled."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from cqabench.common.errors import ConfigError, DataError
from cqabench.evaluation.metrics.tables import read_table_official, rms_official
from cqabench.generation.extraction import extract_answer, parse_table
from cqabench.generation.prompts import (
    DATASET_FAMILY,
    FAMILIES,
    STRATEGIES,
    build_chat,
    chat_hash,
    context_block,
    family_of,
    file_hash,
    load_template,
    template_path,
    truncate,
)

ROOT = Path(__file__).resolve().parents[2] / "resources" / "prompts"
ALL = [(s, f) for s in STRATEGIES for f in FAMILIES]
# one dataset per family, to check exemplar answers against the extraction of that dataset
FAMILY_DATASET = {
    "multihop": "musique",
    "strategy": "strategyqa",
    "ambiguous": "ambigqa",
    "numeric": "finqa",
    "table": "tanq",
}


@pytest.mark.parametrize(("strategy", "family"), ALL)
def test_every_template_loads_and_has_the_shape_of_its_strategy(strategy: str, family: str) -> None:
    path = template_path(ROOT, strategy, family)
    t = load_template(path)
    assert t.hash == hashlib.sha256(path.read_bytes()).hexdigest()[:12] == file_hash(path)
    assert t.system
    user = t.user

    def lines(prefix: str) -> int:
        return len(re.findall(rf"^{re.escape(prefix)}", user, re.M))

    exemplars = lines("Question:")  # the real question follows "{{context}}", not a line start
    assert "{{context}}Question: {{question}}" in user
    if strategy == "zero-shot-cot":
        assert exemplars == 0
        assert "step by step" in user
    else:
        assert exemplars == 5, f"{path}: {exemplars} exemplars"
        assert t.stop == ("\nQuestion:",)
    if strategy == "few-shot-cot":
        assert lines("Reasoning:") == 5
    if strategy == "self-ask":
        assert lines("Follow up:") == 10 and lines("Intermediate answer:") == 10
        assert lines("So the final answer is:") == 5


def _first_exemplar_output(template_user: str) -> str:
    """What the model is shown to write for the first exemplar: the text after its question line."""
    block = template_user.split("\n\n")
    for part in block:
        lines = part.splitlines()
        q = next((j for j, ln in enumerate(lines) if ln.startswith("Question:")), None)
        if q is not None and q + 1 < len(lines):
            return "\n".join(lines[q + 1 :])
    raise AssertionError("no exemplar found")


@pytest.mark.parametrize(("strategy", "family"), [a for a in ALL if a[0] != "zero-shot-cot"])
def test_exemplar_outputs_are_read_back_by_the_answer_extraction(strategy: str, family: str) -> None:
    """A model that copies the exemplar format must get its answer parsed: templates and extraction agree."""
    t = load_template(template_path(ROOT, strategy, family))
    output = _first_exemplar_output(t.user)
    ext = extract_answer(FAMILY_DATASET[family], output, strategy)
    assert ext.ok, (output, ext)
    expected = {
        "multihop": "Salzburg",
        "strategy": "yes",
        "ambiguous": "1908\n1948\n2012",
        "numeric": "25%",
        "table": "Member | Birth year\nJohn Lennon | 1940\nPaul McCartney | 1942\nGeorge Harrison | 1943\nRingo Starr | 1940",
    }[family]
    assert ext.answer == expected


TANQ_ROOT = ROOT.parent / "prompts_tanq"
TABLE_TEMPLATES = [
    *(template_path(ROOT, s, "table") for s in STRATEGIES),
    ROOT / "few-shot" / "table.open-book.txt",
    TANQ_ROOT / "few-shot" / "table.txt",
]
_EXEMPLAR_TABLE = re.compile(r"^(?:Final Answer:|So the final answer is:)\n((?:.+\n)+)", re.M)


@pytest.mark.parametrize("path", TABLE_TEMPLATES, ids=lambda p: str(p.relative_to(ROOT.parent)))
def test_table_templates_ask_for_the_format_tanqs_official_reader_reads(path: Path) -> None:
    """Every table template (TANQ's, the open-book one included) asks for the lines TANQ's own
    evaluation reads (metrics.tables.read_table_official: every line a row, cells split at "|"),
    and its demonstrations are written so: no outer pipes, no separator line, no fence. Read
    either way a demonstration gives the same table, and it scores RMS 1 against itself."""
    t = load_template(path)
    prompt = t.system + "\n" + t.user
    for phrase in (
        'cells separated by " | "',
        'no "|" at the start or end of a line',
        "no separator line",
        "no code fence",
        "nothing after the table",
    ):
        assert phrase in prompt, (path, phrase)
    tables = [m.group(1).strip() for m in _EXEMPLAR_TABLE.finditer(t.user)]
    assert len(tables) == (
        0 if "zero-shot" in str(path) else 1 if "open-book" in path.name else 3 if path.is_relative_to(TANQ_ROOT) else 5
    ), path
    for text in tables:
        lines = text.splitlines()
        assert not any(ln.startswith("|") or ln.endswith("|") or set(ln) <= set("|-: ") for ln in lines), text
        official = read_table_official(text)
        parsed = parse_table(text)
        assert list(official.header) == [c.lower() for c in parsed.header]
        assert [list(r) for r in official.rows] == [[c.lower() for c in r] for r in parsed.rows]
        header, rows = parsed.header, parsed.rows
        assert rms_official(header, rows, text).f1 == 1.0


def _template(tmp_path: Path, body: str) -> Path:
    p = tmp_path / "t.txt"
    p.write_text(body, encoding="utf-8")
    return p


def test_build_chat_places_context_question_and_renders_exemplar_tables(tmp_path: Path) -> None:
    t = load_template(
        _template(
            tmp_path,
            (
                "### system\nBe brief.\n### user\n{{table\nYear | Sales\n2020 | 5\n}}\n"
                "Question: example?\nFinal Answer: 5\n\n{{context}}Question: {{question}}\n### stop\n\\nQuestion:\n"
            ),
        )
    )
    assert t.stop == ("\nQuestion:",)
    docs = [
        {
            "docid": "d1",
            "title": "Paris",
            "text": "Paris is the capital.",
            "kind": "text",
            "table_header": [],
            "table_rows": [],
        },
        {
            "docid": "d2",
            "title": "",
            "text": "Intro",
            "kind": "table",
            "table_header": ["A", "B"],
            "table_rows": [["1", "2"]],
        },
    ]
    chat = build_chat(t, "  What  is\nthe capital? ", docs, "markdown")
    assert chat[0] == {"role": "system", "content": "Be brief."}
    assert chat[1]["role"] == "user"
    assert chat[1]["content"] == (
        "| Year | Sales |\n| --- | --- |\n| 2020 | 5 |\n"
        "Question: example?\nFinal Answer: 5\n\n"
        "Context:\n[1] Paris\nParis is the capital.\n\n[2] Intro\n| A | B |\n| --- | --- |\n| 1 | 2 |\n\n"
        "Question: What is the capital?"
    )
    pipe = build_chat(t, "q", docs, "pipe")[1]["content"]
    assert pipe.startswith("Year|Sales\n2020|5\n") and "[2] Intro\nA|B\n1|2\n" in pipe
    closed = build_chat(t, "q", [], "pipe")[1]["content"]
    assert "Context:" not in closed and closed.endswith("Final Answer: 5\n\nQuestion: q")
    assert chat_hash(chat) != chat_hash(build_chat(t, "What is the capital?", docs, "pipe"))
    assert chat_hash(chat) == chat_hash(build_chat(t, "What is the capital?", docs, "markdown"))


def test_placeholders_inside_questions_or_documents_are_not_expanded(tmp_path: Path) -> None:
    t = load_template(_template(tmp_path, "### user\n{{context}}Q: {{question}}\n"))
    doc = {"title": "T", "text": "says {{question}}", "kind": "text"}
    user = build_chat(t, "what about {{context}}?", [doc])[0]["content"]
    assert user == "Context:\n[1] T\nsays {{question}}\n\nQ: what about {{context}}?"


def test_truncate_cuts_at_a_boundary_and_marks_the_cut() -> None:
    assert truncate("short", 10) == "short"
    assert truncate("alpha beta gamma delta", 12) == "alpha beta …"
    assert truncate("row1 a\nrow2 b\nrow3 c", 15) == "row1 a\nrow2 b …"
    assert truncate("x" * 30, 10) == "x" * 10 + " …"  # no boundary in the second half: hard cut
    assert truncate("anything", None) == "anything"
    block = context_block([{"title": "", "text": "one two three four", "kind": "text"}], "pipe", max_chars=9)
    assert block == "Context:\n[1] one two …\n\n"


@pytest.mark.parametrize(
    ("body", "field", "problem"),
    [
        ("### user\nQuestion: {{question}}\n", "user", "{{context}} exactly once"),
        ("### user\n{{context}}{{context}} {{question}}\n", "user", "{{context}} exactly once"),
        ("### user\n{{context}} {{question}} {{answer}}\n", "user", "unknown placeholder"),
        ("### user\n{{context}} {{question}}\n### user\nagain\n", "user", "twice"),
        ("preamble\n### user\n{{context}} {{question}}\n", "sections", "before the first"),
        ("### system\nonly a system part\n", "user", "missing or empty"),
    ],
)
def test_malformed_templates_are_rejected_naming_the_section(
    tmp_path: Path, body: str, field: str, problem: str
) -> None:
    path = _template(tmp_path, body)
    with pytest.raises(DataError) as err:
        load_template(path)
    assert err.value.field == field and problem in err.value.problem and err.value.path == str(path)


def test_unclosed_table_block_is_an_error(tmp_path: Path) -> None:
    t = load_template(_template(tmp_path, "### user\n{{table\nA | B\n\n{{context}}{{question}}\n"))
    with pytest.raises(DataError, match="not closed"):
        build_chat(t, "q")


def test_dataset_families_and_overrides() -> None:
    assert set(DATASET_FAMILY.values()) == set(FAMILIES)
    assert family_of("tatqa") == "numeric" and family_of("ottqa") == "multihop" and family_of("tanq") == "table"
    assert family_of("tatqa", {"tatqa": "multihop"}) == "multihop"
    with pytest.raises(ConfigError, match="generation.families"):
        family_of("newdata")
    with pytest.raises(ConfigError, match="unknown family"):
        family_of("musique", {"musique": "poetry"})
    with pytest.raises(ConfigError, match="unknown prompt strategy"):
        template_path(ROOT, "one-shot", "multihop")
    assert re.fullmatch(r"[0-9a-f]{12}", file_hash(template_path(ROOT, "self-ask", "table")))


def test_non_utf8_template_names_the_file_and_byte(tmp_path: Path) -> None:
    """Issue 21 (WEAK): a Latin-1 template was a UnicodeDecodeError traceback."""
    path = tmp_path / "t.txt"
    # Hand check: "### user\n" is 9 bytes, "caf" 3 more, so \xe9 is byte 12, on line 2.
    path.write_bytes(b"### user\ncaf\xe9 {{context}} {{question}}\n")
    with pytest.raises(DataError) as err:
        load_template(path)
    assert str(err.value) == (
        f"{path}: record None, field '-': byte 12 (line 2) is not UTF-8 "
        "(invalid continuation byte); save the file as UTF-8"
    )

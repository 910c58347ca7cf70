"""Prompt templates: loading, hashing, and turning (question, documents) into a chat.

A template is a plain text file, resources/prompts/{strategy}/{family}.txt, so that the
prompt a model saw can be read without running code. It has sections introduced by lines
`### system`, `### user` and, optionally, `### stop` (one stop string per line, written
with `\\n` for a newline). The user section holds two placeholders: `{{context}}` (empty in
the closed-book setting, numbered passages otherwise) and `{{question}}`. A table inside an
exemplar is written as

    {{table
    Year | Revenue
    2020 | 1,500
    }}

and is rendered in the serialization of the cell being run, so exemplars and retrieved
documents always show tables the same way. The template's hash (sha256 of the file bytes)
goes into every result row and the file is an input of its Snakemake rule: editing a
template reruns exactly the jobs that use it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from cqabench.common.errors import ConfigError, DataError
from cqabench.data.tables import document_text, serialize
from cqabench.generation.llm.base import Chat

STRATEGIES = ("few-shot", "few-shot-cot", "zero-shot-cot", "self-ask")
FAMILIES = ("multihop", "strategy", "ambiguous", "numeric", "table")
SETTINGS = ("closed", "rag", "oracle", "open-book")

# Which template family a dataset's questions get. TAT-QA mixes spans and arithmetic; it goes
# to `numeric` with FinQA because both put a financial table next to text and most TAT-QA
# answers (spans included) are figures read off that table; the numeric templates say to
# answer with the span when the answer is not a number, and one exemplar does so.
DATASET_FAMILY: dict[str, str] = {
    "musique": "multihop",
    "2wikimultihopqa": "multihop",
    "ottqa": "multihop",
    "strategyqa": "strategy",
    "ambigqa": "ambiguous",
    "tatqa": "numeric",
    "finqa": "numeric",
    "tanq": "table",
}

_SECTION = re.compile(r"^### (system|user|stop)[ \t]*$", re.MULTILINE)
_PLACEHOLDER = re.compile(r"\{\{(\w+)")
_TABLE_BLOCK = re.compile(r"\{\{table\n(.*?)\n\}\}", re.DOTALL)
_SLOT = re.compile(r"\{\{(context|question)\}\}")
_ALLOWED = {"context", "question", "table"}
HASH_CHARS = 12


def family_of(dataset: str, overrides: Mapping[str, str] | None = None) -> str:
    """The template family for a dataset; config `generation.families` may add or override."""
    table = {**DATASET_FAMILY, **(overrides or {})}
    try:
        family = table[dataset]
    except KeyError:
        raise ConfigError(
            f"dataset {dataset!r} has no prompt family; add it under generation.families (one of {', '.join(FAMILIES)})"
        ) from None
    if family not in FAMILIES:
        raise ConfigError(f"generation.families.{dataset}: unknown family {family!r}; valid: {', '.join(FAMILIES)}")
    return family


def template_path(root: str | Path, strategy: str, family: str) -> Path:
    if strategy not in STRATEGIES:
        raise ConfigError(f"unknown prompt strategy {strategy!r}; valid: {', '.join(STRATEGIES)}")
    if family not in FAMILIES:
        raise ConfigError(f"unknown prompt family {family!r}; valid: {', '.join(FAMILIES)}")
    return Path(root) / strategy / f"{family}.txt"


def file_hash(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:HASH_CHARS]


@dataclass(frozen=True)
class Template:
    path: str
    hash: str
    system: str
    user: str
    stop: tuple[str, ...]


def load_template(path: str | Path) -> Template:
    """Parse and check a template file; errors name the file and the section."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise DataError(path, None, "-", "template file not found") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise DataError(
            path, None, "-", f"byte {exc.start} (line {line}) is not UTF-8 ({exc.reason}); save the file as UTF-8"
        ) from None
    marks = list(_SECTION.finditer(text))
    if not marks:
        raise DataError(path, None, "sections", "no '### system' / '### user' section lines")
    if text[: marks[0].start()].strip():
        raise DataError(path, None, "sections", "text before the first '### <section>' line")
    sections: dict[str, str] = {}
    for i, m in enumerate(marks):
        name = m.group(1)
        if name in sections:
            raise DataError(path, None, name, "section appears twice")
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        sections[name] = text[m.end() : end].strip("\n")
    user = sections.get("user", "")
    if not user.strip():
        raise DataError(path, None, "user", "missing or empty")
    for name in ("system", "user"):
        unknown = {p for p in _PLACEHOLDER.findall(sections.get(name, ""))} - _ALLOWED
        if unknown:
            raise DataError(path, None, name, f"unknown placeholder(s) {sorted(unknown)}; allowed: {sorted(_ALLOWED)}")
    for placeholder in ("{{question}}", "{{context}}"):
        if user.count(placeholder) != 1:
            raise DataError(
                path, None, "user", f"must contain {placeholder} exactly once, found {user.count(placeholder)}"
            )
    stop = tuple(line.replace("\\n", "\n") for line in sections.get("stop", "").splitlines() if line.strip())
    return Template(
        path=str(path),
        hash=hashlib.sha256(raw).hexdigest()[:HASH_CHARS],
        system=sections.get("system", "").strip(),
        user=user,
        stop=stop,
    )


def _render_tables(text: str, serialization: str, path: str) -> str:
    def table(m: re.Match[str]) -> str:
        lines = [ln for ln in m.group(1).splitlines() if ln.strip()]
        if not lines:
            raise DataError(path, None, "user", "empty {{table}} block")
        rows = [[c.strip() for c in ln.split("|")] for ln in lines]
        return serialize(rows[0], rows[1:], serialization)

    out = _TABLE_BLOCK.sub(table, text)
    if "{{table" in out:
        raise DataError(path, None, "user", "a {{table block is not closed by a line '}}'")
    return out


def truncate(text: str, max_chars: int | None) -> str:
    """Cut a document to a character budget at a line or word boundary.

    Small models and CPU runs cannot afford whole tables; cutting at a boundary keeps the
    kept rows intact. The cut is marked so the reader (and the model) sees text is missing.
    """
    if max_chars is None or len(text) <= max_chars:
        return text
    head = text[:max_chars]
    cut = max(head.rfind("\n"), head.rfind(" "))
    if cut > max_chars // 2:
        head = head[:cut]
    return head.rstrip() + " …"


def context_block(docs: Sequence[Mapping], serialization: str, max_chars: int | None = None) -> str:
    """Numbered passages, each with its title; tables in the cell's serialization."""
    if not docs:
        return ""
    parts = []
    for i, doc in enumerate(docs, start=1):
        body = truncate(document_text(dict(doc), serialization).strip(), max_chars)
        title = (doc.get("title") or "").strip()
        parts.append(f"[{i}] {title}\n{body}" if title else f"[{i}] {body}")
    return "Context:\n" + "\n\n".join(parts) + "\n\n"


def build_chat(
    template: Template,
    question: str,
    docs: Sequence[Mapping] = (),
    serialization: str = "pipe",
    max_doc_chars: int | None = None,
) -> Chat:
    """The messages sent to the model for one question.

    Placeholders are replaced by plain string substitution, never `str.format`, because
    questions, tables and exemplars contain braces and dollar signs.
    """
    values = {
        "context": context_block(docs, serialization, max_doc_chars),
        "question": " ".join(question.split()),
    }
    # one pass, so a document or question that contains "{{question}}" is never expanded
    user = _SLOT.sub(lambda m: values[m.group(1)], _render_tables(template.user, serialization, template.path))
    chat: Chat = []
    if template.system:
        chat.append({"role": "system", "content": _render_tables(template.system, serialization, template.path)})
    chat.append({"role": "user", "content": user})
    return chat


def chat_hash(chat: Chat) -> str:
    """Short id of the exact prompt (the `prompt_hash` result column)."""
    return hashlib.sha256(json.dumps(chat, ensure_ascii=False, sort_keys=True).encode("utf-8")).hexdigest()[:16]

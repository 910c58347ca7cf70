"""cqabench.generation.cell.Cell: the one generation-cell type, its folder pattern, label and
wildcards, and the rules no config can break (every value below written out by hand)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from cqabench.common.errors import ConfigError
from cqabench.generation.cell import CELL_FIELDS, Cell

RAG = Cell("musique", "dev", "pipe", "bm25", "smollm2-135m", "few-shot", "rag", 2)
RAG_LABEL = "musique/dev/pipe/bm25/smollm2-135m/few-shot/rag-k2"


def test_the_pattern_is_the_rules_cell_folder() -> None:
    """The rules put PATTERN in f-strings: the paths must be those the rules spelt out before,
    `{{dataset}}/.../{{setting}}-k{{k}}` escaped in an f-string (copied from generation.smk)."""
    assert Cell.PATTERN == "{dataset}/{split}/{serialization}/{retriever}/{llm}/{prompt}/{setting}-k{k}"
    results = "results/sample"
    old = f"{results}/generation/{{dataset}}/{{split}}/{{serialization}}/{{retriever}}/{{llm}}/{{prompt}}/{{setting}}-k{{k}}/predictions.parquet"
    assert f"{results}/generation/{Cell.PATTERN}/predictions.parquet" == old
    assert CELL_FIELDS == ("dataset", "split", "serialization", "retriever", "llm", "prompt", "setting", "k")
    from cqabench.planner.cells import ANY_CELL

    assert ANY_CELL == "*/*/*/*/*/*/*-k*"  # the glob the planner finds existing cells with


def test_a_label_names_the_cell_and_back() -> None:
    assert RAG.label == RAG_LABEL
    assert Cell.from_label(RAG_LABEL) == RAG
    # the last "-k" splits setting from k: open-book keeps its hyphen
    book = Cell.from_label("tanq/test/pipe/bm25/llm/few-shot/open-book-k1")
    assert (book.setting, book.k) == ("open-book", 1)
    assert book.label == "tanq/test/pipe/bm25/llm/few-shot/open-book-k1"
    assert RAG.as_dict() == {
        "dataset": "musique",
        "split": "dev",
        "serialization": "pipe",
        "retriever": "bm25",
        "llm": "smollm2-135m",
        "prompt": "few-shot",
        "setting": "rag",
        "k": 2,
    }


@pytest.mark.parametrize(
    ("label", "message"),
    [
        ("musique/dev/rag-k1", "--cells[0]: 'musique/dev/rag-k1' is not '<dataset>/<split>/"),
        ("musique/dev/pipe/bm25/m/few-shot/rag", "is not '<dataset>/<split>/"),  # no -k
        ("musique/dev/pipe/bm25/m/few-shot/rag-k", "is not '<dataset>/<split>/"),  # no k after it
        ("musique/dev/pipe/bm25/m/few-shot/rag-k05", "k '05' is not a whole number written plainly (k0, k5)"),
        ("musique/dev/pipe/bm25/m/few-shot/rag-kx", "k 'x' is not a whole number written plainly"),
    ],
)
def test_a_malformed_label_is_refused_naming_where(label: str, message: str) -> None:
    with pytest.raises(ConfigError, match=r"^--cells\[0\]") as err:
        Cell.from_label(label, "--cells[0]")
    assert message in str(err.value)


def test_wildcards_by_attribute_by_key_or_snakemakes_own_make_the_same_cell() -> None:
    from snakemake.iocontainers import Wildcards

    texts = {
        "dataset": "musique",
        "split": "dev",
        "serialization": "pipe",
        "retriever": "bm25",
        "llm": "smollm2-135m",
        "prompt": "few-shot",
        "setting": "rag",
        "k": "2",
    }
    assert Cell.from_wildcards(SimpleNamespace(**texts)) == RAG
    assert Cell.from_wildcards(texts) == RAG
    assert Cell.from_wildcards(Wildcards(fromdict=texts)) == RAG
    assert Cell.from_wildcards(RAG) == RAG  # a Cell is its own wildcards
    assert Cell.texts_of(RAG) == texts and Cell.label_of(texts) == RAG_LABEL
    # the text as written, for naming the path asked for; the cell itself needs k written plainly
    odd = {**texts, "k": "02"}
    assert Cell.label_of(odd) == "musique/dev/pipe/bm25/smollm2-135m/few-shot/rag-k02"
    with pytest.raises(ConfigError, match="^cell musique/dev/pipe/bm25/smollm2-135m/few-shot/rag-k02: k '02' is not"):
        Cell.from_wildcards(odd)


def test_parse_gives_the_texts_or_none() -> None:
    assert Cell.parse(RAG_LABEL) == Cell.texts_of(RAG)
    assert Cell.parse("musique/dev/pipe/bm25/m/few-shot/rag-k02")["k"] == "02"  # checked later, by problems
    assert Cell.parse("musique/dev/pipe/bm25") is None
    assert Cell.parse("a/musique/dev/pipe/bm25/m/few-shot/rag-k2") is None  # eight parts


def test_cells_sort_as_the_tuples_did_k_as_a_number() -> None:
    """Field by field in folder order; k compares as a number (rag-k10 after rag-k2)."""
    k10 = Cell("musique", "dev", "pipe", "bm25", "smollm2-135m", "few-shot", "rag", 10)
    closed = Cell("musique", "dev", "pipe", "none", "smollm2-135m", "few-shot", "closed", 0)
    ambig = Cell("ambigqa", "dev", "pipe", "none", "smollm2-135m", "few-shot", "closed", 0)
    assert sorted([closed, k10, RAG, ambig]) == [ambig, RAG, k10, closed]
    assert len({RAG, Cell.from_label(RAG_LABEL)}) == 1  # hashable, equal by value


@pytest.mark.parametrize(
    ("label", "why"),
    [
        ("tatqa/dev/pipe/none/m/few-shot/closed-k0", []),
        ("tatqa/dev/pipe/none/m/few-shot/oracle-k0", []),
        ("tatqa/dev/pipe/bm25/m/few-shot/rag-k1", []),
        ("tanq/test/pipe/bm25/m/few-shot/open-book-k1", []),
        (
            "tatqa/dev/pipe/bm25/m/few-shot/closed-k3",
            [
                "closed-book shows no documents, so it has no k: its folder is closed-k0, not closed-k3",
                "closed-book shows no documents and retrieves nothing: its retriever is 'none', not 'bm25'",
            ],
        ),
        (
            "tatqa/dev/pipe/none/m/few-shot/oracle-k5",
            ["oracle shows every gold document, so it has no k: its folder is oracle-k0, not oracle-k5"],
        ),
        (
            "tatqa/dev/pipe/none/m/few-shot/rag-k0",
            ["rag needs a retriever, not 'none'", "rag shows the top k documents: k must be at least 1"],
        ),
        (
            "tanq/test/pipe/bm25/m/few-shot/open-book-k2",
            ["open-book's WikiSearch shows one article: its folder is open-book-k1, not open-book-k2"],
        ),
        (
            "tatqa/dev/pipe/none/m/few-shot/closedbook-k0",
            ["setting 'closedbook' is unknown; valid: ['closed', 'rag', 'oracle', 'open-book']"],
        ),
    ],
)
def test_the_setting_decides_retriever_and_k(label: str, why: list[str]) -> None:
    cell = Cell.from_label(label)
    assert cell.problems() == why
    if why:
        with pytest.raises(ConfigError) as err:
            cell.check()
        assert str(err.value) == f"cell {label}: " + "; ".join(why)
    else:
        cell.check()

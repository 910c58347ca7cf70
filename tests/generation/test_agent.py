"""The open-book tool agent: calculator refusals, tool-call parsing, the real tools over the real
sample corpus, the bounded and cached dialogue, resume, the batch path and the openai backend.

The model is replaced at the backend boundary only, by `ScriptedModel` (a TEST DOUBLE of an LLM
backend: it answers each turn from a script, reading the observations it was given) or by the
loopback OpenAI test double of tests/generation/test_openai_backend.py. Everything else is real: the sample's
OTT-QA, 2Wiki and AmbigQA documents prepared and pooled by the workflow's own commands, the Lucene
BM25 index built by `cqabench index`, the item cache, `run_cell` / `run_batch`.
"""

from __future__ import annotations

import json
import re
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Self

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cqabench.cli import main
from cqabench.common.errors import ConfigError
from cqabench.common.io import write_parquet
from cqabench.evaluation.metrics.tables import rms
from cqabench.generation.agent.calc import CalcError, evaluate, format_value
from cqabench.generation.agent.loop import parse_turn
from cqabench.generation.agent.tools import ArticleStore, Bm25Searcher, Toolbox, ToolCall
from cqabench.generation.batch import BatchCell, run_batch
from cqabench.generation.cell import Cell, CellInputs, CellOptions
from cqabench.generation.extraction import extract_answer
from cqabench.generation.generate import run_cell
from cqabench.generation.llm import llm_spec
from cqabench.generation.llm.base import Chat, Completion, LlmSpec, Sampling
from cqabench.generation.llm.cache import ItemCache
from cqabench.generation.prompts import load_template

REPO = Path(__file__).resolve().parents[2]
RAW = REPO / "resources/raw"
TEMPLATE = REPO / "resources/prompts/few-shot/table.open-book.txt"
BM25 = {"type": "bm25", "k1": 0.9, "b": 0.4, "fields": {"title": 1.0, "text": 1.0}, "language": "en", "threads": 1}
SOURCES = {  # the default config's tool corpus: real Wikipedia text of the bundled sample
    "ottqa": (
        "dev",
        {
            "questions": "ottqa/dev.traced.sample.json",
            "tables": "ottqa/dev_tables.sample.json",
            "passages": "ottqa/dev_passages.sample.json",
        },
    ),
    "2wikimultihopqa": ("dev", {"questions": "2wikimultihopqa/dev.json"}),
    "ambigqa": ("dev", {"questions": "ambigqa/dev_light_40.json", "passages": "ambigqa/psgs_w100_sample.tsv"}),
}
QUESTION = (
    "Which NHL FaceOff games came out for the PlayStation 2, and how many years after the first "
    "NHL FaceOff game was each released?"
)


# ---- the calculator ---------------------------------------------------------------------------


def test_calc_arithmetic_rounding_comparisons_and_dates() -> None:
    assert evaluate("2002 - 1995") == 7
    assert evaluate("round(7 / 3, 2)") == 2.33
    assert evaluate("(3 + 4) * 2 ** 3 % 5") == 1  # 56 % 5
    assert evaluate("max(3, 9, 4) >= 9 and 1 < 2 < 3") is True
    assert evaluate("date(2000, 3, 1) - date(2000, 2, 1)") == 29  # 2000 is a leap year
    assert evaluate('days_between(date("1995-01-01"), date(1996, 1, 1))') == 365
    # an age: 8 Dec 1980 is before the 9 Oct birthday's 40th anniversary? no: 40 years on 9 Oct 1980
    assert evaluate("years_between(date(1940, 10, 9), date(1980, 12, 8))") == 40
    assert evaluate("years_between(date(1940, 10, 9), date(1980, 10, 8))") == 39
    assert format_value(evaluate("10 / 4")) == "2.5" and format_value(evaluate("8 / 4")) == "2"


@pytest.mark.parametrize(
    "source, why",
    [
        ("(1).__class__", "Attribute is not allowed"),
        ("().__class__.__bases__[0].__subclasses__()", "Attribute is not allowed"),
        ("__import__('os').system('true')", "calling Attribute is not allowed"),  # refused before anything runs
        ("__import__('os')", "calling __import__ is not allowed"),
        ("import os", "not a single expression"),
        ("open('/etc/passwd')", "calling open is not allowed"),
        ("eval('1+1')", "calling eval is not allowed"),
        ("9 ** 9 ** 9", "exponents are limited"),
        ("10 ** 64 * 10 ** 64", "exceeds the limit"),
        ("2 ** 200", "exponents are limited"),
        ("10 ** 40", "exceeds the limit"),  # exponent allowed, result too large: refused before computing
        ("x + 1", "unknown name 'x'"),
        ("(lambda: 1)()", "calling Lambda is not allowed"),
        ("[i for i in (1, 2)]", "ListComp is not allowed"),
        ("(1, 2)[0]", "Subscript is not allowed"),
        ("'ab' * 3", "strings cannot be multiplied"),
        ("1 / 0", "division by zero"),
        ("+".join(["1"] * 300), "longer than 400 characters"),
        ("round(2.5, ndigits=1)", "keyword arguments are not allowed"),
    ],
)
def test_calc_refuses_everything_else(source: str, why: str) -> None:
    with pytest.raises(CalcError, match=re.escape(why)):
        evaluate(source)


# ---- tool-call parsing ------------------------------------------------------------------------


def test_parse_turn_forms() -> None:
    p = parse_turn("Thought: search first.\nAction: WikiSearch[Mel Brooks films]\nObservation: made up")
    assert (p.kind, p.call) == ("tool", ToolCall("WikiSearch", "Mel Brooks films"))
    assert p.text == "Thought: search first.\nAction: WikiSearch[Mel Brooks films]"  # invented observation dropped
    p = parse_turn("Action: FindEvidence[Spaceballs | composer [music]]")
    assert p.call == ToolCall("FindEvidence", "Spaceballs | composer [music]")  # up to the line's last "]"
    assert parse_turn("Final Answer:\n| a | b |\n| 1 | 2 |").kind == "final"
    assert parse_turn("Final Answer: x\nAction: Python[1]").kind == "final"  # whichever comes first
    for text, message in [
        ("I think the answer is 5.", "no action found"),
        ("Action: WikiSearch Mel Brooks", "malformed action"),
        ("Action: Google[Mel Brooks]", "unknown tool 'Google'"),
    ]:
        p = parse_turn(text)
        assert p.kind == "error" and message in p.error, (text, p)


# ---- the real tool corpus ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def tool_corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(corpus.parquet, BM25 index) of the default's tool corpus, built by the workflow's commands."""
    root = tmp_path_factory.mktemp("tools")
    corpora = []
    for dataset, (split, files) in SOURCES.items():
        missing = [p for p in files.values() if not (RAW / p).is_file()]
        assert not missing, f"bundled sample of {dataset} missing under {RAW}: {missing}"  # shipped: never skip
        out = root / dataset
        args = ["prepare", "--dataset", dataset, "--split", split, "--out-dir", str(out)]
        for role, path in files.items():
            args += ["--file", f"{role}={RAW / path}"]
        assert main(args) == 0
        corpora += ["--corpus", str(out / "corpus.parquet")]
    corpus = root / "wiki-tools" / "corpus.parquet"
    assert main(["pool-corpus", *corpora, "--out", str(corpus)]) == 0
    index = root / "index"
    assert (
        main(
            [
                "index",
                "--corpus",
                str(corpus),
                "--serialization",
                "pipe",
                "--retriever-settings",
                json.dumps(BM25),
                "--out",
                str(index),
            ]
        )
        == 0
    )
    return corpus, index


@pytest.fixture(scope="module")
def toolbox(tool_corpus: tuple[Path, Path]) -> Iterator[Toolbox]:
    box = Toolbox(ArticleStore.from_parquet(tool_corpus[0]), Bm25Searcher(tool_corpus[1], BM25), max_tool_chars=600)
    yield box
    box.searcher.close()


@pytest.mark.jvm
def test_tools_on_the_real_sample_corpus(toolbox: Toolbox) -> None:
    search, intro, evidence, calc, missing, bad = toolbox.run_many(
        [
            ToolCall("WikiSearch", "NHL FaceOff video game first game series"),
            ToolCall("GetIntro", "NHL FaceOff (video game)"),
            ToolCall("FindEvidence", "NHL FaceOff | PlayStation 2"),
            ToolCall("Python", "2002 - 1995"),
            ToolCall("GetIntro", "No Such Article"),
            ToolCall("FindEvidence", "NHL FaceOff"),
        ]
    )
    # OTT-QA's passage of the first game (its docid is the Wikipedia path)
    assert search.text.startswith("NHL FaceOff (video game): NHL FaceOff is a video game developed by Sony")
    assert search.docids == ["/wiki/NHL_FaceOff_(video_game)"]
    assert intro.text == search.text
    # The table (section "Installments") belongs to the article "NHL FaceOff"; rows mentioning
    # both keywords first (the three PlayStation 2 games), in table order. The label is the table's
    # title after " - ": in the default relevance mode (paper) OTT-QA titles a table by its page, as
    # the toolkit does (docs/fidelity.md), so the label is the page; mode section_titles gives
    # "[Installments]".
    lines = evidence.text.splitlines()
    assert lines[:3] == [
        "[NHL FaceOff] Title: NHL FaceOff 2001; Year: 2000; Platform ( s ): PlayStation , PlayStation 2; Cover Athlete: Curtis Joseph",
        "[NHL FaceOff] Title: NHL FaceOff 2002 ( cancelled game ); Year: 2001; Platform ( s ): PlayStation 2; Cover Athlete: Luc Robitaille",
        "[NHL FaceOff] Title: NHL FaceOff 2003; Year: 2002; Platform ( s ): PlayStation 2; Cover Athlete: Rob Blake",
    ]
    assert evidence.docids == ["NHL_FaceOff_0"] and len(evidence.text) <= 600
    assert (calc.text, calc.error) == ("7", False)
    assert missing.error and "no article titled 'No Such Article'" in missing.text
    assert bad.error and "FindEvidence[Article title | keywords]" in bad.text
    # Lucene query syntax in the keywords is just text; no keywords is an error observation
    odd, empty = toolbox.run_many(
        [ToolCall("WikiSearch", 'NHL "FaceOff" (video game) AND [x]: ?* -OR'), ToolCall("WikiSearch", "  ")]
    )
    assert odd.text.startswith("NHL FaceOff (video game): ")
    assert empty.error and "WikiSearch needs keywords" in empty.text


@pytest.mark.jvm
def test_search_helper_process_ranks_as_in_process(tool_corpus: tuple[Path, Path]) -> None:
    """vLLM's environment has no Java: the same search through `cqabench tool-search` in this one."""
    queries = ["NHL FaceOff video game", "Belgian Grand Prix 1955 Fangio", "zzzz"]
    here = Bm25Searcher(tool_corpus[1], BM25)
    helper = Bm25Searcher(tool_corpus[1], BM25, python=sys.executable, in_process=False)
    try:
        assert helper.search(queries, 5) == here.search(queries, 5)
        assert helper.search(queries, 5)[2] == []
    finally:
        helper.close()
    with pytest.raises(ConfigError, match="bm25 retriever"):
        Bm25Searcher(tool_corpus[1], {"type": "dense"})


# ---- the dialogue, with a scripted model ------------------------------------------------------


class ScriptedModel:
    """TEST DOUBLE of an LLM backend (the `Backend` interface): no model, a script per turn.

    `script(chat)` returns the next assistant text given the chat so far (so it can read the
    observations the real tools returned). Counts every call, like an engine would be paid.
    """

    name = "scripted"

    def __init__(self, script: Callable[[Chat], str]) -> None:
        self.script = script
        self.calls: list[Chat] = []
        self.closed = False

    def generate(
        self, chats: Sequence[Chat], sampling: Sampling, labels: Sequence[str] | None = None
    ) -> Iterator[list[tuple[int, Completion]]]:
        out = []
        for i, chat in enumerate(chats):
            self.calls.append(chat)
            text = self.script(chat)
            for stop in sampling.stop:  # a real engine stops at the template's stop strings
                text = text.split(stop)[0]
            prompt_tokens = sum(len(m["content"].split()) for m in chat)
            out.append((i, Completion(text, prompt_tokens, len(text.split()), 0.01, "stop")))
        yield out

    def close(self) -> None:
        self.closed = True


def nhl_agent(chat: Chat) -> str:
    """Searches, reads the intro, finds the PlayStation 2 rows, computes each gap, answers."""
    observations = [m["content"] for m in chat if m["role"] == "user"][1:]
    turn = len(observations)
    if turn == 0:
        return "Thought: find the first game.\nAction: WikiSearch[NHL FaceOff video game first game series]"
    if turn == 1:
        return "Action: GetIntro[NHL FaceOff (video game)]"
    if turn == 2:
        return "Thought: now the installments table.\nAction: FindEvidence[NHL FaceOff | PlayStation 2]"
    rows = re.findall(r"Title: ([^;]+); Year: (\d{4}); Platform \( s \): ([^;]+);", observations[2])
    first = min(int(y) for _, y, _ in rows)  # the first game's row is among them (PlayStation)
    ps2 = [(t, int(y)) for t, y, p in rows if "PlayStation 2" in p]
    done = observations[3:]
    if len(done) < len(ps2):
        _, year = ps2[len(done)]
        return f"Action: Python[{year} - {first}]\nObservation: 99"
    lines = ["Final Answer:", "| Game | Years after the first |"]
    lines += [f"| {t} | {obs.removeprefix('Observation: ').splitlines()[0]} |" for (t, _), obs in zip(ps2, done)]
    return "\n".join(lines)


GOLD_HEADER = ["Game", "Years after the first"]
GOLD_ROWS = [["NHL FaceOff 2001", "5"], ["NHL FaceOff 2002 ( cancelled game )", "6"], ["NHL FaceOff 2003", "7"]]


def _spec() -> LlmSpec:
    return llm_spec("scripted", {"backend": "openai", "source": "scripted-double", "revision": "test"})


@pytest.fixture(scope="module")
def queries(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("q") / "queries.parquet"
    # a TANQ-style list question whose answer the sample corpus holds (no TANQ sample question's does)
    write_parquet(pa.table({"qid": ["nhl", "nonsense"], "question": [QUESTION, "Which tools are there?"]}), path)
    return path


def _script(chat: Chat) -> str:
    question = chat[1]["content"].rsplit("Question:", 1)[1]
    if "NHL" in question:
        return nhl_agent(chat)
    # the other question: a malformed call, then an unknown tool, then nothing usable (limit reached)
    turn = sum(m["role"] == "user" for m in chat) - 1
    return ["Action: WikiSearch tools", "Action: Google[tools]", "I do not know.", "Still nothing."][min(turn, 3)]


CELL = Cell("tanq", "test", "pipe", "bm25", "scripted", "few-shot", "open-book", 1)
OPTIONS = CellOptions(
    max_questions=None,
    open_book={
        "max_steps": 8,
        "max_tool_chars": 600,
        "max_total_tokens": 100000,
        "max_new_tokens": 96,
        "retriever_settings": BM25,
    },
)


def _run(
    tmp: Path,
    tool_corpus: tuple[Path, Path],
    queries: Path,
    cache: Path,
    model: ScriptedModel,
    options: CellOptions = OPTIONS,
) -> tuple[dict, list[dict]]:
    inputs = CellInputs(queries=queries, template=TEMPLATE, tool_corpus=tool_corpus[0], tool_index=tool_corpus[1])
    out = tmp / "predictions.parquet"
    summary = run_cell(
        CELL,
        _spec(),
        Sampling(max_new_tokens=24),
        load_template(TEMPLATE),
        inputs,
        out,
        cache,
        options,
        tmp / "summary.json",
        backend_factory=lambda: model,
    )
    return summary, pq.read_table(out).to_pylist()


@pytest.mark.jvm
def test_scripted_agent_reaches_the_correct_table_through_all_four_tools(
    tmp_path: Path, tool_corpus: tuple[Path, Path], queries: Path
) -> None:
    model = ScriptedModel(_script)
    summary, rows = _run(tmp_path, tool_corpus, queries, tmp_path / "cache", model)
    nhl = next(r for r in rows if r["qid"] == "nhl")
    transcript = json.loads(nhl["transcript"])
    actions = [s.get("action") for s in transcript["steps"]]
    assert actions == ["WikiSearch", "GetIntro", "FindEvidence", "Python", "Python", "Python", None]
    assert transcript["stop_reason"] == "final_answer"
    assert [s["observation"] for s in transcript["steps"][3:6]] == ["5", "6", "7"]  # 2000-1995, 2001-1995, 2002-1995
    assert "Observation: 99" not in json.dumps(transcript)  # the invented observation never reached the chat
    ext = extract_answer("tanq", nhl["raw_output"], "few-shot")
    assert ext.ok, ext
    table = ext.value
    score = rms(GOLD_HEADER, GOLD_ROWS, table.header, table.rows)
    assert (score.precision, score.recall, score.f1) == (1.0, 1.0, 1.0)
    assert nhl["context_docids"] == ["/wiki/NHL_FaceOff_(video_game)", "NHL_FaceOff_0"]
    assert nhl["setting"] == "open-book" and nhl["retriever"] == "bm25" and nhl["k"] == 1 and not nhl["cached"]
    # the cost columns add up the dialogue's calls
    assert nhl["prompt_tokens"] == sum(s["prompt_tokens"] for s in transcript["steps"])
    # the other question: errors come back as observations, the loop stops at max_steps
    other_row = next(r for r in rows if r["qid"] == "nonsense")
    assert (other_row["prediction"], other_row["parse_ok"]) == ("", False)  # its last turn is no answer
    assert other_row["parse_reason"] == "no final answer: the open-book dialogue stopped at max_steps"
    other = json.loads(other_row["transcript"])
    assert other["stop_reason"] == "max_steps" and len(other["steps"]) == 8
    assert "malformed action" in other["steps"][0]["observation"]
    assert "unknown tool 'Google'" in other["steps"][1]["observation"]
    assert "no action found" in other["steps"][2]["observation"]
    assert "(Last step: write Final Answer: and the table now.)" in model.calls[-1][-1]["content"]
    ob = summary["open_book"]
    assert ob["limits"] == {"max_steps": 8, "max_tool_chars": 600, "max_total_tokens": 100000}
    assert ob["n_model_calls"] == 15 == len(model.calls)
    assert ob["tool_calls"] == {"FindEvidence": 1, "GetIntro": 1, "Python": 3, "WikiSearch": 1}
    assert ob["stop_reasons"] == {"final_answer": 1, "max_steps": 1}
    assert ob["tool_errors"] == 8  # the other question's 8 turns (7 sent back, the last one's recorded)
    assert model.closed
    # each turn used the open-book max_new_tokens and the template's stop strings
    assert json.loads(nhl["sampling"])["max_new_tokens"] == 96
    assert "\nObservation:" in json.loads(nhl["sampling"])["stop"]


@pytest.mark.jvm
def test_token_limit_ends_a_dialogue(tmp_path: Path, tool_corpus: tuple[Path, Path], queries: Path) -> None:
    options = CellOptions(open_book={**OPTIONS.open_book, "max_total_tokens": 1})
    _, rows = _run(tmp_path, tool_corpus, queries, tmp_path / "c", ScriptedModel(_script), options)
    assert {json.loads(r["transcript"])["stop_reason"] for r in rows} == {"max_total_tokens"}
    with pytest.raises(ConfigError, match=r"generation.open_book.max_steps: expected a positive integer"):
        _run(
            tmp_path,
            tool_corpus,
            queries,
            tmp_path / "c",
            ScriptedModel(_script),
            CellOptions(open_book={**OPTIONS.open_book, "max_steps": 0}),
        )
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['max_step'\]"):
        _run(
            tmp_path,
            tool_corpus,
            queries,
            tmp_path / "c",
            ScriptedModel(_script),
            CellOptions(open_book={"max_step": 3}),
        )


@pytest.mark.jvm
def test_resume_mid_dialogue_makes_only_the_missing_calls(
    tmp_path: Path, tool_corpus: tuple[Path, Path], queries: Path
) -> None:
    """A job killed in its third round (the engine dies) keeps the two rounds it finished; the
    restart makes only the other calls and ends with the predictions of an uninterrupted run;
    a warm cache makes none."""
    _, rows = _run(tmp_path / "a", tool_corpus, queries, tmp_path / "full", ScriptedModel(_script))

    class Killed(Exception):
        pass

    def dies_in_round_3(chat: Chat) -> str:
        if len(dying.calls) > 4:
            raise Killed
        return _script(chat)

    dying = ScriptedModel(dies_in_round_3)
    cache = tmp_path / "cache"
    with pytest.raises(Killed):
        _run(tmp_path / "b", tool_corpus, queries, cache, dying)
    assert not (tmp_path / "b" / "predictions.parquet").exists()
    with ItemCache(cache) as c:
        assert len(c) == 4  # 2 dialogues x 2 finished turns
    resumed = ScriptedModel(_script)
    _, rows_resumed = _run(tmp_path / "b", tool_corpus, queries, cache, resumed)
    assert len(resumed.calls) == 15 - 4

    def keep(rs: list[dict]) -> list[dict]:
        return [{k: v for k, v in r.items() if k not in ("cached", "latency_s", "transcript")} for r in rs]

    def strip(t: str) -> list[dict]:
        return [{k: v for k, v in s.items() if k != "cached"} for s in json.loads(t)["steps"]]

    assert keep(rows_resumed) == keep(rows)
    assert [strip(r["transcript"]) for r in rows_resumed] == [strip(r["transcript"]) for r in rows]
    assert [s["cached"] for s in json.loads(rows_resumed[0]["transcript"])["steps"]][:3] == [True, True, False]

    def no_model() -> ScriptedModel:
        raise AssertionError("a warm cache must not load a model")

    inputs = CellInputs(queries=queries, template=TEMPLATE, tool_corpus=tool_corpus[0], tool_index=tool_corpus[1])
    summary = run_cell(
        CELL,
        _spec(),
        Sampling(max_new_tokens=24),
        load_template(TEMPLATE),
        inputs,
        tmp_path / "c.parquet",
        cache,
        OPTIONS,
        None,
        backend_factory=no_model,
    )
    assert summary["n_cached"] == 2 and summary["open_book"]["n_model_calls_generated"] == 0
    replay = pq.read_table(tmp_path / "c.parquet").to_pylist()
    assert keep(replay) == keep(rows) and all(r["cached"] for r in replay)


@pytest.mark.jvm
def test_batch_runs_plain_cells_and_dialogues_on_one_engine_step_by_step(
    tmp_path: Path, tool_corpus: tuple[Path, Path], queries: Path
) -> None:
    engines: list[ScriptedModel] = []
    round_sizes: list[int] = []

    def factory() -> ScriptedModel:
        model = ScriptedModel(lambda chat: _script(chat) if "Tools:" in chat[0]["content"] else "Final Answer:\n| x |")
        original = model.generate

        def generate(chats: Sequence[Chat], sampling: Sampling, labels: Sequence[str] | None = None):
            round_sizes.append(len(chats))
            return original(chats, sampling, labels)

        model.generate = generate  # type: ignore[method-assign]
        engines.append(model)
        return model

    closed_template = REPO / "resources/prompts/few-shot/table.txt"
    members = [
        BatchCell(
            Cell("tanq", "test", "pipe", "none", "scripted", "few-shot", "closed", 0),
            CellInputs(queries=queries, template=closed_template),
            CellOptions(),
            load_template(closed_template),
        ),
        BatchCell(
            CELL,
            CellInputs(queries=queries, template=TEMPLATE, tool_corpus=tool_corpus[0], tool_index=tool_corpus[1]),
            OPTIONS,
            load_template(TEMPLATE),
        ),
    ]
    cache = tmp_path / "cache"
    manifest = run_batch(
        members, _spec(), Sampling(max_new_tokens=24), cache, tmp_path / "manifest.json", backend_factory=factory
    )
    assert len(engines) == 1 and engines[0].closed  # one engine session for everything
    # 2 closed-book prompts, then the dialogues: both questions per round until the NHL one answers
    # (7 rounds), then the other alone to its 8th turn
    assert round_sizes == [2] + [2] * 7 + [1]
    assert manifest["open_book_rounds"] == 8 and manifest["n_generated"] == 2 + 15
    assert [c["n_generated"] for c in manifest["cells"]] == [2, 15]
    # every stored item names its cell, not the batch, so `cache drop --label '<cell glob>'` finds it
    labels = sorted(json.loads(f.read_text())["label"] for f in cache.glob("items/*/*.json"))
    closed = "tanq/test/pipe/none/scripted/few-shot/closed-k0"
    assert len(labels) == 17 and not [x for x in labels if x.startswith("batch")]
    assert sum(x.startswith(f"{closed} ") for x in labels) == 2
    assert sum(x.startswith(f"{CELL.label} open-book round ") for x in labels) == 15
    # the cell job then assembles from the cache without an engine
    summary, _ = _run(
        tmp_path, tool_corpus, queries, cache, ScriptedModel(lambda chat: pytest.fail("no call expected"))
    )
    assert summary["n_generated"] == 0


# ---- the openai backend (text format) ---------------------------------------------------------


class ToolApiDouble:
    """TEST DOUBLE of the OpenAI chat completions API on loopback: answers a dialogue turn by turn."""

    def __init__(self) -> None:
        self.bodies: list[dict] = []
        double = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                double.bodies.append(body)
                last = body["messages"][-1]
                message: dict = {"role": "assistant"}
                if last["role"] == "tool":  # tools API: the tool's result
                    message["content"] = f"Final Answer:\n| Gap |\n| {last['content'].split()[0]} |"
                elif last["content"].startswith("Observation: "):
                    message["content"] = (
                        f"Final Answer:\n| Gap |\n| {last['content'].removeprefix('Observation: ').split()[0]} |"
                    )
                elif "tools" in body:
                    message["content"] = "I will compute it."
                    message["tool_calls"] = [
                        {
                            "id": "srv_1",
                            "type": "function",
                            "function": {
                                "name": "Python",
                                "arguments": json.dumps(
                                    {"expression": "years_between(date(1995, 1, 1), date(2002, 6, 1))"}
                                ),
                            },
                        }
                    ]
                else:
                    message["content"] = "Action: Python[years_between(date(1995, 1, 1), date(2002, 6, 1))]"
                data = json.dumps(
                    {
                        "id": "x",
                        "object": "chat.completion",
                        "created": 0,
                        "model": body["model"],
                        "choices": [{"index": 0, "finish_reason": "stop", "message": message}],
                        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def _api_spec(api: ToolApiDouble, **extra: object) -> LlmSpec:
    return llm_spec(
        "api",
        {
            "backend": "openai",
            "source": "test-model",
            "revision": "t",
            "api_key_env": "CQA_TEST_AGENT_KEY",
            "base_url": f"http://127.0.0.1:{api.server.server_address[1]}/v1",
            "max_retries": 0,
            **extra,
        },
    )


@pytest.mark.jvm
def test_openai_backend_runs_the_dialogue(
    tmp_path: Path, tool_corpus: tuple[Path, Path], queries: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CQA_TEST_AGENT_KEY", "sk-test-agent")
    with ToolApiDouble() as api:
        spec = _api_spec(api)
        cell = Cell("tanq", "test", "pipe", "bm25", "api", "few-shot", "open-book", 1)
        inputs = CellInputs(queries=queries, template=TEMPLATE, tool_corpus=tool_corpus[0], tool_index=tool_corpus[1])
        run_cell(
            cell,
            spec,
            Sampling(max_new_tokens=24),
            load_template(TEMPLATE),
            inputs,
            tmp_path / "p.parquet",
            tmp_path / "c",
            OPTIONS,
        )
    rows = pq.read_table(tmp_path / "p.parquet").to_pylist()
    assert [extract_answer("tanq", r["raw_output"], "few-shot").value.rows for r in rows] == [[["7"]], [["7"]]]
    second = next(b for b in api.bodies if len(b["messages"]) == 4)
    assert [m["role"] for m in second["messages"]] == ["system", "user", "assistant", "user"]
    assert second["messages"][3]["content"] == "Observation: 7"
    assert "\nObservation:" in second["stop"]
    assert len(api.bodies) == 4  # two questions x two turns


@pytest.mark.jvm
def test_openai_tools_api(
    tmp_path: Path, tool_corpus: tuple[Path, Path], queries: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """tools_api: tool definitions go out, tool_calls come back as the text format's action line,
    and the next request carries the call and its result as assistant tool_calls + a tool message."""
    monkeypatch.setenv("CQA_TEST_AGENT_KEY", "sk-test-agent")
    with ToolApiDouble() as api:
        cell = Cell("tanq", "test", "pipe", "bm25", "api", "few-shot", "open-book", 1)
        inputs = CellInputs(queries=queries, template=TEMPLATE, tool_corpus=tool_corpus[0], tool_index=tool_corpus[1])
        run_cell(
            cell,
            _api_spec(api, tools_api=True),
            Sampling(max_new_tokens=24),
            load_template(TEMPLATE),
            inputs,
            tmp_path / "p.parquet",
            tmp_path / "c",
            OPTIONS,
        )
    assert all(
        [t["function"]["name"] for t in b["tools"]] == ["WikiSearch", "FindEvidence", "GetIntro", "Python"]
        for b in api.bodies
    )
    second = next(b for b in api.bodies if len(b["messages"]) == 4)
    assistant, tool = second["messages"][2:]
    assert assistant["content"] == "I will compute it."
    call = assistant["tool_calls"][0]
    assert call["function"]["name"] == "Python" and call["id"] == tool["tool_call_id"] == "call_1"
    assert json.loads(call["function"]["arguments"]) == {
        "expression": "years_between(date(1995, 1, 1), date(2002, 6, 1))"
    }
    assert tool == {"role": "tool", "tool_call_id": "call_1", "content": "7"}
    rows = pq.read_table(tmp_path / "p.parquet").to_pylist()
    steps = json.loads(rows[0]["transcript"])["steps"]
    assert steps[0]["model"] == "I will compute it.\nAction: Python[years_between(date(1995, 1, 1), date(2002, 6, 1))]"
    assert steps[0]["observation"] == "7"
    assert [extract_answer("tanq", r["raw_output"], "few-shot").value.rows for r in rows] == [[["7"]], [["7"]]]
    # the text-format cache entries of the other test are not reused: tools_api has its own keys
    with ItemCache(tmp_path / "c") as cache:
        assert len(cache) == 4


def test_tool_call_translation_round_trip() -> None:
    from cqabench.generation.agent.openai_tools import action_text, to_api_messages

    text = action_text(None, "FindEvidence", json.dumps({"article": "NHL FaceOff", "keywords": "PlayStation 2"}))
    assert text == "Action: FindEvidence[NHL FaceOff | PlayStation 2]"
    assert (
        action_text("", "WikiSearch", "not json") == "Action: WikiSearch[not json]"
    )  # the tool will say what is wrong
    chat = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": text},
        {"role": "user", "content": "Observation: rows"},
        {"role": "assistant", "content": "Action: Google[x]"},
        {"role": "user", "content": "Observation: Error: unknown"},
    ]
    api = to_api_messages(chat)
    assert api[2]["tool_calls"][0]["function"] == {
        "name": "FindEvidence",
        "arguments": json.dumps({"article": "NHL FaceOff", "keywords": "PlayStation 2"}),
    }
    assert api[3] == {"role": "tool", "tool_call_id": "call_1", "content": "rows"}
    assert api[4:] == chat[4:]  # a turn without a valid call stays text


@pytest.mark.jvm
def test_generate_cli_open_book_over_the_api(
    tmp_path: Path, tool_corpus: tuple[Path, Path], queries: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`cqabench generate --setting open-book` as a job runs it; its tool inputs are required."""
    monkeypatch.setenv("CQA_TEST_AGENT_KEY", "sk-test-agent")
    with ToolApiDouble() as api:
        settings = {
            "llm": {
                "backend": "openai",
                "source": "test-model",
                "revision": "t",
                "api_key_env": "CQA_TEST_AGENT_KEY",
                "base_url": f"http://127.0.0.1:{api.server.server_address[1]}/v1",
                "max_retries": 0,
            },
            "sampling": {"temperature": 0, "max_new_tokens": 24},
            "max_questions": 1,
            "open_book": OPTIONS.open_book,
        }
        args = [
            "generate",
            "--dataset",
            "tanq",
            "--split",
            "test",
            "--serialization",
            "pipe",
            "--retriever",
            "bm25",
            "--llm",
            "api",
            "--prompt",
            "few-shot",
            "--setting",
            "open-book",
            "--k",
            "1",
            "--queries",
            str(queries),
            "--template",
            str(TEMPLATE),
            "--settings",
            json.dumps(settings),
            "--cache",
            str(tmp_path / "c"),
            "--out",
            str(tmp_path / "p.parquet"),
            "--summary",
            str(tmp_path / "s.json"),
        ]
        assert main(args) == 1  # no --tool-corpus / --tool-index: a clear error, nothing written
        assert not (tmp_path / "p.parquet").exists()
        assert main([*args, "--tool-corpus", str(tool_corpus[0]), "--tool-index", str(tool_corpus[1])]) == 0
    rows = pq.read_table(tmp_path / "p.parquet").to_pylist()
    assert len(rows) == 1 and json.loads(rows[0]["transcript"])["stop_reason"] == "final_answer"
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["open_book"]["tool_calls"] == {"Python": 1} and summary["options"]["open_book"]["max_steps"] == 8


def test_missing_tool_inputs_name_the_flags(tmp_path: Path, queries: Path) -> None:
    inputs = CellInputs(queries=queries, template=TEMPLATE)
    with pytest.raises(ConfigError, match="setting open-book needs --tool-corpus and --tool-index"):
        run_cell(
            CELL,
            _spec(),
            Sampling(),
            load_template(TEMPLATE),
            inputs,
            tmp_path / "p.parquet",
            tmp_path / "c",
            OPTIONS,
            backend_factory=lambda: ScriptedModel(_script),
        )
    with pytest.raises(
        ConfigError,
        match="open-book needs a retriever, not 'none'; open-book's WikiSearch shows one "
        "article: its folder is open-book-k1, not open-book-k0",
    ):
        Cell("tanq", "test", "pipe", "none", "x", "few-shot", "open-book", 0).check()


SNAKEMAKE = [sys.executable, "-m", "snakemake"]


@pytest.mark.snakemake
def test_default_plans_open_book_for_tanq_over_the_tool_corpus(tmp_path: Path, workdir: Path) -> None:
    import subprocess

    import yaml

    from dry_runs import dry_run

    out = dry_run("config.yaml").stdout  # `-n --forceall`: in an empty results/ the jobs `-n` plans
    cells = set(re.findall(r"results/sample/generation/\S+/open-book-k1/predictions\.parquet", out))
    assert cells == {
        "results/sample/generation/tanq/test/pipe/bm25/smollm2-135m/few-shot/open-book-k1/predictions.parquet"
    }
    assert "results/sample/index/wiki-tools/pipe/bm25" in out
    assert (
        "cqabench pool-corpus --corpus results/sample/data/ottqa/dev/corpus.parquet --corpus "
        "results/sample/data/2wikimultihopqa/dev/corpus.parquet --corpus results/sample/data/ambigqa/dev/corpus.parquet "
        "--out results/sample/corpora/wiki-tools/corpus.parquet"
    ) in out
    assert (
        "--tool-corpus results/sample/corpora/wiki-tools/corpus.parquet --tool-index results/sample/index/wiki-tools/pipe/bm25"
        in out
    )
    # a dense retriever cannot serve WikiSearch: planning stops and says so
    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    config["generation"]["open_book"]["retriever"] = "minilm"
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    bad = subprocess.run(
        [*SNAKEMAKE, "-n", "--configfile", str(path)], cwd=workdir, check=False, capture_output=True, text=True
    )
    assert bad.returncode != 0
    assert "generation.open_book.retriever: 'minilm' must name a bm25 retriever" in bad.stdout + bad.stderr


@pytest.mark.engine
def test_real_model_dialogue_on_hf_replays_from_the_cache(
    tmp_path: Path, tool_corpus: tuple[Path, Path], smollm2_dir: Path
) -> None:
    """The embedded SmolLM2-135M (hf backend) on a real TANQ question, two turns: the multi-turn
    chat goes through the model's chat template, and a replay makes no model call."""
    from cqabench.data.datasets import tanq
    from cqabench.generation.llm.convert import DEFAULT_SOURCE

    data = tanq.load({"questions": RAW / "tanq/test_questions_10.jsonl"}, "test", limit=1)
    qpath = tmp_path / "queries.parquet"
    write_parquet(data.tables()["queries"], qpath)
    spec = llm_spec(
        "smollm2-135m",
        {"backend": "hf", "source": DEFAULT_SOURCE, "dtype": "float32", "batch_size": 2},
        models_dir=smollm2_dir.parent,
    )
    cell = Cell("tanq", "test", "pipe", "bm25", "smollm2-135m", "few-shot", "open-book", 1)
    inputs = CellInputs(queries=qpath, template=TEMPLATE, tool_corpus=tool_corpus[0], tool_index=tool_corpus[1])
    options = CellOptions(
        open_book={
            "max_steps": 2,
            "max_tool_chars": 300,
            "max_total_tokens": 4096,
            "max_new_tokens": 16,
            "retriever_settings": BM25,
        }
    )
    args = (cell, spec, Sampling(max_new_tokens=24), load_template(TEMPLATE), inputs)
    first = run_cell(*args, tmp_path / "a.parquet", tmp_path / "c", options)
    assert first["open_book"]["n_model_calls_generated"] == first["open_book"]["n_model_calls"] >= 1
    rows = pq.read_table(tmp_path / "a.parquet").to_pylist()
    for row in rows:
        steps = json.loads(row["transcript"])["steps"]
        assert 1 <= len(steps) <= 2 and all(s["output_tokens"] <= 16 for s in steps)

    def no_model() -> ScriptedModel:
        raise AssertionError("a warm cache must not load a model")

    again = run_cell(*args, tmp_path / "b.parquet", tmp_path / "c", options, backend_factory=no_model)
    assert again["n_cached"] == len(rows) and again["open_book"]["n_model_calls_generated"] == 0
    replay = pq.read_table(tmp_path / "b.parquet").to_pylist()
    assert [r["raw_output"] for r in replay] == [r["raw_output"] for r in rows]


@pytest.mark.jvm
def test_a_turn_the_backend_gives_up_on_ends_its_dialogue_uncached(
    tmp_path: Path, tool_corpus: tuple[Path, Path], queries: Path
) -> None:
    """An empty reply (asked again once, then failed: never cached) ends that dialogue only; a rerun asks it again."""

    def script(chat: Chat) -> str:
        return "" if "Which tools" in chat[1]["content"] else _script(chat)

    model = ScriptedModel(script)
    _, rows = _run(tmp_path, tool_corpus, queries, tmp_path / "cache", model)
    failed = next(r for r in rows if r["qid"] == "nonsense")
    transcript = json.loads(failed["transcript"])
    assert transcript["stop_reason"] == "generation_failed" and len(transcript["steps"]) == 1
    assert transcript["steps"][0]["kind"] == "failed"
    assert not failed["parse_ok"] and failed["parse_reason"].startswith("generation failed: ")
    assert json.loads(next(r for r in rows if r["qid"] == "nhl")["transcript"])["stop_reason"] == "final_answer"
    again = ScriptedModel(script)
    _run(tmp_path, tool_corpus, queries, tmp_path / "cache", again)
    assert len(again.calls) == 2  # only the failed turn, asked and asked again; the other dialogue replays

"""Failed items are visible and retried (issue 21): never a silent wrong answer, always asked again.

A failed item is a question the backend gave up on (empty replies after its retries). The
choice (docs/generation.md, "Failed items"): the job writes what it could (every successful
answer is in the item cache, the outputs are written) and exits 3, so Snakemake reruns it and
the rerun asks only for the failed items; with `generation.allow_failed_items` the cell is kept
and scoring leaves its failed items out of every mean, counted in `n_failed` (metrics.json, the
fact table, the report).

`FlakyApiTestDouble` stands in for the external boundary only: a loopback chat-completions
server (the real `openai` client and backend talk to it) that, while `failing` is set, answers
chosen questions with empty content and another one with a 500 once; every request is counted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from cqabench.common.io import write_parquet
from cqabench.data.schema import Answer, CanonicalData, Query
from cqabench.evaluation.scoring import ALL_FAILED, failed_qids, generation_failed, score_predictions
from cqabench.report.aggregate import build_metrics_table, find_metric_files
from cqabench.report.answer_comparisons import answers_by_setting
from cqabench.report.answer_comparisons_render import FAILED_NOTE, to_markdown
from test_agent import ScriptedModel, _run, _script, queries, tool_corpus  # noqa: F401 (fixtures)
from test_openai_backend import api_llm_config
from test_secret_redaction import REPO, TEMPLATE, _snakemake_work, key  # noqa: F401 (key: the fixture)

FAILED_REASON = "generation failed: empty reply (message content is empty) after 3 attempt(s)"


# -- scoring: a failed item is left out of the mean and counted ---------------------------------------


def _tables(n: int = 4):
    golds = ["Paris", "Rome", "Oslo", "Bern"][:n]
    t = CanonicalData(
        queries=[Query(f"q{i + 1}", "?") for i in range(n)],
        answers=[Answer(f"q{i + 1}", "aliases", [g]) for i, g in enumerate(golds)],
    ).tables()
    return t["queries"], t["answers"]


def _preds(failed_mark: bool = True) -> pd.DataFrame:
    """q1 right, q2 wrong, q3 failed (the generation job's row), q4 right."""
    return pd.DataFrame(
        {
            "qid": ["q1", "q2", "q3", "q4"],
            "prediction": ["Paris", "Milan", "", "Bern"],
            "parse_ok": [True, True, False, True],
            "parse_reason": ["", "", FAILED_REASON if failed_mark else "no answer marker", ""],
            "finish_reason": ["stop", "stop", "failed" if failed_mark else "stop", "stop"],
        }
    )


def _by_key(summary):
    return {(r["metric"], r["variant"]): r for r in summary}


def test_a_failed_item_is_left_out_of_every_mean_and_counted_in_n_failed() -> None:
    queries, answers = _tables()
    summary, per_q = score_predictions("musique", queries, answers, _preds())
    s = _by_key(summary)
    # hand check: scored q1 (1), q2 (0), q4 (1) -> cover-EM 2/3 over n 3; q3 counted apart
    assert (s[("cover_em", "default")]["value"], s[("cover_em", "default")]["n"]) == (pytest.approx(2 / 3), 3)
    assert s[("em", "default")]["value"] == pytest.approx(2 / 3)
    assert all(r["n_failed"] == 1 and r["n"] == 3 for r in summary)  # n + n_failed = the 4 asked
    assert (s[("parse_ok", "default")]["value"], s[("parse_ok", "default")]["n"]) == (1.0, 3)
    assert (
        "q3" not in set(per_q["qid"]) and len(per_q) == 3 * 5
    )  # 3 questions x (cover_em, em, f1, cover_em dexter, parse_ok)
    assert failed_qids(_preds()) == ["q3"]


def test_without_the_generation_mark_an_unparsed_answer_still_scores_as_wrong() -> None:
    """The mark decides: an extraction failure is the model's answer and counts 0 (2/4 by hand)."""
    queries, answers = _tables()
    s = _by_key(score_predictions("musique", queries, answers, _preds(failed_mark=False))[0])
    assert (s[("cover_em", "default")]["value"], s[("cover_em", "default")]["n"]) == (0.5, 4)
    assert s[("cover_em", "default")]["n_failed"] == 0
    # the parse_reason alone marks it too (predictions whose finish_reason column was not kept)
    marked = _preds().drop(columns=["finish_reason"])
    assert _by_key(score_predictions("musique", queries, answers, marked)[0])[("cover_em", "default")]["n"] == 3


def test_a_cell_whose_every_item_failed_is_na_with_the_reason_never_0() -> None:
    queries, answers = _tables(2)
    preds = pd.DataFrame(
        {
            "qid": ["q1", "q2"],
            "prediction": ["", ""],
            "parse_ok": [False, False],
            "parse_reason": [FAILED_REASON] * 2,
            "finish_reason": ["failed"] * 2,
        }
    )
    summary, per_q = score_predictions("musique", queries, answers, preds)
    assert all(r["value"] is None and r["n"] == 0 and r["n_failed"] == 2 and r["reason"] == ALL_FAILED for r in summary)
    assert per_q.empty


# -- fact table and report ---------------------------------------------------------------------------


def _metric_file(root: Path, setting: str, cover: float | None, n: int, n_failed: int) -> Path:
    k = 0 if setting == "closed" else 3
    retriever = "none" if setting == "closed" else "bm25"
    path = root / "metrics" / "musique/dev/pipe" / retriever / "m/p" / f"{setting}-k{k}" / "metrics.json"
    path.parent.mkdir(parents=True)
    cell = {
        "stage": "generation",
        "dataset": "musique",
        "split": "dev",
        "serialization": "pipe",
        "retriever": retriever,
        "llm": "m",
        "prompt": "p",
        "setting": setting,
        "k": k,
    }
    row = {"metric": "cover_em", "variant": "default", "value": cover, "n": n, "n_failed": n_failed, "unit": "fraction"}
    path.write_text(json.dumps({"cell": cell, "metrics": [row], "provenance": {}}))
    return path


def test_the_fact_table_has_n_failed_per_cell_and_null_where_unrecorded(tmp_path: Path) -> None:
    _metric_file(tmp_path, "closed", 0.5, 4, 0)
    _metric_file(tmp_path, "rag", 2 / 3, 3, 1)
    old = tmp_path / "retrieval/musique/dev/pipe/bm25/metrics.json"  # a file without the key
    old.parent.mkdir(parents=True)
    old.write_text(
        json.dumps({"cell": {"stage": "retrieval"}, "metrics": [{"metric": "ndcg@10", "value": 0.4, "n": 9}]})
    )
    rows = build_metrics_table(find_metric_files(tmp_path), tmp_path).to_pylist()
    by_setting = {r.get("setting") or r["stage"]: r for r in rows}
    assert (by_setting["closed"]["n_failed"], by_setting["rag"]["n_failed"], by_setting["retrieval"]["n_failed"]) == (
        0,
        1,
        None,
    )
    assert (by_setting["rag"]["n"], by_setting["rag"]["value"]) == (3, pytest.approx(2 / 3))


def test_answers_by_setting_shows_the_failed_items_of_a_cell(tmp_path: Path) -> None:
    _metric_file(tmp_path, "closed", 0.5, 4, 0)
    _metric_file(tmp_path, "rag", 2 / 3, 3, 1)
    metrics = build_metrics_table(find_metric_files(tmp_path), tmp_path).to_pandas()
    doc = answers_by_setting(metrics, None, test_resamples=100, bootstrap_resamples=100)
    assert [(f["setting"], f["n_failed"]) for f in doc["failed_items"]] == [("rag", 1)]
    assert {c["setting"]: c["n_failed"] for c in doc["cells"]} == {"closed": 0, "rag": 1}
    md = to_markdown(doc)
    assert "| rag | bm25 | 3 | 3 (+1 failed) [" in md and FAILED_NOTE in md
    assert "| closed | none | 0 | 4 |" in md  # nothing failed: no mark


# -- the external boundary: a chat API that fails some items, then recovers ----------------------------


class FlakyApiTestDouble:
    """Loopback chat-completions server (test double at the external boundary).

    While `failing` is true, the questions in `empty` get 200 replies with empty content (the
    backend's "empty reply" failed item) and the first request of `flaky` gets a 500 (retried by
    the backend, then answered). Otherwise each question gets "Final Answer: <answers[q]>".
    `asked` lists (failing, question) per request, in arrival order.
    """

    def __init__(self, answers: dict[str, str], empty: set[str], flaky: set[str] = frozenset()) -> None:
        self.answers, self.empty, self.flaky = answers, set(empty), set(flaky)
        self.failing = True
        self.asked: list[tuple[bool, str]] = []
        self._lock = threading.Lock()
        double = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 (http.server naming)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                status, data = double.reply(body["messages"][-1]["content"], body["model"])
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def question_of(self, prompt: str) -> str:
        """The question a prompt asks: the longest known question it contains (few-shot prompts quote others)."""
        tail = prompt[prompt.rfind("Question:") :] if "Question:" in prompt else prompt
        found = [q for q in self.answers if q in tail]
        if not found:
            raise AssertionError(f"the double knows no question in {tail[:200]!r}")
        return max(found, key=len)

    def reply(self, prompt: str, model: str) -> tuple[int, bytes]:
        question = self.question_of(prompt)
        with self._lock:
            first = (True, question) not in self.asked
            self.asked.append((self.failing, question))
        if self.failing and question in self.flaky and first:
            return 500, b'{"error": {"message": "overloaded"}}'
        text = "" if self.failing and question in self.empty else f"Final Answer: {self.answers[question]}"
        answer = {
            "id": "cmpl-1",
            "object": "chat.completion",
            "created": 0,
            "model": model,
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
        }
        return 200, json.dumps(answer).encode()

    def requests_after_recovery(self) -> list[str]:
        return [q for failing, q in self.asked if not failing]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> FlakyApiTestDouble:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def _musique_train(n: int) -> list[dict]:
    """The first n questions of the bundled MuSiQue sample (the snakemake cell's max_questions)."""
    with open(REPO / "resources/raw/musique/musique_train_100.jsonl", encoding="utf-8") as fh:
        return [json.loads(line) for line, _ in zip(fh, range(n))]


# -- `cqabench generate` and `generate-batch` as processes ----------------------------------------------

QUESTIONS = {
    "q1": "Which city hosts the tower alpha?",
    "q2": "Which river is bravo?",
    "q3": "Which lake is charlie?",
    "q4": "Which mountain is delta?",
}


@pytest.fixture
def split(tmp_path: Path) -> Path:
    data = CanonicalData(queries=[Query(q, text) for q, text in QUESTIONS.items()])
    path = tmp_path / "split" / "queries.parquet"
    path.parent.mkdir()
    write_parquet(data.tables()["queries"], path)
    return path


def _cli(args: list[str], key: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO / "workflow"), "CQA_TEST_KEY": key}
    return subprocess.run(
        [sys.executable, "-m", "cqabench.cli", *args], env=env, capture_output=True, text=True, timeout=180, check=False
    )


def _settings(base_url: str, **extra: object) -> str:
    llm = api_llm_config(base_url, api_key_env="CQA_TEST_KEY", max_retries=2, max_concurrency=1, timeout_s=10)
    return json.dumps({"llm": llm, "sampling": {"max_new_tokens": 16}, "max_questions": None, **extra})


def _generate(split: Path, out: Path, base_url: str, key: str, **extra: object) -> subprocess.CompletedProcess:
    return _cli(
        [
            "generate",
            "--dataset",
            "musique",
            "--split",
            "dev",
            "--serialization",
            "pipe",
            "--llm",
            "api",
            "--prompt",
            "few-shot",
            "--setting",
            "closed",
            "--queries",
            str(split),
            "--template",
            str(TEMPLATE),
            "--settings",
            _settings(base_url, **extra),
            "--cache",
            str(out / "cache"),
            "--out",
            str(out / "cell/predictions.parquet"),
            "--summary",
            str(out / "cell/summary.json"),
        ],
        key,
    )


def test_a_generate_job_with_failed_items_writes_them_exits_3_and_the_rerun_asks_only_for_them(
    split: Path, tmp_path: Path, key: str
) -> None:
    answers = {text: f"answer {q}" for q, text in QUESTIONS.items()}
    with FlakyApiTestDouble(answers, empty={QUESTIONS["q2"], QUESTIONS["q3"]}, flaky={QUESTIONS["q1"]}) as api:
        first = _generate(split, tmp_path, api.base_url, key)
        summary = json.loads((tmp_path / "cell/summary.json").read_text())
        rows = {r["qid"]: r for r in pq.read_table(tmp_path / "cell/predictions.parquet").to_pylist()}
        api.failing = False
        second = _generate(split, tmp_path, api.base_url, key)
    assert first.returncode == 3, first.stderr[-2000:]
    assert "2 of 4 item(s) failed (q2, q3)" in first.stderr and "run again" in first.stderr
    assert (summary["n_failed"], summary["complete"], sorted(summary["failed_qids"])) == (2, False, ["q2", "q3"])
    assert rows["q2"]["finish_reason"] == "failed" and rows["q2"]["parse_reason"].startswith("generation failed")
    assert rows["q1"]["prediction"] == "answer q1"  # the 500 was retried by the backend and answered
    assert second.returncode == 0, second.stderr[-2000:]
    assert sorted(api.requests_after_recovery()) == sorted([QUESTIONS["q2"], QUESTIONS["q3"]])  # once each
    done = json.loads((tmp_path / "cell/summary.json").read_text())
    assert (done["n_failed"], done["complete"], done["n_cached"], done["n_generated"]) == (0, True, 2, 2)


def test_allow_failed_items_keeps_the_cell_and_exits_0(split: Path, tmp_path: Path, key: str) -> None:
    answers = {text: f"answer {q}" for q, text in QUESTIONS.items()}
    with FlakyApiTestDouble(answers, empty={QUESTIONS["q4"]}) as api:
        done = _generate(split, tmp_path, api.base_url, key, allow_failed=True)
    assert done.returncode == 0 and "warning: 1 of 4 item(s) failed (q4)" in done.stderr, done.stderr[-2000:]
    assert json.loads((tmp_path / "cell/summary.json").read_text())["failed_qids"] == ["q4"]


def test_an_engine_batch_with_failed_items_exits_3_naming_cell_and_question_and_the_rerun_asks_only_for_them(
    split: Path, tmp_path: Path, key: str
) -> None:
    """The batch path: one engine session for two cells (closed, two prompts), then a rerun."""
    answers = {text: f"answer {q}" for q, text in QUESTIONS.items()}
    cells = json.dumps(
        [
            {
                "cell": f"musique/dev/pipe/none/api/{p}/closed-k0",
                "inputs": {"queries": str(split), "template": str(REPO / f"resources/prompts/{p}/multihop.txt")},
            }
            for p in ("few-shot", "few-shot-cot")
        ]
    )
    args = [
        "generate-batch",
        "--llm",
        "api",
        "--cells",
        cells,
        "--cache",
        str(tmp_path / "cache"),
        "--out",
        str(tmp_path / "manifest.json"),
    ]
    with FlakyApiTestDouble(answers, empty={QUESTIONS["q3"]}) as api:
        first = _cli([*args, "--settings", _settings(api.base_url)], key)
        manifest = json.loads((tmp_path / "manifest.json").read_text())
        api.failing = False
        second = _cli([*args, "--settings", _settings(api.base_url)], key)
    assert first.returncode == 3, first.stderr[-2000:]
    assert "2 of 8 item(s) failed (musique/dev/pipe/none/api/few-shot/closed-k0 q3, " in first.stderr
    assert [c["failed_qids"] for c in manifest["cells"]] == [["q3"], ["q3"]] and manifest["n_failed"] == 2
    assert second.returncode == 0, second.stderr[-2000:]
    assert api.requests_after_recovery() == [QUESTIONS["q3"]] * 2  # one per prompt, nothing else
    assert json.loads((tmp_path / "manifest.json").read_text())["n_failed"] == 0


# -- the whole workflow: snakemake twice against an API that fails, then recovers ---------------------------

SNAKEMAKE_CONFIG = """\
name: failed
raw_dir: resources/raw
serializations: [pipe]
datasets:
  musique:
    splits: [train]
    files:
      train:
        questions: {{path: musique/musique_train_100.jsonl}}
retrieval: {{retrievers: [], datasets: []}}
llms:
  api: {{backend: openai, source: test-model, base_url: "{base_url}", max_retries: 2, backoff_s: 0.01,
         max_backoff_s: 0.05, timeout_s: 10, max_concurrency: 1}}
generation:
  llms: [api]
  batch_llms: []
  prompts: [few-shot]
  settings: [closed]
  max_questions: 4
  sampling: {{temperature: 0, max_new_tokens: 16}}
"""
CELL = "musique/train/pipe/none/api/few-shot/closed-k0"


@pytest.mark.snakemake
def test_snakemake_fails_the_cell_then_asks_again_for_just_the_failed_items(key: str, tmp_path: Path) -> None:
    records = _musique_train(4)
    answers = {r["question"]: r["answer"] for r in records}
    answers[records[3]["question"]] = "nobody knows"  # one wrong answer: the final score is 3/4
    empty = {records[1]["question"], records[2]["question"]}
    with FlakyApiTestDouble(answers, empty=empty, flaky={records[0]["question"]}) as api:
        work = _snakemake_work(tmp_path, api.base_url)
        (work / "config.yaml").write_text(SNAKEMAKE_CONFIG.format(base_url=api.base_url))
        env = {
            **os.environ,
            "PYTHONPATH": str(REPO / "workflow"),
            "OPENAI_API_KEY": key,
            "HF_HUB_OFFLINE": "1",
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
        }
        target = f"results/failed/metrics/{CELL}/metrics.json"

        def snakemake() -> subprocess.CompletedProcess:
            return subprocess.run(
                [sys.executable, "-m", "snakemake", "--configfile", "config.yaml", "--cores", "1", target],
                cwd=work,
                env=env,
                capture_output=True,
                text=True,
                timeout=600,
                check=False,
            )

        first = snakemake()
        asked_first = len(api.asked)
        job_log = (work / f"results/failed/logs/generate/{CELL}.log").read_text()  # the rerun writes it anew
        kept = sorted(p.name for p in (work / f"results/failed/generation/{CELL}").glob("*"))
        api.failing = False
        second = snakemake()
    assert first.returncode != 0, (first.stdout + first.stderr)[-3000:]
    assert "2 of 4 item(s) failed" in job_log and "cqabench generate: error:" in job_log
    assert kept == []  # Snakemake removed the failed job's outputs: nothing downstream can score them
    # By hand, one job attempt: q0 a 500 then its retry (2), q1 and q2 empty on each of their
    # 1 + max_retries = 3 tries (6), q3 once (1) = 9. Exit 3 is no out-of-memory exit, so Snakemake
    # does not run the job again in the same run (cqabench.common.job_memory.run_job).
    assert asked_first == 2 + 3 + 3 + 1
    assert second.returncode == 0, (second.stdout + second.stderr)[-3000:]
    assert sorted(api.requests_after_recovery()) == sorted(empty)  # only the failed items, once each
    doc = json.loads((work / target).read_text())
    cover = {(m["metric"], m["variant"]): m for m in doc["metrics"]}[("cover_em", "default")]
    assert (cover["value"], cover["n"], cover["n_failed"], doc["failed_qids"]) == (0.75, 4, 0, [])
    summary = json.loads((work / f"results/failed/generation/{CELL}/summary.json").read_text())
    assert (summary["n_failed"], summary["n_cached"], summary["complete"]) == (0, 2, True)
    rows = build_metrics_table([work / target], work / "results/failed").to_pylist()
    assert {r["n_failed"] for r in rows} == {0}


# -- the open-book agent path ------------------------------------------------------------------------------


@pytest.mark.jvm
def test_an_open_book_dialogue_whose_turn_failed_is_a_failed_item_and_is_asked_again(
    tmp_path: Path,
    tool_corpus: tuple[Path, Path],
    queries: Path,  # noqa: F811 (test_agent's fixtures)
) -> None:
    """A dialogue ended by a failed turn counts in n_failed / failed_qids and is scored apart; the
    rerun continues it from its cached turns while the other dialogue replays without a call."""

    def failing(chat) -> str:
        return "" if "Which tools" in chat[1]["content"] else _script(chat)

    summary, rows = _run(tmp_path, tool_corpus, queries, tmp_path / "cache", ScriptedModel(failing))
    assert (summary["n_failed"], summary["failed_qids"], summary["complete"]) == (1, ["nonsense"], False)
    failed = next(r for r in rows if r["qid"] == "nonsense")
    assert failed["finish_reason"] == "failed" and generation_failed(failed)
    assert not generation_failed(next(r for r in rows if r["qid"] == "nhl"))
    recovered = ScriptedModel(_script)
    summary, _ = _run(tmp_path, tool_corpus, queries, tmp_path / "cache", recovered)
    assert (summary["n_failed"], summary["complete"]) == (0, True)
    assert recovered.calls and all("Which tools" in chat[1]["content"] for chat in recovered.calls)

"""No API key in any output (issue 21, "No secret in any output, ever").

`EchoingProxyTestDouble` stands in for the external boundary only: a loopback http.server in
front of which the real openai backend (real `openai`/`httpx` client) is driven, and which, like
a misconfigured proxy, echoes the request's Authorization header back: in an HTML 200 page, in a
JSON 200 body that is no chat completion, in a 401 / 500 error body, in response headers, and in
the text of an otherwise valid answer. Each test first checks that the key really was sent and
really came back (so a pass is not vacuous), then that neither the key, nor its `Bearer` form,
nor a 12-character slice of it is in the captured logs, the raised error's str/repr, the
console of a `cqabench generate` process, or any file the job wrote (predictions, summary, cache).
"""

from __future__ import annotations

import html
import json
import logging
import os
import secrets
import string
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote

import pyarrow.parquet as pq
import pytest

from cqabench.common import redact as redaction
from cqabench.common.io import write_parquet
from cqabench.data.schema import CanonicalData, Query
from cqabench.generation.llm import llm_spec
from cqabench.generation.llm.base import Sampling
from cqabench.generation.llm.openai_backend import ApiError, OpenAIBackend, _describe_body
from test_openai_backend import ENV, api_llm_config

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = REPO / "resources/prompts/few-shot/multihop.txt"
ALPHABET = string.ascii_letters + string.digits


def fake_key() -> str:
    """A key shaped like OpenAI's: "sk-test-" and 40 random characters (fresh per test)."""
    return "sk-test-" + "".join(secrets.choice(ALPHABET) for _ in range(40))


def leaks(text: str, key: str) -> list[str]:
    """Which forms of the key occur in `text`: whole, Bearer form, or any 12-character slice of it
    (a prefix left by a cut snippet, a suffix, a middle part)."""
    forms = {"key": key, "bearer": f"Bearer {key}"}
    forms |= {f"slice[{i}:{i + 12}]": key[i : i + 12] for i in range(len(key) - 11)}
    return [name for name, form in forms.items() if form in text]


class EchoingProxyTestDouble:
    """Loopback imitation of a proxy in front of the chat completions API that echoes the request
    headers back (test double at the external boundary).

    mode: "html" (200, an HTML error page listing the headers), "json" (200, a JSON object that
    is not a chat completion, quoting the headers), "401" / "500" (that status, the header in the
    error body), "header" (429 whose Retry-After and X-Echo-Authorization headers carry it, then
    500 with the same headers), "answer" (a valid chat completion whose answer quotes the header).
    `sent` keeps every body and header value the double sent, to check the echo really happened.
    """

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.auth: set[str] = set()
        self.sent: list[str] = []
        self.requests = 0
        double = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # keep test output clean
                pass

            def do_POST(self) -> None:  # noqa: N802 (http.server naming)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                auth = self.headers.get("Authorization", "")
                double.auth.add(auth)
                double.requests += 1
                status, content_type, data, headers = double.reply(body, auth)
                double.sent += [data.decode(), *headers.values()]
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def reply(self, body: dict, auth: str) -> tuple[int, str, bytes, dict[str, str]]:
        """(status, content type, body, extra headers) for one request."""
        echo = {"Authorization": auth, "Content-Type": "application/json", "Host": "127.0.0.1"}
        if self.mode == "html":
            # the key starts 43 characters into the page's text, so the backend's 80-character
            # snippet is cut inside it: what is left is a 37-character prefix of the key
            page = f"<html><body>Headers: Authorization: {auth}<br>Host: 127.0.0.1</body></html>"
            return 200, "text/html", page.encode(), {}
        if self.mode == "json":
            return 200, "application/json", json.dumps({"proxy": "echo", "request_headers": echo}).encode(), {}
        if self.mode in ("401", "500"):
            error = {"error": {"message": f"Incorrect API key provided: {auth}", "type": "proxy", "headers": echo}}
            return int(self.mode), "application/json", json.dumps(error).encode(), {}
        if self.mode == "header":
            headers = {"Retry-After": auth.removeprefix("Bearer "), "X-Echo-Authorization": auth}
            status = 429 if self.requests == 1 else 500
            return status, "application/json", b'{"error": {"message": "slow down"}}', headers
        question = body["messages"][-1]["content"]
        answer = {
            "id": "cmpl-1",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {
                        "role": "assistant",
                        "content": f"Final Answer: {question.split()[-1]} (you sent {auth})",
                    },
                }
            ],
            "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
        }
        return 200, "application/json", json.dumps(answer).encode(), {}

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> EchoingProxyTestDouble:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def key(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    value = fake_key()
    monkeypatch.setenv(ENV, value)
    yield value
    redaction.forget_keys()


def _assert_echoed(api: EchoingProxyTestDouble, key: str) -> None:
    """The precondition: the key reached the double and the double sent it back."""
    assert api.auth == {f"Bearer {key}"}
    assert any(key in sent for sent in api.sent)


# -- the redactor itself ---------------------------------------------------------------------------


def test_redact_masks_the_key_its_bearer_form_and_any_8_character_run_of_it(key: str) -> None:
    redaction.register_key(key)
    assert redaction.redact(f"Authorization: Bearer {key}") == "Authorization: Bearer [redacted]"
    # an 80-character cut inside the key leaves a prefix; a message keeping a tail leaves a suffix
    assert redaction.redact(f"<b>{key[:9]}") == "<b>[redacted]"
    assert redaction.redact(f"...{key[-8:]}</b>") == "...[redacted]</b>"
    # (delimiters outside the key's alphabet: an "x" beside key[10:22] is key[9] in 1 key of 62)
    assert redaction.redact(f"#{key[10:22]}#") == "#[redacted]#"
    # 7 characters: shorter than MIN_FRAGMENT, not a clue (the last 4 are what dashboards show)
    assert redaction.redact(f"ends in {key[-7:]}") == f"ends in {key[-7:]}"
    assert redaction.redact(redaction.redact(f"Bearer {key}")) == "Bearer [redacted]"  # idempotent


def test_redact_masks_url_encoded_json_escaped_and_html_escaped_forms() -> None:
    odd = 'k3y+with/odd="chars"&<more>\\Z9'  # a key from a provider whose keys are not [A-Za-z0-9_-]
    redaction.register_key(odd)
    try:
        for form in (odd, quote(odd, safe=""), json.dumps(odd)[1:-1], html.escape(odd)):
            assert form != "" and leaks(redaction.redact(f"echo: [{form}]"), odd) == []
            assert odd[5:13] not in redaction.redact(form) and "[redacted]" in redaction.redact(form)
    finally:
        redaction.forget_keys()


def test_every_configured_key_is_known_and_unregistered_credentials_are_masked_too() -> None:
    a, b, c = fake_key(), fake_key(), fake_key()
    llms = {
        "gpt": {"backend": "openai", "api_key_env": "CQA_KEY_GPT"},
        "other": {"backend": "openai", "api_key_env": "CQA_KEY_OTHER"},
        "local": {"backend": "hf"},
    }
    redaction.register_env_keys(llms, {"CQA_KEY_GPT": a, "CQA_KEY_OTHER": b, "TOGETHER_API_KEY": c, "HOME": "/root"})
    try:
        assert redaction.redact(f"{a} {b} {c} /root") == "[redacted] [redacted] [redacted] /root"
        # a credential nobody registered, in the header forms an echo takes
        assert redaction.redact("Authorization: Bearer abcdefgh12345678") == "Authorization: Bearer [redacted]"
        assert redaction.redact('{"api-key": "abcdefgh12345678"}') == '{"api-key": "[redacted]"}'
        assert redaction.redact("the bearer of bad news", headers=True) == "the bearer of bad news"
        # in model answers only registered keys are masked: "Bearer" there is a word
        assert redaction.redact("Bearer bonds2024 matured", headers=False) == "Bearer bonds2024 matured"
    finally:
        redaction.forget_keys()


def test_the_body_snippet_is_redacted_before_it_is_cut() -> None:
    key = fake_key()
    redaction.register_key(key)
    try:
        # the key starts 67 characters in: the 80-character snippet would end in its first 13
        cut_inside = "<html>" + "y" * 60 + f" {key}"
        assert key[:12] not in _describe_body(cut_inside) and "[redacted]" in _describe_body(cut_inside)
    finally:
        redaction.forget_keys()


# -- the real openai backend against the echoing proxy ---------------------------------------------


@pytest.mark.parametrize("mode", ["html", "json", "401", "500", "header"])
def test_an_echoed_key_reaches_no_log_and_no_raised_error(
    mode: str, key: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)  # every logger, the openai and httpx clients' included
    with EchoingProxyTestDouble(mode) as api:
        backend = OpenAIBackend(llm_spec("api", api_llm_config(api.base_url, max_retries=2, max_concurrency=1)))
        with pytest.raises(ApiError) as err:
            list(backend.generate([[{"role": "user", "content": "Which city?"}]], Sampling(max_new_tokens=8)))
        backend.close()
    _assert_echoed(api, key)
    assert api.requests == (1 if mode == "401" else 3)  # 401 is final; the rest are retried twice
    logged = caplog.text + "\n".join(r.getMessage() for r in caplog.records)
    assert leaks(logged, key) == [] and leaks(str(err.value), key) == [] and leaks(repr(err.value), key) == []
    assert "[redacted]" in str(err.value) or mode == "header"  # header echoes never reach the message
    if mode == "html":  # the 80-character snippet was cut inside the key: its prefix is masked
        assert "Authorization: Bearer [redacted]" in str(err.value)


def test_an_answer_that_quotes_the_key_is_returned_redacted(key: str) -> None:
    with EchoingProxyTestDouble("answer") as api:
        backend = OpenAIBackend(llm_spec("api", api_llm_config(api.base_url)))
        [[(_, comp)]] = list(backend.generate([[{"role": "user", "content": "Which city?"}]], Sampling()))
        backend.close()
    _assert_echoed(api, key)
    assert comp.text == "Final Answer: city? (you sent Bearer [redacted])"


# -- `cqabench generate` as Snakemake runs it: a process, its console, its files ----------------------


@pytest.fixture
def queries(tmp_path: Path) -> Path:
    data = CanonicalData(
        queries=[Query("q1", "Which city hosts the tower alpha?"), Query("q2", "Which river is bravo?")]
    )
    path = tmp_path / "split" / "queries.parquet"
    path.parent.mkdir()
    write_parquet(data.tables()["queries"], path)
    return path


def _generate_process(queries: Path, out: Path, base_url: str, key: str) -> subprocess.CompletedProcess:
    """One closed-book cell's `cqabench generate`, console (stdout + stderr) captured."""
    settings = {
        "llm": api_llm_config(base_url, api_key_env="OPENAI_API_KEY", max_retries=2, timeout_s=10),
        "sampling": {"max_new_tokens": 16},
        "max_questions": None,
    }
    cmd = [
        sys.executable,
        "-m",
        "cqabench.cli",
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
        str(queries),
        "--template",
        str(TEMPLATE),
        "--settings",
        json.dumps(settings),
        "--cache",
        str(out / "cache"),
        "--out",
        str(out / "cell" / "predictions.parquet"),
        "--summary",
        str(out / "cell" / "summary.json"),
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO / "workflow"), "OPENAI_API_KEY": key}
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, check=False)


def files_with_key(root: Path, key: str) -> dict[str, list[str]]:
    """Every file under `root` (bytes, decoded leniently) that holds a form of the key."""
    found = {}
    for path in root.rglob("*"):
        if path.is_file():
            hit = leaks(path.read_bytes().decode("utf-8", errors="replace"), key)
            if hit:
                found[str(path.relative_to(root))] = hit
    return found


@pytest.mark.parametrize("mode", ["html", "json", "500"])
def test_a_generate_job_against_an_echoing_proxy_fails_without_printing_the_key(
    mode: str, key: str, queries: Path, tmp_path: Path
) -> None:
    out = tmp_path / "job"
    with EchoingProxyTestDouble(mode) as api:
        done = _generate_process(queries, out, api.base_url, key)
    _assert_echoed(api, key)
    console = done.stdout + done.stderr
    assert done.returncode == 1 and "cqabench generate: error:" in console, console[-2000:]
    assert console.count("retrying in") >= 2  # the retries were logged ...
    assert leaks(console, key) == []  # ... and neither they nor the error carry the key
    assert files_with_key(out, key) == {}


def test_a_generate_job_stores_an_answer_that_quotes_the_key_redacted(key: str, queries: Path, tmp_path: Path) -> None:
    out = tmp_path / "job"
    with EchoingProxyTestDouble("answer") as api:
        done = _generate_process(queries, out, api.base_url, key)
    _assert_echoed(api, key)
    assert done.returncode == 0, (done.stdout + done.stderr)[-2000:]
    rows = pq.read_table(out / "cell" / "predictions.parquet").to_pylist()
    assert [r["raw_output"] for r in rows] == [
        "Final Answer: alpha? (you sent Bearer [redacted])",
        "Final Answer: bravo? (you sent Bearer [redacted])",
    ]
    assert any((out / "cache").rglob("*.json")), "the answers were cached"
    assert files_with_key(out, key) == {} and leaks(done.stdout + done.stderr, key) == []


def test_an_uncaught_traceback_is_redacted(key: str) -> None:
    """Exceptions that are not cqabench's own reach the console through Python's traceback printer."""
    code = (
        "import os, threading; from cqabench.common import redact; redact.install()\n"
        't = threading.Thread(target=lambda: exec(\'raise RuntimeError("thread: Bearer " + os.environ["OPENAI_API_KEY"])\'))\n'
        "t.start(); t.join()\n"
        "raise ValueError('main: ' + os.environ['OPENAI_API_KEY'][:30])"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO / "workflow"), "OPENAI_API_KEY": key}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 1
    assert "RuntimeError: thread: Bearer [redacted]" in done.stderr and "ValueError: main: [redacted]" in done.stderr
    assert leaks(done.stderr, key) == []


# -- the whole workflow: `snakemake` runs the generate job against the echoing proxy -----------------

SNAKEMAKE_CONFIG = """\
name: redact
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
  max_questions: 2
  sampling: {{temperature: 0, max_new_tokens: 16}}
"""
CELL = "results/redact/generation/musique/train/pipe/none/api/few-shot/closed-k0/predictions.parquet"


def _snakemake_work(tmp_path: Path, base_url: str) -> Path:
    """A throw-away copy of the checkout (code linked, results/, cache/ and .snakemake/ its own), one cell planned."""
    work = tmp_path / "work"
    work.mkdir()
    for name in ("Snakefile", "workflow", "profiles", "resources"):
        (work / name).symlink_to(REPO / name)
    (work / "config.yaml").write_text(SNAKEMAKE_CONFIG.format(base_url=base_url))
    return work


@pytest.mark.parametrize("mode", ["html", "401"])
@pytest.mark.snakemake
def test_snakemake_logs_console_and_results_never_hold_the_key(mode: str, key: str, tmp_path: Path) -> None:
    """The case as it was found: Snakemake's console (with the failed job's log shown, as the
    default profile asks), its .snakemake/log folder, the job log, results/ and cache/ are grepped."""
    with EchoingProxyTestDouble(mode) as api:
        work = _snakemake_work(tmp_path, api.base_url)
        env = {
            **os.environ,
            "PYTHONPATH": str(REPO / "workflow"),
            "OPENAI_API_KEY": key,
            "HF_HUB_OFFLINE": "1",
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
        }
        done = subprocess.run(
            [sys.executable, "-m", "snakemake", "--configfile", "config.yaml", "--cores", "1", CELL],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    console = done.stdout + done.stderr
    _assert_echoed(api, key)
    job_log = work / "results/redact/logs/generate/musique/train/pipe/none/api/few-shot/closed-k0.log"
    assert done.returncode != 0 and job_log.is_file(), console[-3000:]
    assert "cqabench generate: error:" in job_log.read_text() and "[redacted]" in job_log.read_text()
    assert "[redacted]" in console  # the failed job's log is shown on the console ...
    assert leaks(console, key) == []  # ... redacted
    assert list((work / ".snakemake" / "log").glob("*.snakemake.log")), "Snakemake wrote its log"
    assert files_with_key(work / ".snakemake" / "log", key) == {}
    assert files_with_key(work / "results", key) == {}
    assert files_with_key(work / "cache", key) == {}  # the item cache (cache/llm/), outside results/

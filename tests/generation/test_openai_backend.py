"""The openai backend against a loopback TEST DOUBLE of the OpenAI chat completions API.

`OpenAITestDouble` stands in for the external service only: an http.server on 127.0.0.1 that
answers POST /v1/chat/completions like the real API, and can be scripted per question to
fail first with 429 / 500 or to answer too slowly (client timeout).
"""

from __future__ import annotations

import json
import logging
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from cqabench.common.errors import ConfigError
from cqabench.generation.llm import llm_spec
from cqabench.generation.llm.base import Sampling
from cqabench.generation.llm.openai_backend import ApiError, OpenAIBackend

KEY = "sk-test-DOUBLE-0123456789"
ENV = "CQA_TEST_OPENAI_KEY"


def _reply(model: str, choices: list) -> tuple[bytes, str]:
    return json.dumps(
        {
            "id": "cmpl-x",
            "object": "chat.completion",
            "created": 0,
            "model": model,
            "choices": choices,
            "usage": {"prompt_tokens": 4, "completion_tokens": 0, "total_tokens": 4},
        }
    ).encode(), "application/json"


# 200 replies that are no answer (issue 11): what a proxy, a cut connection or a filtering API sends
BAD_200 = {
    "html": lambda model: (b"<html><head><title>502</title></head><body>Bad gateway</body></html>", "text/html"),
    "truncated": lambda model: (
        b'{"id": "cmpl-x", "object": "chat.completion", "choices": [{"index"',
        "application/json",
    ),
    "emptybody": lambda model: (b"", "application/json"),
    "nochoices": lambda model: _reply(model, []),
    "null": lambda model: _reply(
        model, [{"index": 0, "finish_reason": "content_filter", "message": {"role": "assistant", "content": None}}]
    ),
}


class OpenAITestDouble:
    """Loopback imitation of the chat completions endpoint (test double at the external boundary).

    script: question substring -> list of behaviours for successive attempts, each one of
    "429", "500", "401", "slow" (sleeps `slow_s` before answering), "ok", or a 200 reply that is
    no answer: "html" (a proxy's error page), "truncated" (JSON cut short), "emptybody",
    "nochoices" (choices: []), "null" (content: null); after the list runs out every attempt is
    "ok". The answer is "Final Answer: <the question's last word>"; `answers` counts them per
    question. With `vary`, a question answered before gets "<word>-again<n>" (a sampling model:
    two generations of one prompt disagree). `hold_after` {key: n}: once the client with that
    API key has had n answers, its later requests hang until `release` is set and then get no
    reply (requests in flight when that client is killed).
    """

    def __init__(
        self,
        script: dict[str, list[str]] | None = None,
        slow_s: float = 1.0,
        vary: bool = False,
        hold_after: dict[str, int] | None = None,
    ) -> None:
        self.script = script or {}
        self.slow_s = slow_s
        self.vary = vary
        self.hold_after = hold_after or {}
        self.release = threading.Event()
        self.closing = threading.Event()  # set on exit: a "slow" reply still waiting gives up
        self.answers: Counter[str] = Counter()
        self.answers_by_auth: Counter[str] = Counter()
        self.attempts: Counter[str] = Counter()
        self.bodies: list[dict] = []
        self.auth: set[str] = set()
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        double = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # keep test output clean
                pass

            def do_POST(self) -> None:  # noqa: N802 (http.server naming)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                question = body["messages"][-1]["content"]
                with double._lock:
                    double.bodies.append(body)
                    double.auth.add(self.headers.get("Authorization", ""))
                    n = double.attempts[question]
                    double.attempts[question] += 1
                    double.in_flight += 1
                    double.max_in_flight = max(double.max_in_flight, double.in_flight)
                try:
                    plan = next((v for k, v in double.script.items() if k in question), [])
                    action = plan[n] if n < len(plan) else "ok"
                    auth = self.headers.get("Authorization", "").removeprefix("Bearer ")
                    if auth in double.hold_after and double.answers_by_auth[auth] >= double.hold_after[auth]:
                        double.release.wait(60)
                        self.close_connection = True
                        return
                    if action == "slow":
                        double.closing.wait(double.slow_s)
                    if action in BAD_200:
                        self._send_raw(*BAD_200[action](body["model"]))
                        return
                    if action in ("429", "500", "401"):
                        status = int(action)
                        msg = {"401": f"Incorrect API key provided: {KEY}"}.get(action, "try later")
                        self._send(
                            status,
                            {"error": {"message": msg, "type": "test", "code": action}},
                            {"Retry-After": "0"} if status == 429 else {},
                        )
                        return
                    word = question.split()[-1].strip("?")
                    with double._lock:
                        seen = double.answers[question]
                        double.answers[question] += 1
                        double.answers_by_auth[auth] += 1
                    if double.vary and seen:
                        word = f"{word}-again{seen}"
                    self._send(
                        200,
                        {
                            "id": f"cmpl-{n}",
                            "object": "chat.completion",
                            "created": 0,
                            "model": body["model"],
                            "choices": [
                                {
                                    "index": 0,
                                    "finish_reason": "stop",
                                    "message": {"role": "assistant", "content": f"Final Answer: {word}"},
                                }
                            ],
                            "usage": {
                                "prompt_tokens": len(question.split()),
                                "completion_tokens": 3,
                                "total_tokens": len(question.split()) + 3,
                            },
                        },
                    )
                finally:
                    with double._lock:
                        double.in_flight -= 1

            def _send(self, status: int, obj: dict, headers: dict | None = None) -> None:
                self._send_raw(json.dumps(obj).encode(), "application/json", status, headers)

            def _send_raw(self, data: bytes, content_type: str, status: int = 200, headers: dict | None = None) -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", content_type)
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in (headers or {}).items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client timed out and left
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> OpenAITestDouble:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.closing.set()
        self.server.shutdown()
        self.server.server_close()


def api_llm_config(base_url: str, **extra: object) -> dict:
    """The client timeout is far above what a loopback answer takes at a load of 10 (at 0.5 s a
    busy CI timed out ordinary requests, and a 401 or 500 then counted as a timeout); a test of
    timeouts gives its own, with a "slow" reply far past it."""
    return {
        "backend": "openai",
        "source": "test-model",
        "base_url": base_url,
        "api_key_env": ENV,
        "max_concurrency": 3,
        "max_retries": 4,
        "backoff_s": 0.01,
        "max_backoff_s": 0.05,
        "timeout_s": 10,
        **extra,
    }


@pytest.fixture
def api_key(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(ENV, KEY)
    return KEY


def _chats(n: int) -> list[list[dict]]:
    return [[{"role": "user", "content": f"Question: which item is number{i}?"}] for i in range(n)]


def test_retries_on_429_500_and_timeouts_complete_every_item_once(
    api_key: str, caplog: pytest.LogCaptureFixture
) -> None:
    script = {"number1?": ["429", "429"], "number4?": ["500"], "number7?": ["slow"]}
    # the slow reply waits far past the client's timeout, and that timeout is far above what a
    # loopback answer takes even on a loaded machine (at 0.5 s a busy CI timed out ordinary
    # requests, and the exact attempt counts below counted the machine, not the backend)
    with OpenAITestDouble(script, slow_s=60) as api:
        backend = OpenAIBackend(llm_spec("api", api_llm_config(api.base_url, timeout_s=5)))
        with caplog.at_level(logging.WARNING, logger="cqabench.generation.llm.openai_backend"):
            batches = list(
                backend.generate(_chats(10), Sampling(max_new_tokens=16), labels=[f"q{i}" for i in range(10)])
            )
        backend.close()
    indices = [i for batch in batches for i, _ in batch]
    assert sorted(indices) == list(range(10))  # every item exactly once
    results = dict(pair for batch in batches for pair in batch)
    assert all(results[i].text == f"Final Answer: number{i}" for i in range(10))
    assert results[3].prompt_tokens == 5 and results[3].output_tokens == 3 and results[3].latency_s > 0
    # attempts per question: 3 for two 429s, 2 for a 500, 2 for a timeout, 1 otherwise
    per_item = {int(q.split("number")[1].rstrip("?")): n for q, n in api.attempts.items()}
    assert per_item == {i: {1: 3, 4: 2, 7: 2}.get(i, 1) for i in range(10)}
    assert backend.retries == 4
    warnings = [r.getMessage() for r in caplog.records]
    assert sum("request q1 got HTTP 429" in w for w in warnings) == 2
    assert sum("request q4 got HTTP 500" in w for w in warnings) == 1
    assert sum("request q7 got timeout" in w for w in warnings) == 1
    assert api.max_in_flight <= 3
    assert api.auth == {f"Bearer {KEY}"}  # the key reached the server ...
    assert KEY not in caplog.text  # ... and never the logs
    body = api.bodies[0]
    assert body["model"] == "test-model" and body["max_tokens"] == 16 and body["temperature"] == 0


def test_a_non_retryable_error_stops_at_once_without_leaking_the_key(
    api_key: str, caplog: pytest.LogCaptureFixture
) -> None:
    with OpenAITestDouble({"number0?": ["401"]}) as api:
        backend = OpenAIBackend(llm_spec("api", api_llm_config(api.base_url, max_concurrency=1)))
        with pytest.raises(ApiError) as err:
            list(backend.generate(_chats(3), Sampling()))
    assert "HTTP 401" in str(err.value) and KEY not in str(err.value) and "[redacted]" in str(err.value)
    assert sum(api.attempts.values()) == 1  # no retry, and nothing else was sent after the failure
    assert KEY not in caplog.text


def test_answers_already_in_flight_are_delivered_before_a_failure_is_raised(api_key: str) -> None:
    with OpenAITestDouble({"number0?": ["401"], "number1?": ["slow"], "number2?": ["slow"]}, slow_s=0.3) as api:
        cfg = api_llm_config(api.base_url, max_retries=0, timeout_s=5)
        backend = OpenAIBackend(llm_spec("api", cfg))
        delivered = []
        with pytest.raises(ApiError):
            for batch in backend.generate(_chats(6), Sampling()):
                delivered += [i for i, _ in batch]
    assert sorted(delivered) == [1, 2]  # paid-for answers come out; items 3.. were never sent
    assert sum(api.attempts.values()) == 3


def test_retries_give_up_after_max_retries(api_key: str) -> None:
    with OpenAITestDouble({"number0?": ["500"] * 10}) as api:
        backend = OpenAIBackend(llm_spec("api", api_llm_config(api.base_url, max_retries=2)))
        with pytest.raises(ApiError, match=r"HTTP 500\) after 3 attempt"):
            list(backend.generate(_chats(1), Sampling()))
    assert sum(api.attempts.values()) == 3


def test_missing_key_fails_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    with pytest.raises(ConfigError, match=rf"environment variable {ENV}"):
        OpenAIBackend(llm_spec("api", api_llm_config("http://127.0.0.1:9/v1")))


@pytest.mark.parametrize("bad", ["html", "truncated", "emptybody"])
def test_a_malformed_200_reply_is_retried_like_a_server_error(api_key: str, bad: str, caplog) -> None:
    with OpenAITestDouble({"number1?": [bad, bad]}) as api:
        backend = OpenAIBackend(llm_spec("api", api_llm_config(api.base_url)))
        with caplog.at_level(logging.WARNING, logger="cqabench.generation.llm.openai_backend"):
            results = dict(
                p for batch in backend.generate(_chats(3), Sampling(), labels=["q0", "q1", "q2"]) for p in batch
            )
    assert [results[i].text for i in range(3)] == [f"Final Answer: number{i}" for i in range(3)]
    assert api.attempts["Question: which item is number1?"] == 3 and backend.retries == 2
    assert sum("request q1 got malformed reply" in r.getMessage() for r in caplog.records) == 2


@pytest.mark.parametrize(
    ("bad", "what"), [("html", "an HTML page"), ("truncated", "invalid JSON"), ("emptybody", "invalid JSON")]
)
def test_a_reply_that_stays_malformed_stops_the_job_naming_what_came_back(api_key: str, bad: str, what: str) -> None:
    with OpenAITestDouble({"number0?": [bad] * 10}) as api:
        backend = OpenAIBackend(llm_spec("api", api_llm_config(api.base_url, max_retries=2, max_concurrency=1)))
        with pytest.raises(ApiError, match=r"request 0 failed \(malformed reply") as err:
            list(backend.generate(_chats(1), Sampling()))
    assert what in str(err.value) and "after 3 attempt(s)" in str(err.value)
    assert sum(api.attempts.values()) == 3


@pytest.mark.parametrize(("bad", "what"), [("nochoices", "no choices"), ("null", "message content is null")])
def test_an_empty_reply_is_retried_then_returned_as_a_failed_item(api_key: str, bad: str, what: str) -> None:
    with OpenAITestDouble({"number1?": [bad] * 10, "number2?": [bad]}) as api:
        backend = OpenAIBackend(llm_spec("api", api_llm_config(api.base_url, max_retries=2)))
        results = dict(p for batch in backend.generate(_chats(3), Sampling()) for p in batch)
    assert results[0].text == "Final Answer: number0" and not results[0].error
    assert results[2].text == "Final Answer: number2" and not results[2].error  # one empty reply, then an answer
    failed = results[1]
    assert failed.text == "" and failed.finish_reason == "failed"
    assert failed.error == f"empty reply ({what}) after 3 attempt(s)"
    assert api.attempts["Question: which item is number1?"] == 3

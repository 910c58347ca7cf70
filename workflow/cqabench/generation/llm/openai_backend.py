"""Any OpenAI-compatible chat completions API, with bounded concurrency and backoff.

The `openai` client's own retries are switched off so that every retry is ours: logged
(status and attempt, never the key), with exponential backoff and jitter, and honouring a
Retry-After header. 429, 408, 409, 5xx, timeouts and connection errors are retried; any
other error (401, 400, ...) stops the job at once, because retrying cannot fix it.

A 200 reply is checked too (issue 11): a body that is not a chat completion (truncated JSON,
an HTML page from a proxy, an empty body) is retried like a 5xx and stops the job, naming
what came back, when the retries run out; a reply with no choices or a null / empty message
is retried, then returned as a failed item (`Completion.error`), which is never cached.

Nothing built from a reply leaves this module unredacted (issue 21): the body snippet, the
status text, the client's exception text and the answer text pass `cqabench.common.redact.redact`
(the key, its Bearer form, any 8+ characters of it) before they are logged, raised or returned.
"""

from __future__ import annotations

import json
import logging
import os
import random
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

from cqabench.common.errors import ConfigError, CqaError
from cqabench.common.redact import install_record_redaction, redact, register_key
from cqabench.generation.llm.base import Chat, Completion, LlmSpec, Sampling, ToolsApi, api_key_env

log = logging.getLogger(__name__)

RETRY_STATUS = frozenset({408, 409, 429})


class ApiError(CqaError):
    """An API call failed for good (non-retryable status, or retries exhausted)."""


class _BadReply(Exception):
    """A 200 reply that is no usable answer; `empty` says whether it parsed but held nothing."""

    def __init__(self, what: str, empty: bool) -> None:
        super().__init__(what)
        self.what = what
        self.empty = empty


def _fields(resp: object) -> str:
    """A parsed body as the JSON it came as (the client's model without its empty fields), else repr."""
    try:
        return json.dumps(resp.model_dump(exclude_none=True), default=str)  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 (not a pydantic model, or one that cannot dump: its repr will do)
        return repr(resp)


def _describe_body(resp: object) -> str:
    """What came back instead of a chat completion: its kind and its first 80 characters, redacted.

    A proxy's error page may echo the request headers, so the whole text is redacted before it
    is cut (a cut inside the key would leave a fragment redaction could no longer recognise).
    """
    text = resp if isinstance(resp, str) else json.dumps(resp) if isinstance(resp, (list, dict)) else _fields(resp)
    kind = (
        "an HTML page"
        if isinstance(resp, str) and "<html" in resp[:500].lower()
        else "an empty body"
        if resp in ("", None)
        else f"a {type(resp).__name__} body"
    )
    snippet = redact(" ".join(str(text).split()))[:80]
    return f"malformed reply ({kind}, not a chat completion{': ' + repr(snippet) if snippet else ''})"


def _check_reply(resp: object, tools: ToolsApi | None = None) -> tuple[str, str]:
    """(text, finish reason) of a parsed reply, or _BadReply saying what is wrong with it.

    `tools` (open-book turns with tools_api): a reply's first tool call is the turn's
    action, written by `tools` as the text format's action line after the message's text (often null).
    """
    choices = getattr(resp, "choices", None)
    if not isinstance(choices, list):
        raise _BadReply(_describe_body(resp), empty=False)
    if not choices:
        raise _BadReply("empty reply (no choices)", empty=True)
    message = getattr(choices[0], "message", None)
    content = getattr(message, "content", None)
    calls = getattr(message, "tool_calls", None) if tools is not None else None
    if calls and tools is not None:
        function = calls[0].function
        text = tools.action_text(content, function.name, function.arguments)
        return redact(text, headers=False), str(getattr(choices[0], "finish_reason", "") or "")
    if content is None:
        raise _BadReply("empty reply (message content is null)", empty=True)
    if not str(content).strip():
        raise _BadReply("empty reply (message content is empty)", empty=True)
    # a server that echoes the request into an answer must not put the key into the cache
    return redact(str(content), headers=False), str(getattr(choices[0], "finish_reason", "") or "")


def read_api_key(spec: LlmSpec) -> str:
    """The key from the environment variable the config names; fail fast, naming the variable."""
    env = api_key_env(spec)
    key = os.environ.get(env, "")
    if not key:
        raise ConfigError(
            f"llm {spec.name!r} (backend openai) needs an API key in the environment variable {env}, which is not set"
        )
    register_key(key)  # from here on, no output of this process can carry it
    return key


class OpenAIBackend:
    name = "openai"

    def __init__(self, spec: LlmSpec) -> None:
        import openai

        self.spec = spec
        self._openai = openai
        self._key = read_api_key(spec)
        opts = spec.options
        self.max_concurrency = max(1, int(opts.get("max_concurrency", 4)))
        self.max_retries = max(0, int(opts.get("max_retries", 6)))
        self.backoff_s = float(opts.get("backoff_s", 1.0))
        self.max_backoff_s = float(opts.get("max_backoff_s", 60.0))
        self.timeout_s = float(opts.get("timeout_s", 120.0))
        # records per yield: each yield is one durable cache transaction
        self.flush_every = max(1, int(opts.get("flush_every", 1)))
        # Headers the client might log at DEBUG carry the key (and echoes of it); keep those loggers
        # quiet (openai 3 logs through httpx2 / httpcore2), and redact any record that is made anyway.
        for name in ("openai", "httpx", "httpcore", "httpx2", "httpcore2"):
            logging.getLogger(name).setLevel(max(logging.getLogger(name).level, logging.WARNING))
        install_record_redaction()
        self.client = openai.OpenAI(
            api_key=self._key,
            base_url=opts.get("base_url") or None,
            max_retries=0,
            timeout=self.timeout_s,
        )
        self.retries = 0  # across the backend's life; read by the caller for per-cell totals
        self._lock = threading.Lock()

    def _retryable(self, exc: Exception) -> tuple[bool, str, float | None]:
        """(retry?, short description without secrets, server-suggested delay)."""
        o = self._openai
        if isinstance(exc, o.APITimeoutError):
            return True, "timeout", None
        if isinstance(exc, o.APIConnectionError):
            return True, "connection error", None
        if isinstance(exc, o.APIStatusError):
            status = exc.status_code
            after = None
            header = exc.response.headers.get("retry-after") if exc.response is not None else None
            if header:
                try:
                    after = float(header)
                except ValueError:
                    after = None
            return status in RETRY_STATUS or status >= 500, f"HTTP {status}", after
        return False, type(exc).__name__, None

    def _request(self, chat: Chat, sampling: Sampling, tools: ToolsApi | None = None) -> dict:
        body: dict = {
            "model": self.spec.source,
            "messages": chat,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "max_tokens": sampling.max_new_tokens,
            "frequency_penalty": sampling.frequency_penalty,
            "presence_penalty": sampling.presence_penalty,
            "seed": sampling.seed,
        }
        if sampling.stop:
            body["stop"] = list(sampling.stop)
        if tools is not None:  # open-book turns with tools_api (cqabench.generation.agent.openai_tools)
            body["messages"], body["tools"] = tools.to_api_messages(chat), tools.schemas
        return body

    def complete(self, chat: Chat, sampling: Sampling, label: str = "", tools: ToolsApi | None = None) -> Completion:
        """One item, retried as the module docstring says; latency is the successful call's."""
        body = self._request(chat, sampling, tools)
        for attempt in range(self.max_retries + 1):
            began = time.perf_counter()
            try:
                resp = self.client.chat.completions.create(**body)
                text, finish = _check_reply(resp, tools)
            except (self._openai.OpenAIError, ValueError, _BadReply) as exc:
                if isinstance(exc, _BadReply):
                    retry, what, after = True, exc.what, None
                elif isinstance(exc, ValueError):  # the client could not parse the body (truncated JSON)
                    retry, what, after = True, f"malformed reply (invalid JSON: {redact(exc)[:80]})", None
                else:
                    retry, what, after = self._retryable(exc)
                if not retry or attempt == self.max_retries:
                    if isinstance(exc, _BadReply) and exc.empty:  # an item-level failure: recorded, not cached
                        usage = getattr(resp, "usage", None)
                        return Completion(
                            text="",
                            prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
                            output_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
                            latency_s=time.perf_counter() - began,
                            finish_reason="failed",
                            error=f"{what} after {attempt + 1} attempt(s)",
                        )
                    detail = "" if isinstance(exc, _BadReply) else f": {redact(exc)[:300]}"
                    raise ApiError(
                        f"llm {self.spec.name!r}: request {label or '?'} failed ({what}) after "
                        f"{attempt + 1} attempt(s){detail}"
                    ) from None
                delay = min(self.max_backoff_s, self.backoff_s * 2**attempt) * random.uniform(0.5, 1.0)
                if after is not None:
                    delay = max(delay, min(after, self.max_backoff_s))
                with self._lock:
                    self.retries += 1
                log.warning(
                    "llm %s: request %s got %s (attempt %d of %d); retrying in %.2f s",
                    self.spec.name,
                    label or "?",
                    what,
                    attempt + 1,
                    self.max_retries + 1,
                    delay,
                )
                time.sleep(delay)
                continue
            latency = time.perf_counter() - began
            usage = getattr(resp, "usage", None)
            return Completion(
                text=text,
                prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
                output_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
                latency_s=latency,
                finish_reason=finish,
            )
        raise AssertionError("unreachable")

    def generate(
        self,
        chats: Sequence[Chat],
        sampling: Sampling,
        labels: Sequence[str] | None = None,
        tools: ToolsApi | None = None,
    ) -> Iterator[list[tuple[int, Completion]]]:
        """Completions as they finish, at most `max_concurrency` requests in flight.

        Requests are submitted lazily (a window of max_concurrency), so stopping the
        iteration leaves nothing queued behind it. When an item fails for good, nothing new
        is sent, the requests already in flight are awaited and their answers yielded (they
        are paid for), and then the error is raised.
        """
        labels = list(labels) if labels is not None else [str(i) for i in range(len(chats))]
        pending: dict[Future, int] = {}
        next_index = 0
        ready: list[tuple[int, Completion]] = []
        failure: BaseException | None = None
        with ThreadPoolExecutor(max_workers=self.max_concurrency, thread_name_prefix="openai") as pool:
            try:
                while pending or (failure is None and next_index < len(chats)):
                    while failure is None and next_index < len(chats) and len(pending) < self.max_concurrency:
                        fut = pool.submit(self.complete, chats[next_index], sampling, labels[next_index], tools)
                        pending[fut] = next_index
                        next_index += 1
                    done, _ = wait(pending, return_when=FIRST_COMPLETED)
                    for fut in done:
                        index = pending.pop(fut)
                        exc = fut.exception()
                        if exc is None:
                            ready.append((index, fut.result()))
                        elif failure is None:
                            failure = exc
                    finished = not pending and (failure is not None or next_index >= len(chats))
                    if ready and (len(ready) >= self.flush_every or finished):
                        yield ready
                        ready = []
            finally:
                for fut in pending:
                    fut.cancel()
        if failure is not None:
            raise failure

    def close(self) -> None:
        self.client.close()

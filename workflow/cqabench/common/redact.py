"""Keep API keys out of every output: logs, raised errors, tracebacks, cache items, result files.

A server can echo the request back (a proxy's HTML error page that prints the headers, a JSON
error body quoting the `Authorization` header), and the openai/httpx exceptions' str() can hold
the request or the response; so every message built from a reply passes `redact()` before it
is logged, raised or stored. Choke points catch the rest: `install()` (called by the CLI) makes
every log record's message redacted as it is created (the record factory, which the openai
backend also installs), puts a redacting formatter on the root logger's handlers (tracebacks of
`log.exception`) and installs redacting `sys.excepthook` / `threading.excepthook`, so whatever
reaches the console or a job log is redacted even if a message was built without `redact()`.

What is masked, for every registered key (`register_key`, called by `read_api_key` and by the
CLI for every configured `api_key_env`, every `*_API_KEY` variable of the environment and the
hub token `HF_TOKEN`):

* the key itself, hence its `Bearer <key>` form;
* any run of at least `MIN_FRAGMENT` (8) consecutive characters of it. A reply is described by
  a snippet cut at 80 characters, and a cut can fall inside the key: what is left is a prefix
  (or, where a message keeps the tail, a suffix) that still pins the key down. 8 is the
  shortest run that is never shown on purpose (providers' dashboards show keys as a few
  leading characters and the last 4, e.g. "sk-...abcd"), and 8 random base-62 characters
  (~48 bits) are enough to tell one key from every other; a shorter run gives no useful clue
  about the rest, while masking shorter runs would garble ordinary text (prefixes like "sk-");
* its URL-encoded, JSON-escaped and HTML-escaped forms (the forms an echo can take), where
  they differ from the key;
* a token of 8+ characters after `Bearer ` or an `Authorization:` / `api-key:` header name, known
  key or not (a key from a variable nobody registered still does not get through); not in model
  answers (`headers=False`), where "Bearer" is a word.

Redaction runs on the full text before it is cut to a snippet, so a cut never leaves part of
a key that redaction did not see.
"""

from __future__ import annotations

import html
import json
import logging
import os
import re
import sys
import threading
import traceback
from collections.abc import Mapping
from types import TracebackType
from typing import Any
from urllib.parse import quote

MASK = "[redacted]"
MIN_FRAGMENT = 8  # consecutive characters of a key that are masked wherever they appear (see above)
MIN_KEY = 4  # a "key" shorter than this identifies nothing and masking it would garble every message

# A credential after `Bearer ` or a key header's name: a token of 8+ token characters (RFC 6750's
# b64token), so ordinary prose ("the bearer of") is left alone.
_HEADER_SECRET = re.compile(
    r"(?i)(\bbearer\s+|\b(?:authorization|x-api-key|api-key)[\"']?\s*[:=]\s*[\"']?(?:(?:bearer|basic|token)\s+)?)"
    r"[A-Za-z0-9._~+/=-]{8,}"
)

_lock = threading.Lock()
_keys: set[str] = set()
_fragments: frozenset[str] = frozenset()  # every MIN_FRAGMENT-long window of every form of every key
_whole: tuple[str, ...] = ()  # forms of keys shorter than MIN_FRAGMENT, longest first


def _forms(key: str) -> set[str]:
    """The key as an echo can carry it: plain, URL-encoded, JSON-escaped, HTML-escaped."""
    return {key, quote(key, safe=""), json.dumps(key)[1:-1], html.escape(key)}


def register_key(key: str | None) -> None:
    """Mask this secret from now on, in this process (idempotent, thread-safe)."""
    global _fragments, _whole
    if not key or len(key) < MIN_KEY:
        return
    with _lock:
        if key in _keys:
            return
        _keys.add(key)
        fragments, whole = set(_fragments), set(_whole)
        for form in _forms(key):
            if len(form) < MIN_FRAGMENT:
                whole.add(form)
            fragments.update(form[i : i + MIN_FRAGMENT] for i in range(len(form) - MIN_FRAGMENT + 1))
        _fragments = frozenset(fragments)
        _whole = tuple(sorted(whole, key=len, reverse=True))


# Tokens of the Hugging Face hub (`cqabench fetch-models` reads HF_TOKEN; the client also knows the old name).
TOKEN_VARIABLES = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")


def register_env_keys(llms: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None) -> None:
    """Register the key of every configured openai model (`api_key_env`), every `*_API_KEY`
    variable of the environment (the providers' naming convention, OPENAI_API_KEY included) and
    the hub tokens (`TOKEN_VARIABLES`)."""
    env = os.environ if environ is None else environ
    names = {n for n in env if n.upper().endswith("API_KEY")} | set(TOKEN_VARIABLES)
    for cfg in (llms or {}).values():
        if isinstance(cfg, Mapping) and cfg.get("api_key_env"):
            names.add(str(cfg["api_key_env"]))
    for name in names:
        register_key(env.get(name))


def forget_keys() -> None:
    """Drop every registered key (tests only: each test registers its own fake key)."""
    global _fragments, _whole
    with _lock:
        _keys.clear()
        _fragments, _whole = frozenset(), ()


def _spans(text: str) -> list[tuple[int, int]]:
    """Merged [start, end) ranges of `text` covered by a registered key or a fragment of one."""
    found: list[tuple[int, int]] = []
    for needle in list(_fragments) + list(_whole):
        start = text.find(needle)
        while start != -1:
            found.append((start, start + len(needle)))
            start = text.find(needle, start + 1)
    found.sort()
    merged: list[tuple[int, int]] = []
    for start, end in found:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def redact(text: object, headers: bool = True) -> str:
    """`text` (str() of anything) with every registered key and fragment of one masked, and with
    `headers`, every credential after `Bearer ` or a key header's name (off for model answers,
    which are prose: there only the registered keys are masked)."""
    s = text if isinstance(text, str) else str(text)
    if _fragments or _whole:
        spans = _spans(s)
        if spans:
            parts, last = [], 0
            for start, end in spans:
                parts += [s[last:start], MASK]
                last = end
            s = "".join(parts) + s[last:]
    return _HEADER_SECRET.sub(lambda m: m.group(1) + MASK, s) if headers else s


class RedactingFormatter(logging.Formatter):
    """Wraps a handler's formatter: the formatted record (message, arguments, traceback) is redacted."""

    def __init__(self, inner: logging.Formatter | None) -> None:
        super().__init__()
        self.inner = inner or logging.Formatter()

    def format(self, record: logging.LogRecord) -> str:
        return redact(self.inner.format(record))


def _redacting_factory(inner: Any) -> Any:
    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = inner(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 (a bad format string: logging itself reports it later)
            return record
        clean = redact(message)
        if clean != message:  # a record without a secret is left as it was made (msg objects, args)
            record.msg, record.args = clean, None
        return record

    factory.redacting = True  # type: ignore[attr-defined]
    return factory


def install_record_redaction() -> None:
    """Redact every log record's message as it is made, whichever logger or handler gets it.

    Process-wide and idempotent; the record factory is the one point every record passes (a
    filter on a logger misses records propagated from its children, a handler's formatter misses
    handlers added later, caplog's records included). Records are made only for enabled levels,
    so the cost is one `redact()` per line actually logged.
    """
    current = logging.getLogRecordFactory()
    if not getattr(current, "redacting", False):
        logging.setLogRecordFactory(_redacting_factory(current))


def install_log_redaction(logger: logging.Logger | None = None) -> None:
    """Redact every record's message, and everything the logger's handlers (the root logger's by
    default) write: the formatter also sees the traceback text of `log.exception`."""
    install_record_redaction()
    for handler in (logger or logging.getLogger()).handlers:
        if not isinstance(handler.formatter, RedactingFormatter):
            handler.setFormatter(RedactingFormatter(handler.formatter))


def _excepthook(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
    sys.stderr.write(redact("".join(traceback.format_exception(kind, exc, tb))))


def _thread_excepthook(args: threading.ExceptHookArgs) -> None:
    if args.exc_type is SystemExit:
        return
    name = args.thread.name if args.thread is not None else "?"
    text = "".join(traceback.format_exception(args.exc_type, args.exc_value, args.exc_traceback))
    sys.stderr.write(redact(f"Exception in thread {name}:\n{text}"))


def install(llms: Mapping[str, Any] | None = None) -> None:
    """The CLI's choke points: register the environment's keys, redact logs and uncaught tracebacks."""
    register_env_keys(llms)
    logging.captureWarnings(True)  # warnings.warn text goes through the redacting handlers too
    install_log_redaction()
    sys.excepthook = _excepthook
    threading.excepthook = _thread_excepthook

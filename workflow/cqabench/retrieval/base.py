"""The contract every retriever family (bm25, dense, splade, colbert) implements.

A family is a module with two functions and one optional constant:

    build_index(docs: Iterable[Doc], index_dir: Path, settings: dict) -> None
        `docs` yields (docid, title, text) once (it may be a generator). Write everything the
        family needs into `index_dir` (it exists and is empty). How title and text are joined is
        the family's choice (BM25 indexes them as separate fields).

    search(index_dir: Path, queries: list[QueryText], k: int, settings: dict) -> Results
        (qid, text) in, {qid: [(docid, score), ...]} out, best first, at most k per query; every
        qid of the input is a key (an empty list when nothing matched). Use `rank()` to order.

    resolve(settings: dict) -> dict   (optional)
        Defaults filled in and values checked (raise ConfigError); `type` may be dropped. What
        it returns is what settings.json records and what is compared, so `language: en`
        written out and left to its default name the same index.

    SEARCH_ONLY_KEYS: frozenset[str]   (optional)
        Setting names that change how a search runs but not what the index holds
        (threads, batch size, device, ...). They are left out of the index signature so an
        index is not rebuilt or refused because of them. `DEFAULT_SEARCH_ONLY_KEYS` always apply.

`settings` is the config dict of one retriever (`retrievers: {name: {type: ..., ...}}`), `type`
included. Callers go through `cqabench.retrieval.build_index/search`, which build into a
temporary directory, record the settings in `settings.json`, and refuse to search an index
built with other settings; so a family module never reads or writes `settings.json` itself.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from cqabench.common.errors import ConfigError

Doc = tuple[str, str, str]  # (docid, title, text)
QueryText = tuple[str, str]  # (qid, text)
Ranking = list[tuple[str, float]]  # (docid, score), best first
Results = dict[str, Ranking]

SETTINGS_FILE = "settings.json"
DEFAULT_SEARCH_ONLY_KEYS = frozenset({"threads", "batch_size", "query_batch_size", "device"})
_DEVICE = re.compile(r"^(cpu|cuda(:\d+)?)$")


def _normal(obj: Any) -> Any:
    """JSON round trip: tuples become lists and key order stops mattering, as in settings.json."""
    return json.loads(json.dumps(obj, sort_keys=True))


def index_signature(settings: Mapping[str, Any], search_only: Iterable[str] = ()) -> dict[str, Any]:
    """The part of the settings that decides what an index holds."""
    drop = DEFAULT_SEARCH_ONLY_KEYS | frozenset(search_only)
    return _normal({key: value for key, value in settings.items() if key not in drop})


def write_settings(index_dir: Path, settings: Mapping[str, Any]) -> None:
    """Record the exact settings an index was built with (all of them, search-only ones too)."""
    (Path(index_dir) / SETTINGS_FILE).write_text(
        json.dumps(_normal(dict(settings)), indent=2, sort_keys=True) + "\n", encoding="utf-8"
    )


def check_index(index_dir: Path, settings: Mapping[str, Any], search_only: Iterable[str] = ()) -> None:
    """Refuse a missing index or one built with other settings: reusing it would mislabel a run."""
    index_dir = Path(index_dir)
    recorded_path = index_dir / SETTINGS_FILE
    if not index_dir.is_dir():
        raise ConfigError(f"index {index_dir} does not exist; build it first (cqabench index)")
    if not recorded_path.is_file():
        raise ConfigError(f"index {index_dir} has no {SETTINGS_FILE}; it was not built by cqabench index")
    try:
        recorded = json.loads(recorded_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{recorded_path} is not valid JSON ({exc.msg}); rebuild the index") from None
    built = index_signature(recorded, search_only)
    asked = index_signature(settings, search_only)
    if built != asked:
        diff = sorted(
            f"{key}: index has {built.get(key, '<unset>')!r}, asked {asked.get(key, '<unset>')!r}"
            for key in set(built) | set(asked)
            if built.get(key) != asked.get(key)
        )
        raise ConfigError(f"index {index_dir} was built with other settings ({'; '.join(diff)}); rebuild it")


def check_positive_int(family: str, settings: Mapping[str, Any], *keys: str) -> None:
    """Each of `keys` that is set must be a positive integer (`batch_size: "abc"` fails planning)."""
    for key in keys:
        value = settings.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise ConfigError(f"{family} retriever: {key} must be a positive integer, got {value!r}")


def check_device(family: str, device: Any, allowed: str = "cpu, cuda or cuda:N") -> str:
    """`cpu`, `cuda` or `cuda:N`, checked at planning time; whether the GPU is there is checked
    where the model is loaded (`cqabench.retrieval.encoders.require_device`)."""
    if not isinstance(device, str) or not _DEVICE.match(device):
        raise ConfigError(f"{family} retriever: device must be {allowed}, got {device!r}")
    return device


def rank(scored: Iterable[tuple[str, float]], k: int) -> Ranking:
    """Best k by score, ties by docid descending.

    trec_eval (and so pytrec_eval) ignores the rank column and orders a run by score, breaking
    ties by docid in reverse string order; ranking the same way keeps our rank column, the
    order rank-based metrics (StrategyQA Recall@10) see, and what trec_eval scores identical.
    """
    ordered = sorted(((str(d), float(s)) for d, s in scored), key=lambda pair: pair[0], reverse=True)
    ordered.sort(key=lambda pair: pair[1], reverse=True)  # stable: equal scores keep docid desc
    return ordered[:k]

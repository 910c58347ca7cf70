"""Encoding in `encode_jobs` part jobs (cqabench.retrieval.parts): scatter / gather.

On the real TAT-QA sample corpus (252 documents, tables serialized as `pipe`), encoded with the
bundled MiniLM on onnxruntime int8 as config/config.yaml runs it: the index gathered from 3 part
jobs equals the single job's index byte for byte (docids, every shard, dense.json) and gives the
same top-100 (docids and scores) for all 240 sample questions; SPLADE likewise (a tiny local
MLM, flushes made small so the parts split real chunks); ColBERT (a tiny local checkpoint,
chunks of 40) from one codec job and 3 part jobs equals colbert-ai's own single-job index file
by file. The gather refuses parts that do not
tile the corpus, naming the part file and field. A real Snakemake run with encode_jobs 3, one
part job SIGKILLed while it runs and rerun: only that part, the gather and nothing else run.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import models_fixtures as mf  # noqa: E402
from cqabench import retrieval as retrievers  # noqa: E402
from cqabench.common.errors import ConfigError, DataError  # noqa: E402
from cqabench.data import documents  # noqa: E402
from cqabench.retrieval import colbert, jobs, parts, splade  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
RAW = REPO / "resources" / "raw"
# As config/config.yaml's minilm, with shards of 40 documents: 252 documents make 7 shards, and 3
# parts hold shards 0-1, 2-3 and 4-6 (rows 0-80, 80-160, 160-252).
MINILM = {"type": "dense", "family": "sentence-transformers", "model": mf.MINILM, "similarity": "cosine",
          "max_length": 256, "backend": "onnx", "quantize": "int8", "batch_size": 32, "shard_size": 40}  # fmt: skip


@pytest.fixture(scope="module")
def tatqa(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from cqabench.data.prepare import prepare

    out = tmp_path_factory.mktemp("tatqa")
    prepare("tatqa", "dev", {"questions": RAW / "tatqa" / "tatqa_dataset_dev.sample.json"}, out)
    return out


def _queries(data: Path) -> list[tuple[str, str]]:
    return [(r["qid"], r["question"]) for r in pq.read_table(data / "queries.parquet").to_pylist()]


def _scattered(corpus: Path, settings: dict[str, Any], n: int, root: Path) -> tuple[list[Path], Path]:
    """N part jobs through the CLI, then the gather, as the rules run them (ColBERT's, with its
    --codec, run through the rules themselves: `colbert_rules`)."""
    from cqabench.cli import main

    folders = [root / f"{i}-of-{n}" for i in range(n)]
    for i, folder in enumerate(folders):
        assert main(["encode-part", "--corpus", str(corpus), "--serialization", "pipe", "--retriever-settings",
                     json.dumps(settings), "--part", str(i), "--of", str(n), "--out", str(folder)]) == 0  # fmt: skip
    index = root / "gathered"
    assert main(["gather-index", "--corpus", str(corpus), "--serialization", "pipe", "--retriever-settings",
                 json.dumps(settings), "--parts", *map(str, folders), "--out", str(index)]) == 0  # fmt: skip
    return folders, index


def test_part_rows_cut_whole_chunks_by_hand() -> None:
    # 252 rows in chunks of 40: 7 chunks; part i of 3 holds chunks [7i//3, 7(i+1)//3) = 0-2, 2-4, 4-7.
    assert [parts.part_rows(252, 40, i, 3) for i in range(3)] == [(0, 80), (80, 160), (160, 252)]
    # Fewer chunks than parts: the first parts are empty, the last holds everything.
    assert [parts.part_rows(10, 40, i, 3) for i in range(3)] == [(0, 0), (0, 0), (0, 10)]
    assert [parts.part_rows(0, 40, i, 2) for i in range(2)] == [(0, 0), (0, 0)]
    assert parts.part_rows(100, 10, 0, 1) == (0, 100)
    with pytest.raises(ConfigError, match="part 3 of 3"):
        parts.part_rows(10, 4, 3, 3)


def test_a_row_range_reads_exactly_those_rows_across_row_groups(tatqa: Path, tmp_path: Path) -> None:
    table = pq.read_table(tatqa / "corpus.parquet")
    corpus = tmp_path / "corpus.parquet"
    pq.write_table(table, corpus, row_group_size=30)  # 9 row groups: ranges cross their borders
    assert pq.ParquetFile(corpus).metadata.num_row_groups == 9 and documents.corpus_rows(corpus) == 252
    every = list(jobs.read_documents(corpus, "pipe"))
    for start, stop in ((0, 80), (80, 160), (160, 252), (29, 31), (0, 0), (250, 252)):
        assert list(jobs.read_documents(corpus, "pipe", (start, stop))) == every[start:stop]


@pytest.fixture(scope="module")
def onnx_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The module's CQABENCH_EXPORT_CACHE, as the rules set it (cache/onnx): MiniLM is exported to
    ONNX int8 once, by the first job that needs it, and every later index job of the module (the
    dense pair's, the Snakemake run's part jobs) copies that export (issue 35)."""
    return tmp_path_factory.mktemp("onnx-cache")


@pytest.fixture(scope="module")
def dense_pair(tatqa: Path, onnx_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("dense_parts")
    os.environ["CQABENCH_EXPORT_CACHE"] = str(onnx_cache)  # as the rules set it: one export
    try:
        single = root / "single"
        jobs.index_corpus(tatqa / "corpus.parquet", "pipe", MINILM, single)
        folders, gathered = _scattered(tatqa / "corpus.parquet", {**MINILM, "encode_jobs": 3}, 3, root)
    finally:
        del os.environ["CQABENCH_EXPORT_CACHE"]
    return {"single": single, "gathered": gathered, "parts": folders, "root": root}


def test_three_dense_parts_build_the_single_job_index_bitwise(dense_pair: dict[str, Any], tatqa: Path) -> None:
    single, gathered = dense_pair["single"], dense_pair["gathered"]
    assert [parts.read_part(f)["rows"] for f in dense_pair["parts"]] == [[0, 80], [80, 160], [160, 252]]
    assert [parts.read_part(f)["shards"] for f in dense_pair["parts"]] == [
        ["00000.npy", "00001.npy"],
        ["00002.npy", "00003.npy"],
        ["00004.npy", "00005.npy", "00006.npy"],
    ]
    assert (single / "docids.txt").read_bytes() == (gathered / "docids.txt").read_bytes()
    assert len((gathered / "docids.txt").read_text().splitlines()) == 252
    names = sorted(p.name for p in (single / "shards").iterdir())
    assert names == sorted(p.name for p in (gathered / "shards").iterdir()) and len(names) == 7
    for name in names:
        assert (single / "shards" / name).read_bytes() == (gathered / "shards" / name).read_bytes(), name
    assert (single / "dense.json").read_bytes() == (gathered / "dense.json").read_bytes()
    # settings.json differs only in the search-only encode_jobs; either settings search either index.
    a, b = (json.loads((d / "settings.json").read_text()) for d in (single, gathered))
    assert {k for k in set(a) | set(b) if a.get(k) != b.get(k)} == {"encode_jobs"}
    queries = _queries(tatqa)
    assert len(queries) == 240
    one = retrievers.search(single, queries, 100, MINILM)
    three = retrievers.search(gathered, queries, 100, {**MINILM, "encode_jobs": 3})
    assert one == three  # same docids, same order, same float scores, for all 240 questions
    assert all(len(r) == 100 for r in one.values())


def test_the_gather_refuses_parts_that_do_not_tile_the_corpus(
    dense_pair: dict[str, Any], tatqa: Path, tmp_path: Path
) -> None:
    corpus = tatqa / "corpus.parquet"
    settings = {**MINILM, "encode_jobs": 3}
    folders = dense_pair["parts"]
    out = tmp_path / "index"
    with pytest.raises(DataError, match=r"0-of-3/part.json: record 'part 1', field 'part'"):
        parts.gather_index(corpus, "pipe", settings, [folders[0], folders[0], folders[2]], out)
    with pytest.raises(DataError, match="field 'of'"):
        parts.gather_index(corpus, "pipe", settings, folders[:2], out)
    with pytest.raises(DataError, match=r"field 'signature': made with other settings \(differs in: max_length\)"):
        parts.gather_index(corpus, "pipe", {**settings, "max_length": 128}, folders, out)
    # A part whose docids repeat one of another part's: named, with both part folders.
    copies = [tmp_path / f.name for f in folders]
    for src, dst in zip(folders, copies):
        shutil.copytree(src, dst)
    first = (copies[0] / "docids.txt").read_text().splitlines()[0]
    lines = (copies[2] / "docids.txt").read_text().splitlines()
    (copies[2] / "docids.txt").write_text("\n".join([first, *lines[1:]]) + "\n")
    with pytest.raises(DataError, match=rf"record '{first}', field 'docid': duplicate document id"):
        parts.gather_index(corpus, "pipe", settings, copies, out)
    shutil.rmtree(copies[1])
    with pytest.raises(DataError, match="1-of-3/part.json.*no part.json"):
        parts.gather_index(corpus, "pipe", settings, copies, out)
    assert not out.exists()  # nothing half-built
    with pytest.raises(ConfigError, match="cannot be encoded in parts"):
        parts.encode_corpus_part(corpus, "pipe", {"type": "bm25"}, 0, 2, tmp_path / "bm25")


@pytest.mark.jvm
def test_splade_parts_build_the_single_job_index(tatqa: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SPLADE's parts cut at multiples of its encoder flush (1024 documents; 60 here, so the
    252 documents make 5 flushes, and 3 parts hold 1, 2 and 2 of them)."""
    import torch
    from transformers import AutoTokenizer, BertForMaskedLM

    monkeypatch.setattr(splade, "FLUSH_DOCS", 60)
    model = mf.tiny_mlm(tmp_path / "mlm")
    # Output bias lowered (as tests/retrieval/test_splade.py's random_mlm) so a text gets a few hundred
    # terms, like a trained SPLADE, instead of half the vocabulary.
    mlm = BertForMaskedLM.from_pretrained(model).eval()
    with torch.no_grad():
        texts = [d[2] for d in mf.TOY_DOCS]
        logits = mlm(**AutoTokenizer.from_pretrained(model)(texts, padding=True, return_tensors="pt")).logits
        mlm.cls.predictions.bias -= torch.quantile(logits.flatten()[::7], 0.9995)
    mlm.save_pretrained(model)
    settings = {"type": "splade", "model": str(model), "doc_max_length": 32, "quantization": 100}
    corpus = tatqa / "corpus.parquet"
    single = tmp_path / "single"
    jobs.index_corpus(corpus, "pipe", settings, single)
    folders, gathered = _scattered(corpus, {**settings, "encode_jobs": 3}, 3, tmp_path)
    assert [parts.read_part(f)["rows"] for f in folders] == [[0, 60], [60, 180], [180, 252]]
    queries = _queries(tatqa)[:60]
    one = retrievers.search(single, queries, 100, settings)
    three = retrievers.search(gathered, queries, 100, {**settings, "encode_jobs": 3})
    assert one == three and sum(len(r) for r in one.values()) > 0


def _torch_files_equal(a: Path, b: Path) -> bool:
    import torch

    x, y = torch.load(a), torch.load(b)
    if isinstance(x, tuple):
        return isinstance(y, tuple) and len(x) == len(y) and all(torch.equal(u, v) for u, v in zip(x, y))
    return torch.equal(x, y)


@pytest.mark.colbert
@pytest.mark.snakemake
def test_colbert_parts_build_colbert_ais_single_job_index(
    tatqa: Path, tmp_path: Path, colbert_rules: dict[str, Any]
) -> None:
    """One codec job, 3 part jobs, the gather: the PLAID index colbert-ai's `Indexer.index` builds.

    The scattered index is the one the rules built (`colbert_rules`: colbert-codec, encode-part and
    gather-index as Snakemake runs them; once built here through the CLI as well, the same
    commands, issue 35), compared with colbert-ai's single job on the same corpus.
    252 documents in colbert-ai chunks of 40 make 7 chunks; the parts hold chunks 0-1, 2-3 and
    4-6. Every tensor file (codec, codes, residuals, IVF) is equal, every doclens and chunk
    metadata file is byte-equal, metadata.json equal but for the paths and run name, and the first
    60 questions get the same top-100 docids and scores.
    """
    work, settings = colbert_rules["work"], colbert_rules["settings"]
    corpus = tatqa / "corpus.parquet"
    # the corpus the rules encoded is this module's prepared TAT-QA sample
    assert pq.read_table(work / "results/sample/data/tatqa/dev/corpus.parquet").equals(pq.read_table(corpus))
    single = tmp_path / "single"
    jobs.index_corpus(corpus, "pipe", settings, single)
    scattered = {**settings, "encode_jobs": 3}
    codec = work / COLBERT_PARTS / "codec"
    assert json.loads((codec / colbert.CODEC_FILE).read_text())["num_chunks"] == 7
    folders, gathered = [work / COLBERT_PARTS / f"{i}-of-3" for i in range(3)], work / COLBERT_INDEX
    assert [parts.read_part(f)["chunks"] for f in folders] == [[0, 1], [2, 3], [4, 5, 6]]
    one, many = single / colbert.PLAID_DIR, gathered / colbert.PLAID_DIR
    names = sorted(p.name for p in one.iterdir())
    assert names == sorted(p.name for p in many.iterdir())
    assert {"ivf.pid.pt", "centroids.pt", "6.residuals.pt", "doclens.6.json", "6.metadata.json"} <= set(names)
    for name in names:
        if name.endswith(".pt"):
            assert _torch_files_equal(one / name, many / name), name
        elif name in ("metadata.json", "plan.json"):
            a, b = json.loads((one / name).read_text()), json.loads((many / name).read_text())
            paths = {"index_path", "collection", "root", "index_name", "experiment", "name"}  # paths; run time
            assert {k: v for k, v in a.items() if k != "config"} == {k: v for k, v in b.items() if k != "config"}, name
            assert {k: v for k, v in a["config"].items() if k not in paths} == {
                k: v for k, v in b["config"].items() if k not in paths
            }, name
        else:
            assert (one / name).read_bytes() == (many / name).read_bytes(), name
    assert (single / "docids.txt").read_bytes() == (gathered / "docids.txt").read_bytes()
    queries = _queries(tatqa)[:60]
    assert retrievers.search(single, queries, 100, settings) == retrievers.search(gathered, queries, 100, scattered)
    with pytest.raises(DataError, match=r"codec.json.*'rows': is 252, the parts need 251"):
        colbert.read_codec(codec, 251, 40)


# ---- a real Snakemake run: a killed part job is rerun alone ----


def _workdir(tmp_path: Path) -> Path:
    """A folder that runs this repository's workflow with its own results/."""
    work = tmp_path / "work"
    work.mkdir()
    for name in ("Snakefile", "workflow", "config", "profiles", "resources"):
        (work / name).symlink_to(REPO / name)
    return work


def _snakemake(work: Path, config: Path, *args: str, export_cache: Path | None = None) -> str:
    """`snakemake --configfile config --cores 1 args` in `work`, asserted to succeed; its output.
    `export_cache`: the jobs' CQABENCH_EXPORT_CACHE (None: the rules' default, cache/onnx)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1",
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}  # fmt: skip
    if export_cache is not None:
        env["CQABENCH_EXPORT_CACHE"] = str(export_cache)
    done = subprocess.run([sys.executable, "-m", "snakemake", "--configfile", str(config), "--cores", "1", *args],
                          cwd=work, capture_output=True, text=True, env=env, timeout=600, check=False)  # fmt: skip
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    return done.stdout + done.stderr


@pytest.mark.snakemake
def test_a_killed_part_job_is_rerun_alone(tmp_path: Path, onnx_cache: Path) -> None:
    """Parts 0 and 2 finished (Snakemake), part 1's job SIGKILLed while it runs (no cleanup of any
    kind, as a lost node or SLURM's kill would): the next run of the index runs exactly part 1's
    job and the gather, and leaves the finished parts' files as they were."""
    from dry_runs import parse

    work = _workdir(tmp_path)
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    config["retrievers"]["minilm"].update({"encode_jobs": 3, "shard_size": 40})
    config_file = work / "parts.yaml"
    config_file.write_text(yaml.safe_dump(config))
    index = "results/sample/index/tatqa/pipe/minilm"
    part_dirs = [work / f"results/sample/index_parts/tatqa/pipe/minilm/{i}-of-3" for i in range(3)]

    _snakemake(
        work,
        config_file,
        str(part_dirs[0].relative_to(work)),
        str(part_dirs[2].relative_to(work)),
        export_cache=onnx_cache,
    )
    assert part_dirs[0].is_dir() and part_dirs[2].is_dir() and not (work / index).exists()
    before = {p.name: (p / parts.PART_FILE).stat().st_mtime_ns for p in (part_dirs[0], part_dirs[2])}

    # Part 1's job, as the rule runs it, killed once it has started writing its part.
    env = {**os.environ, "PYTHONPATH": str(REPO / "workflow"), "CQABENCH_EXPORT_CACHE": str(onnx_cache)}
    job = subprocess.Popen([sys.executable, "-m", "cqabench.cli", "encode-part", "--corpus",
                            str(work / "results/sample/data/tatqa/dev/corpus.parquet"), "--serialization", "pipe",
                            "--retriever-settings", json.dumps(config["retrievers"]["minilm"]), "--part", "1",
                            "--of", "3", "--out", str(part_dirs[1])],
                           cwd=work, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.monotonic() + 300
    while not list(part_dirs[1].parent.glob(".1-of-3.*.tmp")) and time.monotonic() < deadline:
        time.sleep(0.2)
    os.kill(job.pid, signal.SIGKILL)
    job.wait()
    assert list(part_dirs[1].parent.glob(".1-of-3.*.tmp")), "the job never started writing"
    assert not part_dirs[1].exists()  # a killed part leaves nothing that looks complete

    plan = parse(_snakemake(work, config_file, "-n", index, export_cache=onnx_cache)).counts
    assert plan == {"encode_part": 1, "gather_index": 1}, plan
    out = _snakemake(work, config_file, index, export_cache=onnx_cache)
    assert parse(out).counts == plan  # the real run's job stats: those two jobs ran, nothing else
    assert "wildcards: corpus=tatqa, serialization=pipe, retriever=minilm, part=1, parts=3" in out
    after = {p.name: (p / parts.PART_FILE).stat().st_mtime_ns for p in (part_dirs[0], part_dirs[2])}
    assert after == before  # the finished parts were not rerun
    assert not list(part_dirs[1].parent.glob(".1-of-3.*.tmp"))  # the killed job's leftovers swept
    assert len((work / index / "docids.txt").read_text().splitlines()) == 252
    assert [parts.read_part(p)["rows"] for p in part_dirs] == [[0, 80], [80, 160], [160, 252]]


COLBERT_INDEX = "results/sample/index/tatqa/pipe/colbert"
COLBERT_PARTS = "results/sample/index_parts/tatqa/pipe/colbert"


@pytest.fixture(scope="module")
def colbert_rules(tiny_colbert_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The rules wired as config/dexter.yaml uses them, planned (`-n`) and run for real once on the
    TAT-QA sample with the session's tiny ColBERT (colbert-ai chunks of 40, encode_jobs 3): the
    index both ColBERT tests below read, built once (issue 35)."""
    work = _workdir(tmp_path_factory.mktemp("colbert_rules"))
    settings = {"type": "colbert", "model": str(tiny_colbert_dir), "nbits": 2, "doc_maxlen": 32, "query_maxlen": 16,
                "kmeans_niters": 2, "chunksize": 40, "timeout_s": 900}  # fmt: skip
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    config["retrievers"]["colbert"] = {**settings, "encode_jobs": 3}
    config_file = work / "colbert.yaml"
    config_file.write_text(yaml.safe_dump(config))
    plan = _snakemake(work, config_file, "-n", COLBERT_INDEX)
    return {"work": work, "settings": settings, "plan": plan, "run": _snakemake(work, config_file, COLBERT_INDEX)}


@pytest.mark.snakemake
def test_snakemake_builds_a_colbert_index_from_its_codec_and_parts(colbert_rules: dict[str, Any]) -> None:
    """The rules wired as config/dexter.yaml uses them, run for real on the TAT-QA sample: one
    colbert_codec job, then 3 encode_part jobs given its folder, then gather_index."""
    from dry_runs import parse

    work = colbert_rules["work"]
    plan = parse(colbert_rules["plan"]).counts
    assert {r: plan.get(r) for r in ("colbert_codec", "encode_part", "gather_index", "index")} == {
        "colbert_codec": 1, "encode_part": 3, "gather_index": 1, "index": None}, plan  # fmt: skip
    out = colbert_rules["run"]
    assert "--codec results/sample/index_parts/tatqa/pipe/colbert/codec" in out
    meta = json.loads((work / COLBERT_INDEX / colbert.PLAID_DIR / "metadata.json").read_text())
    assert (meta["num_chunks"], len((work / COLBERT_INDEX / "docids.txt").read_text().splitlines())) == (7, 252)
    folders = [work / COLBERT_PARTS / f"{i}-of-3" for i in range(3)]
    assert [parts.read_part(f)["chunks"] for f in folders] == [[0, 1], [2, 3], [4, 5, 6]]

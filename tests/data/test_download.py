"""`cqabench download` on real raw files served from file:// URLs (urllib's own file handler, so no
server is faked): good archives unpack and verify, bad ones are errors naming the URL, with no
output and no temporary left."""

from __future__ import annotations

import gzip
import hashlib
import json
import zipfile
from pathlib import Path

import pytest

from cqabench.cli import main

RAW = Path(__file__).resolve().parents[2] / "resources" / "raw"
REAL = RAW / "finqa" / "dev.json"  # one real FinQA record


def _download(url: str, out: Path, member: str | None = None, sha256: str | None = None) -> int:
    spec = {"url": url, **({"member": member} if member else {}), **({"sha256": sha256} if sha256 else {})}
    return main(
        [
            "download",
            "--name",
            "finqa/dev.json",
            "--spec",
            json.dumps(spec),
            "--raw-dir",
            "resources/raw",
            "--out",
            str(out),
        ]
    )


def test_a_real_zip_member_and_gzip_unpack_and_verify(tmp_path: Path) -> None:
    content = REAL.read_bytes()
    digest = hashlib.sha256(content).hexdigest()
    archive = tmp_path / "finqa.zip"
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("dataset/dev.json", content)
    gz = tmp_path / "dev.json.gz"
    gz.write_bytes(gzip.compress(content))
    for url, member in ((archive.as_uri(), "dataset/dev.json"), (gz.as_uri(), None)):
        out = tmp_path / "out" / "dev.json"
        assert _download(url, out, member, digest) == 0
        assert out.read_bytes() == content
        out.unlink()


@pytest.mark.parametrize(
    "kind", ["not a zip", "truncated zip", "not a gzip", "truncated gzip", "no such member", "empty reply"]
)
def test_a_bad_archive_is_an_error_naming_the_url_and_leaves_nothing(kind: str, tmp_path: Path, capsys) -> None:
    content = REAL.read_bytes()
    served = tmp_path / "served"
    served.mkdir()
    member = "dataset/dev.json"
    if kind in ("not a zip", "not a gzip"):
        src = served / ("finqa.zip" if kind == "not a zip" else "dev.json.gz")
        src.write_bytes(b"<!DOCTYPE html><html>Sign in to continue</html>")  # what a login page sends
    elif kind in ("truncated zip", "no such member"):
        src = served / "finqa.zip"
        with zipfile.ZipFile(src, "w", compression=zipfile.ZIP_DEFLATED) as zf:
            zf.writestr(member if kind == "truncated zip" else "other/train.json", content)
        if kind == "truncated zip":
            src.write_bytes(src.read_bytes()[: len(src.read_bytes()) // 2])
    elif kind == "truncated gzip":
        src = served / "dev.json.gz"
        packed = gzip.compress(content)
        src.write_bytes(packed[: len(packed) // 2])
    else:
        src = served / "dev.json"
        src.write_bytes(b"")
    out_dir = tmp_path / "out"
    rc = _download(src.as_uri(), out_dir / "dev.json", member if src.suffix == ".zip" else None)
    err = capsys.readouterr().err
    assert rc == 1 and "Traceback" not in err
    assert src.as_uri() in err and "finqa/dev.json" in err and "place the file at resources/raw/finqa/dev.json" in err
    expected = {
        "not a zip": "not a valid zip archive",
        "truncated zip": "not a valid zip archive",
        "not a gzip": "not a valid gzip file",
        "truncated gzip": "not a valid gzip file",
        "no such member": "has no member 'dataset/dev.json'",
        "empty reply": "sent 0 bytes",
    }[kind]
    assert expected in err
    assert list(out_dir.iterdir()) == []  # neither the output nor a temporary


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        # Hand check: the "'" is the 2nd character of line 1, where json expects a property name.
        (
            "{'url': 'x'}",
            "--spec: not valid JSON at line 1, column 2: Expecting property name enclosed in double quotes",
        ),
        ('["https://x"]', "--spec: expected a JSON object {url, sha256, member}, got list"),
    ],
)
def test_a_bad_spec_is_one_error_line_naming_spec(spec: str, expected: str, tmp_path: Path, capsys) -> None:
    """Issue 21 (WEAK): bad JSON in --spec was a JSONDecodeError traceback."""
    code = main(
        [
            "download",
            "--name",
            "finqa/dev.json",
            "--spec",
            spec,
            "--raw-dir",
            "resources/raw",
            "--out",
            str(tmp_path / "dev.json"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 1
    assert err.startswith(f"cqabench download: error: {expected}"), err
    assert "Traceback" not in err and not (tmp_path / "dev.json").exists()

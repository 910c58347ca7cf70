"""Fetch one raw file of a full dataset, verified by checksum; offline, say where to put it."""

from __future__ import annotations

import gzip
import logging
import shutil
import urllib.request
import zipfile
import zlib
from pathlib import Path

from cqabench.common.errors import CqaError
from cqabench.common.io import atomic_path, sha256_file

log = logging.getLogger(__name__)


def _unzip_member(tmp: Path, member: str, name: str, url: str, hint: str) -> None:
    """Replace the downloaded archive `tmp` by its `member`; a reply that is no zip (an HTML
    error page, a cut-short transfer) or lacks the member is an error naming the URL."""
    try:
        with zipfile.ZipFile(tmp) as zf:
            if member not in zf.namelist():
                listed = ", ".join(sorted(zf.namelist())[:10])
                raise CqaError(
                    f"{name}: the zip archive at {url} has no member {member!r} (it holds: {listed}); "
                    f"check `member` in the config, or {hint}"
                )
            with zf.open(member) as src:
                data = src.read()
    except (zipfile.BadZipFile, EOFError, zlib.error) as exc:
        raise CqaError(f"{name}: what {url} sent is not a valid zip archive ({exc}; {_head(tmp)}); {hint}") from None
    tmp.write_bytes(data)


def _gunzip(tmp: Path, name: str, url: str, hint: str) -> None:
    """Replace the downloaded `tmp` by its gunzipped content; a reply that is no gzip is an error naming the URL."""
    try:
        with gzip.open(tmp) as src:
            data = src.read()
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
        raise CqaError(f"{name}: what {url} sent is not a valid gzip file ({exc}; {_head(tmp)}); {hint}") from None
    tmp.write_bytes(data)


def _head(path: Path) -> str:
    """The first bytes of a bad download, which usually say what it is ("<!DOCTYPE html>")."""
    with open(path, "rb") as fh:
        head = fh.read(40)
    return f"{path.stat().st_size} bytes starting {head!r}"


def fetch(
    url: str | None,
    out: Path,
    name: str,
    raw_dir: str,
    sha256: str | None = None,
    member: str | None = None,
    timeout: float = 60.0,
) -> None:
    """Download `url` (or `member` of the zip archive at `url`; a .gz is unpacked) to `out`, then check its sha256."""
    hint = f"place the file at {raw_dir}/{name}" + (f" (sha256 {sha256})" if sha256 else "")
    if not url:
        raise CqaError(f"{name}: no URL is configured for this file and it is not under {raw_dir}/; {hint}")
    with atomic_path(out) as tmp:
        try:
            with urllib.request.urlopen(url, timeout=timeout) as resp, open(tmp, "wb") as fh:
                shutil.copyfileobj(resp, fh)
        except OSError as exc:
            raise CqaError(f"{name}: cannot download {url} ({exc}); offline, {hint}") from None
        if tmp.stat().st_size == 0:
            raise CqaError(f"{name}: {url} sent 0 bytes; {hint}")
        if member:
            _unzip_member(tmp, member, name, url, hint)
        elif url.split("?")[0].endswith(".gz"):
            _gunzip(tmp, name, url, hint)
        actual = sha256_file(tmp)
        if sha256 and actual != sha256:
            raise CqaError(f"{name}: checksum mismatch for {url}: expected {sha256}, got {actual}")
        if not sha256:
            log.warning("%s: no checksum configured; downloaded file has sha256 %s", name, actual)

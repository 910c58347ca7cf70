"""Fetch one raw file of a full dataset, verified by checksum; offline, say where to put it."""

from __future__ import annotations

import gzip
import logging
import shutil
import urllib.request
import zipfile
from pathlib import Path

from cqabench.errors import CqaError
from cqabench.io import atomic_path, sha256_file

log = logging.getLogger(__name__)



def fetch(url: str | None, out: Path, name: str, raw_dir: str, sha256: str | None = None,
          member: str | None = None, timeout: float = 60.0) -> None:
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
        if member:
            with zipfile.ZipFile(tmp) as zf, zf.open(member) as src:
                data = src.read()
            tmp.write_bytes(data)
        elif url.split("?")[0].endswith(".gz"):
            with gzip.open(tmp) as src:
                data = src.read()
            tmp.write_bytes(data)
        actual = sha256_file(tmp)
        if sha256 and actual != sha256:
            raise CqaError(f"{name}: checksum mismatch for {url}: expected {sha256}, got {actual}")
        if not sha256:
            log.warning("%s: no checksum configured; downloaded file has sha256 %s", name, actual)

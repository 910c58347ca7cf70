"""A loopback stand-in for the Hugging Face hub: the HTTP endpoints `snapshot_download` calls.

The real `huggingface_hub` client (0.36, the project venv's) is pointed at it with `HF_ENDPOINT`
or `endpoint=`; what it serves was read off the client's source:

* `GET /api/models/<repo>/revision/<rev>` (`HfApi.model_info`; `?blobs=True` with
  files_metadata): JSON with `id`, `sha` (the commit the revision resolves to) and `siblings`
  (`rfilename`, `size`). An unknown revision is 404 with `X-Error-Code: RevisionNotFound`, an
  unknown repository 401 with `X-Error-Code: RepoNotFound`, as the hub answers.
* `HEAD` / `GET /<repo>/resolve/<rev>/<file>` (`get_hf_file_metadata`, then the download): the
  client refuses a file without `X-Repo-Commit`, `ETag` and `Content-Length`; it sends
  `Range: bytes=N-` to resume, answered with 206.

A gated repository answers its files with 401 (`X-Error-Code: GatedRepo`) without an
`Authorization: Bearer <token>` header, and with 403 for a wrong token, echoing the token it was
sent in `X-Error-Message`: a hostile echo, so the tests can check that no output shows it.
Every request is recorded (method, path, whether and which token it carried).
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit


@dataclass
class Repo:
    files: dict[str, bytes]
    commit: str
    branches: dict[str, str] = field(default_factory=dict)
    gated: bool = False

    def resolve(self, revision: str) -> str | None:
        if revision == self.commit:
            return self.commit
        return self.branches.get(revision)


def commit_of(text: str) -> str:
    """A deterministic 40-hex commit id for a test repository."""
    return hashlib.sha1(text.encode()).hexdigest()


def files_of(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


class LoopbackHub:
    def __init__(self, repos: dict[str, Repo], token: str) -> None:
        self.repos, self.token = repos, token
        self.requests: list[dict[str, str | None]] = []
        self._lock = threading.Lock()
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                hub._handle(self, body=True)

            def do_HEAD(self) -> None:
                hub._handle(self, body=False)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> LoopbackHub:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    # ---- request handling ----

    def _send(
        self, h: BaseHTTPRequestHandler, status: int, headers: dict[str, str], body: bytes, send_body: bool
    ) -> None:
        h.send_response(status)
        for k, v in {**headers, "Content-Length": str(len(body))}.items():
            h.send_header(k, v)
        h.end_headers()
        if send_body:
            h.wfile.write(body)

    def _error(self, h: BaseHTTPRequestHandler, status: int, code: str, message: str, send_body: bool) -> None:
        body = json.dumps({"error": message}).encode()
        self._send(
            h,
            status,
            {"X-Error-Code": code, "X-Error-Message": message, "Content-Type": "application/json"},
            body,
            send_body,
        )

    def _handle(self, h: BaseHTTPRequestHandler, body: bool) -> None:
        path = unquote(urlsplit(h.path).path)
        auth = h.headers.get("Authorization") or ""
        token = auth.removeprefix("Bearer ").strip() if auth.startswith("Bearer ") else None
        with self._lock:
            self.requests.append({"method": h.command, "path": path, "token": token})
        if path.startswith("/api/models/") and "/revision/" in path:
            repo_id, revision = path.removeprefix("/api/models/").split("/revision/", 1)
            self._model_info(h, repo_id, revision, body)
        elif "/resolve/" in path:
            repo_id, rest = path.lstrip("/").split("/resolve/", 1)
            revision, _, filename = rest.partition("/")
            self._resolve(h, repo_id, revision, filename, token, body)
        else:
            self._error(h, 404, "EntryNotFound", f"no route {path}", body)

    def _model_info(self, h: BaseHTTPRequestHandler, repo_id: str, revision: str, body: bool) -> None:
        repo = self.repos.get(repo_id)
        if repo is None:
            return self._error(h, 401, "RepoNotFound", f"Repository Not Found for url: {repo_id}", body)
        commit = repo.resolve(revision)
        if commit is None:
            return self._error(h, 404, "RevisionNotFound", f"Invalid rev id: {revision}", body)
        doc = {"id": repo_id, "modelId": repo_id, "sha": commit, "private": False,
               "gated": "manual" if repo.gated else False, "tags": [], "downloads": 0, "likes": 0,
               "siblings": [{"rfilename": n, "size": len(b)} for n, b in sorted(repo.files.items())]}  # fmt: skip
        self._send(h, 200, {"Content-Type": "application/json"}, json.dumps(doc).encode(), body)

    def _resolve(
        self, h: BaseHTTPRequestHandler, repo_id: str, revision: str, filename: str, token: str | None, body: bool
    ) -> None:
        repo = self.repos.get(repo_id)
        if repo is None:
            return self._error(h, 401, "RepoNotFound", f"Repository Not Found for url: {repo_id}", body)
        if repo.gated and token is None:
            return self._error(
                h,
                401,
                "GatedRepo",
                f"Access to model {repo_id} is restricted. You must have access "
                "to it and be authenticated to access it. Please log in.",
                body,
            )
        if repo.gated and token != self.token:
            return self._error(
                h,
                403,
                "GatedRepo",
                f"Access to model {repo_id} is restricted and you are not in the "
                f"authorized list (token {token} was refused).",
                body,
            )
        commit = repo.resolve(revision)
        if commit is None:
            return self._error(h, 404, "RevisionNotFound", f"Invalid rev id: {revision}", body)
        data = repo.files.get(filename)
        if data is None:
            return self._error(h, 404, "EntryNotFound", f"{filename} does not exist at {commit}", body)
        headers = {"X-Repo-Commit": commit, "ETag": f'"{hashlib.sha256(data).hexdigest()}"',
                   "Content-Type": "application/octet-stream", "Accept-Ranges": "bytes"}  # fmt: skip
        ranged = h.headers.get("Range", "")
        if ranged.startswith("bytes=") and ranged.endswith("-") and h.command == "GET":
            start = int(ranged[len("bytes=") : -1])
            headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
            return self._send(h, 206, headers, data[start:], body)
        self._send(h, 200, headers, data, body)

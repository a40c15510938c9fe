"""A small Hugging Face hub on loopback: the API calls huggingface_hub makes to fetch a model.

No hub is reachable from the test machines, so this answers what the real client asks, as
the Hub answers it (huggingface_hub's own error handling keys on these headers):

    GET  /api/models/{repo}/revision/{revision}   model info: the commit `sha`, the siblings
    GET  /api/models/{repo}/refs                  branches and tags
    GET  /api/models/{repo}/tree/{revision}       the files, with `oid` (git blob id), `size`
                                                  and, for LFS files, `lfs.oid` (sha256)
    HEAD /{repo}/resolve/{revision}/{path}        X-Repo-Commit, ETag (LFS: X-Linked-Etag
    GET  /{repo}/resolve/{revision}/{path}        and X-Linked-Size), Content-Length; the bytes

Errors as the Hub gives them: an unknown repository is 401 (no token) or 404 with
`X-Error-Code: RepoNotFound`, a private one without a token the same 401, a bad token 401 with
"Invalid credentials in Authorization header", a gated one without access 401 with
`X-Error-Code: GatedRepo`, an unknown revision 404 `RevisionNotFound`. A repository's files
are served from a directory (the packaged all-MiniLM-L6-v2 in the tests); `tamper` makes the
resolve endpoint serve other bytes than the listing describes, as a corrupting proxy would,
and `hold` keeps a file's GET waiting until released, so a test can line two downloads up.
Every request is recorded in `requests`.
"""

import dataclasses
import hashlib
import json
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

LFS_SUFFIXES = (".safetensors", ".bin", ".onnx")


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclasses.dataclass
class Repo:
    files: dict[str, bytes]
    commit: str
    branches: dict[str, str] = dataclasses.field(default_factory=dict)
    tags: dict[str, str] = dataclasses.field(default_factory=dict)
    token: str | None = None  # required token
    gated: bool = False  # without the token: GatedRepo, else RepoNotFound (private)
    tamper: dict[str, bytes] = dataclasses.field(default_factory=dict)

    @classmethod
    def from_directory(cls, directory: Path, commit: str, **options) -> "Repo":
        files = {path.relative_to(directory).as_posix(): path.read_bytes()
                 for path in sorted(directory.rglob("*")) if path.is_file()
                 and "__pycache__" not in path.parts}
        return cls(files=files, commit=commit, **options)

    def resolve(self, revision: str) -> str | None:
        if revision == self.commit:
            return self.commit
        return self.branches.get(revision) or self.tags.get(revision)

    def entry(self, path: str) -> dict:
        data = self.files[path]
        entry = {"type": "file", "oid": git_blob_id(data), "size": len(data), "path": path}
        if path.endswith(LFS_SUFFIXES):
            pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:" \
                      f"{hashlib.sha256(data).hexdigest()}\nsize {len(data)}\n".encode()
            entry.update(oid=git_blob_id(pointer),
                         lfs={"oid": hashlib.sha256(data).hexdigest(), "size": len(data),
                              "pointerSize": len(pointer)})
        return entry


class Hub:
    def __init__(self) -> None:
        self.repos: dict[str, Repo] = {}
        self.requests: list[tuple[str, str]] = []
        self.holds: dict[str, threading.Event] = {}
        self.held = threading.Condition()
        self.waiting: list[str] = []
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def downloads(self, path: str) -> int:
        """GETs of one file's bytes, over every repository."""
        return sum(1 for method, url in self.requests
                   if method == "GET" and "/resolve/" in url and url.endswith("/" + path))

    def hold(self, path: str) -> threading.Event:
        """Keep GETs of `path` waiting until the returned event is set."""
        event = self.holds[path] = threading.Event()
        return event

    def start(self) -> "Hub":
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                hub._answer(self, body=True)

            def do_HEAD(self) -> None:
                hub._answer(self, body=False)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        for event in self.holds.values():
            event.set()
        self._server.shutdown()
        self._server.server_close()

    # -- answers ---------------------------------------------------------------------------

    def _send(self, handler, status: int, body: bytes = b"", headers: dict | None = None,
              send_body: bool = True) -> None:
        handler.send_response(status)
        for name, value in (headers or {}).items():
            handler.send_header(name, value)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        if send_body:
            try:
                handler.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a test's out-of-room download, say)

    def _error(self, handler, status: int, code: str | None, message: str,
               send_body: bool) -> None:
        headers = {"Content-Type": "application/json", "X-Error-Message": message}
        if code:
            headers["X-Error-Code"] = code
        self._send(handler, status, json.dumps({"error": message}).encode(), headers, send_body)

    def _json(self, handler, value, send_body: bool) -> None:
        self._send(handler, 200, json.dumps(value).encode(),
                   {"Content-Type": "application/json"}, send_body)

    def _repo(self, handler, repo_id: str, send_body: bool) -> Repo | None:
        """The repository, or None after answering as the Hub does when it is not readable."""
        auth = handler.headers.get("Authorization", "")
        token = auth.removeprefix("Bearer ") if auth.startswith("Bearer ") else None
        repo = self.repos.get(repo_id)
        if token is not None and not token.startswith("hf_"):
            self._error(handler, 401, None, "Invalid credentials in Authorization header",
                        send_body)
            return None
        if repo is not None and repo.token is not None and token != repo.token:
            if repo.gated:
                self._error(handler, 401, "GatedRepo", f"Access to model {repo_id} is "
                            "restricted. You must have access to it and be authenticated to "
                            "access it. Please log in.", send_body)
                return None
            repo = None  # private: the Hub does not say it exists
        if repo is None:
            self._error(handler, 401 if token is None else 404, "RepoNotFound",
                        "Repository not found", send_body)
        return repo

    def _repo_at(self, handler, repo_id: str, revision: str, send_body: bool):
        """(repo, commit) for a revision of a repo; commit None once an error is sent."""
        repo = self._repo(handler, repo_id, send_body)
        commit = None if repo is None else repo.resolve(revision)
        if repo is not None and commit is None:
            self._error(handler, 404, "RevisionNotFound", f"Invalid rev id: {revision}",
                        send_body)
        return repo, commit

    def _answer(self, handler, body: bool) -> None:
        url = urllib.parse.urlsplit(handler.path)
        path = urllib.parse.unquote(url.path)
        self.requests.append((handler.command, handler.path))
        if path.startswith("/api/models/"):
            self._api(handler, path.removeprefix("/api/models/"), body)
        elif "/resolve/" in path:
            repo_id, rest = path.lstrip("/").split("/resolve/", 1)
            revision, file_path = rest.split("/", 1)
            self._resolve(handler, repo_id, revision, file_path, body)
        else:
            self._error(handler, 404, None, "no such route", body)

    def _api(self, handler, rest: str, body: bool) -> None:
        for marker in ("/revision/", "/tree/"):
            if marker in rest:
                repo_id, revision = rest.split(marker, 1)
                break
        else:
            if rest.endswith("/refs"):
                repo = self._repo(handler, rest.removesuffix("/refs"), body)
                if repo is not None:
                    self._json(handler, {
                        "branches": [{"name": n, "ref": f"refs/heads/{n}", "targetCommit": c}
                                     for n, c in repo.branches.items()],
                        "tags": [{"name": n, "ref": f"refs/tags/{n}", "targetCommit": c}
                                 for n, c in repo.tags.items()],
                        "converts": []}, body)
                return
            self._error(handler, 404, None, "no such route", body)
            return
        repo, commit = self._repo_at(handler, repo_id, revision, body)
        if commit is None:
            return
        if marker == "/revision/":
            self._json(handler, {"id": repo_id, "modelId": repo_id, "sha": commit,
                                 "private": repo.token is not None, "gated": repo.gated,
                                 "siblings": [{"rfilename": p} for p in repo.files]}, body)
            return
        folders = sorted({p.rsplit("/", 1)[0] for p in repo.files if "/" in p})
        self._json(handler, [{"type": "directory", "oid": git_blob_id(f.encode()), "size": 0,
                              "path": f} for f in folders]
                   + [repo.entry(p) for p in repo.files], body)

    def _resolve(self, handler, repo_id: str, revision: str, file_path: str,
                 body: bool) -> None:
        repo, commit = self._repo_at(handler, repo_id, revision, body)
        if commit is None:
            return
        if file_path not in repo.files:
            self._error(handler, 404, "EntryNotFound", f"{file_path} does not exist", body)
            return
        entry = repo.entry(file_path)
        headers = {"X-Repo-Commit": commit, "ETag": f'"{entry["oid"]}"',
                   "Content-Type": "application/octet-stream"}
        if "lfs" in entry:
            headers.update({"X-Linked-Etag": f'"{entry["lfs"]["oid"]}"',
                            "X-Linked-Size": str(entry["size"])})
        data = repo.tamper.get(file_path, repo.files[file_path])
        hold = self.holds.get(file_path)
        if body and hold is not None:
            with self.held:
                self.waiting.append(file_path)
                self.held.notify_all()
            hold.wait()
        self._send(handler, 200, data, headers, body)

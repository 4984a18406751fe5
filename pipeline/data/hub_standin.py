"""A loopback HTTP server that answers like the Hugging Face hub's `resolve` endpoint.

`huggingface_hub` downloads through it unchanged (point `endpoint` at the URL it yields): a HEAD
then a GET of `<repo>/resolve/<revision>/<file>` (`datasets/<repo>/...` for datasets), an ETag
and an `X-Repo-Commit` header, 404 with `EntryNotFound` for anything it does not serve. The tests
use it for every hub download; the checkpoints stage uses it for its offline stand-in rows
(`checkpoints.source: standin`), serving a packaged model under fake ids.
"""

from __future__ import annotations

import hashlib
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator, Mapping

def _body(source: bytes | Path) -> bytes:
    return source if isinstance(source, bytes) else Path(source).read_bytes()


def standin_commit(files: Mapping[str, bytes | Path]) -> str:
    """The commit every served file claims to belong to: a digest of all of them, so different
    contents are a different commit (as on the hub)."""
    digest = hashlib.sha1()
    for path in sorted(files):
        digest.update(path.encode() + hashlib.sha256(_body(files[path])).digest())
    return digest.hexdigest()


@contextmanager
def hub_standin(files: Mapping[str, bytes | Path], etags: Mapping[str, str] | None = None) -> Iterator[tuple[str, list[str]]]:
    """Serve `files` ({'<repo>/resolve/<rev>/<name>': bytes or a file}); yields (endpoint, requested paths).
    Each file's ETag is its sha256, as the hub's is for an LFS file, unless `etags` says otherwise
    (a test's damaged transfer)."""
    requested: list[str] = []
    commit = standin_commit(files)

    class Handler(BaseHTTPRequestHandler):
        def _answer(self, with_body: bool) -> None:
            path = self.path.split("?")[0].lstrip("/")
            requested.append(f"{self.command} {path}")
            source = files.get(path)
            if source is None:
                self.send_response(404)
                self.send_header("X-Error-Code", "EntryNotFound")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            body = _body(source)
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("ETag", f'"{(etags or {}).get(path) or hashlib.sha256(body).hexdigest()}"')
            self.send_header("X-Repo-Commit", commit)
            self.end_headers()
            if with_body:
                self.wfile.write(body)

        def do_HEAD(self) -> None:  # noqa: N802 (http.server's naming)
            self._answer(with_body=False)

        def do_GET(self) -> None:  # noqa: N802
            self._answer(with_body=True)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", requested
    finally:
        server.shutdown()
        server.server_close()


def model_files(repo: str, folder: Path, revision: str = "main", tokenizer: bool = True) -> dict[str, Path]:
    """The `hub_standin` entries that serve a saved model folder as hub model `repo` (without its
    tokenizer files when `tokenizer` is false)."""
    names = ["config.json", "model.safetensors"]
    if tokenizer:
        names += [path.name for path in sorted(folder.iterdir()) if path.name.startswith(("tokenizer", "vocab", "special_tokens", "merges"))]
    return {f"{repo}/resolve/{revision}/{name}": folder / name for name in names if (folder / name).is_file()}

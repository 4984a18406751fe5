"""A loopback HTTP server that answers like the Hugging Face hub's `resolve` endpoint."""

from __future__ import annotations

import hashlib
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator


@contextmanager
def hub_standin(files: dict[str, bytes]) -> Iterator[tuple[str, list[str]]]:
    """Serve `files` ({'datasets/<repo>/resolve/<rev>/<name>': bytes}); yields (endpoint, requested paths)."""
    requested: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def _answer(self, with_body: bool) -> None:
            path = self.path.split("?")[0].lstrip("/")
            requested.append(f"{self.command} {path}")
            body = files.get(path)
            if body is None:
                self.send_response(404)
                self.send_header("X-Error-Code", "EntryNotFound")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("ETag", f'"{hashlib.sha256(body).hexdigest()}"')
            self.send_header("X-Repo-Commit", "0" * 40)
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

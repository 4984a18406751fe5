"""The loopback hub stand-in the tests download through (it lives in the product:
`pipeline.data.hub_standin`, which the checkpoints stage's offline rows use too)."""

from pipeline.data.hub_standin import hub_standin, model_files, standin_commit  # noqa: F401


from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
import threading


@contextmanager
def loopback_server(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """A loopback HTTP server answering with `handler` for the duration; yields its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()

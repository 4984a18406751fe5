"""A stand-in for Google Translate's web endpoint on 127.0.0.1.

The tests and the benchmark's translation section (`tools.benchmark.translation`) use it, and
the rtt stage translates through it when `rtt.endpoint: standin` (the rehearsal preset,
conf/scale/rehearsal.yaml): the same protocol and client code as the papers' Google, offline.

It answers `GET /m?sl=…&tl=…&q=…` the way translate.google.com/m answers deep-translator: an
HTML page whose `<div class="result-container">` holds the translation. Its "translation" is
deterministic (`loopback_translation`: each line gets a `[<target>]` tag), and it can misbehave
on purpose: drop connections, throttle (HTTP 429), lose a line of packed requests, fail on
given text, or answer slowly.
"""

from __future__ import annotations

import html
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit


def loopback_translation(text: str, target: str) -> str:
    return "\n".join(f"[{target}] {line}" for line in text.split("\n"))


@dataclass(frozen=True)
class LoopbackRequest:
    source: str
    target: str
    lines: tuple[str, ...]


class LoopbackGoogle:
    """Use as a context manager; `url` is the endpoint, `requests` every request received, in order.

    drop_first: the first N requests lose their connection without an answer.
    throttle_first: the N requests after those are answered with HTTP 429.
    drop_line_when_packed: a request of several lines is answered without its last line.
    untranslatable: a request with a line containing this text gets a page without a translation.
    delay_seconds: every answer waits this long (settable while serving).
    """

    def __init__(
        self,
        *,
        drop_first: int = 0,
        throttle_first: int = 0,
        drop_line_when_packed: bool = False,
        untranslatable: str | None = None,
        delay_seconds: float = 0.0,
    ):
        self.drop_first = drop_first
        self.throttle_first = throttle_first
        self.drop_line_when_packed = drop_line_when_packed
        self.untranslatable = untranslatable
        self.delay_seconds = delay_seconds
        self.requests: list[LoopbackRequest] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/m"

    def __enter__(self) -> "LoopbackGoogle":
        # a short poll interval, so that leaving the context does not wait half a second
        threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True).start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _answer(self, query: str) -> tuple[int, str] | None:
        """(status, html) for a query string, or None to drop the connection."""
        fields = parse_qs(query, keep_blank_values=True)
        request = LoopbackRequest(fields["sl"][0], fields["tl"][0], tuple(fields["q"][0].split("\n")))
        with self._lock:
            number = len(self.requests)
            self.requests.append(request)
        time.sleep(self.delay_seconds)
        if number < self.drop_first:
            return None
        if number < self.drop_first + self.throttle_first:
            return 429, "<html><body>Too Many Requests</body></html>"
        lines = list(request.lines)
        if self.untranslatable and any(self.untranslatable in line for line in lines):
            return 200, "<html><body><p>no translation here</p></body></html>"
        if self.drop_line_when_packed and len(lines) > 1:
            lines.pop()
        translation = html.escape(loopback_translation("\n".join(lines), request.target))
        return 200, f'<html><body><div class="result-container">{translation}</div></body></html>'

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                answer = stand_in._answer(urlsplit(self.path).query)
                if answer is None:
                    self.close_connection = True
                    return
                status, page = answer
                body = page.encode("utf-8")
                self.send_response(status)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        return Handler

"""The one interface every translation backend implements, and the errors it may raise."""

from __future__ import annotations

from abc import ABC, abstractmethod


class TransientError(Exception):
    """Rate limiting, a server error or a timeout: the same request may succeed later."""


class EndpointUnreachable(TransientError):
    """No connection to the backend at all; if it persists, the run stops instead of failing every sentence."""


class TranslationFailed(Exception):
    """The backend cannot translate this text as sent; smaller requests (one sentence each) may work."""


class RequestsCancelled(Exception):
    """The run is being abandoned (`cancel_requests`): no further request, no retry, no halving."""


class Translator(ABC):
    """A machine-translation system.

    `translate` is one request: sentences joined by newlines in, one line per sentence out when
    all goes well. The round-trip driver packs the requests, checks the alignment and retries.
    """

    name: str
    """The backend's key in the translation cache."""

    request_chars: int
    """The most characters one request may carry (newlines included), as `request_cost` counts them."""

    hard_limit: bool = True
    """Whether a request over the limit would be refused (Google); otherwise (Apertium) the limit
    only sizes the corpus's chunks, and a chunk's back leg goes as one request however long."""

    def request_limit(self, source: str, target: str) -> int:
        """The size limit of a request source→target (the chunk size of that leg)."""
        return self.request_chars

    def request_cost(self, text: str) -> int:
        """What one text adds to a request, counted against `request_chars`: its length, unless
        the backend has a tighter limit to fold in."""
        return len(text)

    @abstractmethod
    def check_pair(self, source: str, target: str) -> None:
        """Raise PipelineError saying what to install or change unless source→target is available."""

    def cancel_requests(self) -> None:
        """Stop the requests in flight at once, and make later ones raise RequestsCancelled (the run
        is being abandoned); a no-op where requests cannot outlive the process."""

    @abstractmethod
    def translate(self, text: str, source: str, target: str) -> str:
        """Translate one request; raise TransientError to be retried, TranslationFailed to give this text up."""

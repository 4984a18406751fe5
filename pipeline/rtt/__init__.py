"""Round-trip translation EN→X→EN: translators (google, apertium), the persistent cache, the driver."""

import logging
from contextlib import contextmanager
from typing import Iterator

from pipeline.config import RttSettings
from pipeline.errors import PipelineError
from pipeline.rtt.apertium import ApertiumBackend
from pipeline.rtt.cache import Leg, TranslationCache
from pipeline.rtt.google import GoogleBackend
from pipeline.rtt.roundtrip import RoundTripResult, normalize, pack, round_trip
from pipeline.rtt.translator import EndpointUnreachable, TransientError, TranslationFailed, Translator

log = logging.getLogger(__name__)

BACKENDS = ("apertium", "google")
# rtt.endpoint's value that starts the loopback Google stand-in in the rtt stage's process (rehearsal)
STANDIN_ENDPOINT = "standin"
STANDIN_NAME = "google-standin"


def make_translator(settings: RttSettings) -> Translator:
    """The backend named by rtt.backend, configured from the rtt settings."""
    if settings.backend == "google" and settings.endpoint == STANDIN_ENDPOINT:
        raise PipelineError("rtt.endpoint=standin: translate inside `google_standin(settings)`, which serves the stand-in")
    if settings.backend == "google":
        return GoogleBackend(settings.endpoint, settings.timeout_seconds, settings.max_chars)
    if settings.backend == "apertium":
        return ApertiumBackend(settings.timeout_seconds)
    raise PipelineError(f"unknown rtt.backend '{settings.backend}'; choose one of: {', '.join(BACKENDS)}")


@contextmanager
def translator_for(settings: RttSettings) -> Iterator[Translator]:
    """The translator of the rtt settings. `rtt.endpoint: standin` (the rehearsal preset) starts the
    loopback Google stand-in (`pipeline.rtt.loopback`) for the block's duration, logged, and caches
    its answers under their own backend name, so they never pass for Google's."""
    if not (settings.backend == "google" and settings.endpoint == STANDIN_ENDPOINT):
        yield make_translator(settings)
        return
    from pipeline.rtt.loopback import LoopbackGoogle

    with LoopbackGoogle() as stand_in:
        log.warning("rtt.endpoint=standin: translating through the loopback Google stand-in at %s "
                    "(tagged copies of the text, not translations; a rehearsal only)", stand_in.url)
        yield GoogleBackend(stand_in.url, settings.timeout_seconds, settings.max_chars, name=STANDIN_NAME)


__all__ = [
    "ApertiumBackend",
    "BACKENDS",
    "EndpointUnreachable",
    "GoogleBackend",
    "Leg",
    "RoundTripResult",
    "TransientError",
    "TranslationCache",
    "TranslationFailed",
    "Translator",
    "make_translator",
    "translator_for",
    "normalize",
    "pack",
    "round_trip",
]

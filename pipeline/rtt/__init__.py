"""Round-trip translation EN→X→EN: translators (google, apertium), the persistent cache, the driver."""

from pipeline.config import RttSettings
from pipeline.errors import PipelineError
from pipeline.rtt.apertium import ApertiumBackend
from pipeline.rtt.cache import Leg, TranslationCache
from pipeline.rtt.google import GoogleBackend
from pipeline.rtt.roundtrip import RoundTripResult, normalize, pack, round_trip
from pipeline.rtt.translator import EndpointUnreachable, TransientError, TranslationFailed, Translator

BACKENDS = ("apertium", "google")


def make_translator(settings: RttSettings) -> Translator:
    """The backend named by rtt.backend, configured from the rtt settings."""
    if settings.backend == "google":
        return GoogleBackend(settings.endpoint, settings.timeout_seconds, settings.max_chars)
    if settings.backend == "apertium":
        return ApertiumBackend(settings.timeout_seconds)
    raise PipelineError(f"unknown rtt.backend '{settings.backend}'; choose one of: {', '.join(BACKENDS)}")


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
    "normalize",
    "pack",
    "round_trip",
]

"""Throughput of the translation layer, for the bench stage: cache hits, Apertium, packed requests."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Sequence

from pipeline.config import RttSettings
from pipeline.rtt import make_translator
from pipeline.rtt.cache import TranslationCache
from pipeline.rtt.loopback import LoopbackGoogle
from pipeline.rtt.roundtrip import round_trip

LOOPBACK_PIVOT = "fr"


def benchmark_translation(sentences: Sequence[str], settings: RttSettings, apertium_pivot: str | None = "es") -> dict:
    """Round-trip `sentences` with fresh caches in a temporary folder and measure:

    - google_loopback_*: the google backend (deep-translator, packing, rtt.workers threads)
      against the loopback stand-in, so the numbers are the client's, not Google's;
    - cache_hits_per_s: the same round trip again, served entirely from the cache;
    - apertium_sentences_per_s: real Apertium round trips en→apertium_pivot→en (None skips it).
    """
    results: dict = {"sentences": len(sentences), "workers": settings.workers, "max_chars": settings.max_chars}
    with tempfile.TemporaryDirectory(prefix="rtt-bench-") as scratch, LoopbackGoogle() as stand_in:
        google = settings.model_copy(update={"backend": "google", "endpoint": stand_in.url})
        with TranslationCache(Path(scratch) / "google.sqlite") as cache:
            fresh = round_trip(sentences, LOOPBACK_PIVOT, make_translator(google), cache, google, show_progress=False)
            cached = round_trip(sentences, LOOPBACK_PIVOT, make_translator(google), cache, google, show_progress=False)
        results["google_loopback_requests"] = len(stand_in.requests)
        results["google_loopback_requests_per_s"] = round(len(stand_in.requests) / fresh.seconds, 1)
        results["google_loopback_sentences_per_request"] = round(2 * fresh.unique / len(stand_in.requests), 1)
        results["google_loopback_sentences_per_s"] = round(fresh.sentences_per_second, 1)
        results["cache_hits_per_s"] = round(cached.cache_hits / cached.seconds)
        if apertium_pivot is not None:
            apertium = settings.model_copy(update={"backend": "apertium"})
            with TranslationCache(Path(scratch) / "apertium.sqlite") as cache:
                run = round_trip(sentences, apertium_pivot, make_translator(apertium), cache, apertium, show_progress=False)
            results["apertium_pivot"] = apertium_pivot
            results["apertium_sentences_per_s"] = round(run.sentences_per_second, 1)
    return results

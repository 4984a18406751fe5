"""Translation throughput: cache hits, Apertium round trips, packed requests to the loopback stand-in."""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path

from tools.benchmark.timing_inputs import BenchInputs
from pipeline.rtt.loopback import LoopbackGoogle
from tools.benchmark.timing import summarize
from pipeline.config import RttSettings
from pipeline.errors import PipelineError
from pipeline.rtt import TranslationCache, make_translator, round_trip

LOOPBACK_PIVOT = "fr"
RATES = ("cache_hits_per_s", "apertium_sentences_per_s", "google_loopback_requests_per_s", "google_loopback_sentences_per_s")
RUN_FACTS = ("sentences", "workers", "max_chars", "google_loopback_requests", "google_loopback_sentences_per_request")


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


def _repeated_runs(sentences: Sequence[str], settings: RttSettings, repeats: int,
                   apertium_pivot: str | None) -> tuple[list[dict], str | None]:
    """`repeats` runs; without Apertium installed the Apertium part is skipped: (runs, why)."""
    runs, skipped = [], None
    for _ in range(repeats):
        try:
            runs.append(benchmark_translation(sentences, settings, apertium_pivot if skipped is None else None))
        except PipelineError as error:
            if apertium_pivot is None or skipped is not None:
                raise
            skipped = str(error)
            runs.append(benchmark_translation(sentences, settings, None))
    return runs, skipped


def bench_translation(inputs: BenchInputs) -> dict:
    """`benchmark_translation` run `translation_repeats` times on the first `translation_sentences`
    corpus sentences with the rtt settings; each rate as {median, min, max, iqr, repeats}."""
    inputs.advance("bench translation")
    scale, pivot = inputs.scale, inputs.apertium_pivot
    sentences = inputs.sentences[: scale.translation_sentences]
    runs, skipped = _repeated_runs(sentences, inputs.params.rtt, scale.translation_repeats, pivot)
    result: dict = {key: runs[0][key] for key in RUN_FACTS}
    for rate in RATES:
        values = [run[rate] for run in runs if rate in run]
        if values:
            result[rate] = {key: (round(value, 1) if isinstance(value, float) else value)
                            for key, value in summarize(values).items()}
    if pivot is not None:
        result["apertium_pivot"] = pivot
    if skipped is not None:
        result["apertium_skipped"] = skipped
    inputs.advance(done=1)
    return result

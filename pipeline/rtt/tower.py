"""One tower's round trips as the `rtt@<tower>` stage makes them: the corpus through the tower's
pivot language and back, resumable through the persistent cache, and the failure policy.

Failed sentences become empty lines (the pretraining falls back to two dropout views there) as
long as they are at most `rtt.max_failed_fraction` of the corpus; beyond that the stage stops
without writing, and a rerun asks only for what the cache still lacks.
"""

from __future__ import annotations

from pipeline import paths
from pipeline.config import RttSettings
from pipeline.data.readers import read_corpus
from pipeline.io import write_text_atomic
from pipeline.errors import PipelineError
from pipeline.rtt.cache import TranslationCache
from pipeline.rtt.roundtrip import RoundTripResult, round_trip
from pipeline.rtt.translator import Translator


def check_failures(result: RoundTripResult, settings: RttSettings) -> None:
    """The failure policy: more failed sentences than `rtt.max_failed_fraction` is an error."""
    if result.failed > settings.max_failed_fraction * result.sentences:
        raise PipelineError(
            f"{result.failed} of {result.sentences} sentences ({result.failed / result.sentences:.1%}) found no "
            f"round trip, more than rtt.max_failed_fraction={settings.max_failed_fraction}; rerun to retry them "
            "(the rest is cached)"
        )


def translate_tower(tower: str, pivot: str, settings: RttSettings, translator: Translator) -> RoundTripResult:
    """Round-trip data/raw/corpus.txt through the tower's `pivot` language into data/rtt/<tower>.txt (aligned
    line by line, an empty line where a translation failed), caching in data/cache/rtt/<tower>.sqlite."""
    corpus = read_corpus(paths.CORPUS)
    with TranslationCache(paths.rtt_cache(tower)) as cache:
        if cache.discarded_legacy:
            print(
                f"rtt: dropped {cache.discarded_legacy} per-sentence translations from {cache.path} "
                "(a cache from before chunk keys; their answers depended on timing, see docs/method.md)"
            )
        result = round_trip(corpus, pivot, translator, cache, settings)
    check_failures(result, settings)
    write_text_atomic(paths.rtt_file(tower), "".join(f"{line}\n" for line in result.translations))
    return result

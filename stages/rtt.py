"""Round-trip translate the corpus EN→X→EN for one tower.

Reads data/raw/corpus.txt and the rtt and towers settings; writes data/rtt/<tower>.txt (aligned
line by line with the corpus; an empty line where a translation failed) and keeps a persistent
translation cache in data/cache/rtt/<tower>.sqlite, so a killed run resumes where it stopped."""

from pathlib import Path

import typer

from pipeline.data.readers import read_corpus
from pipeline.io import write_text_atomic
from pipeline.errors import PipelineError
from pipeline.rtt import TranslationCache, make_translator, round_trip
from pipeline.config import load_params
from stages.common import ParamsOption, stage, summary

NAME = "rtt"
CORPUS = Path("data/raw/corpus.txt")
OUTPUT_DIR = Path("data/rtt")
CACHE_DIR = Path("data/cache/rtt")


@stage
def command(tower: str = typer.Option(..., help="tower name from params towers (I or II)"), params: Path = ParamsOption) -> None:
    settings = load_params(params)
    if tower not in settings.towers:
        raise PipelineError(f"unknown tower '{tower}'; the towers in {params} are: {', '.join(settings.towers)}")
    pivot = settings.towers[tower].lang
    rtt = settings.rtt
    corpus = read_corpus(CORPUS)
    translator = make_translator(rtt)
    with TranslationCache(CACHE_DIR / f"{tower}.sqlite") as cache:
        if cache.discarded_legacy:
            print(
                f"rtt: dropped {cache.discarded_legacy} per-sentence translations from {cache.path} "
                "(a cache from before chunk keys; their answers depended on timing, see docs/method.md)"
            )
        result = round_trip(corpus, pivot, translator, cache, rtt)
    if result.failed > rtt.max_failed_fraction * result.sentences:
        raise PipelineError(
            f"{result.failed} of {result.sentences} sentences ({result.failed / result.sentences:.1%}) found no "
            f"round trip, more than rtt.max_failed_fraction={rtt.max_failed_fraction}; rerun to retry them "
            "(the rest is cached)"
        )
    write_text_atomic(OUTPUT_DIR / f"{tower}.txt", "".join(f"{line}\n" for line in result.translations))
    misaligned = f", {result.misaligned_chunks} misaligned chunks asked again in halves" if result.misaligned_chunks else ""
    summary(
        NAME,
        f"tower {tower} {rtt.source_lang}→{pivot}→{rtt.source_lang} via {translator.name}: {result.sentences} sentences "
        f"in {result.chunks} chunks, {result.translated} leg translations in {result.requests} requests{misaligned}, "
        f"{result.cache_hits} cache hits ({result.cache_hit_rate:.0%}), {result.failed} failed (empty lines); "
        f"{result.sentences_per_second:.1f} sentences/s, {result.seconds:.1f} s",
    )

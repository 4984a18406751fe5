"""Round-trip translate the corpus EN→X→EN for one tower.

Reads data/raw/corpus.txt and the rtt and towers settings; writes data/rtt/<tower>.txt (aligned
line by line with the corpus; an empty line where a translation failed) and keeps a persistent
translation cache in data/cache/rtt/<tower>.sqlite, so a killed run resumes where it stopped.
The work and the failure policy are `pipeline.rtt.tower`."""

from pathlib import Path

import typer

from stages.common import ParamsOption, stage, stage_params, summary

NAME = "rtt"


@stage
def command(tower: str = typer.Option(..., help="tower name from params towers (I or II)"), params: Path = ParamsOption) -> None:
    # here, not at the top: the translation clients (requests, bs4) would slow every stage's start-up
    from pipeline import paths
    from pipeline.errors import PipelineError
    from pipeline.rtt import translator_for
    from pipeline.rtt.tower import translate_tower

    settings = stage_params(params)
    if tower not in settings.towers:
        raise PipelineError(f"unknown tower '{tower}'; the towers in {params} are: {', '.join(settings.towers)}")
    pivot, rtt = settings.towers[tower].lang, settings.rtt
    with translator_for(rtt) as translator:
        result = translate_tower(tower, pivot, rtt, translator)
    misaligned = f", {result.misaligned_chunks} misaligned chunks asked again in halves" if result.misaligned_chunks else ""
    summary(
        NAME,
        f"tower {tower} {rtt.source_lang}→{pivot}→{rtt.source_lang} via {translator.name}: {result.sentences} sentences "
        f"in {result.chunks} chunks, {result.translated} leg translations in {result.requests} requests{misaligned}, "
        f"{result.cache_hits} cache hits ({result.cache_hit_rate:.0%}), {result.failed} failed (empty lines); "
        f"{result.sentences_per_second:.1f} sentences/s, {result.seconds:.1f} s -> {paths.rtt_file(tower)}",
    )

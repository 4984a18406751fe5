"""Fetch the corpus, the STS benchmarks and the backbone weights.

Reads the data and backbone settings; from the data mirror PIPELINE_DATA_MIRROR names when it is set,
else from the canonical sources (Hugging Face hub). Writes data/raw/corpus.txt, data/raw/senteval/,
data/raw/original/ (STS-B as released), data/backbone/ and data/uc/; every corpus and benchmark file is checked
against its pinned digest (pipeline/data/inputs.sha256) before any is written, and
reports/provenance/download.json records what was verified, what could only be recorded, and the hub
commits the revisions resolved to.
"""

import time
from pathlib import Path

from pipeline.data.download import download
from pipeline.data.pinned import InputManifest
from pipeline.data.sources import configured_mirror
from stages.common import ParamsOption, stage, stage_params, summary

NAME = "download"


@stage
def command(params: Path = ParamsOption) -> None:
    settings = stage_params(params)
    started = time.perf_counter()
    manifest = InputManifest()
    result = download(settings.data, settings.backbone, settings.seed, configured_mirror(), manifest=manifest)
    from pipeline.execution.environment import write_provenance  # torch: only when a stage runs, not for --help

    write_provenance(NAME, inputs=manifest.record.as_json())
    summary(
        NAME,
        f"corpus {result.corpus_sentences} sentences (wiki {result.wiki_sentences} + SICK {result.sick_sentences}, "
        f"deduplicated), {result.senteval_files} benchmark files, backbone '{settings.backbone.source}' "
        f"from {result.source} in {time.perf_counter() - started:.1f}s",
    )

"""Unsupervised SimCSE pretraining of one tower on the corpus plus its round trips.

Reads data/raw/corpus.txt, data/rtt/<tower>.txt, data/backbone/ and STS-B dev (model selection);
writes data/models/pretrain/<tower>/ (Hugging Face format + sentence-transformers config),
resumable checkpoints in data/checkpoints/pretrain-<tower>/ and reports/training/pretrain-<tower>.{json,csv}.
"""

from pathlib import Path

import typer

from stages.common import ParamsOption, stage, stage_params, summary, tower_settings, training_line

NAME = "pretrain"


@stage
def command(tower: str = typer.Option(..., help="tower name from params towers (I or II)"), params: Path = ParamsOption) -> None:
    from pipeline import paths
    from pipeline.data.readers import read_corpus
    from pipeline.training_jobs import simcse_task
    from pipeline.training_tasks import check_before_loading, pretraining_examples, read_round_trips

    settings = stage_params(params)
    tower_settings(settings, tower)
    corpus = read_corpus(paths.CORPUS)
    examples = pretraining_examples(corpus, read_round_trips(paths.rtt_file(tower), len(corpus)), settings.pretrain.rtt_as)
    check_before_loading(f"{NAME}-{tower}", len(examples), settings.pretrain, settings, "pretrain")
    job = simcse_task(settings, tower)
    result = job.run(examples, settings)
    summary(job.name, training_line(result, len(examples)))

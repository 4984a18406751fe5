"""Unsupervised SimCSE pretraining of one tower on the corpus plus its round trips.

Reads data/raw/corpus.txt, data/rtt/<tower>.txt, data/backbone/ and STS-B dev (model selection);
writes data/models/pretrain/<tower>/ (Hugging Face format + sentence-transformers config),
resumable checkpoints in data/checkpoints/pretrain-<tower>/ and reports/training/pretrain-<tower>.{json,csv}.
"""

from pathlib import Path

import typer

from pipeline.config import load_params
from stages.common import ParamsOption, stage, summary, tower_settings, training_line

NAME = "pretrain"


@stage
def command(tower: str = typer.Option(..., help="tower name from params towers (I or II)"), params: Path = ParamsOption) -> None:
    from pipeline import paths
    from pipeline.data.readers import read_corpus
    from pipeline.modeling import load_tokenizer
    from pipeline.training_tasks import (
        SimCSETask, check_before_loading, gaussian_negatives, pretraining_examples, read_round_trips, run_training,
    )

    settings = load_params(params)
    lr = tower_settings(settings, tower).lr
    corpus = read_corpus(paths.CORPUS)
    examples = pretraining_examples(corpus, read_round_trips(paths.rtt_file(tower), len(corpus)), settings.pretrain.rtt_as)
    pretrain = settings.pretrain
    name = f"pretrain-{tower}"
    check_before_loading(name, len(examples), pretrain, settings)
    task = SimCSETask(
        paths.BACKBONE, load_tokenizer(paths.BACKBONE), pretrain.dropout, pretrain.temperature,
        gaussian_negatives(pretrain.gaussian, settings.seed), pretrain.max_length,
    )
    result = run_training(name, task, examples, pretrain, lr, paths.pretrained_tower(tower), settings, [paths.BACKBONE])
    summary(name, training_line(result, len(examples)))


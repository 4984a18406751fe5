"""Unsupervised SimCSE pretraining of one tower on the corpus plus its round trips.

Reads data/raw/corpus.txt, data/rtt/<tower>.txt, data/backbone/ and STS-B dev (model selection);
writes data/models/pretrain/<tower>/ (Hugging Face format + sentence-transformers config),
resume states in data/checkpoints/pretrain-<tower>/ and reports/training/pretrain-<tower>.{json,csv}.
"""

from pathlib import Path

import typer

from stages.common import ParamsOption, stage, stage_params, summary, training_line

NAME = "pretrain"


@stage
def command(tower: str = typer.Option(..., help="tower name from params towers (I or II)"), params: Path = ParamsOption) -> None:
    from pipeline.training.jobs import run_pretrain

    done = run_pretrain(stage_params(params), tower)
    summary(done.name, training_line(done))


def check_processes(count: int, tower: str, params: Path = ParamsOption) -> None:
    """What `count` processes (PIPELINE_NPROC) need of the settings, checked before any starts."""
    from pipeline.training.jobs import pretrain_job

    pretrain_job(stage_params(params), tower).check_processes(count)

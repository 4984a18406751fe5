"""Unsupervised SimCSE pretraining of one tower on the corpus plus its round trips.

Reads data/raw/corpus.txt, data/rtt/<tower>.txt, data/backbone/ and STS-B dev; writes
data/models/pretrain/<tower>/ (Hugging Face format) and checkpoints in data/checkpoints/."""

from pathlib import Path

import typer

from stages.common import ParamsOption, not_implemented, stage

NAME = "pretrain"


@stage
def command(tower: str = typer.Option(..., help="tower name from params towers (I or II)"), params: Path = ParamsOption) -> None:
    not_implemented(NAME, 5)

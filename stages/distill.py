"""Distil a frozen ensemble teacher into one fresh backbone by MSE.

Reads the teacher (joint: the twin; uc: the UC ensemble), data/backbone/ and the corpus; writes
data/models/distill/<teacher>/."""

from pathlib import Path

import typer

from stages.common import ParamsOption, not_implemented, stage

NAME = "distill"


@stage
def command(teacher: str = typer.Option(..., help="joint or uc"), params: Path = ParamsOption) -> None:
    not_implemented(NAME, 5)

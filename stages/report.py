"""Render every table of the papers whose rows exist: ours | paper | delta.

Reads reports/metrics/*.json, DVC experiments and the table specs in params; writes
reports/tables/*.md, .csv and .tex."""

from pathlib import Path

from stages.common import ParamsOption, not_implemented, stage

NAME = "report"


@stage
def command(params: Path = ParamsOption) -> None:
    not_implemented(NAME, 7)

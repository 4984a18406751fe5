"""Alignment/uniformity, CLS energy, norm statistics, attention sink and inference cost.

Reads the evaluated models and STS-B; writes reports/analysis/*.json and plot data."""

from pathlib import Path

from stages.common import ParamsOption, not_implemented, stage

NAME = "analyze"


@stage
def command(params: Path = ParamsOption) -> None:
    not_implemented(NAME, 6)

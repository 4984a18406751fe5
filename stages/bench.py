"""Benchmark throughput and memory of training, evaluation and translation.

Reads params and the backbone; writes reports/bench.json."""

from pathlib import Path

from stages.common import ParamsOption, not_implemented, stage

NAME = "bench"


@stage
def command(params: Path = ParamsOption) -> None:
    not_implemented(NAME, 8)

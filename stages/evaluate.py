"""Evaluate a model on the 7 STS tasks (SentEval protocol) and, when enabled, MTEB.

Reads the model's folder(s) and data/raw/senteval/; writes reports/metrics/<model>.json."""

from pathlib import Path

from stages.common import ParamsOption, not_implemented, stage

NAME = "evaluate"


@stage
def command(params: Path = ParamsOption) -> None:
    not_implemented(NAME, 6)

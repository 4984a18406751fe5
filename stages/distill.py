"""Distil a frozen ensemble teacher into one fresh backbone by MSE (the papers' D and UC D).

Reads the teacher — the registry's model of that name (pipeline/evaluated_models.py); joint: the twin in
data/models/joint/; uc: the UC ensemble of that twin and data/uc/ — plus data/backbone/ (the
student's start), data/raw/corpus.txt and STS-B dev; writes data/models/distill/<teacher>/,
resume states in data/checkpoints/distill-<teacher>/ and reports/training/distill-<teacher>.{json,csv}.
"""

from pathlib import Path

import typer

from stages.common import ParamsOption, stage, stage_params, summary, training_line

NAME = "distill"


@stage
def command(teacher: str = typer.Option(..., help="joint (the twin) or uc (the UC ensemble)"), params: Path = ParamsOption) -> None:
    from pipeline.training.jobs import run_distill

    done = run_distill(stage_params(params), teacher)
    summary(done.name, training_line(done))


def check_processes(count: int, teacher: str, params: Path = ParamsOption) -> None:
    """What `count` processes (PIPELINE_NPROC) need of the settings, checked before any starts."""
    from pipeline.training.jobs import distill_job

    distill_job(stage_params(params), teacher).check_processes(count)

"""Train a seed paper's own model as its paper trains it: SimCSE, or GS-InfoNCE (`baselines.<name>`).

Reads data/raw/corpus.txt (its Wiki1M sentences only: no round trips, no SICK), data/backbone/ and
STS-B dev (model selection); writes data/models/baseline/<name>/, resume states in
data/checkpoints/baseline-<name>/ and reports/training/baseline-<name>.{json,csv}.
"""

from pathlib import Path

import typer

from stages.common import ParamsOption, stage, stage_params, summary, training_line

NAME = "baseline"


@stage
def command(name: str = typer.Option(..., help="a key of baselines in params.yaml (simcse, gs-infonce)"),
            params: Path = ParamsOption) -> None:
    from pipeline.training.jobs import run_baseline

    done = run_baseline(stage_params(params), name)
    summary(done.name, training_line(done))


def check_processes(count: int, name: str, params: Path = ParamsOption) -> None:
    """What `count` processes (PIPELINE_NPROC) need of the settings, checked before any starts."""
    from pipeline.training.jobs import baseline_job

    baseline_job(stage_params(params), name).check_processes(count)

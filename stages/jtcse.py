"""The committed run's JTCSE twin: the `train` settings with `jtcse.cael` CAELs (null: half the layers).

Reads data/models/pretrain/{I,II}/, data/raw/corpus.txt and STS-B dev (model selection); writes
data/models/jtcse/{I,II}/, resume states in data/checkpoints/jtcse/ and reports/training/jtcse.{json,csv}.
The `joint` stage trains `train` as set (TNCSE by default), so one `dvc repro` trains both papers' twins.
"""

from pathlib import Path

from stages.common import ParamsOption, stage, stage_params, summary, training_line

NAME = "jtcse"


@stage
def command(params: Path = ParamsOption) -> None:
    from pipeline.training.jobs import run_joint

    done = run_joint(stage_params(params), NAME)
    summary(done.name, training_line(done))


def check_processes(count: int, params: Path = ParamsOption) -> None:
    """What `count` processes (PIPELINE_NPROC) need of the settings, checked before any starts."""
    from pipeline.training.jobs import joint_job

    joint_job(stage_params(params), name=NAME).check_processes(count)

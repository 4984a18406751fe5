"""Twin-tower training: TNCSE (train.cael = 0) or JTCSE (train.cael > 0).

Reads data/models/pretrain/{I,II}/, data/raw/corpus.txt and STS-B dev (model selection); writes
data/models/joint/{I,II}/ (Hugging Face format; the twin's embedding is the sum of the two towers'
last-layer [CLS]), resume states in data/checkpoints/joint/ and reports/training/joint.{json,csv}.
"""

from pathlib import Path

from stages.common import ParamsOption, stage, stage_params, summary, training_line

NAME = "joint"


@stage
def command(params: Path = ParamsOption) -> None:
    from pipeline.training.jobs import run_joint

    done = run_joint(stage_params(params))
    summary(done.name, training_line(done))


def check_processes(count: int, params: Path = ParamsOption) -> None:
    """What `count` processes (PIPELINE_NPROC) need of the settings, checked before any starts."""
    from pipeline.training.jobs import joint_job

    joint_job(stage_params(params)).check_processes(count)

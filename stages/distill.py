"""Distil a frozen ensemble teacher into one fresh backbone by MSE (the papers' D and UC D).

Reads the teacher — the registry's model of that name (pipeline/models.py); joint: the twin in
data/models/joint/; uc: the UC ensemble of that twin and data/uc/ — plus data/backbone/ (the
student's start), data/raw/corpus.txt and STS-B dev; writes data/models/distill/<teacher>/,
checkpoints in data/checkpoints/distill-<teacher>/ and reports/training/distill-<teacher>.{json,csv}.
"""

from pathlib import Path

import typer

from stages.common import ParamsOption, stage, stage_params, summary, training_line

NAME = "distill"


@stage
def command(teacher: str = typer.Option(..., help="joint (the twin) or uc (the UC ensemble)"), params: Path = ParamsOption) -> None:
    from pipeline import paths
    from pipeline.data.readers import read_corpus
    from pipeline.errors import PipelineError
    from pipeline.training_jobs import distill_task
    from pipeline.training_tasks import check_before_loading

    settings = stage_params(params)
    if teacher not in settings.distill.teachers:
        raise PipelineError(f"--teacher {teacher} is not in distill.teachers; allowed: {', '.join(settings.distill.teachers)}")
    corpus = read_corpus(paths.CORPUS)
    check_before_loading(f"{NAME}-{teacher}", len(corpus), settings.distill.teachers[teacher], settings,
                         f"distill.teachers.{teacher}")
    job = distill_task(settings, teacher)
    examples = job.task.examples(corpus)
    result = job.run(examples, settings)
    summary(job.name, training_line(result, len(examples)))

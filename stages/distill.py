"""Distil a frozen ensemble teacher into one fresh backbone by MSE (the papers' D and UC D).

Reads the teacher — joint: the twin in data/models/joint/; uc: the UC ensemble of that twin and
data/uc/ — plus data/backbone/ (the student's start), data/raw/corpus.txt and STS-B dev; writes
data/models/distill/<teacher>/, checkpoints in data/checkpoints/distill-<teacher>/ and
reports/training/distill-<teacher>.{json,csv}.
"""

from pathlib import Path

import typer

from pipeline.config import load_params
from stages.common import ParamsOption, stage, summary, training_line

NAME = "distill"


@stage
def command(teacher: str = typer.Option(..., help="joint (the twin) or uc (the UC ensemble)"), params: Path = ParamsOption) -> None:
    from pipeline import paths
    from pipeline.data.readers import read_corpus
    from pipeline.errors import PipelineError
    from pipeline.evaluation.sts import twin, uc_ensemble
    from pipeline.modeling import load_tokenizer
    from pipeline.training_tasks import DistillTask, FrozenEnsemble, check_before_loading, run_training

    settings = load_params(params)
    if teacher not in settings.distill.teachers:
        raise PipelineError(f"--teacher {teacher} is not in distill.teachers; allowed: {', '.join(settings.distill.teachers)}")
    student = settings.distill.teachers[teacher]
    tower_I, tower_II = (str(paths.joint_model() / name) for name in ("I", "II"))
    towers = twin(tower_I, tower_II) if teacher == "joint" else uc_ensemble(tower_I, tower_II, str(paths.UC), settings.uc_weight)
    corpus = read_corpus(paths.CORPUS)
    name = f"distill-{teacher}"
    check_before_loading(name, len(corpus), student, settings)
    task = DistillTask(
        paths.BACKBONE, FrozenEnsemble(towers), load_tokenizer(paths.BACKBONE), student.dropout, student.max_length
    )
    examples = task.examples(corpus)
    result = run_training(
        name, task, examples, student, student.lr, paths.student(teacher), settings, [Path(path) for path, _ in towers]
    )
    summary(name, training_line(result, len(examples)))

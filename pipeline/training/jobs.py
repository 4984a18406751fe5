"""The training stages built from params: what `pretrain@<tower>`, `joint` and `distill@<teacher>`
run, for the stages and for the benchmark (which times the same tasks on its own backbone).

Each function loads the models and returns a `TrainingJob`: the task (`pipeline.training_tasks`),
its optimisation settings and learning rate, where the stage saves the result and the model
folders it starts from (part of the run's fingerprint). Call `check_before_loading` first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline import paths
from pipeline.config import OptimSettings, Params, StudentSettings, TrainSettings
from pipeline.environment import training_data
from pipeline.models import TOWER_NAMES, WeightedTowers, teacher_model
from pipeline.modeling import load_tokenizer
from pipeline.training import TrainingResult
from pipeline.training_tasks import DistillTask, FrozenEnsemble, SimCSETask, TwinTask, gaussian_negatives, run_training


@dataclass(frozen=True)
class TrainingJob:
    """A training stage ready to run: `run(examples, params)` trains, keeps the best checkpoint on
    STS-B dev, saves it to `output` and writes reports/training/<name>.{json,csv}."""

    name: str
    task: Any
    settings: OptimSettings
    lr: float
    output: Path
    inputs: tuple[Path, ...]
    key: str  # the dotted key of `settings` in params.yaml (pretrain, train, distill.teachers.<teacher>)
    data: tuple[Path, ...]  # the corpus and round trips its record hashes (declared deps of the stage)

    def run(self, examples: Sequence[tuple[str, ...]], params: Params) -> TrainingResult:
        return run_training(self.name, self.task, examples, self.settings, self.lr, self.output, params,
                            list(self.inputs), self.key, self.data)


def simcse_task(params: Params, tower: str, backbone: Path = paths.BACKBONE) -> TrainingJob:
    """`pretrain@<tower>`: unsupervised SimCSE from `backbone` with the tower's learning rate."""
    pretrain = params.pretrain
    task = SimCSETask(
        backbone, load_tokenizer(backbone), pretrain.dropout, pretrain.temperature,
        gaussian_negatives(pretrain.gaussian, params.seed), pretrain.max_length,
    )
    return TrainingJob(f"pretrain-{tower}", task, pretrain, params.towers[tower].lr, paths.pretrained_tower(tower), (backbone,),
                       "pretrain", tuple(training_data(params, [tower])))


def twin_task(params: Params, towers: tuple[Path, Path] | None = None, train: TrainSettings | None = None) -> TrainingJob:
    """`joint`: TNCSE or JTCSE on the pretrained towers (or `towers`), `train` or params' train settings."""
    towers = towers or tuple(paths.pretrained_tower(tower) for tower in TOWER_NAMES)
    train = train or params.train
    task = TwinTask(towers, load_tokenizer(towers[0]), train, params.seed)
    return TrainingJob("joint", task, train, train.mode_lr, paths.joint_model(), tuple(towers), "train",
                       tuple(training_data(params)))


def distill_task(params: Params, teacher: str, backbone: Path = paths.BACKBONE, ensemble: WeightedTowers | None = None,
                 student: StudentSettings | None = None) -> TrainingJob:
    """`distill@<teacher>`: a fresh `backbone` regressed onto the registry's model `teacher` (or
    `ensemble`), with the student settings `distill.teachers.<teacher>` (or `student`)."""
    ensemble = ensemble or teacher_model(params, teacher)
    student = student or params.distill.teachers[teacher]
    task = DistillTask(backbone, FrozenEnsemble(ensemble), load_tokenizer(backbone), student.dropout, student.max_length)
    inputs = tuple(Path(folder) for folder in ensemble.folders)
    return TrainingJob(f"distill-{teacher}", task, student, student.lr, paths.student(teacher), inputs,
                       f"distill.teachers.{teacher}", tuple(training_data(params)))

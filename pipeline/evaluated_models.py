"""The pipeline's models: one weighted-towers type and the registry of every model by name.

A model is `WeightedTowers`: saved model folders whose last-layer [CLS] embeddings are summed with
weights (docs/architecture.md; docs/method.md, "Equation ↔ code": inference). Evaluation, the distillation teachers, analysis, the
report's row names and the `evaluate` foreach of dvc.yaml (through `models` in params.yaml,
checked against `evaluated_model_folders()` at load) all read this one registry; the lists of
models in dvc.yaml (analyze's deps and outs, the plots) are checked against it by tests/test_models.py.

| name | towers (weights) |
|---|---|
| `backbone` | data/backbone |
| `pretrain-I`, `pretrain-II` | data/models/pretrain/{I,II} |
| `ensemble` | pretrain I + pretrain II (the untrained "None" row of the loss ablation) |
| `joint` | data/models/joint/I + data/models/joint/II (TNCSE or JTCSE): the teacher of `joint-D` |
| `joint-D` | data/models/distill/joint, the student of `joint` |
| `uc` | (1 − w)(joint I + joint II) + w · data/uc, w = `Params.uc_weight` (`backbone.uc_weight`, or `backbone.jtcse_uc_weight` for a JTCSE twin): the teacher of `uc-D` |
| `uc-D` | data/models/distill/uc, the student of `uc` |
| `jtcse` | data/models/jtcse/I + II: the committed run's JTCSE twin (`jtcse.cael` CAELs), the teacher of `jtcse-D` |
| `jtcse-D` | data/models/distill/jtcse, the student of `jtcse` |
| `simcse`, `gs-infonce` | data/models/baseline/{simcse,gs-infonce}: the seed papers' own models (`baseline@<name>`) |
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from pipeline import paths

TOWER_NAMES = ("I", "II")
MODEL_NAMES = ("backbone", "pretrain-I", "pretrain-II", "ensemble", "joint", "joint-D", "uc", "uc-D", "jtcse", "jtcse-D",
               "simcse", "gs-infonce")
# the seed papers' own models, each trained by `baseline@<name>` (a key of `baselines` in params.yaml)
BASELINES = ("simcse", "gs-infonce")
# the dvc.yaml stages that train (one list: the CLI spreads them over processes, the GPU-hour estimate costs them)
TRAINING_STAGES = ("pretrain", "joint", "jtcse", "distill", "baseline")
# the jtcse stage's models (the committed run's JTCSE twin and its student): params written before it lack them
JTCSE_MODELS = ("jtcse", "jtcse-D")
# distilled model → its teacher (a model of the registry and a key of `distill.teachers`)
STUDENTS = {"joint-D": "joint", "uc-D": "uc", "jtcse-D": "jtcse"}


class ModelChoice(Protocol):
    """What the registry reads from the settings (`pipeline.config.Params`): the UC weight and the
    names of the evaluated models."""

    @property
    def uc_weight(self) -> float: ...

    @property
    def models(self) -> Mapping[str, object]: ...


@dataclass(frozen=True)
class WeightedTowers:
    """Σ_i w_i · h_i over saved towers: iterating gives (folder, weight) pairs."""

    members: tuple[tuple[str, float], ...]

    @classmethod
    def of(cls, members: Iterable[tuple[str | Path, float]]) -> WeightedTowers:
        """From (folder, weight) pairs: a folder or hub id as given, a Path as a POSIX string."""
        return cls(tuple((folder if isinstance(folder, str) else folder.as_posix(), float(weight)) for folder, weight in members))

    @classmethod
    def single(cls, folder: str | Path) -> WeightedTowers:
        return cls.of([(folder, 1.0)])

    @classmethod
    def twin(cls, tower_i: str | Path, tower_ii: str | Path) -> WeightedTowers:
        """A twin's embedding: h_I + h_II."""
        return cls.of([(tower_i, 1.0), (tower_ii, 1.0)])

    @classmethod
    def uc(cls, tower_i: str | Path, tower_ii: str | Path, uc_tower: str | Path, weight: float) -> WeightedTowers:
        """The UC ensemble: (1 − w)(h_I + h_II) + w · h_UC, as weights (1 − w, 1 − w, w)."""
        return cls.of([(tower_i, 1 - weight), (tower_ii, 1 - weight), (uc_tower, weight)])

    @property
    def folders(self) -> list[str]:
        return [folder for folder, _ in self.members]

    @property
    def weights(self) -> list[float]:
        return [weight for _, weight in self.members]

    def combine(self, embeddings: Sequence):
        """Σ_i w_i · embeddings[i] (tensors or arrays of equal shape, one per member, in order)."""
        if len(embeddings) != len(self.members):
            raise ValueError(f"{len(embeddings)} embeddings for {len(self.members)} towers")
        return sum(weight * embedding for weight, embedding in zip(self.weights, embeddings))

    def __iter__(self) -> Iterator[tuple[str, float]]:
        return iter(self.members)

    def __len__(self) -> int:
        return len(self.members)


def all_models(uc_weight: float) -> dict[str, WeightedTowers]:
    """Every model the registry knows, in `MODEL_NAMES` order, with the UC weight `uc_weight`."""
    first, second = (paths.pretrained_tower(tower) for tower in TOWER_NAMES)
    joint_i, joint_ii = (paths.joint_model() / tower for tower in TOWER_NAMES)
    models = {
        "backbone": WeightedTowers.single(paths.BACKBONE),
        "pretrain-I": WeightedTowers.single(first),
        "pretrain-II": WeightedTowers.single(second),
        "ensemble": WeightedTowers.twin(first, second),
        "joint": WeightedTowers.twin(joint_i, joint_ii),
        "joint-D": WeightedTowers.single(paths.student("joint")),
        "uc": WeightedTowers.uc(joint_i, joint_ii, paths.UC, uc_weight),
        "uc-D": WeightedTowers.single(paths.student("uc")),
        "jtcse": WeightedTowers.twin(*(paths.jtcse_model() / tower for tower in TOWER_NAMES)),
        "jtcse-D": WeightedTowers.single(paths.student("jtcse")),
        **{name: WeightedTowers.single(paths.baseline_model(name)) for name in BASELINES},
    }
    assert tuple(models) == MODEL_NAMES
    return models


def pipeline_models(params: ModelChoice) -> dict[str, WeightedTowers]:
    """The models of params.yaml's `models` (validated against the registry at load), in registry order."""
    return {name: towers for name, towers in all_models(params.uc_weight).items() if name in params.models}


def teacher_model(params: ModelChoice, teacher: str) -> WeightedTowers:
    """The frozen ensemble a `distill@<teacher>` stage distils: the registry's model of that name."""
    assert teacher in STUDENTS.values(), teacher  # distill.teachers is validated at load
    return all_models(params.uc_weight)[teacher]


def _dvc_output(folder: str) -> str:
    """The DVC output a tower folder belongs to (a twin stage writes both towers as one folder)."""
    twin = next((twin for twin in (paths.joint_model(), paths.jtcse_model()) if twin in Path(folder).parents), None)
    return twin.as_posix() if twin is not None else folder


def evaluated_model_folders() -> dict[str, dict[str, str]]:
    """`models` of params.yaml: per model, the DVC outputs holding its towers, the deps of its
    `evaluate@<model>` stage (`towers_folder`, and `second_towers_folder`: another, or the first again)."""
    entries = {}
    for name, towers in all_models(0.0).items():
        outputs = list(dict.fromkeys(_dvc_output(folder) for folder in towers.folders))
        assert len(outputs) <= 2, (name, outputs)
        entries[name] = {"towers_folder": outputs[0], "second_towers_folder": outputs[-1]}
    return entries


def validate_teacher_folders(declared: Mapping[str, tuple[str | None, str | None]]) -> None:
    """`distill.teachers.<teacher>.towers_folder` / `second_towers_folder` (the deps of `distill@<teacher>`)
    must be the registry's outputs of that model; both null (params written before them) is accepted."""
    from pipeline.errors import PipelineError

    folders = evaluated_model_folders()
    for teacher, pair in declared.items():
        expected = (folders[teacher]["towers_folder"], folders[teacher]["second_towers_folder"])
        if pair != (None, None) and pair != expected:
            raise PipelineError(f"distill.teachers.{teacher}: towers_folder, second_towers_folder = {pair[0]}, {pair[1]}; "
                                f"the {teacher} model's towers are in {expected[0]}, {expected[1]} (pipeline/evaluated_models.py): set those")


def tower_exists(tower: str | Path) -> bool:
    """A saved Hugging Face model folder (it has config.json)."""
    return (Path(tower) / "config.json").is_file()


def missing_towers(towers: Iterable[tuple[str, float]]) -> list[str]:
    """The towers of a model that are not saved yet."""
    return [tower for tower, _ in towers if not tower_exists(tower)]


def split_available(models: Mapping[str, WeightedTowers]) -> tuple[dict[str, WeightedTowers], dict[str, list[str]]]:
    """(models whose towers all exist, {skipped model: its missing towers}), both in registry order."""
    available, skipped = {}, {}
    for name, towers in models.items():
        missing = missing_towers(towers)
        if missing:
            skipped[name] = missing
        else:
            available[name] = towers
    return available, skipped

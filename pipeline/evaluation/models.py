"""The models the pipeline evaluates and analyses, by name, as weighted sums of towers.

One registry for every stage that reads the trained models (evaluate, analyze, report's row
names): each name maps to `WeightedTowers`, the model folders whose last-layer [CLS] embeddings
are summed with the given weights (DESIGN.md §2 and §5, Inference).

| name | towers |
|---|---|
| `backbone` | data/backbone |
| `pretrain-I`, `pretrain-II` | data/models/pretrain/{I,II} |
| `ensemble` | pretrain I + pretrain II (the untrained "None" row of the loss ablation) |
| `joint` | data/models/joint/I + data/models/joint/II (TNCSE or JTCSE) |
| `joint-D` | data/models/distill/joint (when `distill.teachers` has `joint`) |
| `uc` | (1 − w)(joint I + joint II) + w · data/uc, w = `backbone.uc_weight` (`jtcse_uc_weight` for JTCSE) |
| `uc-D` | data/models/distill/uc (when `distill.teachers` has `uc`) |
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from pipeline import paths
from pipeline.config import Params
from pipeline.evaluation.sts import WeightedTowers, twin, uc_ensemble

TOWER_NAMES = ("I", "II")


def pipeline_models(params: Params) -> dict[str, WeightedTowers]:
    """Every model of the pipeline by name (in the order above), towers as folder paths (POSIX, relative)."""
    first, second = TOWER_NAMES  # params validation guarantees exactly these two towers
    pretrained = {tower: paths.pretrained_tower(tower).as_posix() for tower in TOWER_NAMES}
    joint = {tower: (paths.joint_model() / tower).as_posix() for tower in TOWER_NAMES}
    teachers = params.distill.teachers
    models: dict[str, WeightedTowers] = {"backbone": [(paths.BACKBONE.as_posix(), 1.0)]}
    for tower in TOWER_NAMES:
        models[f"pretrain-{tower}"] = [(pretrained[tower], 1.0)]
    models["ensemble"] = twin(pretrained[first], pretrained[second])
    models["joint"] = twin(joint[first], joint[second])
    if "joint" in teachers:
        models["joint-D"] = [(paths.student("joint").as_posix(), 1.0)]
    models["uc"] = uc_ensemble(joint[first], joint[second], paths.UC.as_posix(), params.uc_weight)
    if "uc" in teachers:
        models["uc-D"] = [(paths.student("uc").as_posix(), 1.0)]
    return models


def tower_exists(tower: str | Path) -> bool:
    """A saved Hugging Face model folder (it has config.json)."""
    return (Path(tower) / "config.json").is_file()


def missing_towers(towers: WeightedTowers) -> list[str]:
    """The towers of a model that are not saved yet."""
    return [tower for tower, _ in towers if not tower_exists(tower)]


def split_available(
    models: Mapping[str, WeightedTowers],
) -> tuple[dict[str, WeightedTowers], dict[str, list[str]]]:
    """(models whose towers all exist, {skipped model: its missing towers}), both in registry order."""
    available, skipped = {}, {}
    for name, towers in models.items():
        missing = missing_towers(towers)
        if missing:
            skipped[name] = missing
        else:
            available[name] = towers
    return available, skipped

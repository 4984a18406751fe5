"""The tower-distance term (pipeline/objective_terms/tower_distance.py): selectable, weighted by its own setting,
which `dvc exp run -S` composes."""

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from conftest import REPO_ROOT
from pipeline import losses
from pipeline.config import TrainSettings
from pipeline.params_file import parse_params


def _outputs():
    generator = torch.Generator().manual_seed(0)
    last, pooled = (torch.randn(2, 8, 4, generator=generator, requires_grad=True) for _ in range(2))
    return losses.TwinObjective, type("Out", (), {"last_cls": last, "pooler_output": pooled, "cross_cls": None})()


def test_the_weight_scales_the_term_and_the_papers_objective_leaves_it_out():
    objective, out = _outputs()
    once = objective.of(["nce", "distance"])(out).terms
    thrice = objective.of(["nce", "distance"], distance_weight=3.0)(out).terms
    assert thrice["distance"].item() == pytest.approx(3 * once["distance"].item()) and once["distance"] > 0
    assert thrice["nce"].item() == pytest.approx(once["nce"].item())
    assert "distance" not in TrainSettings().losses and TrainSettings(losses=["nce", "distance"]).losses == ["nce", "distance"]


def test_dvc_exp_run_can_set_the_weight():
    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base=None):
        composed = compose(config_name="config", overrides=["train.distance_weight=2.5", "train.losses=[nce,distance]"])
    settings = parse_params(OmegaConf.to_container(composed, resolve=True)).train
    assert settings.term_settings["distance_weight"] == 2.5 and settings.losses == ["nce", "distance"]

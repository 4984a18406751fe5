"""The rehearsal preset (conf/scale/rehearsal.yaml) is the paper preset with a short, listed set of
changes: what an offline CPU machine cannot provide, nothing else."""

import pytest
import yaml

from pipeline.params_file import parse_params

from conftest import REPO_ROOT

# What the offline CPU cannot provide (each key's reason is its comment in conf/scale/rehearsal.yaml).
REHEARSAL_OVERRIDES = {
    "scale",
    "data.wiki.limit", "data.hub_endpoint",
    "rtt.endpoint",
    "pretrain.precision", "train.activation_checkpointing",
    "pretrain.max_steps", "train.max_steps", "distill.teachers.joint.max_steps", "distill.teachers.uc.max_steps",
    "distill.teachers.jtcse.max_steps",
    "baselines.simcse.precision", "baselines.simcse.max_steps", "baselines.gs-infonce.precision", "baselines.gs-infonce.max_steps",
    "baselines.simcse.activation_checkpointing", "baselines.gs-infonce.activation_checkpointing",
    "eval.max_pairs", "analysis.align_data",
    "checkpoints.source",
}  # fmt: skip


def compose(*overrides: str) -> dict:
    from hydra import compose as hydra_compose, initialize_config_dir
    from omegaconf import OmegaConf

    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base=None):
        return OmegaConf.to_container(hydra_compose(config_name="config", overrides=list(overrides)), resolve=True)


def leaves(tree: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            flat |= leaves(value, f"{prefix}{key}.")
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def differing_keys(one: dict, other: dict) -> set[str]:
    first, second = leaves(one), leaves(other)
    return {key for key in first.keys() | second.keys() if first.get(key, "<absent>") != second.get(key, "<absent>")}


@pytest.mark.parametrize("backbone", ["bert", "roberta"])
def test_rehearsal_differs_from_the_paper_preset_only_in_the_listed_keys(backbone):
    paper = compose("scale=paper", f"backbone={backbone}")
    rehearsal = compose("scale=rehearsal", f"backbone={backbone}")
    assert differing_keys(paper, rehearsal) == REHEARSAL_OVERRIDES
    preset = yaml.safe_load((REPO_ROOT / "conf" / "scale" / "rehearsal.yaml").read_text())
    assert set(leaves({k: v for k, v in preset.items() if k != "defaults"})) == REHEARSAL_OVERRIDES  # one place
    settings = parse_params(rehearsal)  # valid as composed
    assert (settings.backbone.name, settings.data.hub_endpoint, settings.rtt.endpoint) == (backbone, "standin", "standin")
    assert settings.train.batch_size == parse_params(paper).train.batch_size  # the paper's batches stay


def test_the_paper_preset_starts_no_stand_in():
    for backbone in ("bert", "roberta"):
        paper = parse_params(compose("scale=paper", f"backbone={backbone}"))
        assert (paper.data.hub_endpoint, paper.rtt.endpoint, paper.checkpoints.source) == (None, None, "hub")

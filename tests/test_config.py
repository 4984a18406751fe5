import os
import subprocess
import sys

import pytest
import yaml

from pipeline.params_file import load_params, parse_params
from pipeline.errors import PipelineError

from conftest import REPO_ROOT, committed_text


def test_committed_params_is_the_valid_tiny_preset(tiny_params_dict):
    params = parse_params(tiny_params_dict)
    assert params.scale == "tiny"
    assert params.backbone.name == "minilm"
    assert params.rtt.backend == "apertium"
    assert set(params.towers) == {"I", "II"}


@pytest.mark.parametrize(
    "edit, expected",
    [
        (lambda p: p.update(no_such_key=1), "unknown setting 'no_such_key'"),
        (lambda p: p["data"]["wiki"].update(limit=-5), "data.wiki.limit=-5"),
        (lambda p: p["data"]["wiki"].update(limit="many"), "data.wiki.limit='many'"),
        (lambda p: p["train"].update(cael=7), "train.cael=7 is more than the 6 encoder layers"),
        (lambda p: p["train"].update(cross_mode="both"), "train.cross_mode='both'"),
        (lambda p: p["train"].update(cross_outputs="mean"), "train.cross_outputs=mean applies to train.cross_mode=side only"),
        (lambda p: p["rtt"].update(backend="bing"), "rtt.backend='bing'"),
        (lambda p: p["train"].update(losses=["nce", "magic"]), "train.losses=['nce', 'magic'] names unknown loss magic; allowed: nce, icnce, ictn"),
        (lambda p: p["pretrain"].update(rtt_as="both"), "pretrain.rtt_as='both'"),
        (lambda p: p["eval"].update(token_budget=100), "eval.token_budget=100 is less than eval.max_length=128"),
        (lambda p: p["eval"].update(token_budget=2), "eval.token_budget=2"),
        (lambda p: p["eval"].update(token_budget="many"), "eval.token_budget='many'"),
        (lambda p: p["train"].update(losses=[]), "train.losses=[] switches every loss term off; allowed: a non-empty subset"),
        (lambda p: p["train"]["gaussian"].update(enabled=True, weight=0), "train.gaussian.weight=0.0 is not positive"),
        (lambda p: p["pretrain"]["gaussian"].update(enabled=True, weight=0), "pretrain.gaussian.weight=0.0 is not positive"),
        (lambda p: p["train"].update(cael=7, cross_mode="side"), "train.cael=7 is more than the 6 encoder layers of backbone 'minilm'"),
        (lambda p: p["train"].update(compile="yes"), "train.compile='yes'"),
        (lambda p: p.update(threads=0), "threads=0"),
        (lambda p: p.update(threads="all"), "threads='all'"),
    ],
)
def test_bad_values_give_one_line_naming_key_and_value(tiny_params_dict, edit, expected):
    edit(tiny_params_dict)
    with pytest.raises(PipelineError) as caught:
        parse_params(tiny_params_dict)
    message = str(caught.value)
    assert expected in message
    assert "\n" not in message


def test_every_cael_up_to_the_layer_count_is_allowed(tiny_params_dict):
    tiny_params_dict["train"]["cael"] = 7
    with pytest.raises(PipelineError, match=r"allowed: 0 \(TNCSE\) to 6, the encoder's layer count"):
        parse_params(tiny_params_dict)
    for cael in range(7):  # 4 and 5 do not divide MiniLM's 6 layers: evenly spread all the same
        tiny_params_dict["train"]["cael"] = cael
        assert parse_params(tiny_params_dict).train.cael == cael
    tiny_params_dict["train"].update(cross_mode="side", cross_outputs="mean")
    assert parse_params(tiny_params_dict).train.cross_outputs == "mean"


def test_missing_params_file_is_a_clear_error(tmp_path):
    with pytest.raises(PipelineError, match="not found"):
        load_params(tmp_path / "params.yaml")


def test_stage_refuses_bad_value_with_exit_2_and_no_traceback(tmp_path, tiny_params_dict):
    tiny_params_dict["data"]["wiki"]["limit"] = -1
    params_file = tmp_path / "params.yaml"
    params_file.write_text(yaml.safe_dump(tiny_params_dict))
    result = subprocess.run(
        [sys.executable, "-m", "stages", "download", "--params", str(params_file)],
        capture_output=True, text=True, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: invalid params: data.wiki.limit=-1: Input should be greater than or equal to 1"
    ]
    assert "Traceback" not in result.stderr


def test_hydra_composition_matches_committed_params(tiny_params_dict):
    """The committed params.yaml is exactly conf/ composed with the default groups."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base=None):
        composed = OmegaConf.to_container(compose(config_name="config"), resolve=True)
        paper_bert = OmegaConf.to_container(
            compose(config_name="config", overrides=["scale=paper", "backbone=bert"]), resolve=True
        )
    committed = yaml.safe_load(committed_text("params.yaml"))  # not the workspace's: `dvc exp run -S` rewrites it
    assert composed == committed
    paper = parse_params(paper_bert)
    assert (paper.scale, paper.rtt.backend, paper.backbone.num_layers) == ("paper", "google", 12)
    assert (paper.towers["I"].lang, paper.towers["II"].lang) == ("fr", "ru")
    assert paper.data.wiki.limit is None


def test_small_preset_composes_to_the_papers_batches_on_the_mirror():
    """`-S scale=small`: the whole mirror, Apertium, the papers' batch sizes, full benchmarks."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base=None):
        small = parse_params(OmegaConf.to_container(compose(config_name="config", overrides=["scale=small"]), resolve=True))
    assert (small.scale, small.device, small.rtt.backend) == ("small", "auto", "apertium")
    assert small.data.wiki.limit == 11913
    assert (small.pretrain.batch_size, small.pretrain.max_length, small.pretrain.max_steps) == (64, 32, None)
    assert (small.train.batch_size, small.train.max_length, small.train.max_steps) == (64, 64, None)
    assert small.eval.max_pairs is None and small.analysis.align_data == "all"


def test_rules_hold_only_where_they_apply(tiny_params_dict):
    """GS-InfoNCE's λ = 0 is refused only when it is switched on; `report` from old experiments is accepted."""
    tiny_params_dict["train"]["gaussian"].update(enabled=False, weight=0)
    tiny_params_dict["report"] = {}
    params = parse_params(tiny_params_dict)
    assert params.train.gaussian.weight == 0 and params.train.compile == "auto"
    tiny_params_dict["train"]["gaussian"]["enabled"] = True
    with pytest.raises(PipelineError, match="train.gaussian.weight=0.0 is not positive"):
        parse_params(tiny_params_dict)


def test_precision_presets_follow_the_released_scripts():
    """paper: SimCSE's towers in fp16 (its --fp16), the twin and the students in fp32 (the twin
    scripts); small: bf16, the fast choice on a GPU; tiny (a CPU): fp32 everywhere."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    def composed(*overrides):
        with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base=None):
            return parse_params(OmegaConf.to_container(compose(config_name="config", overrides=list(overrides)), resolve=True))

    def precisions(params):
        return {key: section.precision for key, section in params.training_sections().items()}

    sections = ("pretrain", "train", "distill.teachers.joint", "distill.teachers.uc", "distill.teachers.jtcse", "baselines.simcse",
                "baselines.gs-infonce")
    # SimCSE's and GS-InfoNCE's own models train as SimCSE's script does (--fp16)
    assert precisions(composed("scale=paper", "backbone=bert")) == dict(zip(sections, ("fp16", "fp32", "fp32", "fp32", "fp32", "fp16", "fp16")))
    assert precisions(composed("scale=small")) == dict.fromkeys(sections, "bf16")
    assert precisions(composed()) == dict.fromkeys(sections, "fp32")


@pytest.mark.parametrize("section", ["pretrain", "train", "distill.teachers.uc"])
@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_half_precision_on_a_cpu_is_one_line_naming_the_key(tiny_params_dict, section, precision):
    *parents, leaf = section.split(".")
    node = tiny_params_dict
    for part in [*parents, leaf]:
        node = node[part]
    node["precision"] = precision
    assert tiny_params_dict["device"] == "cpu"
    with pytest.raises(PipelineError) as error:
        parse_params(tiny_params_dict)
    message = str(error.value)
    assert "\n" not in message and f"{section}.precision={precision} needs a CUDA GPU" in message
    assert f"set {section}.precision: fp32" in message


def test_an_unknown_precision_is_refused(tiny_params_dict):
    tiny_params_dict["train"]["precision"] = "fp8"
    with pytest.raises(PipelineError, match=r"train.precision='fp8': Input should be 'bf16', 'fp16' or 'fp32'"):
        parse_params(tiny_params_dict)


def test_with_device_auto_half_precision_is_checked_when_the_device_resolves(tiny_params_dict, monkeypatch):
    """device auto: params load (a GPU may be there when the stage runs); on a CPU the stage stops
    before loading any model, with one line naming the key."""
    import torch

    from pipeline.training.jobs import joint_job, pretrain_job

    tiny_params_dict["device"] = "auto"
    tiny_params_dict["pretrain"]["precision"] = "fp16"
    params = parse_params(tiny_params_dict)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(PipelineError) as error:
        pretrain_job(params, "I").check(1000)
    assert str(error.value) == (
        "pretrain.precision=fp16 needs a CUDA GPU but device=auto runs on cpu; on CPU set pretrain.precision: fp32"
    )
    joint_job(params).check(1000)  # fp32: fine anywhere


def test_a_params_file_that_changes_while_a_stage_runs_is_refused(tmp_path):
    from pipeline.params_file import params_unchanged_while_running

    path = tmp_path / "params.yaml"
    path.write_text("seed: 1\n")
    with params_unchanged_while_running(path):
        assert path.read_text() == "seed: 1\n"  # reading it changes nothing
    with pytest.raises(PipelineError, match="params.yaml changed while this stage ran"):
        with params_unchanged_while_running(path):
            path.write_text("seed: 2\n")
    with pytest.raises(PipelineError, match="changed while this stage ran"):
        with params_unchanged_while_running(tmp_path / "later.yaml"):
            (tmp_path / "later.yaml").write_text("seed: 2\n")


def test_no_test_reads_the_workspace_params():
    """`dvc exp run -S` and the rehearsal rewrite the workspace's params.yaml: a test that read it would
    build its project from whatever ran last. Tests take `conftest.tiny_preset()` (or the committed text)."""
    needle = "REPO_ROOT / " + '"params.yaml"'  # split, so this file does not match itself
    readers = [path.name for path in (REPO_ROOT / "tests").glob("test_*.py") if needle in path.read_text(encoding="utf-8")]
    assert readers == []


def test_a_retired_setting_is_refused_in_a_stages_params_and_dropped_from_a_past_runs():
    """data.mirror moved to PIPELINE_DATA_MIRROR: params.yaml that still sets it stops with one line naming the
    replacement; an experiment recorded before the move is still read (the report, the seed record)."""
    from conftest import tiny_preset

    old = tiny_preset()
    old["data"]["mirror"] = "../shared/data"
    with pytest.raises(PipelineError, match=r"data.mirror is retired: .*PIPELINE_DATA_MIRROR.*; remove it from params.yaml"):
        parse_params(old)
    assert parse_params(old, of_a_past_run=True) == parse_params(tiny_preset())
    assert old["data"]["mirror"] == "../shared/data"  # the caller's dict is left as it was


LEGACY_KEYS = {"report"}  # accepted for old experiments' params.yaml, written by no preset (Params.report)


def schema_leaves(model: type, prefix: str = "") -> list[str]:
    """Every setting of the schema as a dotted key (sections descended, dict-valued settings kept whole)."""
    from pydantic import BaseModel

    keys = []
    for name, field in model.model_fields.items():
        key = prefix + (field.alias or name)
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            keys += schema_leaves(annotation, key + ".")
        else:
            keys.append(key)
    return keys


def test_every_setting_of_the_schema_is_in_conf_so_dvc_exp_run_can_override_it(tiny_params_dict):
    """One source of defaults: Hydra refuses `-S key=value` for a key conf/config.yaml lacks, so a schema field with a
    default only in pipeline/config.py could not be set from the command line (`train.deterministic` was one)."""
    from pipeline.config import Params

    def present(key: str) -> bool:
        node = tiny_params_dict
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                return False
            node = node[part]
        return True

    assert [key for key in schema_leaves(Params) if key not in LEGACY_KEYS and not present(key)] == []


def test_a_default_in_conf_is_the_schemas_default(tiny_params_dict):
    """Where a section's schema default and conf/config.yaml's value could diverge, they do not: the committed
    composition parses to what the schema alone would give for every key conf does not override on purpose."""
    from pipeline.config import Params

    parsed = parse_params(tiny_params_dict)
    assert parsed.train.deterministic is False and parsed.pretrain.deterministic is False
    assert Params.model_fields["train"].annotation.model_fields["deterministic"].default is False

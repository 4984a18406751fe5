"""The model registry (pipeline/models.py): names, folders, weights, and the `models` of params.yaml."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from pipeline.config import parse_params
from pipeline.errors import PipelineError
from pipeline.models import MODEL_NAMES, WeightedTowers, dvc_models, pipeline_models, split_available, teacher_model

from tiny_models import save_tiny_bert

ROOT = Path(__file__).resolve().parents[1]


def test_registry_names_every_pipeline_model_with_its_folders_and_weights(tiny_params_dict):
    models = pipeline_models(parse_params(tiny_params_dict))
    assert list(models) == ["backbone", "pretrain-I", "pretrain-II", "ensemble", "joint", "joint-D", "uc", "uc-D"]
    assert list(models["backbone"]) == [("data/backbone", 1.0)]
    assert list(models["pretrain-II"]) == [("data/models/pretrain/II", 1.0)]
    assert list(models["ensemble"]) == [("data/models/pretrain/I", 1.0), ("data/models/pretrain/II", 1.0)]
    assert list(models["joint"]) == [("data/models/joint/I", 1.0), ("data/models/joint/II", 1.0)]
    w = tiny_params_dict["backbone"]["uc_weight"]
    assert list(models["uc"]) == [("data/models/joint/I", 1 - w), ("data/models/joint/II", 1 - w), ("data/uc", w)]
    assert list(models["joint-D"]) == [("data/models/distill/joint", 1.0)]
    assert list(models["uc-D"]) == [("data/models/distill/uc", 1.0)]


def test_the_uc_weight_has_one_source_and_jtcse_may_override_it(tiny_params_dict):
    tiny_params_dict["backbone"]["uc_weight"] = 0.6
    tiny_params_dict["backbone"]["jtcse_uc_weight"] = 0.8
    tncse = parse_params(tiny_params_dict)
    assert teacher_model(tncse, "uc").weights == pytest.approx([0.4, 0.4, 0.6])
    tiny_params_dict["train"]["cael"] = 2
    jtcse = parse_params(tiny_params_dict)
    assert pipeline_models(jtcse)["uc"].weights == pytest.approx([0.2, 0.2, 0.8])
    assert teacher_model(jtcse, "joint") == pipeline_models(jtcse)["joint"]


def test_committed_params_and_dvc_yaml_evaluate_exactly_the_registry():
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    assert params["models"] == dvc_models()
    assert list(dvc_models()) == list(MODEL_NAMES)
    assert dvc_models()["uc"] == {"model": "data/models/joint", "also": "data/uc"}
    evaluate = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]["evaluate"]
    assert evaluate["foreach"] == "${models}"


def test_analyze_lists_every_model_of_the_registry():
    analyze = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]["analyze"]
    outs = [next(iter(entry)) for entry in analyze["outs"]]  # plain outputs: out of the headline `dvc metrics show`
    assert [out for out in outs if out.endswith(".json") and out.count("/") == 2 and "attention" not in out] == [
        f"reports/analysis/{name}.json" for name in MODEL_NAMES
    ]
    folders = {output for entry in dvc_models().values() for output in entry.values()}
    assert folders <= set(analyze["deps"])


def test_report_rows_name_registry_models():
    from pipeline.reporting.spec import MODELS

    assert MODELS == MODEL_NAMES


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda p: p["models"].update({"no-such-model": {"model": "data/backbone", "also": "data/backbone"}}),
         "invalid params: models.no-such-model is not a model of the pipeline; models: backbone, pretrain-I"),
        (lambda p: p["models"]["uc"].update({"also": "data/models/joint"}),
         "invalid params: models.uc={'model': 'data/models/joint', 'also': 'data/models/joint'} must be "
         "{'model': 'data/models/joint', 'also': 'data/uc'}"),
        (lambda p: p["distill"]["teachers"].pop("uc"),
         "invalid params: models.uc-D is distilled from 'uc', which is not in distill.teachers; add it or drop uc-D"),
    ],
)
def test_bad_models_are_refused_at_load(tiny_params_dict, edit, message):
    raw = copy.deepcopy(tiny_params_dict)
    edit(raw)
    with pytest.raises(PipelineError) as error:
        parse_params(raw)
    assert str(error.value).startswith(message)


def test_without_models_every_registry_model_is_evaluated(tiny_params_dict):
    del tiny_params_dict["models"]
    assert tuple(pipeline_models(parse_params(tiny_params_dict))) == MODEL_NAMES


def test_a_subset_of_models_is_evaluated_in_registry_order(tiny_params_dict):
    entries = tiny_params_dict["models"]
    tiny_params_dict["models"] = {name: entries[name] for name in ("uc", "backbone")}
    assert list(pipeline_models(parse_params(tiny_params_dict))) == ["backbone", "uc"]


def test_weighted_towers_combine_and_folders():
    towers = WeightedTowers.uc(Path("a"), "b", "c", 0.25)
    assert towers.folders == ["a", "b", "c"] and towers.weights == [0.75, 0.75, 0.25]
    assert towers.combine([1.0, 2.0, 4.0]) == pytest.approx(0.75 * 3 + 1.0)
    with pytest.raises(ValueError):
        towers.combine([1.0, 2.0])


def test_split_available_keeps_models_whose_towers_all_exist(tmp_path):
    save_tiny_bert(tmp_path / "a", seed=0, layers=1)
    models = {"one": [(str(tmp_path / "a"), 1.0)], "pair": [(str(tmp_path / "a"), 1.0), (str(tmp_path / "b"), 1.0)]}
    available, skipped = split_available(models)
    assert list(available) == ["one"] and skipped == {"pair": [str(tmp_path / "b")]}

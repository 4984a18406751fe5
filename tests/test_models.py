"""The model registry (pipeline/evaluated_models.py): names, folders, weights, and the `models` of params.yaml."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pipeline.params_file import parse_params
from pipeline.errors import PipelineError
from pipeline.evaluated_models import BASELINES, JTCSE_MODELS, MODEL_NAMES, WeightedTowers, evaluated_model_folders, pipeline_models, split_available, teacher_model

from tiny_models import save_tiny_bert

ROOT = Path(__file__).resolve().parents[1]


def test_registry_names_every_pipeline_model_with_its_folders_and_weights(tiny_params_dict):
    models = pipeline_models(parse_params(tiny_params_dict))
    assert list(models) == ["backbone", "pretrain-I", "pretrain-II", "ensemble", "joint", "joint-D", "uc", "uc-D",
                            "jtcse", "jtcse-D", "simcse", "gs-infonce"]
    assert list(models["backbone"]) == [("data/backbone", 1.0)]
    assert list(models["pretrain-II"]) == [("data/models/pretrain/II", 1.0)]
    assert list(models["ensemble"]) == [("data/models/pretrain/I", 1.0), ("data/models/pretrain/II", 1.0)]
    assert list(models["joint"]) == [("data/models/joint/I", 1.0), ("data/models/joint/II", 1.0)]
    w = tiny_params_dict["backbone"]["uc_weight"]
    assert list(models["uc"]) == [("data/models/joint/I", 1 - w), ("data/models/joint/II", 1 - w), ("data/uc", w)]
    assert list(models["joint-D"]) == [("data/models/distill/joint", 1.0)]
    assert list(models["uc-D"]) == [("data/models/distill/uc", 1.0)]
    assert list(models["jtcse"]) == [("data/models/jtcse/I", 1.0), ("data/models/jtcse/II", 1.0)]
    assert list(models["jtcse-D"]) == [("data/models/distill/jtcse", 1.0)]
    assert list(models["simcse"]) == [("data/models/baseline/simcse", 1.0)]
    assert list(models["gs-infonce"]) == [("data/models/baseline/gs-infonce", 1.0)]


def test_the_uc_weight_has_one_source_and_jtcse_may_override_it(tiny_params_dict):
    tiny_params_dict["backbone"]["uc_weight"] = 0.6
    tiny_params_dict["backbone"]["jtcse_uc_weight"] = 0.8
    tncse = parse_params(tiny_params_dict)
    assert teacher_model(tncse, "uc").weights == pytest.approx([0.4, 0.4, 0.6])
    tiny_params_dict["train"]["cael"] = 2
    jtcse = parse_params(tiny_params_dict)
    assert pipeline_models(jtcse)["uc"].weights == pytest.approx([0.2, 0.2, 0.8])
    assert teacher_model(jtcse, "joint") == pipeline_models(jtcse)["joint"]


def dvc_yaml() -> dict:
    return yaml.safe_load((ROOT / "dvc.yaml").read_text())


def test_the_evaluated_models_default_to_the_registry_and_dvc_yaml_evaluates_them():
    folders = evaluated_model_folders()
    assert list(folders) == list(MODEL_NAMES)
    assert folders["uc"] == {"towers_folder": "data/models/joint", "second_towers_folder": "data/uc"}
    assert folders["ensemble"] == {"towers_folder": "data/models/pretrain/I", "second_towers_folder": "data/models/pretrain/II"}
    assert folders["joint-D"] == {"towers_folder": "data/models/distill/joint", "second_towers_folder": "data/models/distill/joint"}
    evaluate = dvc_yaml()["stages"]["evaluate"]
    assert evaluate["foreach"] == "${models}"
    assert evaluate["do"]["deps"][:2] == ["${item.towers_folder}", "${item.second_towers_folder}"]


def test_conf_lists_exactly_the_registry(tiny_params_dict):
    """conf/config.yaml (composed into params.yaml, see test_config) restates the registry's folders."""
    assert tiny_params_dict["models"] == evaluated_model_folders()


def test_analyze_reads_and_writes_every_model_of_the_registry():
    analyze = dvc_yaml()["stages"]["analyze"]
    outs = [next(iter(entry)) for entry in analyze["outs"]]  # plain outputs: out of the headline `dvc metrics show`
    assert [out for out in outs if out.endswith(".json") and out.count("/") == 2 and "attention" not in out] == [
        f"reports/analysis/{name}.json" for name in MODEL_NAMES
    ]
    model_folders = {dep for dep in analyze["deps"] if dep.startswith("data/") and not dep.startswith("data/raw/")}
    assert model_folders == {folder for entry in evaluated_model_folders().values() for folder in entry.values()}


def test_every_plot_of_the_models_lists_the_registry_in_its_order():
    """The cosine-density plots (one per STS-B gold bin) draw one line per model of the registry."""
    from pipeline.analysis import GOLD_BINS

    density = {}
    for plot in dvc_yaml()["plots"]:
        if isinstance(plot, dict):
            (definition,) = plot.values()
            for file, columns in definition["y"].items():
                if Path(file).name.startswith("cosine_density_"):
                    density[file] = columns
    assert set(density) == {f"reports/analysis/cosine_density_{low}-{high}.csv" for low, high in GOLD_BINS}
    for file, columns in density.items():
        assert columns == list(MODEL_NAMES), file


def test_a_table_row_names_a_model_of_the_registry():
    from pydantic import ValidationError

    from pipeline.reporting.spec import RowSpec

    assert [RowSpec(label=name, model=name).model for name in MODEL_NAMES] == list(MODEL_NAMES)
    with pytest.raises(ValidationError):
        RowSpec(label="D", model="distilled")


def test_without_models_every_registry_model_but_the_seed_papers_and_jtcse_is_evaluated(tiny_params_dict):
    """params made before the seed papers' models and the jtcse stage have neither: their default evaluates the rest."""
    del tiny_params_dict["models"], tiny_params_dict["baselines"], tiny_params_dict["distill"]["teachers"]["jtcse"]
    assert tuple(pipeline_models(parse_params(tiny_params_dict))) == tuple(
        name for name in MODEL_NAMES if name not in (*BASELINES, *JTCSE_MODELS))


def test_a_seed_papers_model_is_evaluated_only_where_baselines_trains_it(tiny_params_dict):
    del tiny_params_dict["baselines"]["gs-infonce"]
    with pytest.raises(PipelineError, match="models.gs-infonce is trained by baselines.gs-infonce, which params.yaml lacks"):
        parse_params(tiny_params_dict)
    tiny_params_dict["baselines"]["bert-flow"] = tiny_params_dict["baselines"]["simcse"]
    with pytest.raises(PipelineError, match="baselines.bert-flow is not a seed paper's model of the registry"):
        parse_params(tiny_params_dict)


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


def test_the_committed_run_trains_jtcse_beside_tncse_at_half_the_layers(tiny_params_dict):
    """The jtcse stage: train's settings with jtcse.cael CAELs, null = half the backbone's layers (3 of MiniLM's
    6, the papers' 6 of BERT-base's 12); its own folder, teacher of jtcse-D; the joint stage keeps train's 0."""
    from pipeline.training.jobs import joint_job

    params = parse_params(tiny_params_dict)
    assert params.train.cael == 0 and params.jtcse_train.cael == tiny_params_dict["backbone"]["num_layers"] // 2 == 3
    job = joint_job(params, name="jtcse")
    assert (job.name, job.settings.cael, job.output.as_posix()) == ("jtcse", 3, "data/models/jtcse")
    assert "JTCSE with 3 CAELs" == job.method and joint_job(params).method == "TNCSE"
    assert teacher_model(params, "jtcse") == pipeline_models(params)["jtcse"]
    tiny_params_dict["jtcse"] = {"cael": 7}
    with pytest.raises(PipelineError, match="jtcse.cael"):
        parse_params(tiny_params_dict)


def test_a_distill_stage_depends_on_its_teachers_towers_as_the_registry_has_them(tiny_params_dict):
    params = parse_params(tiny_params_dict)
    for teacher, student in params.distill.teachers.items():
        folders = {folder.split("/I")[0].split("/II")[0] for folder in teacher_model(params, teacher).folders}
        assert {student.towers_folder, student.second_towers_folder} == folders, teacher
    tiny_params_dict["distill"]["teachers"]["jtcse"]["towers_folder"] = "data/models/joint"
    with pytest.raises(PipelineError, match="distill.teachers.jtcse: .* the jtcse model's towers are in data/models/jtcse"):
        parse_params(tiny_params_dict)

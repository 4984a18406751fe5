"""The LayerNorm study (TNCSE Figure 5, JTCSE Fig. 8): removing LayerNorms, the norm input of the
tensor-norm loss, their settings, the save/load round trip, the norm probe, the tables and figures."""

import copy
import json
import logging
import math
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
import yaml
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import AutoModel, AutoTokenizer, BertConfig, BertModel, RobertaConfig, RobertaModel

from pipeline import losses
from pipeline.analysis import norm_probe, probe_sentences
from pipeline.config import TrainSettings
from pipeline.params_file import parse_params
from pipeline.errors import PipelineError
from pipeline.modeling import (
    TwinEncoder,
    TwinOutput,
    count_layernorms,
    drop_layernorms,
    dropped_layers,
    load_backbone,
)
from pipeline.modeling.layernorm import CONFIG_KEY
from pipeline.writeup.render import markdown
from pipeline.writeup.report import write_index, write_tables
from pipeline.reporting.runs import ExperimentSearch, Run
from pipeline.reporting.spec import load_tables, parse_tables
from pipeline.reporting.surface import SURFACE_K, SURFACE_T, tensor_norm_surface
from pipeline.reporting.tables import RunSource, build_table
from pipeline.training.tasks import TwinTask

from conftest import REPO_ROOT, tiny_preset
from tiny_models import save_tiny_bert

LAYERS = 4


def tiny_model(family: str = "bert", seed: int = 0, layers: int = LAYERS):
    torch.manual_seed(seed)
    shape = dict(vocab_size=100, hidden_size=32, num_hidden_layers=layers, num_attention_heads=4,
                 intermediate_size=64, max_position_embeddings=40)
    if family == "bert":
        return BertModel(BertConfig(**shape)).eval()
    return RobertaModel(RobertaConfig(**shape, pad_token_id=1)).eval()


def tiny_batch(seed: int = 0, rows: int = 6):
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(5, 100, (rows, 9), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 6:] = 0
    return input_ids.masked_fill(attention_mask == 0, 0), attention_mask


def identities(model) -> int:
    return sum(isinstance(module, nn.Identity) for module in model.encoder.layer.modules())


# ----------------------------------------------------------------------------- removing LayerNorms


@pytest.mark.parametrize("family", ["bert", "roberta"])
@pytest.mark.parametrize("k", range(LAYERS + 1))
def test_drop_layernorms_removes_exactly_two_per_layer_of_the_last_k(family, k):
    model = tiny_model(family)
    assert count_layernorms(model) == 2 * LAYERS
    drop_layernorms(model, k)
    assert count_layernorms(model) == 2 * (LAYERS - k)
    assert identities(model) == 2 * k
    for index, layer in enumerate(model.encoder.layer):
        removed = index >= LAYERS - k
        for module in (layer.attention.output.LayerNorm, layer.output.LayerNorm):
            assert isinstance(module, nn.Identity if removed else nn.LayerNorm)
    assert isinstance(model.embeddings.LayerNorm, nn.LayerNorm)  # only the encoder layers' LayerNorms
    assert dropped_layers(model) == k
    assert (CONFIG_KEY in model.config.to_dict()) == (k > 0)


def test_a_removed_layernorm_keeps_the_residual_addition():
    model = tiny_model()
    drop_layernorms(model, 1)
    block = model.encoder.layer[-1].attention.output
    hidden, residual = torch.randn(2, 5, 32), torch.randn(2, 5, 32)
    with torch.no_grad():
        torch.testing.assert_close(block(hidden, residual), block.dense(hidden) + residual, rtol=0, atol=0)


def test_drop_layernorms_zero_leaves_the_outputs_bit_for_bit():
    ids, mask = tiny_batch()
    with torch.no_grad():
        before = tiny_model()(input_ids=ids, attention_mask=mask)
        after = drop_layernorms(tiny_model(), 0)(input_ids=ids, attention_mask=mask)
    assert torch.equal(before.last_hidden_state, after.last_hidden_state)
    assert torch.equal(before.pooler_output, after.pooler_output)


@pytest.mark.parametrize("k", [-1, LAYERS + 1])
def test_drop_layernorms_out_of_range_is_one_line(k):
    with pytest.raises(PipelineError, match=rf"train.drop_layernorm={k} is (negative|more than the {LAYERS} encoder layers .*); allowed: 0 .* to {LAYERS}") as caught:
        drop_layernorms(tiny_model(), k)
    assert "\n" not in str(caught.value)


def test_removed_layernorms_cannot_be_put_back_but_the_same_count_reapplies():
    model = drop_layernorms(tiny_model(), 2)
    drop_layernorms(model, 2)
    assert count_layernorms(model) == 2 * (LAYERS - 2)
    with pytest.raises(PipelineError, match="already has the LayerNorms of its last 2 layers removed"):
        drop_layernorms(model, 3)


# ----------------------------------------------------------------------------- save and load


def test_saved_model_records_k_and_the_pipeline_loader_reapplies_it(tmp_path):
    model = drop_layernorms(tiny_model(), 3)
    model.save_pretrained(tmp_path / "m")
    assert json.loads((tmp_path / "m" / "config.json").read_text())[CONFIG_KEY] == 3
    loaded = load_backbone(tmp_path / "m").eval()
    assert count_layernorms(loaded) == 2 * (LAYERS - 3) and dropped_layers(loaded) == 3
    ids, mask = tiny_batch()
    with torch.no_grad():
        ours, theirs = model(input_ids=ids, attention_mask=mask), loaded(input_ids=ids, attention_mask=mask)
        torch.testing.assert_close(theirs.last_hidden_state, ours.last_hidden_state, rtol=0, atol=1e-6)
        torch.testing.assert_close(theirs.pooler_output, ours.pooler_output, rtol=0, atol=1e-6)
        # stock AutoModel ignores the key and re-creates unit LayerNorms: why the pipeline loads with load_backbone
        stock = AutoModel.from_pretrained(str(tmp_path / "m")).eval()
        assert count_layernorms(stock) == 2 * LAYERS
        assert not torch.allclose(stock(input_ids=ids, attention_mask=mask).last_hidden_state, ours.last_hidden_state)


def test_a_model_without_removed_layernorms_saves_the_config_it_always_did(tmp_path):
    drop_layernorms(tiny_model(), 0).save_pretrained(tmp_path / "m")
    assert CONFIG_KEY not in json.loads((tmp_path / "m" / "config.json").read_text())
    assert count_layernorms(load_backbone(tmp_path / "m")) == 2 * LAYERS


# ----------------------------------------------------------------------------- settings


@pytest.mark.parametrize(
    "edit, expected",
    [
        (dict(norm_input="cls"), "train.norm_input='cls'"),
        (dict(drop_layernorm=7), "train.drop_layernorm=7 is more than the 6 encoder layers of backbone 'minilm'"),
        (dict(drop_layernorm=-1), "train.drop_layernorm=-1"),
        (dict(drop_layernorm="two"), "train.drop_layernorm='two'"),
    ],
)
def test_bad_study_settings_are_one_line(tiny_params_dict, edit, expected):
    tiny_params_dict["train"].update(edit)
    with pytest.raises(PipelineError) as caught:
        parse_params(tiny_params_dict)
    assert expected in str(caught.value) and "\n" not in str(caught.value)


def test_study_settings_default_to_the_method_and_take_every_k_up_to_the_layer_count(tiny_params_dict):
    assert TrainSettings().norm_input == "pooler" and TrainSettings().drop_layernorm == 0
    params = parse_params(tiny_params_dict)
    assert (params.train.norm_input, params.train.drop_layernorm) == ("pooler", 0)
    for k in range(params.backbone.num_layers + 1):
        tiny_params_dict["train"].update(drop_layernorm=k, norm_input="last_hidden_cls")
        assert parse_params(tiny_params_dict).train.drop_layernorm == k


@pytest.mark.parametrize("edit", [dict(norm_input="cls"), dict(drop_layernorm=7)])
def test_a_stage_given_a_bad_study_setting_exits_2_with_one_line(tmp_path, edit):
    raw = tiny_preset()
    raw["train"].update(edit)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw))
    result = subprocess.run([sys.executable, "-m", "stages", "joint"], cwd=tmp_path, capture_output=True, text=True,
                            timeout=300, env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1",
                                 "PIPELINE_LEASE_DIR": os.environ["PIPELINE_LEASE_DIR"]})  # the suite's (conftest)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert f"train.{next(iter(edit))}=" in line


# ----------------------------------------------------------------------------- the loss's norm input


def twin_output(seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    last, pooled = torch.randn(2, 8, 16, generator=generator), torch.randn(2, 8, 16, generator=generator)
    return TwinOutput(last_cls=last, pooler_output=pooled, cross_cls=None)


def test_norm_input_pooler_is_todays_objective_bit_for_bit():
    out = twin_output()
    default = losses.twin_objective(out)
    explicit = losses.twin_objective(out, norm_input="pooler")
    assert torch.equal(default.total, explicit.total)
    assert torch.equal(default.terms["ictn"], losses.ictn(out.last_cls, out.pooler_output))


def test_norm_input_last_hidden_cls_takes_the_norms_of_the_last_hidden_cls():
    out = twin_output()
    study = losses.twin_objective(out, norm_input="last_hidden_cls")
    assert torch.equal(study.terms["ictn"], losses.ictn(out.last_cls, out.last_cls))
    assert not torch.equal(study.terms["ictn"], losses.twin_objective(out).terms["ictn"])
    assert torch.equal(study.terms["nce"], losses.twin_objective(out).terms["nce"])


def test_unknown_norm_input_is_one_line():
    with pytest.raises(PipelineError, match="train.norm_input='cls' is not known; allowed: pooler, last_hidden_cls"):
        losses.norm_vectors(twin_output(), "cls")


@pytest.fixture(scope="module")
def towers(tmp_path_factory):
    root = tmp_path_factory.mktemp("towers")
    return save_tiny_bert(root / "I", seed=1, layers=3), save_tiny_bert(root / "II", seed=2, layers=3)


def study_batch(tokenizer):
    sentences = ["a girl is styling her hair .", "the cat sat on the mat .", "two dogs run in the park ."]
    return [tokenizer(sentences, padding=True, return_tensors="pt")]


def test_twin_task_with_defaults_computes_todays_loss_bit_for_bit(towers):
    tokenizer = AutoTokenizer.from_pretrained(towers[0])
    settings = TrainSettings(dropout=0.0, jtcse_dropout=0.0)
    task = TwinTask(towers, tokenizer, settings, seed=3)
    assert identities(task.model.tower_I) == 0 and not task.leaves_parameters_unused
    batch = study_batch(tokenizer)
    reference = TwinEncoder.from_pretrained(str(towers[0]), str(towers[1]), dropout=0.0)
    with torch.no_grad():
        ours = task.loss(task.model, batch, step=0)["loss"]
        out = reference(batch[0]["input_ids"], batch[0]["attention_mask"])
        today = losses.twin_objective(out, settings.losses, temperature=settings.temperature, norm_factor=settings.norm_factor).total
    assert torch.equal(ours, today)


def test_twin_task_of_the_study_removes_layernorms_and_saves_k(towers, tmp_path):
    tokenizer = AutoTokenizer.from_pretrained(towers[0])
    settings = TrainSettings(norm_input="last_hidden_cls", drop_layernorm=2, max_length=24)
    task = TwinTask(towers, tokenizer, settings, seed=3)
    assert all(count_layernorms(tower) == 2 for tower in task.model.towers)  # 3 layers, last 2 without
    assert task.leaves_parameters_unused  # the pooler layers get no gradient: DDP must be told
    loss = task.loss(task.model, study_batch(tokenizer), step=0)
    loss["loss"].backward()
    assert all(p.grad is None for p in task.model.tower_I.pooler.parameters())
    task.save(task.model, tmp_path / "joint")
    for name in ("I", "II"):
        assert count_layernorms(load_backbone(tmp_path / "joint" / name)) == 2


# ----------------------------------------------------------------------------- the norm probe


def test_probe_sentences_are_a_seeded_sample_of_distinct_lines():
    corpus = [f"sentence {i}" for i in range(300)] + ["sentence 0", "  "]
    sample = probe_sentences(corpus, 100, seed=7)
    assert len(sample) == len(set(sample)) == 100 and set(sample) <= set(corpus) - {"  "}
    assert sample == probe_sentences(corpus, 100, seed=7) and sample != probe_sentences(corpus, 100, seed=8)
    with pytest.raises(PipelineError, match="analysis.norm_probe_sentences=400 is more than the corpus's 300"):
        probe_sentences(corpus, 400, seed=7)


PROBE = ["a girl is styling her hair .", "the cat sat on the mat .", "two dogs run in the park .",
         "a man plays a guitar", "it rains", "children are playing football on a sunny day in the city park ."]


def test_norm_probe_numbers_are_the_norms_of_the_models_outputs(towers):
    probes = norm_probe({"one": [(str(towers[0]), 1.0)], "pair": [(str(towers[0]), 1.0), (str(towers[1]), 1.0)]},
                        PROBE, max_length=128, batch_size=4)
    tokenizer = AutoTokenizer.from_pretrained(towers[0])
    norms = {}
    for tower in towers:
        with torch.no_grad():
            out = BertModel.from_pretrained(str(tower)).eval()(**tokenizer(PROBE, padding=True, return_tensors="pt"))
        norms[tower] = out.last_hidden_state[:, 0].double().norm(dim=-1), out.pooler_output.double().norm(dim=-1)
    assert probes["one"]["last_hidden_cls"]["mean"] == pytest.approx(float(norms[towers[0]][0].mean()), rel=1e-6)
    assert probes["one"]["pooler"]["std"] == pytest.approx(float(norms[towers[0]][1].std(unbiased=False)), rel=1e-4)
    pooled = torch.cat([norms[towers[0]][0], norms[towers[1]][0]])
    assert probes["pair"]["last_hidden_cls"]["mean"] == pytest.approx(float(pooled.mean()), rel=1e-6)
    assert probes["pair"]["last_hidden_cls"]["max"] == pytest.approx(float(pooled.max()), rel=1e-6)
    assert probes["pair"]["towers"][str(towers[1])]["pooler"]["mean"] == pytest.approx(float(norms[towers[1]][1].mean()))
    assert probes["one"]["sentences"] == 6 and probes["one"]["dropped_layernorm_layers"] == {str(towers[0]): 0}


def test_removing_layernorms_changes_the_probed_norm_spread(towers, tmp_path):
    for k in (1, 2):
        drop_layernorms(load_backbone(towers[0]), k).save_pretrained(tmp_path / f"k{k}")
    models = {"k0": [(str(towers[0]), 1.0)], **{f"k{k}": [(str(tmp_path / f"k{k}"), 1.0)] for k in (1, 2)}}
    probes = norm_probe(models, PROBE, max_length=32, batch_size=4)
    assert probes["k2"]["dropped_layernorm_layers"] == {str(tmp_path / "k2"): 2}
    # the last LayerNorm puts every h^L near √d (unit weights of a random model): removing it frees the norm
    spread = {name: probe["last_hidden_cls"]["std"] / probe["last_hidden_cls"]["mean"] for name, probe in probes.items()}
    assert spread["k1"] > 2 * spread["k0"] and spread["k2"] > 2 * spread["k0"]
    assert probes["k1"]["last_hidden_cls"]["mean"] != pytest.approx(probes["k0"]["last_hidden_cls"]["mean"], rel=1e-3)


# ----------------------------------------------------------------------------- the loss surface


def test_surface_values_are_the_loss_function_at_sampled_points():
    ks, ts = np.linspace(*SURFACE_K, 7), np.linspace(*SURFACE_T, 5)
    values = tensor_norm_surface(ks, ts)
    assert values.shape == (7, 5)
    generator = torch.Generator().manual_seed(0)
    for i, j in [(0, 0), (3, 2), (6, 4), (2, 1), (5, 3)]:
        k, t = float(ks[i]), float(ts[j])
        # any pair of vectors with ‖h⁺‖ = k‖h‖ and cos γ = t, in 16 dimensions
        h = torch.randn(16, generator=generator, dtype=torch.float64)
        other = torch.randn(16, generator=generator, dtype=torch.float64)
        other = other - (other @ h) / (h @ h) * h
        positive = k * h.norm() * (t * h / h.norm() + math.sqrt(1 - t * t) * other / other.norm())
        assert values[i, j] == pytest.approx(float(losses.norm_ratio(h[None], positive[None])[0]), rel=1e-9, abs=1e-12)
        assert values[i, j] == pytest.approx(math.sqrt(1 + k * k - 2 * k * t) / (1 + k), rel=1e-9, abs=1e-12)  # Eq. 3
    assert tensor_norm_surface([1.0], [1.0])[0, 0] == pytest.approx(0.0, abs=1e-12)  # the minimum at k = t = 1


# ----------------------------------------------------------------------------- tables and figures


def _study_run(name: str, params: dict, k: int, norm: float, stsb: float) -> Run:
    params = copy.deepcopy(params)
    params["train"].update(norm_input="last_hidden_cls", drop_layernorm=k)
    probe = {"last_hidden_cls": {"mean": norm, "std": norm / 10}, "pooler": {"mean": 8.0, "std": 0.5}}
    files = {"reports/metrics/joint.json": {"STSBenchmark": {"test": stsb}, "avg": stsb - 20},
             "reports/analysis/joint.json": {"norm_probe": probe}}
    return Run(name, params, files, timestamp=f"2026-01-0{k + 1}")


def test_the_study_tables_render_our_rows_beside_the_papers_and_draw_their_figures(tiny_params_dict, tmp_path):
    tables = load_tables(REPO_ROOT / "tables.yaml")
    old = copy.deepcopy(tiny_params_dict)
    del old["train"]["norm_input"], old["train"]["drop_layernorm"]  # a workspace from before the study
    workspace = Run("workspace", old, {"reports/metrics/joint.json": {"STSBenchmark": {"test": 80.0}, "avg": 60.0},
                                       "reports/analysis/joint.json": {"norm_probe": {
                                           "last_hidden_cls": {"mean": 6.0, "std": 0.1}, "pooler": {"mean": 8.5, "std": 0.5}}}})
    runs = [_study_run("exp k1", tiny_params_dict, 1, 14.0, 79.0), _study_run("exp k2", tiny_params_dict, 2, 22.0, 75.0)]
    source = RunSource(workspace, lambda: ExperimentSearch(runs))
    table = build_table(tables, "layernorm-tncse", source)
    rows = {row.label: row for row in table.rows}
    assert rows["pooler output (TNCSE)"].run == "workspace"  # an old run counts at the defaults: pooler, k = 0
    assert rows["pooler output (TNCSE)"].ours["STS-B"] == 80.0 and rows["pooler output (TNCSE)"].paper["STS-B"] == 81.72
    assert rows["h^L, k = 1"].run == "exp k1" and rows["h^L, k = 1"].ours["norm h^L"] == 14.0
    assert rows["h^L, k = 2"].ours == {"norm h^L": 22.0, "std h^L": 2.2, "norm h^P": 8.0, "STS-B": 75.0, "Avg.": 55.0}
    assert rows["h^L, k = 3"].missing and "train.drop_layernorm=3" in rows["h^L, k = 3"].command
    text = markdown(table)
    assert "14.00 | — | —" in text.replace("\\|", "|") and "between 14 and 16" in text

    written = write_tables([table, build_table(tables, "layernorm-jtcse", source)], tmp_path / "tables")
    figures = {path.relative_to(tmp_path).as_posix() for path in written if path.suffix == ".png"}
    assert figures == {"figures/layernorm-tncse.png", "figures/layernorm-jtcse.png", "figures/tensor_norm_surface.png"}
    assert (tmp_path / "figures" / "layernorm-tncse.png").read_bytes().startswith(b"\x89PNG")
    readme = write_index([table], tmp_path / "tables").read_text()
    assert "[layernorm-tncse.png](../figures/layernorm-tncse.png)" in readme
    assert "[tensor_norm_surface.png](../figures/tensor_norm_surface.png)" in readme


def test_a_figure_must_draw_columns_of_its_table():
    raw = yaml.safe_load((REPO_ROOT / "tables.yaml").read_text())
    raw["tables"]["layernorm-tncse"]["figure"]["line"] = "STS-X"
    with pytest.raises(PipelineError, match="tables.layernorm-tncse: figure: unknown column 'STS-X'"):
        parse_tables(raw)


def test_loading_a_study_model_reports_only_weights_missing_besides_the_removed_layernorms(tmp_path, caplog):
    drop_layernorms(tiny_model(), 2).save_pretrained(tmp_path / "m")
    with caplog.at_level(logging.WARNING):
        load_backbone(tmp_path / "m")
    assert not [record for record in caplog.records if "LOAD REPORT" in record.getMessage() or "lacks" in record.getMessage()]
    weights = load_file(tmp_path / "m" / "model.safetensors")
    del weights["pooler.dense.weight"]
    save_file(weights, tmp_path / "m" / "model.safetensors", metadata={"format": "pt"})
    with caplog.at_level(logging.WARNING):
        load_backbone(tmp_path / "m")
    (warning,) = [record.getMessage() for record in caplog.records if "lacks" in record.getMessage()]
    assert warning.endswith("newly initialised: pooler.dense.weight")

"""Analysis metrics (alignment, uniformity, E_CLS, attention sink, norms, cost, cosine density),
the model registry and the `analyze` stage on tiny random BERTs."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from transformers import AutoTokenizer, BertConfig
from typer.testing import CliRunner

from pipeline.analysis import (
    GOLD_BINS,
    alignment,
    analyze_layers,
    attention_map,
    attention_received,
    cls_energy,
    cosine_density,
    efficiency,
    inference_gmacs,
    is_punctuation_token,
    load_eager_model,
    norm_statistics,
    positive_pairs,
    thop_formula_gmacs,
    thop_gmacs,
    uniformity,
)
from pipeline.analysis.layers import LayerAnalysis
from pipeline.data.readers import ScoredPair
from stages.cli import app

from conftest import MIRROR
from tiny_models import save_tiny_bert

SENTENCES = [
    "a girl is styling her hair .",
    "a man is playing a guitar !",
    "three dogs run on the beach",
    "is it raining ?",
    "the cat sleeps .",
    "a woman slices a tomato on a board .",
]


# ----------------------------------------------------------------------------- alignment, uniformity


def _unit(rows: np.ndarray) -> list[np.ndarray]:
    return [row / np.linalg.norm(row) for row in rows]


def test_alignment_matches_a_python_loop_and_is_zero_for_identical_positives():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(7, 5)), rng.normal(size=(7, 5))
    for alpha in (2, 1):
        loop = sum(np.linalg.norm(a - b) ** alpha for a, b in zip(_unit(x), _unit(y))) / len(x)
        assert alignment(x, y, alpha=alpha) == pytest.approx(loop, rel=1e-12)
    assert alignment(torch.from_numpy(x), torch.from_numpy(3 * x)) == pytest.approx(0.0, abs=1e-12)  # scale is normalised away
    assert alignment(x, -x) == pytest.approx(4.0)  # opposite points: ||u - (-u)||^2 = 4


def test_uniformity_matches_a_python_loop_over_distinct_pairs_and_antipodal_points():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(9, 4))
    units = _unit(x)
    terms = [math.exp(-2 * np.linalg.norm(units[i] - units[j]) ** 2) for i in range(9) for j in range(i + 1, 9)]
    loop = math.log(sum(terms) / len(terms))
    assert uniformity(x) == pytest.approx(loop, rel=1e-12)
    assert uniformity(x, block=2) == pytest.approx(loop, rel=1e-12)  # row blocks give the same mean
    t3 = [math.exp(-3 * np.linalg.norm(units[i] - units[j]) ** 2) for i in range(9) for j in range(i + 1, 9)]
    assert uniformity(x, t=3) == pytest.approx(math.log(sum(t3) / len(t3)), rel=1e-12)
    # two antipodal points: ||u - v||^2 = 4, so log exp(-2 · 4) = -8, the minimum possible
    assert uniformity(np.array([[0.0, 2.0], [0.0, -5.0]])) == pytest.approx(-8.0)
    # identical points: log exp(0) = 0, the maximum
    assert uniformity(np.ones((3, 4))) == pytest.approx(0.0, abs=1e-12)


# ----------------------------------------------------------------------------- cosine density


def test_cosine_density_integrates_to_one_in_every_non_empty_gold_bin():
    rng = np.random.default_rng(2)
    gold = np.concatenate([rng.uniform(0, 4, 200), [5.0, 5.0, 4.0]])  # 5.0 belongs to [4, 5]
    cosines = np.clip(gold / 5 + rng.normal(0, 0.2, len(gold)), -1, 1)
    density = cosine_density(cosines, gold)
    width = np.diff(density.edges)
    assert list(density.density) == ["0-1", "1-2", "2-3", "3-4", "4-5"]
    assert density.counts["4-5"] == 3 and sum(density.counts.values()) == len(gold)
    for label, values in density.density.items():
        assert (values >= 0).all()
        assert float((values * width).sum()) == pytest.approx(1.0)
        assert len(values) == len(density.centres)
    empty = cosine_density([0.5, 0.6], [0.5, 0.7])
    assert empty.counts["3-4"] == 0 and not empty.density["3-4"].any() and empty.mean_cosine["3-4"] is None
    assert len(GOLD_BINS) == 5


# ----------------------------------------------------------------------------- inference cost


def test_gmacs_formula_matches_a_hand_count_and_doubles_for_a_twin():
    config = BertConfig(hidden_size=32, num_hidden_layers=2, intermediate_size=64, num_attention_heads=2)
    t = 10
    # per layer: Q,K,V,O 4·10·32·32 = 40960; QKᵀ and A·V 2·10·10·32 = 6400; FFN 2·10·32·64 = 40960
    hand = 2 * (40960 + 6400 + 40960) + 32 * 32  # + pooler
    assert inference_gmacs(config, t) == pytest.approx(hand / 1e9)
    assert inference_gmacs(config, t, towers=2) == pytest.approx(2 * hand / 1e9)
    assert inference_gmacs({"model_type": "bert", "hidden_size": 32, "num_hidden_layers": 2, "intermediate_size": 64}, t) == inference_gmacs(config, t)
    layer_norms = 4 * (1 + 2 * 2) * t * 32  # 4 per element of the embedding LayerNorm and 2 per layer
    assert thop_formula_gmacs(config, t) == pytest.approx((hand - 2 * 6400 + layer_norms) / 1e9)
    # BERT-base at 64 tokens: thop counts 5.44 per encoder; JTCSE Table VII prints 5.40 single, 10.90 twin
    bert_base = {"model_type": "bert", "hidden_size": 768, "num_hidden_layers": 12, "intermediate_size": 3072}
    assert thop_formula_gmacs(bert_base, 64) == pytest.approx(5.4413, abs=1e-4)
    assert thop_formula_gmacs(bert_base, 64, towers=2) == pytest.approx(10.90, abs=0.05)
    assert efficiency(79.70, 10.90) == pytest.approx(7.31, abs=0.01)
    assert efficiency(None, 10.90) is None


@pytest.mark.parametrize("family", ["bert", "roberta"])
@pytest.mark.parametrize("seq_len", [16, 64])
def test_thop_counts_what_its_formula_says(family, seq_len):
    from transformers import BertModel, RobertaConfig, RobertaModel

    shape = dict(vocab_size=100, hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=64,
                 max_position_embeddings=80)
    torch.manual_seed(0)
    model = BertModel(BertConfig(**shape)) if family == "bert" else RobertaModel(RobertaConfig(**shape, pad_token_id=1))
    assert thop_gmacs(model.eval(), seq_len) == pytest.approx(thop_formula_gmacs(model.config, seq_len), rel=1e-9)
    # thop leaves the model as it was: no counting buffers in its state
    assert not [name for name in model.state_dict() if "total_" in name]


def test_alignment_positives_are_pairs_with_gold_strictly_above_4():
    pairs = [ScoredPair("a", "b", score) for score in (5.0, 4.2, 4.0, 3.9, 4.000001)]
    assert [pair.score for pair in positive_pairs(pairs)] == [5.0, 4.2, 4.000001]


def test_cosine_grid_shares_sum_to_one_in_every_gold_group():
    rng = np.random.default_rng(2)
    gold = rng.uniform(0, 5, 300)
    cosines = np.clip(gold / 5 + rng.normal(0, 0.3, 300), -1, 1)
    density = cosine_density(cosines, gold)
    for label, shares in density.grid.items():
        assert shares.shape == (5,) and float(shares.sum()) == pytest.approx(1.0)
    # bins over [0, 1]: negatives go to the first bin, 1.0 to the last, 0.2 opens the second
    edges = cosine_density([-0.5, 0.0, 0.19, 0.2, 0.99, 1.0], [4.5] * 6)
    assert edges.grid["4-5"].tolist() == pytest.approx([3 / 6, 1 / 6, 0, 0, 2 / 6])
    assert not cosine_density([0.5], [0.5]).grid["3-4"].any()


# ----------------------------------------------------------------------------- layer level


def test_attention_map_is_the_head_average_of_the_models_attentions(tmp_path):
    folder = save_tiny_bert(tmp_path / "two", seed=3, layers=2)
    model, tokenizer = load_eager_model(folder), AutoTokenizer.from_pretrained(str(folder))
    result = attention_map(model, tokenizer, "the cat sleeps .")
    batch = tokenizer("the cat sleeps .", return_tensors="pt")
    attentions = model(**batch, output_attentions=True).attentions
    assert result["tokens"][0] == "[CLS]" and result["tokens"][-1] == "[SEP]"
    assert len(result["layers"]) == 2
    for layer, expected in zip(result["layers"], attentions):
        assert torch.allclose(torch.tensor(layer, dtype=torch.float64), expected[0].double().mean(0), atol=1e-6)
        assert torch.allclose(torch.tensor(layer, dtype=torch.float64).sum(-1), torch.ones(len(result["tokens"]), dtype=torch.float64))



@pytest.fixture(scope="module")
def tiny_project(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("analysis-models")
    save_tiny_bert(root / "backbone", seed=0, layers=3)
    save_tiny_bert(root / "I", seed=1)
    save_tiny_bert(root / "II", seed=2)
    return root


def _manual_e_cls_and_received(model_path: Path, sentence: str) -> tuple[list[float], list[float]]:
    """E_CLS from attention probabilities × the value projection of each layer's input, by hand."""
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = load_eager_model(model_path)
    batch = tokenizer([sentence], return_tensors="pt")
    with torch.no_grad():
        out = model(**batch, output_attentions=True, output_hidden_states=True)
        e_cls, received_cls = [], []
        for layer, block in enumerate(model.encoder.layer):
            attention = block.attention.self
            hidden = out.hidden_states[layer][0]  # (T, d), input of this layer
            heads = out.attentions[layer][0]  # (H, T, T)
            value = attention.value(hidden).view(hidden.shape[0], heads.shape[0], -1).transpose(0, 1)  # (H, T, dh)
            context = (heads @ value).transpose(0, 1).reshape(hidden.shape[0], -1)  # (T, d)
            e_cls.append(float(context[0].norm() / context[1:].norm()))
            received_cls.append(float(heads[:, :, 0].mean()))
    return e_cls, received_cls


def test_layer_analysis_e_cls_and_attention_sink_per_layer(tiny_project):
    backbone = tiny_project / "backbone"
    result = analyze_layers(backbone, SENTENCES, max_length=32, batch_size=4)
    assert len(result.e_cls) == 3  # one value per encoder layer
    assert all(0 < value < math.inf for value in result.e_cls)
    sink = result.attention_sink
    for key in ("cls", "sep", "final_punct"):
        assert len(sink[key]) == 3
        assert all(0.0 <= value <= 1.0 for value in sink[key])
    assert all(c + s + p <= 1 + 1e-9 for c, s, p in zip(sink["cls"], sink["sep"], sink["final_punct"]))
    assert sink["sentences"] == len(SENTENCES) and sink["sentences_with_final_punct"] == 5  # all but 'beach'
    assert 0 < sink["uniform"] < 1
    # the last layer's end-of-sequence sink: [SEP] plus the final punctuation (where a sentence ends in it)
    assert sink["last_end"] == pytest.approx(sink["sep"][-1] + sink["final_punct"][-1] * 5 / len(SENTENCES))
    tokenizer = AutoTokenizer.from_pretrained(backbone)
    lengths = [len(tokenizer(sentence)["input_ids"]) for sentence in SENTENCES]
    ends = [2 - ("beach" in sentence) for sentence in SENTENCES]  # 'beach' has no final punctuation
    assert sink["uniform_end"] == pytest.approx(np.mean([end / n for end, n in zip(ends, lengths)]))

    # one sentence at a time vs padded batches: the same numbers
    single = [analyze_layers(backbone, [sentence], max_length=32, batch_size=1) for sentence in SENTENCES]
    assert result.e_cls == pytest.approx(np.mean([s.e_cls for s in single], axis=0).tolist(), rel=1e-5)
    assert sink["cls"] == pytest.approx(np.mean([s.attention_sink["cls"] for s in single], axis=0).tolist(), rel=1e-5)
    for key in ("last_end", "uniform_end"):
        assert sink[key] == pytest.approx(np.mean([s.attention_sink[key] for s in single]), rel=1e-5)
    assert sorted(result.last_hidden_norms) == pytest.approx(sorted(np.concatenate([s.last_hidden_norms for s in single])), rel=1e-5)

    # E_CLS and the attention on [CLS] by hand from the attention weights and the value projection
    e_cls, received = _manual_e_cls_and_received(backbone, SENTENCES[0])
    assert single[0].e_cls == pytest.approx(e_cls, rel=1e-5)
    assert single[0].attention_sink["cls"] == pytest.approx(received, rel=1e-5)


def test_cls_energy_and_attention_received_ignore_padding():
    context = torch.tensor([[[3.0, 4.0], [1.0, 0.0], [0.0, 2.0], [9.0, 9.0]]])  # last row is padding
    mask = torch.tensor([[1, 1, 1, 0]])
    assert cls_energy(context, mask).tolist() == pytest.approx([5.0 / math.sqrt(5.0)])
    probs = torch.zeros(1, 2, 4, 4)
    probs[0, 0, :, 0] = 1.0  # head 0 looks at [CLS]
    probs[0, 1, :, 2] = 1.0  # head 1 looks at the last real token ([SEP])
    received = attention_received(probs, mask, torch.tensor([True]))
    assert received["cls"].item() == pytest.approx(0.5)
    assert received["sep"].item() == pytest.approx(0.5)
    assert received["final_punct"].item() == pytest.approx(0.0)
    assert torch.isnan(attention_received(probs, mask, torch.tensor([False]))["final_punct"]).all()
    assert is_punctuation_token(".") and is_punctuation_token("Ġ?") and not is_punctuation_token("[SEP]")
    assert not is_punctuation_token("a.")


def _sums_of(attentions: torch.Tensor, input_ids: torch.Tensor, mask: torch.Tensor, punct_ids: list[int]):
    """_LayerSums over one batch of given last-layer attention weights (one layer)."""
    from types import SimpleNamespace

    from pipeline.analysis.layers import _LayerSums

    sums = _LayerSums(1, torch.tensor(punct_ids))
    output = SimpleNamespace(attentions=[attentions], last_hidden_state=torch.ones(len(mask), 4, 2),
                             pooler_output=torch.ones(len(mask), 2))
    sums.add(input_ids, mask, output, [torch.ones(len(mask), mask.shape[1], 2)],
             (output.last_hidden_state[:, 0], output.pooler_output))
    return sums.attention_sink(len(mask))


def test_the_end_of_sequence_sink_against_its_uniform_share():
    """Two sentences: [CLS] a . [SEP] (ends in punctuation, 4 tokens) and [CLS] a [SEP] pad (3 tokens).
    Uniform attention gives the end tokens 2/4 and 1/3; a sink on [SEP] gives them everything."""
    cls, word, dot, sep = 101, 7, 9, 102
    ids = torch.tensor([[cls, word, dot, sep], [cls, word, sep, 0]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]])
    uniform = mask[:, None, None, :].double().expand(2, 1, 4, 4) / mask.sum(1)[:, None, None, None]
    sink = _sums_of(uniform, ids, mask, [dot])
    assert sink["uniform_end"] == pytest.approx((2 / 4 + 1 / 3) / 2)
    assert sink["last_end"] == pytest.approx(sink["uniform_end"])  # uniform attention is no sink
    assert sink["uniform"] == pytest.approx((1 / 4 + 1 / 3) / 2)
    on_sep = torch.zeros(2, 1, 4, 4)
    on_sep[0, 0, :, 3] = 1.0
    on_sep[1, 0, :, 2] = 1.0
    sink = _sums_of(on_sep, ids, mask, [dot])
    assert sink["last_end"] == pytest.approx(1.0) and sink["cls"] == [pytest.approx(0.0)]
    on_cls = torch.zeros(2, 1, 4, 4)
    on_cls[:, 0, :, 0] = 1.0  # a sink on [CLS]: the end tokens get nothing
    assert _sums_of(on_cls, ids, mask, [dot])["last_end"] == pytest.approx(0.0)


def test_model_report_carries_the_towers_mean_end_sink():
    from pipeline.analysis.per_model import _layer_fields

    def layers(last_end: float, uniform_end: float) -> LayerAnalysis:
        return LayerAnalysis(e_cls=[1.0], attention_sink={"last_end": last_end, "uniform_end": uniform_end},
                             last_hidden_norms=np.ones(3), pooler_norms=np.ones(3), sentences=3)

    found = {"I": layers(0.2, 0.1), "II": layers(0.4, 0.1)}
    twin = _layer_fields([("I", 0.5), ("II", 0.5)], found)
    assert twin["sink_end_last"] == pytest.approx(0.3) and twin["sink_end_uniform"] == pytest.approx(0.1)
    one = _layer_fields([("I", 1.0)], found)
    assert one["sink_end_last"] == pytest.approx(0.2) and one["attention_sink"]["last_end"] == 0.2


def test_norm_statistics_have_quantiles_and_a_density_histogram():
    rng = np.random.default_rng(3)
    stats = norm_statistics(rng.normal(15, 0.3, 500), rng.uniform(2, 20, 500), bins=20)
    assert stats["last_hidden"]["q05"] < stats["last_hidden"]["q50"] < stats["last_hidden"]["q95"]
    assert stats["last_hidden"]["cv"] < stats["pooler"]["cv"]
    histogram = stats["histogram"]
    width = np.diff(histogram["edges"])
    for key in ("last_hidden", "pooler"):
        assert float((np.array(histogram[key]) * width).sum()) == pytest.approx(1.0)


# ----------------------------------------------------------------------------- registry and stage


def _layout_project(root: Path, models: Path, mirror: Path, params: dict) -> None:
    (root / "data" / "models" / "pretrain").mkdir(parents=True)
    (root / "data" / "raw").mkdir(parents=True)
    (root / "data" / "backbone").symlink_to(models / "backbone")
    (root / "data" / "models" / "pretrain" / "I").symlink_to(models / "I")
    (root / "data" / "models" / "pretrain" / "II").symlink_to(models / "II")
    (root / "data" / "raw" / "senteval").symlink_to(mirror / "senteval")
    corpus = (mirror / "wiki1m" / "wiki1m_for_simcse.head.txt").read_text(encoding="utf-8").splitlines()[:150]
    (root / "data" / "raw" / "corpus.txt").write_text("\n".join(corpus) + "\n", encoding="utf-8")
    params["device"] = "cpu"
    params["eval"].update(max_pairs=100, batch_size=16, max_length=32, cost_length=16)
    (root / "params.yaml").write_text(yaml.safe_dump(params))
    (root / "reports" / "metrics").mkdir(parents=True)
    (root / "reports" / "metrics" / "backbone.json").write_text(json.dumps({"avg": 42.0}))


def test_stage_writes_reports_and_plot_data_and_skips_missing_models(
    tmp_path, tiny_project, mirror, tiny_params_dict, monkeypatch, caplog
):
    _layout_project(tmp_path, tiny_project, mirror, tiny_params_dict)
    monkeypatch.chdir(tmp_path)
    caplog.set_level(logging.INFO)
    result = CliRunner().invoke(app, ["analyze"])
    assert result.exit_code == 0, result.output
    assert "[analyze] 4 of 12 models on 100 STS-B pairs" in result.output

    analysis = tmp_path / "reports" / "analysis"
    analyzed = ["backbone", "pretrain-I", "pretrain-II", "ensemble"]
    for name in ("joint", "joint-D", "uc", "uc-D", "simcse", "gs-infonce"):
        assert not (analysis / f"{name}.json").exists()
        assert sum(f"skipping {name}:" in record.getMessage() for record in caplog.records) == 1

    backbone = json.loads((analysis / "backbone.json").read_text())
    for key in ("alignment", "uniformity", "e_cls", "norms", "attention_sink", "gmacs", "seq_len", "eta"):
        assert key in backbone
    assert len(backbone["e_cls"]) == 3 and backbone["seq_len"] == 16
    config = BertConfig.from_pretrained(tiny_project / "backbone")
    assert backbone["gmacs"] == pytest.approx(thop_formula_gmacs(config, 16))  # thop's count
    assert backbone["gmacs_with_attention"] == pytest.approx(inference_gmacs(config, 16))
    assert backbone["eta"] == pytest.approx(42.0 / backbone["gmacs"])
    assert 0 <= backbone["alignment"] <= 4 and backbone["uniformity"] <= 0

    ensemble = json.loads((analysis / "ensemble.json").read_text())
    tower_i = json.loads((analysis / "pretrain-I.json").read_text())
    assert ensemble["gmacs"] == pytest.approx(2 * tower_i["gmacs"])
    assert ensemble["eta"] is None and "eta_note" in ensemble
    assert set(ensemble["norms"]) == {"data/models/pretrain/I", "data/models/pretrain/II"}
    assert ensemble["e_cls"] == pytest.approx(np.mean(list(ensemble["e_cls_towers"].values()), axis=0).tolist())
    assert ensemble["e_cls_towers"]["data/models/pretrain/I"] == pytest.approx(tower_i["e_cls"])

    align = pd.read_csv(analysis / "align_uniform.csv")
    assert list(align.columns) == ["model", "uniformity", "alignment", "avg"] and list(align.model) == analyzed
    energy = pd.read_csv(analysis / "cls_energy.csv")
    assert list(energy.columns) == ["model", "e_cls", "avg"]
    assert energy.set_index("model").loc["backbone", "avg"] == 42.0
    for low in range(5):
        density = pd.read_csv(analysis / f"cosine_density_{low}-{low + 1}.csv")
        assert list(density.columns) == ["cosine", *analyzed]
    norms = pd.read_csv(analysis / "norm_histogram.csv")
    assert list(norms.columns) == ["norm", "last_hidden", "pooler"]
    grid = pd.read_csv(analysis / "cosine_grid.csv")
    assert list(grid.columns) == ["model", "gold", "0-0.2", "0.2-0.4", "0.4-0.6", "0.6-0.8", "0.8-1"]
    assert len(grid) == 5 * len(analyzed)
    maps = json.loads((analysis / "attention_maps.json").read_text())
    assert list(maps) == ["backbone", "pretrain-I", "pretrain-II"]  # the ensemble's towers are these two
    assert maps["backbone"]["sentence"] == "This is an example sentence for visualizing attention scores."
    figures = analysis.parent / "figures"
    for figure in ("alignment_uniformity.png", "cls_energy.png", "cosine_density.png", "norm_histogram.png",
                   "attention_sink.png", "cosine_grid.png", "attention_maps.png"):
        assert (figures / figure).read_bytes().startswith(b"\x89PNG")
    probe = ensemble["norm_probe"]  # the LayerNorm study's probe: 100 corpus sentences, both towers pooled
    assert probe["sentences"] == 100 and set(probe["towers"]) == {"data/models/pretrain/I", "data/models/pretrain/II"}
    assert probe["dropped_layernorm_layers"] == {"data/models/pretrain/I": 0, "data/models/pretrain/II": 0}
    assert 0 < probe["last_hidden_cls"]["min"] <= probe["last_hidden_cls"]["mean"] <= probe["last_hidden_cls"]["max"]
    assert backbone["norm_probe"]["towers"] == {} and "norm probe backbone on 100 sentences" in result.output


def test_stage_takes_alignment_and_uniformity_from_every_stsb_split(
    tmp_path, tiny_project, mirror, tiny_params_dict, monkeypatch
):
    tiny_params_dict["analysis"] = {"align_data": "all"}
    _layout_project(tmp_path, tiny_project, mirror, tiny_params_dict)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["analyze"])
    assert result.exit_code == 0, result.output
    backbone = json.loads((tmp_path / "reports" / "analysis" / "backbone.json").read_text())
    assert backbone["pairs"] == 100 and backbone["align_pairs"] > 8000  # train + dev + test, uncapped


def test_stage_needs_the_backbone(tmp_path, tiny_params_dict, mirror, monkeypatch):
    (tmp_path / "data" / "raw").mkdir(parents=True)
    (tmp_path / "data" / "raw" / "senteval").symlink_to(mirror / "senteval")
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(tiny_params_dict))
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["analyze"])
    assert result.exit_code == 2
    assert "data/backbone does not exist" in result.output


def _numbers(value, path=""):
    """Every number of a nested report, by its path."""
    if isinstance(value, dict):
        return {key: number for name, item in value.items() for key, number in _numbers(item, f"{path}/{name}").items()}
    if isinstance(value, (list, tuple)):
        return {key: number for index, item in enumerate(value) for key, number in _numbers(item, f"{path}[{index}]").items()}
    return {path: float(value)} if isinstance(value, (int, float, np.floating)) and not isinstance(value, bool) else {}


def test_analysis_reads_the_towers_rows_from_the_store_and_scores_as_before(tiny_project, tmp_path):
    """The ensemble's and towers' analyses from a store that the evaluate stage already filled equal
    those of towers encoded afresh, and encode nothing."""
    from pipeline.analysis import analyze_models
    from pipeline.evaluation.embedder import HFEmbedder
    from pipeline.evaluation.store import EmbeddingStore, model_tables
    from pipeline.evaluation.sts import load_tasks
    from pipeline.evaluated_models import WeightedTowers

    tasks = load_tasks(MIRROR / "senteval", ["STSBenchmark"], 120, seed=0)
    pairs = tasks[0].subsets["test"]
    towers = [str(tiny_project / "I"), str(tiny_project / "II")]
    models = {"pretrain-I": WeightedTowers.of([(towers[0], 1.0)]), "ensemble": WeightedTowers.twin(*towers)}
    passes = []

    def make_embedder(tower):
        passes.append(tower)
        return HFEmbedder(tower, "cls_before_pooler", 32, 32, "cpu")

    fresh = analyze_models(models, pairs, EmbeddingStore(None, "cls_before_pooler|32", make_embedder, 32), max_length=32)
    root = tmp_path / "embeddings"
    model_tables(models, tasks, EmbeddingStore(root, "cls_before_pooler|32", make_embedder, 32))  # evaluate@<model>
    passes.clear()
    store = EmbeddingStore(root, "cls_before_pooler|32", make_embedder, 32)
    stored = analyze_models(models, pairs, store, max_length=32)
    assert passes == [] and store.counts.passes == 0  # no tower's encoder was loaded or run
    for name in models:
        expected, got = _numbers(fresh.reports[name]), _numbers(stored.reports[name])
        assert expected.keys() == got.keys() and len(expected) > 5
        for path, value in expected.items():
            assert got[path] == pytest.approx(value, abs=1e-6), (name, path)

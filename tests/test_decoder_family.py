"""Another backbone family through the one adapter (pipeline/modeling/families/llama.py, `LlamaFamily`): a tiny
decoder-only Llama — causal attention, rotary positions, RMSNorm, no pooler, the last real token as the
sentence vector — trains a TNCSE twin step, embeds through the STS evaluator's path and goes through the
LayerNorm study's layer access, with no other module knowing it is not a BERT."""

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoTokenizer, LlamaConfig, LlamaModel

from pipeline.analysis import analyze_layers, inference_gmacs, thop_formula_gmacs, thop_gmacs, tower_norms
from pipeline.config import TrainSettings
from pipeline.errors import PipelineError
from pipeline.evaluation.embedder import HFEmbedder
from pipeline.evaluation.sts import embed_sentences
from pipeline.execution.runtime import RunContext
from pipeline.modeling import TwinEncoder, count_layernorms, drop_layernorms, last_layer_cls, load_backbone
from pipeline.modeling.architecture import architecture_of
from pipeline.modeling.families.llama import LlamaFamily, last_token
from pipeline.training.loop import RunSpec, train
from pipeline.training.tasks import TwinTask
from tiny_models import save_tiny_family, save_tower_pair

CPU = RunContext(torch.device("cpu"), None)
LAYERS = 3
SENTENCES = ["a girl is styling her hair .", "a man plays a guitar", "two dogs run in the park !", "the sun"]


def save_tiny_llama(folder, seed: int):
    """A random Llama (hidden 32, 3 layers, attention dropout for the views) with the tiny BERT's tokenizer."""

    def build(tokenizer):
        return LlamaModel(LlamaConfig(
            vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=LAYERS, num_attention_heads=2,
            num_key_value_heads=2, intermediate_size=64, max_position_embeddings=128, attention_dropout=0.1,
            pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.cls_token_id, eos_token_id=tokenizer.sep_token_id,
        ))

    return save_tiny_family(folder, seed, build)


@pytest.fixture(scope="module")
def towers(tmp_path_factory):
    return save_tower_pair(tmp_path_factory.mktemp("llama"), save_tiny_llama)


def test_the_adapter_runs_the_stock_forward_layer_by_layer(towers):
    """Layer list, count (from the config), call signature, final norm and sentence token are the adapter's."""
    batch = AutoTokenizer.from_pretrained(towers[0])(SENTENCES, padding=True, return_tensors="pt")
    model = load_backbone(towers[0]).eval()
    architecture = architecture_of(model)
    assert isinstance(architecture, LlamaFamily) and architecture.pooler(model) is None
    assert len(architecture.layers(model)) == architecture.layer_count(model.config) == LAYERS
    ids, mask = batch["input_ids"], batch["attention_mask"]
    with torch.no_grad():
        stock = model(input_ids=ids, attention_mask=mask).last_hidden_state
        hidden = architecture.embed(model, ids)
        context = architecture.layer_context(model, hidden, mask)
        for layer in architecture.layers(model):
            hidden = architecture.run_layer(layer, hidden, context)
        torch.testing.assert_close(architecture.final_norm(model, hidden), stock)
        rows = mask.sum(1) - 1  # right padding: the last real token
        torch.testing.assert_close(last_layer_cls(model, ids, mask), stock[torch.arange(len(ids)), rows])
    left = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    torch.testing.assert_close(last_token(torch.arange(8.0).view(2, 4, 1), left), torch.tensor([[3.0], [7.0]]))


def test_a_tncse_twin_step_trains_the_decoder_towers(towers, tmp_path):
    settings = TrainSettings(cael=0, batch_size=4, max_length=24, max_steps=2, save_every=100)
    task = TwinTask(towers, AutoTokenizer.from_pretrained(towers[0]), settings, seed=5)
    assert not task.leaves_parameters_unused  # no pooler layer to leave without a gradient
    examples = [(sentence,) for sentence in SENTENCES * 4]
    result = train(task, examples, settings, RunSpec(1e-3, 5, tmp_path / "joint", tmp_path / "ckpt"), CPU)
    assert result.history and all(torch.isfinite(torch.tensor(step["loss"])) for step in result.history)
    assert set(result.history[0]) >= {"loss", "nce", "icnce", "ictn"}
    for name, folder in zip(("I", "II"), towers):
        before, after = load_file(folder / "model.safetensors"), load_file(tmp_path / "joint" / name / "model.safetensors")
        assert before.keys() == after.keys()
        assert any(not torch.equal(before[key], after[key]) for key in before), f"tower {name} did not change"
    pooling = (tmp_path / "joint" / "I" / "1_Pooling" / "config.json").read_text()
    assert '"pooling_mode_lasttoken": true' in pooling and '"pooling_mode_cls_token": false' in pooling


def test_jtcse_cross_attention_is_refused_in_one_line(towers):
    with pytest.raises(PipelineError, match="train.cael=1: JTCSE's cross-attention .* LlamaFamily does not"):
        TwinEncoder(load_backbone(towers[0]), load_backbone(towers[1]), cael=1)


def test_the_sts_evaluators_encoding_path_embeds_the_last_token(towers):
    embedder = HFEmbedder(towers[0], pooler="cls_before_pooler", max_length=32, token_budget=64)
    table = embed_sentences(embedder, SENTENCES)
    vectors = table.lookup(SENTENCES)
    assert vectors.shape == (len(SENTENCES), 32) and torch.isfinite(torch.from_numpy(vectors)).all()
    assert len({row.tobytes() for row in vectors}) == len(SENTENCES)  # each sentence its own vector
    alone = torch.cat([embedder([sentence]) for sentence in SENTENCES]).numpy()  # no padding at all
    assert vectors == pytest.approx(alone, abs=1e-5)  # padding never reaches the last real token


def test_the_layernorm_study_reaches_every_layers_rmsnorms(towers, tmp_path):
    model = load_backbone(towers[0])
    assert count_layernorms(model) == 2 * LAYERS
    drop_layernorms(model, 2)
    assert count_layernorms(model) == 2
    model.save_pretrained(tmp_path / "dropped")
    assert count_layernorms(load_backbone(tmp_path / "dropped")) == 2  # removed again on load

    analysis = analyze_layers(towers[0], SENTENCES, max_length=32, seq_len=16)
    assert len(analysis.e_cls) == model.config.num_hidden_layers == LAYERS
    assert all(len(analysis.attention_sink[key]) == LAYERS for key in ("cls", "sep"))
    assert len(analysis.attention_map["layers"]) == LAYERS
    assert analysis.last_hidden_norms.shape == (len(SENTENCES),)
    assert analysis.last_hidden_norms == pytest.approx(analysis.pooler_norms)  # no pooler: h^P is h^L
    last, pooler = tower_norms(str(towers[0]), SENTENCES)
    assert sorted(last) == pytest.approx(sorted(analysis.last_hidden_norms), rel=1e-5)  # analyze_layers orders by length
    assert pooler == pytest.approx(last)


def test_the_cost_formula_is_the_familys(towers):
    model = load_backbone(towers[0]).eval()
    assert thop_gmacs(model, 16) == pytest.approx(thop_formula_gmacs(model.config, 16), rel=1e-9)
    assert inference_gmacs(model.config, 16) > thop_formula_gmacs(model.config, 16)

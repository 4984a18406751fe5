"""Encoder, poolers, twin towers and JTCSE cross-attention on tiny random BERT / RoBERTa models."""

import math

import pytest
import torch
import torch.multiprocessing as mp
from torch.nn import functional as F
from transformers import BertConfig, BertModel, RobertaConfig, RobertaModel
from transformers.masking_utils import create_bidirectional_mask

from pipeline.errors import PipelineError
from pipeline.losses import icnce, twin_info_nce
from pipeline.modeling import (
    SentenceEncoder,
    TwinEncoder,
    TwinOutput,
    cael_layers,
    cross_layer_cls,
    gather_with_grad,
    last_layer_cls,
    set_dropout,
)
from pipeline.settings_rules import validate_cael

FAMILIES = ("bert", "roberta")


def tiny_model(family: str, seed: int, layers: int = 4, attn_implementation: str = "sdpa"):
    torch.manual_seed(seed)
    shape = dict(
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=layers,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=40,
    )
    config = BertConfig(**shape) if family == "bert" else RobertaConfig(**shape, pad_token_id=1)
    config._attn_implementation = attn_implementation
    model = BertModel(config) if family == "bert" else RobertaModel(config)
    return model.eval()


def tiny_batch(family: str, seed: int = 0):
    """3 sentences of up to 9 tokens, two of them padded."""
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(5, 100, (3, 9), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 6:] = 0
    attention_mask[2, 4:] = 0
    pad_id = 0 if family == "bert" else 1
    return input_ids.masked_fill(attention_mask == 0, pad_id), attention_mask


def twin_pair(family: str, layers: int = 4, attn_implementation: str = "sdpa"):
    return tiny_model(family, 1, layers, attn_implementation), tiny_model(family, 2, layers, attn_implementation)


def views(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.repeat_interleave(2, dim=0)


# ---- single encoder and poolers -------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_poolers_match_their_definitions(family):
    model = tiny_model(family, 0)
    input_ids, attention_mask = tiny_batch(family)
    stock = model(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True)
    hidden = stock.hidden_states
    weights = attention_mask[..., None].float()

    def mean(states):
        return (states * weights).sum(1) / weights.sum(1)

    expected = {
        "cls": stock.pooler_output,
        "cls_before_pooler": stock.last_hidden_state[:, 0],
        "avg": mean(stock.last_hidden_state),
        "avg_first_last": mean((hidden[1] + hidden[-1]) / 2),
        "avg_top2": mean((hidden[-2] + hidden[-1]) / 2),
    }
    for pooler, embedding in expected.items():
        out = SentenceEncoder(model, pooler, cls_only_last_layer=False)(input_ids, attention_mask)
        assert torch.allclose(out.pooled, embedding, atol=1e-6), pooler
        assert torch.equal(out.last_cls, stock.last_hidden_state[:, 0])
        assert torch.equal(out.pooler_output, stock.pooler_output)
        # the default: in eval mode a [CLS] pooler runs the last layer for [CLS] only, same values
        out = SentenceEncoder(model, pooler)(input_ids, attention_mask)
        assert torch.allclose(out.pooled, embedding, atol=1e-5), pooler
        assert torch.allclose(out.last_cls, stock.last_hidden_state[:, 0], atol=1e-5)
        assert torch.allclose(out.pooler_output, stock.pooler_output, atol=1e-5)


@pytest.mark.parametrize("attn_implementation", ("sdpa", "eager"))
@pytest.mark.parametrize("family", FAMILIES)
def test_last_layer_cls_is_the_stock_cls_and_skips_the_other_rows(family, attn_implementation):
    model = tiny_model(family, 3, layers=3, attn_implementation=attn_implementation)
    input_ids, attention_mask = tiny_batch(family)
    stock = model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state[:, 0]
    last = model.encoder.layer[-1]
    rows_seen = []
    hook = last.intermediate.register_forward_hook(lambda module, args, output: rows_seen.append(args[0].shape[1]))
    try:
        assert torch.allclose(last_layer_cls(model, input_ids, attention_mask), stock, atol=1e-5)
    finally:
        hook.remove()
    assert rows_seen == [1]  # the last layer's feed-forward ran for [CLS] alone
    # padding does not leak into [CLS]: a sentence gives the same embedding alone and padded in a batch
    alone = last_layer_cls(model, input_ids[2:, :4], attention_mask[2:, :4])
    assert torch.allclose(alone, stock[2:], atol=1e-5)


def test_training_mode_keeps_the_stock_forward():
    """Dropout must draw the stock model's random masks, so training never takes the [CLS]-only path."""
    model = tiny_model("bert", 0)
    set_dropout(model, 0.1).train()
    input_ids, attention_mask = tiny_batch("bert")
    torch.manual_seed(7)
    expected = model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state[:, 0]
    torch.manual_seed(7)
    assert torch.equal(SentenceEncoder(model)(input_ids, attention_mask).last_cls, expected)


def test_pooler_output_is_dense_tanh_over_cls():
    model = tiny_model("bert", 0)
    input_ids, attention_mask = tiny_batch("bert")
    out = SentenceEncoder(model)(input_ids, attention_mask)
    assert torch.allclose(out.pooler_output, torch.tanh(model.pooler.dense(out.last_cls)), atol=1e-6)


def test_unknown_pooler_raises_one_line():
    with pytest.raises(PipelineError) as error:
        SentenceEncoder(tiny_model("bert", 0), "max")
    message = str(error.value)
    assert "\n" not in message
    assert "pooler=max" in message and "allowed: cls, cls_before_pooler, avg, avg_first_last, avg_top2" in message


def test_backbone_without_pooler_layer_is_refused():
    config = tiny_model("bert", 0).config
    with pytest.raises(PipelineError, match="no pooler layer"):
        SentenceEncoder(BertModel(config, add_pooling_layer=False))


def test_set_dropout_changes_every_dropout_and_the_config():
    model = tiny_model("roberta", 0)
    set_dropout(model, 0.00025)
    probabilities = {m.p for m in model.modules() if isinstance(m, torch.nn.Dropout)}
    assert probabilities == {0.00025}
    assert model.config.hidden_dropout_prob == model.config.attention_probs_dropout_prob == 0.00025
    # p = 0 in training mode is the eval-mode forward
    input_ids, attention_mask = tiny_batch("roberta")
    expected = model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    set_dropout(model, 0.0).train()
    assert torch.allclose(model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state, expected)
    with pytest.raises(PipelineError):
        set_dropout(model, 1.5)


def test_from_pretrained_round_trip(tmp_path):
    tiny_model("bert", 0).save_pretrained(tmp_path / "I")
    tiny_model("bert", 1).save_pretrained(tmp_path / "II")
    encoder = SentenceEncoder.from_pretrained(str(tmp_path / "I"), pooler="avg", dropout=0.05)
    assert encoder.model.config.hidden_dropout_prob == 0.05 and encoder.model.pooler is not None
    twin = TwinEncoder.from_pretrained(str(tmp_path / "I"), str(tmp_path / "II"), cael=2, dropout=0.00025)
    assert twin.cross_layers == [1, 3]
    assert torch.equal(twin.tower_I.pooler.dense.weight, encoder.model.pooler.dense.weight)


def test_pickled_weights_are_never_loaded(tmp_path):
    """A folder (or hub id) with only `pytorch_model.bin` is refused in one line: loading a pickle
    can run code, and the project loads safetensors only."""
    model = tiny_model("bert", 0)
    model.save_pretrained(tmp_path / "pickled")  # transformers 5 writes safetensors only: make the pickle by hand
    (tmp_path / "pickled" / "model.safetensors").unlink()
    torch.save(model.state_dict(), tmp_path / "pickled" / "pytorch_model.bin")
    with pytest.raises(PipelineError, match="could not load model .*pickled"):
        SentenceEncoder.from_pretrained(str(tmp_path / "pickled"), pooler="avg")


# ---- CAEL placement and validation ----------------------------------------------------------


def test_cael_placement():
    assert cael_layers(0, 6) == []
    assert cael_layers(1, 6) == [5]  # 1-based layer 6
    assert cael_layers(2, 6) == [2, 5]  # layers 3 and 6
    assert cael_layers(3, 6) == [1, 3, 5]  # layers 2, 4, 6
    assert cael_layers(6, 6) == [0, 1, 2, 3, 4, 5]
    assert cael_layers(4, 6) == [1, 2, 4, 5]  # not a divisor: layers 2, 3, 5, 6, still evenly spread
    assert cael_layers(5, 6) == [1, 2, 3, 4, 5]


@pytest.mark.parametrize("cael", range(1, 13))
def test_cael_placement_is_jtcse_eq_7_whenever_cael_divides_the_layers(cael):
    layers = cael_layers(cael, 12)
    assert len(layers) == len(set(layers)) == cael and layers[-1] == 11  # always ends at layer L
    if 12 % cael == 0:  # Eq. 7: the 1-based layers i with i mod (L / cael) == 0
        assert [i + 1 for i in layers] == [i for i in range(1, 13) if i % (12 // cael) == 0]


@pytest.mark.parametrize(
    "cael, message",
    [
        (7, "train.cael=7 is more than the 6 encoder layers of the backbone; allowed: 0 (TNCSE) to 6, the encoder's layer count"),
        (-1, "train.cael=-1 is negative; allowed: 0 (TNCSE) to 6, the encoder's layer count"),
        ("2", "train.cael='2' is not an integer; allowed: 0 (TNCSE) to 6, the encoder's layer count"),
    ],
)
def test_bad_cael_raises_one_line(cael, message):
    with pytest.raises(PipelineError) as error:
        validate_cael(cael, 6)
    assert str(error.value) == message
    with pytest.raises(PipelineError):
        cael_layers(cael, 6)


def test_twin_refuses_bad_cael_and_cross_outputs():
    tower_I, tower_II = twin_pair("bert", layers=6)
    with pytest.raises(PipelineError, match="train.cael=7 is more than the 6 encoder layers"):
        TwinEncoder(tower_I, tower_II, cael=7)
    with pytest.raises(PipelineError, match="train.cross_outputs=first"):
        TwinEncoder(tower_I, tower_II, cael=2, cross_outputs="first")
    with pytest.raises(PipelineError, match="train.cross_mode=both"):
        TwinEncoder(tower_I, tower_II, cael=2, cross_mode="both")
    with pytest.raises(PipelineError, match="train.cross_outputs=mean applies to train.cross_mode=side only"):
        TwinEncoder(tower_I, tower_II, cael=2, cross_outputs="mean", cross_mode="stream")
    with pytest.raises(PipelineError, match="towers differ"):
        TwinEncoder(tower_I, tiny_model("bert", 3, layers=4))


# ---- twin forward ---------------------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("cael", [0, 2])
def test_twin_shapes(family, cael):
    twin = TwinEncoder(*twin_pair(family), cael=cael)
    input_ids, attention_mask = tiny_batch(family)
    out = twin(input_ids, attention_mask)
    assert out.last_cls.shape == out.pooler_output.shape == (2, 6, 32)
    assert (out.cross_cls is None) == (cael == 0)
    if cael:
        assert out.cross_cls.shape == (2, 6, 32)
    assert twin.encode(input_ids, attention_mask).shape == (3, 32)


@pytest.mark.parametrize("family", FAMILIES)
def test_cael_zero_is_the_stock_forward_bit_for_bit_even_with_dropout(family):
    tower_I, tower_II = twin_pair(family)
    twin = TwinEncoder(tower_I, tower_II, cael=0).train()
    input_ids, attention_mask = tiny_batch(family)
    torch.manual_seed(7)
    out = twin(input_ids, attention_mask)
    torch.manual_seed(7)
    stock = [tower(input_ids=views(input_ids), attention_mask=views(attention_mask)) for tower in (tower_I, tower_II)]
    assert torch.equal(out.last_cls, torch.stack([s.last_hidden_state[:, 0] for s in stock]))
    assert torch.equal(out.pooler_output, torch.stack([s.pooler_output for s in stock]))
    # the two views of a sentence differ only by dropout
    assert not torch.equal(out.last_cls[0, 0], out.last_cls[0, 1])


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("mode, cross_outputs", [("stream", "last"), ("side", "mean")])
@pytest.mark.parametrize("layers, cael", [(2, 1), (4, 2), (6, 3), (6, 4), (6, 6)])
def test_cross_attention_leaves_the_normal_streams_as_the_stock_forward(family, mode, cross_outputs, layers, cael):
    tower_I, tower_II = twin_pair(family, layers)
    input_ids, attention_mask = tiny_batch(family)
    out = TwinEncoder(tower_I, tower_II, cael=cael, cross_outputs=cross_outputs, cross_mode=mode)(input_ids, attention_mask)
    stock = [tower(input_ids=views(input_ids), attention_mask=views(attention_mask)) for tower in (tower_I, tower_II)]
    assert torch.equal(out.last_cls, torch.stack([s.last_hidden_state[:, 0] for s in stock]))
    assert torch.equal(out.pooler_output, torch.stack([s.pooler_output for s in stock]))


def hand_cross_cls(layer, hidden, other_layer, other_hidden, attention_mask, heads=4):
    """[CLS] of `hand_cross_layer`."""
    return hand_cross_layer(layer, hidden, other_layer, other_hidden, attention_mask, heads)[:, 0]


def hand_cross_layer(layer, hidden, other_layer, other_hidden, attention_mask, heads=4):
    """JTCSE Eq. 8-10 and the rest of the layer written out with the raw weights (all rows).
    With `other_layer is layer` and `other_hidden is hidden` it is the stock layer."""
    attention, other_attention = layer.attention.self, other_layer.attention.self
    batch, length, width = hidden.shape
    head_size = width // heads

    def split(x):
        return x.view(batch, length, heads, head_size).transpose(1, 2)

    query = split(hidden @ attention.query.weight.T + attention.query.bias)
    key = split(hidden @ attention.key.weight.T + attention.key.bias)
    other_value = split(other_hidden @ other_attention.value.weight.T + other_attention.value.bias)
    scores = query @ key.transpose(-1, -2) / math.sqrt(head_size)
    scores = scores.masked_fill(attention_mask[:, None, None, :] == 0, float("-inf"))
    context = (scores.softmax(-1) @ other_value).transpose(1, 2).reshape(batch, length, width)
    output = layer.attention.output
    attended = F.layer_norm(
        context @ output.dense.weight.T + output.dense.bias + hidden,
        (width,),
        output.LayerNorm.weight,
        output.LayerNorm.bias,
        output.LayerNorm.eps,
    )
    intermediate = F.gelu(attended @ layer.intermediate.dense.weight.T + layer.intermediate.dense.bias)
    ffn = layer.output
    out = F.layer_norm(
        intermediate @ ffn.dense.weight.T + ffn.dense.bias + attended,
        (width,),
        ffn.LayerNorm.weight,
        ffn.LayerNorm.bias,
        ffn.LayerNorm.eps,
    )
    return out


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("attn_implementation", ["sdpa", "eager"])
def test_cross_output_equals_hand_computation(family, attn_implementation):
    tower_I, tower_II = twin_pair(family, layers=2, attn_implementation=attn_implementation)
    input_ids, attention_mask = tiny_batch(family)
    out = TwinEncoder(tower_I, tower_II, cael=1, cross_mode="side")(input_ids, attention_mask)  # CAEL = layer 2
    ids, mask = views(input_ids), views(attention_mask)
    inputs = [
        t(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states[1] for t in (tower_I, tower_II)
    ]
    layer_I, layer_II = tower_I.encoder.layer[1], tower_II.encoder.layer[1]
    expected_I = hand_cross_cls(layer_I, inputs[0], layer_II, inputs[1], mask)
    expected_II = hand_cross_cls(layer_II, inputs[1], layer_I, inputs[0], mask)
    assert torch.allclose(out.cross_cls[0], expected_I, atol=1e-5)
    assert torch.allclose(out.cross_cls[1], expected_II, atol=1e-5)
    assert not torch.allclose(out.cross_cls[0], out.last_cls[0], atol=1e-3)


@pytest.mark.parametrize("family", FAMILIES)
def test_cross_outputs_last_and_mean(family):
    tower_I, tower_II = twin_pair(family, layers=6)
    input_ids, attention_mask = tiny_batch(family)
    ids, mask = views(input_ids), views(attention_mask)
    towers = (tower_I, tower_II)
    hidden = [t(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states for t in towers]
    masks = [
        create_bidirectional_mask(config=t.config, inputs_embeds=h[0], attention_mask=mask) for t, h in zip(towers, hidden)
    ]

    def cross_cls_at(index):
        layers = [t.encoder.layer[index] for t in (tower_I, tower_II)]
        return torch.stack(
            [
                cross_layer_cls(layers[0], hidden[0][index], masks[0], layers[1], hidden[1][index]),
                cross_layer_cls(layers[1], hidden[1][index], masks[1], layers[0], hidden[0][index]),
            ]
        )

    mean_of_three = TwinEncoder(tower_I, tower_II, cael=3, cross_outputs="mean", cross_mode="side")(input_ids, attention_mask)
    expected = torch.stack([cross_cls_at(index) for index in (1, 3, 5)]).mean(0)
    assert torch.allclose(mean_of_three.cross_cls, expected, atol=1e-6)
    last_of_three = TwinEncoder(tower_I, tower_II, cael=3, cross_outputs="last", cross_mode="side")(input_ids, attention_mask)
    assert torch.allclose(last_of_three.cross_cls, cross_cls_at(5), atol=1e-6)
    # the last CAEL is always the last layer, so with "last" the count of CAELs does not matter
    last_of_one = TwinEncoder(tower_I, tower_II, cael=1, cross_mode="side")(input_ids, attention_mask)
    assert torch.equal(last_of_one.cross_cls, last_of_three.cross_cls)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("mode", ["stream", "side"])
def test_cross_outputs_follow_the_other_towers_values_and_normal_outputs_do_not(family, mode):
    tower_I, tower_II = twin_pair(family, layers=4)
    twin = TwinEncoder(tower_I, tower_II, cael=2, cross_mode=mode)  # CAELs at layers 2 and 4; c read after layer 4
    input_ids, attention_mask = tiny_batch(family)
    before = twin(input_ids, attention_mask)
    with torch.no_grad():
        tower_II.encoder.layer[3].attention.self.value.weight.mul_(1.5)
    after = twin(input_ids, attention_mask)
    assert torch.equal(after.last_cls[0], before.last_cls[0])  # tower I's own stream
    assert torch.equal(after.pooler_output[0], before.pooler_output[0])
    assert not torch.allclose(after.cross_cls[0], before.cross_cls[0], atol=1e-4)  # SA_I · V_II changed
    assert torch.equal(after.cross_cls[1], before.cross_cls[1])  # SA_II · V_I did not
    # the other tower's layer input (its earlier layers) reaches c_I too
    with torch.no_grad():
        tower_II.embeddings.word_embeddings.weight.add_(torch.randn_like(tower_II.embeddings.word_embeddings.weight))
    moved = twin(input_ids, attention_mask)
    assert torch.equal(moved.last_cls[0], before.last_cls[0])
    assert not torch.allclose(moved.cross_cls[0], after.cross_cls[0], atol=1e-4)


def parameters_with_gradient(model: torch.nn.Module) -> set[str]:
    return {name for name, p in model.named_parameters() if p.grad is not None and p.grad.abs().sum() > 0}


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("mode", ["stream", "side"])
def test_gradients_reach_what_the_papers_say(family, mode):
    tower_I, tower_II = twin_pair(family, layers=4)
    twin = TwinEncoder(tower_I, tower_II, cael=2, cross_mode=mode).train()
    input_ids, attention_mask = tiny_batch(family)

    # a tower's own L_NCE trains that tower only
    twin_info_nce(twin(input_ids, attention_mask).last_cls[0]).backward()
    assert parameters_with_gradient(tower_II) == set()
    assert "encoder.layer.3.attention.self.value.weight" in parameters_with_gradient(tower_I)
    twin.zero_grad(set_to_none=True)

    # c_I reaches tower II only through its value projection at the CAEL (and the layers below)
    out = twin(input_ids, attention_mask)
    out.cross_cls[0].pow(2).sum().backward()
    reached = parameters_with_gradient(tower_II)
    assert "encoder.layer.3.attention.self.value.weight" in reached
    assert not {n for n in reached if n.startswith("encoder.layer.3.") and "value" not in n}
    assert not {n for n in reached if n.startswith("pooler")}
    assert "encoder.layer.3.attention.self.query.weight" in parameters_with_gradient(tower_I)
    twin.zero_grad(set_to_none=True)

    # the cross ICNCE trains both towers' value weights
    out = twin(input_ids, attention_mask)
    icnce(out.cross_cls[0], out.cross_cls[1]).backward()
    for tower in (tower_I, tower_II):
        assert "encoder.layer.3.attention.self.value.weight" in parameters_with_gradient(tower)


@pytest.mark.parametrize("family", FAMILIES)
def test_encode_is_the_sum_of_the_towers_last_cls(family):
    tower_I, tower_II = twin_pair(family)
    input_ids, attention_mask = tiny_batch(family)
    expected = sum(
        t(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state[:, 0] for t in (tower_I, tower_II)
    )
    for cael in (0, 4):
        assert torch.allclose(TwinEncoder(tower_I, tower_II, cael=cael).encode(input_ids, attention_mask), expected, atol=1e-5)


# ---- JTCSE cross streams (cross_mode="stream") --------------------------------------------


def hand_cross_streams(towers, cael, input_ids, attention_mask):
    """The cross streams written out with `hand_cross_layer`: [CLS] of each after layer L, (2, 2N, d)."""
    ids, mask = views(input_ids), views(attention_mask)
    normal = [t(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states for t in towers]
    cross = None
    for index in range(towers[0].config.num_hidden_layers):
        layers = [t.encoder.layer[index] for t in towers]
        if index in cael_layers(cael, len(normal[0]) - 1):
            inputs = [normal[0][index], normal[1][index]] if cross is None else cross
            cross = [
                hand_cross_layer(layers[0], inputs[0], layers[1], inputs[1], mask),
                hand_cross_layer(layers[1], inputs[1], layers[0], inputs[0], mask),
            ]
        elif cross is not None:  # an ordinary layer: self-attention on the cross stream
            cross = [hand_cross_layer(layer, states, layer, states, mask) for layer, states in zip(layers, cross)]
    return torch.stack([states[:, 0] for states in cross])


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("cael", [1, 2, 3])
def test_cross_streams_equal_hand_computation(family, cael):
    towers = twin_pair(family, layers=3)  # cael 1: layer 3; 2: layers 2, 3; 3: layers 1, 2, 3
    input_ids, attention_mask = tiny_batch(family)
    out = TwinEncoder(*towers, cael=cael)(input_ids, attention_mask)
    assert torch.allclose(out.cross_cls, hand_cross_streams(towers, cael, input_ids, attention_mask), atol=1e-5)


@pytest.mark.parametrize("layers, counts", [(12, [1, 2, 3, 4, 6, 12]), (6, [1, 2, 3, 4, 5, 6])])
def test_every_cael_count_gives_other_cross_outputs_and_the_stock_normal_streams(layers, counts):
    tower_I, tower_II = twin_pair("bert", layers)
    input_ids, attention_mask = tiny_batch("bert")
    ids, mask = views(input_ids), views(attention_mask)
    stock = [tower(input_ids=ids, attention_mask=mask) for tower in (tower_I, tower_II)]
    cross = {}
    for cael in counts:
        out = TwinEncoder(tower_I, tower_II, cael=cael)(input_ids, attention_mask)  # eval mode: dropout off
        assert torch.equal(out.last_cls, torch.stack([s.last_hidden_state[:, 0] for s in stock]))
        assert torch.equal(out.pooler_output, torch.stack([s.pooler_output for s in stock]))
        cross[cael] = out.cross_cls
    for first in counts:
        for second in counts:
            if first < second:
                assert not torch.allclose(cross[first], cross[second], atol=1e-4), (first, second)


@pytest.mark.parametrize("family", FAMILIES)
def test_one_cael_stream_equals_side_exactly_even_with_dropout(family):
    tower_I, tower_II = twin_pair(family, layers=4)
    input_ids, attention_mask = tiny_batch(family)
    outputs = []
    for mode in ("stream", "side"):
        twin = TwinEncoder(tower_I, tower_II, cael=1, cross_mode=mode).train()
        torch.manual_seed(3)
        outputs.append(twin(input_ids, attention_mask))
    for stream, side in zip(*outputs):
        assert torch.equal(stream, side)


def count_layer_calls(twin: TwinEncoder, input_ids, attention_mask) -> list[list[int]]:
    """How often each layer's feed-forward runs in one forward, per tower."""
    counts = [[0] * twin.num_layers for _ in twin.towers]
    handles = [
        layer.intermediate.register_forward_hook(lambda *_, t=t, i=i: counts[t].__setitem__(i, counts[t][i] + 1))
        for t, tower in enumerate(twin.towers)
        for i, layer in enumerate(tower.encoder.layer)
    ]
    twin(input_ids, attention_mask)
    for handle in handles:
        handle.remove()
    return counts


def test_the_cross_stream_runs_every_layer_from_the_first_cael_on():
    twin = TwinEncoder(*twin_pair("bert", layers=6), cael=2)  # CAELs at layers 3 and 6
    input_ids, attention_mask = tiny_batch("bert")
    # layers 1-2: the normal stream only; layers 3-6: the normal stream and the cross stream
    assert count_layer_calls(twin, input_ids, attention_mask) == [[1, 1, 2, 2, 2, 2]] * 2
    side = TwinEncoder(*twin.towers, cael=2, cross_mode="side")  # side outputs of layer 6 only
    assert count_layer_calls(side, input_ids, attention_mask) == [[1, 1, 1, 1, 1, 2]] * 2


@pytest.mark.parametrize("family", FAMILIES)
def test_the_cross_loss_trains_every_layer_from_the_first_cael_on_in_both_towers(family):
    tower_I, tower_II = twin_pair(family, layers=6)
    twin = TwinEncoder(tower_I, tower_II, cael=2).train()  # CAELs at layers 3 and 6 (0-based 2, 5)
    input_ids, attention_mask = tiny_batch(family)
    out = twin(input_ids, attention_mask)
    icnce(out.cross_cls[0], out.cross_cls[1]).backward()
    kinds = ("attention.self.query.weight", "attention.self.key.weight", "attention.self.value.weight",
             "intermediate.dense.weight", "output.dense.weight")
    for tower in (tower_I, tower_II):
        reached = parameters_with_gradient(tower)
        for index in range(2, 6):
            assert {f"encoder.layer.{index}.{kind}" for kind in kinds} <= reached
        assert not {n for n in reached if n.startswith("pooler")}
    # The layers before the first CAEL do not run on the cross stream: their gradient from the cross
    # loss is exactly what flows back through the normal streams' input to layer 3.
    twin.zero_grad(set_to_none=True)
    layer_inputs = []
    hooks = [t.encoder.layer[2].register_forward_pre_hook(lambda _, args: layer_inputs.append(args[0])) for t in twin.towers]
    out = twin(input_ids, attention_mask)
    for hook in hooks:
        hook.remove()
    loss = icnce(out.cross_cls[0], out.cross_cls[1])
    below = [p for t in twin.towers for n, p in t.named_parameters() if n.startswith(("encoder.layer.0.", "encoder.layer.1."))]
    direct = torch.autograd.grad(loss, below, retain_graph=True)
    through_input = torch.autograd.grad(loss, layer_inputs, retain_graph=True)
    chained = torch.autograd.grad(layer_inputs, below, grad_outputs=through_input)
    for a, b in zip(direct, chained):
        assert torch.allclose(a, b, atol=1e-6)


# ---- ensembles and DDP gathering ------------------------------------------------------------


def test_ensembles():
    from pipeline.evaluated_models import WeightedTowers

    h_I, h_II, h_uc = torch.randn(3, 4), torch.randn(3, 4), torch.randn(3, 4)
    assert torch.equal(WeightedTowers.twin("I", "II").combine([h_I, h_II]), h_I + h_II)
    assert torch.allclose(WeightedTowers.of([("I", 1), ("II", 1), ("uc", 1)]).combine([h_I, h_II, h_uc]), h_I + h_II + h_uc)
    uc = WeightedTowers.uc("I", "II", "uc", 0.7)
    assert torch.allclose(uc.combine([h_I, h_II, h_uc]), 0.3 * (h_I + h_II) + 0.7 * h_uc)


def test_gather_with_grad_is_identity_in_one_process():
    x = torch.randn(4, 3, requires_grad=True)
    assert gather_with_grad(x) is x
    out = TwinOutput(torch.randn(2, 4, 3), torch.randn(2, 4, 3), None)
    gathered = out.gather()
    assert gathered.last_cls is out.last_cls and gathered.cross_cls is None


def _gather_worker(rank: int, world_size: int, init_file: str, results):
    torch.distributed.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size)
    local = torch.full((2, 3), float(rank + 1), requires_grad=True)
    gathered = gather_with_grad(local)
    (gathered * torch.arange(1.0, 5.0)[:, None]).sum().backward()
    results[rank] = (gathered.detach().clone(), local.grad.clone())
    torch.distributed.destroy_process_group()


def test_gather_with_grad_two_processes(tmp_path):
    results = mp.Manager().dict()
    mp.spawn(_gather_worker, args=(2, str(tmp_path / "init"), results), nprocs=2)
    expected = torch.tensor([[1.0] * 3, [1.0] * 3, [2.0] * 3, [2.0] * 3])
    for rank in (0, 1):
        gathered, grad = results[rank]
        assert torch.equal(gathered, expected)
        # gradient only for this rank's rows (weights 1,2 on rank 0; 3,4 on rank 1)
        assert torch.equal(grad, torch.tensor([[1.0], [2.0]]).expand(2, 3) + 2 * rank)


def test_the_package_exports_exactly_what_it_imports():
    """`pipeline.modeling.__all__` is the package's list of public names: a name imported into the
    package but missing from it (or listed but not imported) is a list that drifted."""
    import ast
    import inspect

    import pipeline.modeling as package

    imported = {alias.asname or alias.name for node in ast.parse(inspect.getsource(package)).body
                if isinstance(node, ast.ImportFrom) for alias in node.names}
    assert set(package.__all__) == imported
    assert len(package.__all__) == len(set(package.__all__))
    assert all(getattr(package, name).__doc__ for name in package.__all__), "every public name has a docstring"

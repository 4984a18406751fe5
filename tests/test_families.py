"""pipeline/modeling/families/: the contract every backbone family meets, checked on a tiny random model of each
registered model type (`Architecture.tiny_config`). The cases come from the registry, so a family module added
to that folder is tested here with no edit to this file."""

from dataclasses import dataclass

import pytest
import torch
from torch import nn
from transformers import AutoModel, PretrainedConfig, PreTrainedModel

from pipeline.analysis import inference_gmacs, thop_formula_gmacs, thop_gmacs
from pipeline.errors import PipelineError
from pipeline.modeling import count_layernorms, drop_layernorms, last_layer_cls, layer_forward
from pipeline.modeling.architecture import (
    Architecture,
    UnrolledLayer,
    architecture_of,
    architecture_of_layer,
    register_architecture,
    registered_architectures,
)
from pipeline.plugins import load_plugins

FAMILIES = registered_architectures()  # model type → its family, every family module loaded
UNROLLED = sorted(model_type for model_type, family in FAMILIES.items() if isinstance(family, UnrolledLayer))
BATCH, LENGTH = 3, 7


@dataclass
class TinyModel:
    """A tiny random model of one model type, its family, and a batch padded on the right."""

    family: Architecture
    config: PretrainedConfig
    model: PreTrainedModel
    input_ids: torch.Tensor
    attention_mask: torch.Tensor

    def forward(self) -> torch.Tensor:
        return self.model(input_ids=self.input_ids, attention_mask=self.attention_mask).last_hidden_state


def build_tiny(model_type: str, attn_implementation: str = "sdpa") -> TinyModel:
    family = FAMILIES[model_type]
    config = family.tiny_config(model_type)
    torch.manual_seed(0)
    model = AutoModel.from_config(config, attn_implementation=attn_implementation, **family.load_options()).eval()
    input_ids = torch.randint(5, config.vocab_size, (BATCH, LENGTH))
    lengths = torch.tensor([LENGTH, LENGTH - 2, 3])  # the later rows padded
    attention_mask = (torch.arange(LENGTH) < lengths[:, None]).long()
    if config.pad_token_id is not None:
        input_ids = input_ids.masked_fill(attention_mask == 0, config.pad_token_id)
    return TinyModel(family, config, model, input_ids, attention_mask)


@pytest.fixture(params=sorted(FAMILIES))
def tiny(request) -> TinyModel:
    return build_tiny(request.param)


def test_each_family_module_registers_a_family_of_its_own():
    """Adding a family is adding a module: every module of the package registers one, and only they do."""
    modules = load_plugins("pipeline.modeling.families")
    assert {type(family).__module__ for family in FAMILIES.values()} == set(modules)


def test_the_model_and_its_layers_find_the_family(tiny):
    family, model = tiny.family, tiny.model
    assert architecture_of(model) is family and architecture_of(tiny.config) is family
    layers = family.layers(model)
    assert len(layers) == family.layer_count(tiny.config) == tiny.config.num_hidden_layers
    assert list(layers) == [module for module in model.modules() if isinstance(module, family.layer_classes)]
    assert all(architecture_of_layer(layer) is family for layer in layers)
    assert (family.pooler(model) is not None) == family.has_pooler_layer


def test_the_layer_by_layer_forward_is_the_stock_forward(tiny):
    """Embedding, layer context, each layer's call and the final norm, as the twin runs them."""
    family, model = tiny.family, tiny.model
    with torch.no_grad():
        stock = tiny.forward()
        hidden = family.embed(model, tiny.input_ids)
        context = family.layer_context(model, hidden, tiny.attention_mask)
        for layer in family.layers(model):
            hidden = family.run_layer(layer, hidden, context)
        torch.testing.assert_close(family.final_norm(model, hidden), stock)


def test_the_sentence_vector_and_pooler_output_are_one_row_per_sentence(tiny):
    family, model, mask = tiny.family, tiny.model, tiny.attention_mask
    with torch.no_grad():
        output = model(input_ids=tiny.input_ids, attention_mask=mask)
        vector, pooled = family.sentence_outputs(model, output, mask)
        assert vector.shape == pooled.shape == (BATCH, tiny.config.hidden_size)
        torch.testing.assert_close(vector, family.sentence_vector(output.last_hidden_state, mask))
        torch.testing.assert_close(pooled, family.pooler_of(model, vector))
        torch.testing.assert_close(pooled, family.pooler_output(model, output.last_hidden_state, mask))
        torch.testing.assert_close(last_layer_cls(model, tiny.input_ids, mask), vector, atol=1e-5, rtol=1e-5)
    if not family.has_pooler_layer:
        torch.testing.assert_close(pooled, vector)  # without a pooler h^P is h^L


def test_set_dropout_reaches_every_dropout(tiny):
    """At 0 a forward in training mode is the evaluation forward (no dropout left anywhere); at 0.5 two differ."""
    family, model = tiny.family, tiny.model
    with torch.no_grad():
        evaluated = tiny.forward()
        family.set_dropout(model, 0.0)
        model.train()
        torch.testing.assert_close(tiny.forward(), evaluated)
        family.set_dropout(model, 0.5)
        assert not torch.allclose(tiny.forward(), tiny.forward())
    assert all(module.p == 0.5 for module in model.modules() if isinstance(module, nn.Dropout))
    assert all(getattr(model.config, key) == 0.5 for key in family.dropout_config_keys)


def test_the_norm_slots_are_each_layers_norms(tiny):
    family, model = tiny.family, tiny.model
    layers = family.layers(model)
    for layer in layers:
        slotted = [getattr(parent, name) for parent, name in family.layernorm_slots(layer)]
        assert slotted and all(isinstance(norm, family.norm_classes) for norm in slotted)
        assert {id(norm) for norm in slotted} == {id(m) for m in layer.modules() if isinstance(m, family.norm_classes)}
    before = count_layernorms(model)
    drop_layernorms(model, 1)  # the LayerNorm study: the last layer's norms removed
    assert count_layernorms(model) == before - len(family.layernorm_slots(layers[-1]))
    with torch.no_grad():
        assert torch.isfinite(tiny.forward()).all()


def test_the_attention_context_is_captured_per_layer(tiny):
    family, model = tiny.family, tiny.model
    captured: list[torch.Tensor] = []
    handles = [family.capture_context(layer, captured.append) for layer in family.layers(model)]
    try:
        with torch.no_grad():
            tiny.forward()
    finally:
        for handle in handles:
            handle.remove()
    assert [tuple(context.shape) for context in captured] == [(BATCH, LENGTH, tiny.config.hidden_size)] * len(handles)


def test_the_cost_formula_is_what_thop_counts(tiny):
    assert thop_gmacs(tiny.model, 16) == pytest.approx(thop_formula_gmacs(tiny.config, 16), rel=1e-9)
    assert inference_gmacs(tiny.config, 16) > thop_formula_gmacs(tiny.config, 16)  # plus the attention products


@pytest.mark.parametrize("attn_implementation", ["sdpa", "eager"])
@pytest.mark.parametrize("model_type", UNROLLED)
def test_a_layer_run_part_by_part_is_the_layers_own_forward(model_type, attn_implementation):
    """The path JTCSE's cross-attention and the sentence-row-only last layer take (`layer_forward`), under
    either attention function the layer may be configured with."""
    tiny = build_tiny(model_type, attn_implementation)
    family, model = tiny.family, tiny.model
    with torch.no_grad():
        hidden = family.embed(model, tiny.input_ids)
        context = family.layer_context(model, hidden, tiny.attention_mask)
        for layer in family.layers(model):
            stock = family.run_layer(layer, hidden, context)
            torch.testing.assert_close(layer_forward(layer, hidden, context), stock, atol=1e-5, rtol=1e-5)
            row = family.sentence_row_only()
            if row is not None:
                torch.testing.assert_close(layer_forward(layer, hidden, context, row=row)[:, 0], stock[:, row],
                                           atol=1e-5, rtol=1e-5)
            hidden = stock


@pytest.mark.parametrize("model_type", sorted(FAMILIES))
def test_a_model_type_claimed_twice_is_refused_and_changes_nothing(model_type):
    family = FAMILIES[model_type]
    claimer = type("Claimer", (type(family),), {"model_types": ("not-yet-claimed", model_type)})
    with pytest.raises(PipelineError, match=f"model type '{model_type}' already has an architecture adapter"):
        register_architecture(claimer())
    assert registered_architectures() == FAMILIES


def test_a_family_serving_no_model_type_is_refused():
    nameless = type("Nameless", (type(next(iter(FAMILIES.values()))),), {"model_types": ()})
    with pytest.raises(PipelineError, match="Nameless declares no model_types"):
        register_architecture(nameless())

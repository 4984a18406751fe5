"""The allowed values and the rules between settings (pipeline/settings_rules.py): each rule fires
at load with one line, and each allowed-value tuple is defined there only."""

from __future__ import annotations

import ast
import copy
from pathlib import Path

import pytest

from pipeline import settings_rules
from pipeline.declarations import loss_terms
from pipeline.params_file import parse_params
from pipeline.errors import PipelineError
from pipeline.settings_rules import validate_drop_layernorm, validate_evaluated_models, validate_precision

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda p: p["train"].update(drop_layernorm=7),
         "invalid params: train.drop_layernorm=7 is more than the 6 encoder layers of backbone 'minilm'; "
         "allowed: 0 (keep every LayerNorm) to 6, the encoder's layer count"),
        (lambda p: p["train"].update(cael=7),
         "invalid params: train.cael=7 is more than the 6 encoder layers of backbone 'minilm'; "
         "allowed: 0 (TNCSE) to 6, the encoder's layer count"),
        (lambda p: p["train"].update(cross_outputs="mean"),
         "invalid params: train.cross_outputs=mean applies to train.cross_mode=side only; the stream mode reads "
         "the cross streams after the last layer; allowed with stream: last"),
        (lambda p: p["towers"].pop("II"), "invalid params: towers=['I'] must name exactly the two towers I and II"),
        (lambda p: p["models"].update({"no-such-model": {"towers_folder": "data/backbone", "second_towers_folder": "data/backbone"}}),
         "invalid params: models.no-such-model is not a model of the pipeline; models: backbone, pretrain-I"),
        (lambda p: p["models"]["uc"].update({"second_towers_folder": "data/models/joint"}),
         "invalid params: models.uc={'towers_folder': 'data/models/joint', 'second_towers_folder': 'data/models/joint'} "
         "must be {'towers_folder': 'data/models/joint', 'second_towers_folder': 'data/uc'}"),
        (lambda p: p["distill"]["teachers"].pop("uc"),
         "invalid params: models.uc-D is distilled from 'uc', which is not in distill.teachers; add it or drop uc-D"),
    ],
)
def test_each_rule_fires_at_load_with_its_own_message(tiny_params_dict, edit, message):
    """The whole message: a second copy of a rule firing first would change it."""
    raw = copy.deepcopy(tiny_params_dict)
    edit(raw)
    with pytest.raises(PipelineError) as error:
        parse_params(raw)
    assert str(error.value).startswith(message)


def test_every_drop_layernorm_up_to_the_layer_count_is_allowed(tiny_params_dict):
    for k in range(7):
        tiny_params_dict["train"]["drop_layernorm"] = k
        assert parse_params(tiny_params_dict).train.drop_layernorm == k
    with pytest.raises(PipelineError, match="train.drop_layernorm=-1 is negative"):
        validate_drop_layernorm(-1, 6)


def test_rules_raise_the_one_user_error_type():
    """A rule called by a library constructor (no params file) raises PipelineError too."""
    with pytest.raises(PipelineError, match="models.x is not a model of the pipeline"):
        validate_evaluated_models({"x": {}}, teachers=[])
    with pytest.raises(PipelineError, match="needs a CUDA GPU but the device is cpu"):
        validate_precision("bf16", "cpu", "train.precision")
    assert validate_precision("fp32", "cpu", "train.precision") == "fp32"


ALLOWED_VALUE_HOMES = (settings_rules, loss_terms)  # the settings' rules, and the settings a loss term owns


def allowed_value_tuples() -> dict[tuple[str, ...], str]:
    """The string tuples settings_rules and the loss-term declarations define (not those they import), by value."""
    found = {}
    for module in ALLOWED_VALUE_HOMES:
        defined = {target.id for node in ast.parse(Path(module.__file__).read_text()).body
                   if isinstance(node, ast.Assign) for target in node.targets if isinstance(target, ast.Name)}
        found |= {value: name for name, value in vars(module).items()
                  if name in defined and isinstance(value, tuple) and all(isinstance(item, str) for item in value)}
    return found


def test_allowed_values_are_defined_in_settings_rules_only():
    """No other module restates a tuple (or a Literal) of the same strings: one home to change."""
    allowed = allowed_value_tuples()
    assert len(allowed) >= 8  # the loss terms (and STS tasks) are their registries' keys, not tuples here
    copies = []
    for file in sorted([*ROOT.joinpath("pipeline").rglob("*.py"), *ROOT.joinpath("stages").glob("*.py")]):
        if file in {Path(module.__file__) for module in ALLOWED_VALUE_HOMES}:
            continue
        for node in ast.walk(ast.parse(file.read_text())):
            if isinstance(node, ast.Tuple) and node.elts and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
                value = tuple(e.value for e in node.elts)
                if value in allowed:
                    copies.append(f"{file.relative_to(ROOT)}:{node.lineno} restates {allowed[value]}")
    assert not copies

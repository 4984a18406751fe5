"""The papers' LayerNorm study (TNCSE Figure 5, JTCSE Fig. 8): LayerNorms of the last k encoder layers removed.

"Removed" in code: in each of the last k encoder layers, both LayerNorms — in BERT's family the one after the
attention block (`layer.attention.output.LayerNorm`) and the one after the feed-forward block
(`layer.output.LayerNorm`); in another family its `layernorm_slots`, of its `norm_classes` (an RMSNorm, say)
— become `nn.Identity`. The residual additions stay: each block still
returns dropout(dense(x)) + its input, only the normalisation of that sum is gone. The embeddings'
LayerNorm and the pooler are untouched. TNCSE: "include two LayerNorms in each of their encoder
layers, which are located after the attention layer and after the FNN, respectively"; "remove the
last several layers of LayerNorm of the encoder" (docs/method.md, "LayerNorm study").

The count is recorded in the model's config (`dropped_layernorm_layers`), so `save_pretrained`
writes it to config.json and `pipeline.modeling.load_backbone` removes the same LayerNorms again on
load: a saved model embeds as it did in training. Stock `AutoModel.from_pretrained` does not read
that key; it would re-create the removed LayerNorms with fresh unit weights (docs/method.md says
so), which is why the pipeline loads models through `load_backbone` only.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from torch import nn
from transformers import PreTrainedModel
from transformers.utils import logging as hf_logging

from pipeline.modeling.architecture import architecture_of
from pipeline.settings_rules import validate_drop_layernorm
from pipeline.errors import PipelineError

log = logging.getLogger(__name__)

CONFIG_KEY = "dropped_layernorm_layers"


def dropped_layers(model: PreTrainedModel) -> int:
    """How many final encoder layers of `model` have their LayerNorms removed (its config's record)."""
    return int(getattr(model.config, CONFIG_KEY, 0) or 0)


def drop_layernorms(model: PreTrainedModel, k: int) -> PreTrainedModel:
    """Replace both LayerNorms of the last `k` encoder layers with `nn.Identity`, in place; record k.

    k = 0 changes nothing. A model that already has LayerNorms removed accepts the same k again
    (reapplying on load) and refuses another: what was removed cannot be put back.
    """
    architecture = architecture_of(model)
    layers = architecture.layers(model)
    validate_drop_layernorm(k, len(layers))
    already = dropped_layers(model)
    if already and already != k:
        raise PipelineError(
            f"drop_layernorm={k}: this model already has the LayerNorms of its last {already} layers removed "
            f"({CONFIG_KEY} in its config.json); start from a model with every LayerNorm, or set drop_layernorm: {already}"
        )
    for layer in layers[len(layers) - k:] if k else []:
        for parent, name in architecture.layernorm_slots(layer):
            if not isinstance(getattr(parent, name), (*architecture.norm_classes, nn.Identity)):
                raise PipelineError(
                    f"drop_layernorm: {type(model).__name__} layer has no "
                    f"{'/'.join(c.__name__ for c in architecture.norm_classes)} at {name}; "
                    "its family's adapter names other norms (layernorm_slots, pipeline/modeling/families/)"
                )
            setattr(parent, name, nn.Identity())
    if k:
        setattr(model.config, CONFIG_KEY, k)
    return model


def count_layernorms(model: PreTrainedModel) -> int:
    """The norms (the family's `norm_classes`) left in the encoder layers (2 per layer in a stock model)."""
    architecture = architecture_of(model)
    return sum(isinstance(module, architecture.norm_classes) for module in architecture.layers(model).modules())


def recorded_drop(path: str | Path) -> int:
    """k recorded in a local model folder's config.json (0 for a hub id or a folder without it)."""
    config = Path(path) / "config.json"
    if not config.is_file():
        return 0
    try:
        return int(json.loads(config.read_text(encoding="utf-8")).get(CONFIG_KEY, 0) or 0)
    except (ValueError, TypeError, AttributeError):
        return 0  # an unreadable config is for the loader to report


@contextmanager
def quiet_transformers() -> Iterator[None]:
    """Transformers' own warnings off (its weight-loading report), back as they were afterwards."""
    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)


def check_missing_keys(model: PreTrainedModel, missing: list[str], path: str | Path) -> None:
    """Warn about weights a folder lacks other than the LayerNorms its config says were removed."""
    k = dropped_layers(model)
    architecture = architecture_of(model)
    layers = architecture.layers(model)
    module_names = {id(module): name for name, module in model.named_modules()}
    removed = {  # each removed norm's own parameters (an RMSNorm has no bias)
        f"{module_names[id(parent)]}.{slot}.{name}"
        for layer in (layers[len(layers) - k:] if k else [])
        for parent, slot in architecture.layernorm_slots(layer)
        for name, _ in getattr(parent, slot).named_parameters()
    }
    unexpected = sorted(key for key in missing if key.removeprefix(f"{model.base_model_prefix}.") not in removed)
    if unexpected:
        log.warning("%s lacks weights besides its removed LayerNorms, newly initialised: %s", path, ", ".join(unexpected))

"""The allowed values of the settings and the rules one setting obeys on its own or with another.

Every tuple of allowed values is defined here once: the schema (`pipeline.config`) turns them into
`Literal`s, and the library's constructors that take the same values directly (a model built in a
test or a notebook) check them with the rules below. Each rule raises `PipelineError` with one line
naming the key, the value and what is allowed; `Params` lets that error through unchanged at load.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit

from pipeline.urls import without_userinfo
from pipeline.errors import PipelineError
from pipeline.evaluated_models import BASELINES, MODEL_NAMES, STUDENTS, evaluated_model_folders

# ---- allowed values ---------------------------------------------------------------------------
SCALES = ("tiny", "small", "paper", "rehearsal")
DEVICES = ("auto", "cpu", "cuda")
SICK_SPLITS = ("train", "trial", "test")
# The poolers SimCSE, TNCSE and JTCSE compare, named as in SimCSE's code.
POOLERS = ("cls", "cls_before_pooler", "avg", "avg_first_last", "avg_top2")
CROSS_OUTPUTS = ("last", "mean")
# stream: cross streams that feed the next layers (JTCSE's reading, the default); side: side outputs of each CAEL
CROSS_MODES = ("stream", "side")
# A training stage's arithmetic: bf16 or fp16 autocast (fp16 with a gradient scaler) on CUDA, or fp32.
PRECISIONS = ("bf16", "fp16", "fp32")


# ---- the rules: each defined once, here -------------------------------------------------------
# `Params` runs every one at load (`load_params`), so a bad combination stops a stage before any
# model is loaded. The library's constructors that also take these values directly (`TwinEncoder`,
# `SentenceEncoder`, `GaussianNegatives`, `twin_objective`: tests and the benchmark build them
# without a params file) call the same functions; nothing else checks them again.


def describe_allowed_cael(num_layers: int) -> str:
    """0 (TNCSE) up to the layer count: CAELs are spread evenly over any count (`cael_layers`)."""
    return f"0 (TNCSE) to {num_layers}, the encoder's layer count"


def describe_allowed_drop(num_layers: int) -> str:
    """0 up to the layer count: the final encoder layers whose LayerNorms are removed."""
    return f"0 (keep every LayerNorm) to {num_layers}, the encoder's layer count"


def validate_cael(cael: int, num_layers: int, key: str = "train.cael", backbone: str | None = None) -> int:
    """`cael` must be an integer from 0 (TNCSE) to the layer count; raise a one-line PipelineError."""
    return _validate_layer_count(cael, num_layers, key, backbone, describe_allowed_cael(num_layers))


def validate_drop_layernorm(
    k: int, num_layers: int, key: str = "train.drop_layernorm", backbone: str | None = None
) -> int:
    """`k` (the LayerNorm study) must be an integer from 0 to the layer count; raise a one-line PipelineError."""
    return _validate_layer_count(k, num_layers, key, backbone, describe_allowed_drop(num_layers))


def _validate_layer_count(value: int, num_layers: int, key: str, backbone: str | None, allowed: str) -> int:
    """An integer from 0 to the encoder's layer count (a number of layers to act on)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise PipelineError(f"{key}={value!r} is not an integer; allowed: {allowed}")
    if value < 0:
        raise PipelineError(f"{key}={value} is negative; allowed: {allowed}")
    if value > num_layers:
        of = f"backbone '{backbone}'" if backbone else "the backbone"
        raise PipelineError(f"{key}={value} is more than the {num_layers} encoder layers of {of}; allowed: {allowed}")
    return value


def validate_towers(towers, key: str = "towers") -> None:
    """The twin has exactly the two towers I and II (each pretrained on its own round trip)."""
    if set(towers) != {"I", "II"}:
        raise PipelineError(f"{key}={sorted(towers)} must name exactly the two towers I and II")


def validate_cross_outputs(cross_outputs: str, key: str = "train.cross_outputs") -> str:
    if cross_outputs not in CROSS_OUTPUTS:
        raise PipelineError(f"{key}={cross_outputs} is not known; allowed: {', '.join(CROSS_OUTPUTS)}")
    return cross_outputs


def validate_cross_mode(cross_mode: str, cross_outputs: str, key: str = "train.cross_mode") -> str:
    if cross_mode not in CROSS_MODES:
        raise PipelineError(f"{key}={cross_mode} is not known; allowed: {', '.join(CROSS_MODES)}")
    if cross_mode == "stream" and cross_outputs != "last":
        raise PipelineError(
            f"train.cross_outputs={cross_outputs} applies to {key}=side only; the stream mode reads the cross "
            "streams after the last layer; allowed with stream: last"
        )
    return cross_mode


def validate_gaussian(count: int | None, std: float, weight: float, key: str = "gaussian") -> None:
    """GS-InfoNCE's noise: M >= 0 vectors (None = 3 × batch), σ > 0, λ > 0 (λ = 0 would be log 0)."""
    if count is not None and count < 0:
        raise PipelineError(f"{key}.count={count} is negative; allowed: an integer >= 0 or null")
    if std <= 0:
        raise PipelineError(f"{key}.std={std} is not positive; allowed: a number > 0")
    if weight <= 0:
        raise PipelineError(
            f"{key}.weight={weight} is not positive; allowed: a number > 0 (to train without the noise set {key}.enabled: false)"
        )


def validate_pooler(pooler: str, key: str = "pooler") -> str:
    if pooler not in POOLERS:
        raise PipelineError(f"{key}={pooler} is not a known pooler; allowed: {', '.join(POOLERS)}")
    return pooler


def validate_token_budget(token_budget: int | str, max_length: int, key: str = "eval.token_budget",
                          length_key: str = "eval.max_length") -> int | str:
    """`auto` (by device) or a whole number of padded tokens per batch, at least `max_length`: a batch
    must hold one sentence of the longest length. A string of digits (a command-line option) counts
    as its number."""
    budget = int(token_budget) if isinstance(token_budget, str) and token_budget.isdigit() else token_budget
    if budget == "auto":
        return budget
    if not isinstance(budget, int) or isinstance(budget, bool):
        raise PipelineError(f"{key}={token_budget!r} is not auto or a whole number of tokens")
    if budget < max_length:
        raise PipelineError(f"{key}={budget} is less than {length_key}={max_length}: a batch must hold one sentence "
                            f"of the longest length; raise {key} to {max_length} or more")
    return budget


def validate_precision(precision: str, device_type: str, key: str, device_setting: str | None = None) -> str:
    """`precision` of a training stage (one of `PRECISIONS`, the schema checked) on the device it runs
    on: bf16 and fp16 on CUDA only, a CPU trains in fp32 (`device_setting` names how the device was chosen)."""
    if precision != "fp32" and device_type != "cuda":
        if device_setting is None:
            chosen = f"the device is {device_type}"
        else:
            chosen = f"device={device_setting}" + ("" if device_setting == device_type else f" runs on {device_type}")
        raise PipelineError(f"{key}={precision} needs a CUDA GPU but {chosen}; on CPU set {key}: fp32")
    return precision


# data.hub_endpoint's value that makes the download stage build the backbones offline and serve
# them from a loopback hub in its own process (the rehearsal preset, `pipeline.data.standin_models`)
STANDIN_HUB = "standin"


def validate_hub_endpoint(endpoint: str | None, key: str = "data.hub_endpoint") -> str | None:
    """A hub URL with its scheme and host (http(s)://host[:port]), None for HF_ENDPOINT / the public hub,
    or `standin`: without a scheme every download stage would fail deep in the HTTP client."""
    if endpoint is None or endpoint == STANDIN_HUB:
        return endpoint
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        shown = without_userinfo(endpoint)
        raise PipelineError(f"{key}={shown!r} is not a hub URL; allowed: http(s)://host[:port] (e.g. http://{shown}), standin or null")
    return endpoint


def validate_baselines(names: Iterable[str], key: str = "baselines") -> None:
    """`baselines` of params.yaml: each a seed paper's model of the registry (`pipeline.evaluated_models.BASELINES`)."""
    for name in names:
        if name not in BASELINES:
            raise PipelineError(f"{key}.{name} is not a seed paper's model of the registry; baselines: {', '.join(BASELINES)}")


def validate_evaluated_models(
    models: Mapping[str, Mapping[str, str]], teachers: Iterable[str], baselines: Iterable[str] = (), key: str = "models"
) -> None:
    """`models` of params.yaml against the registry (`pipeline.evaluated_models`): known names, the registry's
    folders, a distilled model only where its teacher is distilled (`distill.teachers`) and a seed
    paper's model only where `baselines` trains it."""
    known = evaluated_model_folders()
    teachers, baselines = set(teachers), set(baselines)
    for name, entry in models.items():
        if name not in known:
            raise PipelineError(f"{key}.{name} is not a model of the pipeline; models: {', '.join(MODEL_NAMES)}")
        if dict(entry) != known[name]:
            raise PipelineError(
                f"{key}.{name}={dict(entry)} must be {known[name]}, the folders the registry reads (pipeline/evaluated_models.py)"
            )
        if name in STUDENTS and STUDENTS[name] not in teachers:
            raise PipelineError(
                f"{key}.{name} is distilled from '{STUDENTS[name]}', which is not in distill.teachers; add it or drop {name}"
            )
        if name in BASELINES and name not in baselines:
            raise PipelineError(f"{key}.{name} is trained by baselines.{name}, which params.yaml lacks; add it or drop {name}")


def validate_standin_hub(endpoint: str | None, checkpoint_source: str) -> None:
    """The stand-in hub serves the backbones only: the checkpoints stage's hub rows cannot be scored through
    it (and the download reads the corpus and benchmarks from a mirror: `pipeline.data.download`)."""
    if endpoint != STANDIN_HUB:
        return
    if checkpoint_source == "hub":
        raise PipelineError("data.hub_endpoint=standin serves no public checkpoint; set checkpoints.source: standin")

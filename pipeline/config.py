"""Typed settings: the schema of `params.yaml`, loading and validation.

`params.yaml` is composed from the preset groups in `conf/` (DVC's Hydra integration) and is the
single source of every setting. Loading validates it against the models below: an unknown key, a
wrong type or an impossible combination raises `PipelineError` with one line naming the key, the
value and what is allowed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from pipeline.errors import PipelineError

PARAMS_FILE = Path("params.yaml")
STS_TASKS = ("STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness")
# The poolers SimCSE, TNCSE and JTCSE compare, named as in SimCSE's code.
POOLERS = ("cls", "cls_before_pooler", "avg", "avg_first_last", "avg_top2")
LOSS_TERMS = ("nce", "icnce", "ictn")
CROSS_OUTPUTS = ("last", "mean")
# Fewest pairs a task (or the STS-B dev set of model selection) may be cut to: a Spearman over a
# handful of pairs is noise, and over one pair it is NaN.
MIN_EVAL_PAIRS = 100
DEVICES = ("auto", "cpu", "cuda")


def allowed_cael_values(num_layers: int) -> list[int]:
    """0 (TNCSE) or a divisor of the layer count: CAELs are evenly spaced."""
    return [0] + [count for count in range(1, num_layers + 1) if num_layers % count == 0]


class Section(BaseModel):
    """Base of every section: unknown keys are errors, values are checked on assignment too."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class WikiSettings(Section):
    limit: int | None = Field(None, ge=1, description="first N lines of Wiki1M; null = all 1M")
    repo_id: str = "princeton-nlp/datasets-for-simcse"
    filename: str = "wiki1m_for_simcse.txt"


class DataSettings(Section):
    mirror: str | None = Field(None, description="local mirror folder; null = canonical sources")
    wiki: WikiSettings = WikiSettings()
    add_sick: bool = True
    senteval_repo_id: str = "princeton-nlp/datasets-for-simcse"
    senteval_filename: str = "senteval.tar"
    hub_endpoint: str | None = Field(None, description="Hugging Face hub URL; null = HF_ENDPOINT or the public hub")


class BackboneSettings(Section):
    name: str
    source: str = Field(description="'package:<python package>' or a Hugging Face hub id")
    revision: str = "main"
    num_layers: int = Field(ge=1)
    uc_source: str = Field(description="the existing unsupervised checkpoint of the UC ensemble")
    uc_weight: float = Field(ge=0.0, le=1.0)


class TowerSettings(Section):
    lang: str = Field(min_length=2, description="round-trip pivot language EN→X→EN")
    lr: float = Field(gt=0, description="learning rate of this tower's SimCSE pretraining")


class RttSettings(Section):
    backend: Literal["google", "apertium"]
    source_lang: str = "en"
    workers: int = Field(4, ge=1)
    max_retries: int = Field(5, ge=0)
    backoff_seconds: float = Field(1.0, ge=0)
    max_chars: int = Field(4500, ge=100, description="characters per packed request")
    max_failed_fraction: float = Field(0.01, ge=0, le=1)
    timeout_seconds: float = Field(30.0, gt=0)
    endpoint: str | None = Field(None, description="google backend base URL; null = deep-translator's default")


class GaussianNegativesSettings(Section):
    """GS-InfoNCE: M Gaussian vectors as extra negatives; off when `enabled` is false."""

    enabled: bool = False
    count: int | None = Field(None, ge=0, description="M; null = 3 × batch size")
    mean: float = 0.0
    std: float = Field(1.0, gt=0)
    weight: float = Field(1.0, ge=0, description="λ")


class OptimSettings(Section):
    """What every training stage shares: the one training loop reads these."""

    batch_size: int = Field(64, ge=2)
    max_length: int = Field(32, ge=4)
    epochs: int = Field(1, ge=1)
    max_steps: int | None = Field(None, ge=1, description="stop after this many steps; null = full epochs")
    warmup_steps: int = Field(0, ge=0)
    grad_accum: int = Field(1, ge=1)
    weight_decay: float = Field(0.0, ge=0)
    dropout: float = Field(0.1, ge=0, lt=1)
    temperature: float = Field(0.05, gt=0)
    eval_every: int = Field(250, ge=1)
    save_every: int = Field(250, ge=1)
    pooler: Literal[POOLERS] = "cls_before_pooler"  # type: ignore[valid-type]


class PretrainSettings(OptimSettings):
    rtt_as: Literal["pairs", "sentences"] = "pairs"
    gaussian: GaussianNegativesSettings = GaussianNegativesSettings()


class TrainSettings(OptimSettings):
    """The twin stage: TNCSE when cael == 0, JTCSE otherwise."""

    lr: float = Field(1e-6, gt=0)
    cael: int = Field(0, ge=0, description="cross-attention encoder layers; must divide the layer count")
    cross_outputs: Literal[CROSS_OUTPUTS] = "last"  # type: ignore[valid-type]
    losses: list[Literal[LOSS_TERMS]] = list(LOSS_TERMS)  # type: ignore[valid-type]
    norm_factor: float = Field(0.5, gt=0, description="the released code's division of the norm loss by 2")
    gaussian: GaussianNegativesSettings = GaussianNegativesSettings()


class StudentSettings(OptimSettings):
    lr: float = Field(1e-5, gt=0)


class DistillSettings(Section):
    teachers: dict[Literal["joint", "uc"], StudentSettings]


class MtebSettings(Section):
    enabled: bool = False
    sts_tasks: list[str] = ["STS17", "STS22.v2", "STSBenchmarkMultilingualSTS"]
    zero_shot_tasks: list[str] = []
    local: bool = Field(True, description="offline: local mteb tasks built from the mirror's raw files")


class EvalSettings(Section):
    tasks: list[Literal[STS_TASKS]] = list(STS_TASKS)  # type: ignore[valid-type]
    max_pairs: int | None = Field(
        None, ge=MIN_EVAL_PAIRS, description="cap on pairs per task and on the STS-B dev set (tiny scale); null = all"
    )
    batch_size: int = Field(128, ge=1)
    max_length: int = Field(128, ge=4)
    pooler: Literal[POOLERS] = "cls_before_pooler"  # type: ignore[valid-type]
    cost_length: int = Field(64, ge=1, description="tokens per sentence for the inference-cost count (GMACs, η)")
    mteb: MtebSettings = MtebSettings()


class Params(Section):
    scale: Literal["tiny", "paper"]
    seed: int = Field(42, ge=0, le=2**32 - 1, description="numpy's seed range")
    device: Literal[DEVICES] = "auto"  # type: ignore[valid-type]
    data: DataSettings
    backbone: BackboneSettings
    towers: dict[str, TowerSettings]
    rtt: RttSettings
    pretrain: PretrainSettings
    train: TrainSettings
    distill: DistillSettings
    eval: EvalSettings = EvalSettings()
    report: dict[str, Any] = {}

    @model_validator(mode="after")
    def _check_combinations(self) -> "Params":
        layers = self.backbone.num_layers
        if self.train.cael and layers % self.train.cael:
            allowed = ", ".join(map(str, allowed_cael_values(layers)))
            raise ValueError(
                f"train.cael={self.train.cael} does not divide the {layers} encoder layers of "
                f"backbone '{self.backbone.name}'; allowed: {allowed}"
            )
        if set(self.towers) != {"I", "II"}:
            raise ValueError(f"towers={sorted(self.towers)} must name exactly the two towers I and II")
        return self


def describe_validation_error(error: ValidationError, source: str) -> str:
    """One line for the first problem: `key=value: what is allowed` (the value when it is a scalar)."""
    first = error.errors()[0]
    key = ".".join(str(part) for part in first["loc"])
    if first["type"] == "extra_forbidden":
        return f"unknown setting '{key}' in {source}; remove it or check its spelling"
    message = first["msg"].removeprefix("Value error, ")
    if not key:  # a cross-field check already names its keys
        return message
    value = first.get("input")
    shown = "" if isinstance(value, (dict, list)) else f"={value!r}"
    return f"{key}{shown}: {message}".replace("\n", " ")


def parse_params(raw: dict[str, Any]) -> Params:
    try:
        return Params.model_validate(raw)
    except ValidationError as error:
        raise PipelineError(f"invalid params: {describe_validation_error(error, 'params.yaml')}") from None


def read_yaml_file(path: Path | str, missing_hint: str) -> Any:
    """A YAML file's content; a one-line PipelineError if it is missing (with `missing_hint`) or not YAML."""
    path = Path(path)
    if not path.is_file():
        raise PipelineError(f"{path} not found; {missing_hint}")
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as error:
        raise PipelineError(f"{path} is not valid YAML: {error}".replace("\n", " ")) from None


def load_params(path: Path | str = PARAMS_FILE) -> Params:
    raw = read_yaml_file(path, "run from the project root or compose it with `dvc exp run`")
    if not isinstance(raw, dict):
        raise PipelineError(f"{path} must hold a mapping of settings")
    return parse_params(raw)

"""Typed settings: the schema of `params.yaml` and its validation (reading the file: `pipeline.params_file`).

`params.yaml` is composed from the preset groups in `conf/` (DVC's Hydra integration) and is the
single source of every setting. Loading validates it against the models below: an unknown key, a
wrong type or an impossible combination raises `PipelineError` with one line naming the key, the
value and what is allowed.
"""

from __future__ import annotations


from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from pipeline.declarations import loss_terms
from pipeline.declarations.sts_tasks import PAPERS_TASK_NAMES, STS_TASK_REGISTRY
from pipeline.errors import PipelineError
from pipeline.evaluated_models import BASELINES, JTCSE_MODELS, STUDENTS, evaluated_model_folders, validate_teacher_folders
from pipeline.settings_rules import (
    CROSS_MODES,
    CROSS_OUTPUTS,
    DEVICES,
    POOLERS,
    PRECISIONS,
    SCALES,
    SICK_SPLITS,
    validate_cael,
    validate_cross_mode,
    validate_drop_layernorm,
    validate_evaluated_models,
    validate_baselines,
    validate_gaussian,
    validate_hub_endpoint,
    validate_standin_hub,
    validate_precision,
    validate_towers,
    validate_token_budget,
)

# Fewest pairs a task (or the STS-B dev set of model selection) may be cut to: a Spearman over a
# handful of pairs is noise, and over one pair it is NaN.
MIN_EVAL_PAIRS = 100
# Fewest bootstrap resamples (eval.bootstrap, 0 = off): each 2.5 % tail of a 95 % interval holds at least one.
MIN_BOOTSTRAP_RESAMPLES = 40
# Most: past 10,000 a 95 % percentile interval's ends move by less than their own Monte Carlo error,
# while the resample positions cost resamples × pairs × 4 bytes (10,000 over the seven tasks' 18,850
# test pairs at paper scale: 0.75 GB; eval.bootstrap: 1000000000 failed on a 294 GiB allocation).
MAX_BOOTSTRAP_RESAMPLES = 10_000


class Section(BaseModel):
    """Base of every section: unknown keys are errors, values are checked on assignment too."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class WikiSettings(Section):
    limit: int | None = Field(None, ge=1, description="first N lines of Wiki1M; null = all 1M")
    repo_id: str = "princeton-nlp/datasets-for-simcse"
    filename: str = "wiki1m_for_simcse.txt"
    revision: str | None = Field(None, description="the hub commit (40 hex) to fetch it at; null = `main` (its files are pinned by content: pipeline/data/inputs.sha256)")


class DataSettings(Section):
    wiki: WikiSettings = WikiSettings()
    add_sick: bool = True
    sick_splits: list[Literal[SICK_SPLITS]] = Field(  # type: ignore[valid-type]
        ["train", "trial"], min_length=1,
        description="SICK files whose sentences join the corpus; adding test (SICK-R's scored split) is transductive",
    )
    senteval_repo_id: str = "princeton-nlp/datasets-for-simcse"
    senteval_filename: str = "senteval.tar"
    senteval_revision: str | None = Field(None, description="the hub commit (40 hex) of senteval.tar; null = `main` (pinned by content as wiki.revision)")
    hub_endpoint: str | None = Field(
        None, description="Hugging Face hub URL; null = HF_ENDPOINT or the public hub; standin = the backbones built "
        "offline (real configurations, random weights) and served by a loopback hub in the download stage (rehearsal)",
    )


class BackboneSettings(Section):
    name: str
    title: str | None = Field(None, description="the backbone as the papers name it (BERT-base); null: a stand-in")
    stands_in_for: str | None = Field(
        None, description="the papers' backbone (a preset of conf/backbone/) whose claims a smaller scale judges on this one"
    )
    source: str = Field(description="'package:<python package>' or a Hugging Face hub id")
    revision: str | None = Field(None, description="the hub commit (40 hex) of `source`; null for a package source "
                                 "(the lock pins the package) or `main`, the commit it resolved to recorded in reports/provenance/download.json")
    num_layers: int = Field(ge=1)
    uc_source: str = Field(description="the existing unsupervised checkpoint of the UC ensemble")
    uc_revision: str | None = Field(None, description="the hub commit (40 hex) of `uc_source`; null as for `revision`")
    uc_weight: float = Field(ge=0.0, le=1.0, description="w of the UC ensemble of a TNCSE twin")
    jtcse_uc_weight: float | None = Field(None, ge=0.0, le=1.0, description="w for a JTCSE twin; null = uc_weight")


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
    endpoint: str | None = Field(
        None, description="google backend base URL; null = deep-translator's default; standin = the loopback stand-in "
        "started by the rtt stage (rehearsal: tagged copies, not translations)",
    )


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
    sampling: Literal["random", "length_bucketed"] = Field(
        "random", description="random: a seeded uniform permutation per epoch, last partial batch kept; "
        "length_bucketed: similar-length batches (less padding, length-matched in-batch negatives)",
    )
    schedule: Literal["linear", "constant"] = Field("linear", description="after warm-up: decay to 0, or constant")
    warmup_steps: int = Field(0, ge=0)
    grad_accum: int = Field(1, ge=1)
    weight_decay: float = Field(0.0, ge=0, description="AdamW's decoupled decay, on every parameter")
    max_grad_norm: float | None = Field(
        None, gt=0, description="clip the accumulated gradient's total norm once per optimiser step; null = no clip"
    )
    dropout: float = Field(0.1, ge=0, lt=1)
    temperature: float = Field(0.05, gt=0)
    eval_every: int = Field(250, ge=1)
    eval_at_end: bool = Field(True, description="also evaluate (and maybe select) the weights of the last step")
    save_every: int = Field(250, ge=1)
    pooler: Literal[POOLERS] = "cls_before_pooler"  # type: ignore[valid-type]
    compile: Literal["auto", "on", "graphs", "off"] = Field(
        "auto", description="on: the whole objective compiled as one graph (batches padded to fixed widths); graphs: "
        "and captured as CUDA graphs (CUDA only); auto = graphs on CUDA, off on a CPU (pipeline/training/compiled.py)"
    )
    deterministic: bool = Field(
        False, description="deterministic CUDA kernels (measured on an H200: pretrain 26%, the twin 38% slower); CPU kernels are "
        "deterministic anyway at a fixed thread count"
    )
    precision: Literal[PRECISIONS] = Field(  # type: ignore[valid-type]
        "fp32", description="bf16 | fp16 autocast (fp16 with a gradient scaler), CUDA only; fp32 on any device"
    )
    activation_checkpointing: bool = Field(
        False, description="recompute each encoder layer's activations in the backward instead of keeping them: "
        "less memory (the paper's RoBERTa twin at batch 256 on a smaller card), about a third more compute, the same "
        "losses and gradients"
    )


class PretrainSettings(OptimSettings):
    rtt_as: Literal["pairs", "sentences"] = "pairs"
    gaussian: GaussianNegativesSettings = GaussianNegativesSettings()


class BaselineSettings(OptimSettings):
    """A seed paper's own model (`baseline@<name>`: SimCSE, GS-InfoNCE), trained as its paper trains it:
    unsupervised SimCSE on Wiki1M alone (no round trips, no SICK) from the backbone, at its own rate."""

    lr: float = Field(gt=0)
    gaussian: GaussianNegativesSettings = GaussianNegativesSettings()


class TrainSettings(OptimSettings):
    """The twin stage: TNCSE when cael == 0, JTCSE otherwise. Besides these fields it holds the settings
    each loss term owns (`pipeline.declarations.loss_terms`: `train.norm_factor`, `train.norm_input`),
    checked against the term's declaration and defaulted from it."""

    model_config = ConfigDict(extra="allow", validate_assignment=True)  # extras: the terms' own settings only

    lr: float = Field(1e-6, gt=0)
    cael: int = Field(0, ge=0, strict=True, description="cross-attention encoder layers, 0 to the layer count; 0 = TNCSE")
    cross_mode: Literal[CROSS_MODES] = "stream"  # type: ignore[valid-type]
    jtcse_lr: float | None = Field(None, gt=0, description="lr when cael > 0; null = lr")
    jtcse_dropout: float | None = Field(None, ge=0, lt=1, description="dropout when cael > 0; null = dropout")
    cross_outputs: Literal[CROSS_OUTPUTS] = "last"  # type: ignore[valid-type]
    losses: list[str] = Field(default_factory=lambda: list(loss_terms.PAPERS_OBJECTIVE),
                              description="the twin objective's terms (pipeline.declarations.loss_terms), checked at load; "
                              "default: the papers' three")
    drop_layernorm: int = Field(
        0, ge=0, strict=True, description="remove both LayerNorms of the last k encoder layers of each tower (the LayerNorm study)"
    )
    gaussian: GaussianNegativesSettings = GaussianNegativesSettings()

    @model_validator(mode="before")
    @classmethod
    def _with_term_settings(cls, raw: Any) -> Any:
        """Every key a field or a declared term's setting; each term setting checked by its declaration or defaulted."""
        if not isinstance(raw, dict):
            return raw
        owned = loss_terms.term_settings()
        for key in raw:
            if key not in cls.model_fields and key not in owned:
                raise PipelineError(f"unknown setting 'train.{key}' in params.yaml; remove it or check its spelling")
        return raw | {key: setting.validate(f"train.{key}", raw[key]) if key in raw else setting.default
                      for key, (_, setting) in owned.items()}

    @property
    def term_settings(self) -> dict[str, Any]:
        """The settings the loss terms own, by key (what `twin_objective` hands to the terms)."""
        return {key: getattr(self, key) for key in loss_terms.term_settings()}

    @property
    def mode_lr(self) -> float:
        """The learning rate of this mode (TNCSE: lr; JTCSE: jtcse_lr when set)."""
        return self.jtcse_lr if self.cael and self.jtcse_lr is not None else self.lr

    @property
    def mode_dropout(self) -> float:
        """The dropout of this mode (TNCSE: dropout; JTCSE: jtcse_dropout when set)."""
        return self.jtcse_dropout if self.cael and self.jtcse_dropout is not None else self.dropout


class StudentSettings(OptimSettings):
    lr: float = Field(1e-5, gt=0)
    # the teacher's towers as DVC outputs, the deps of its `distill@<teacher>` stage (DVC cannot look them up in
    # `models`): checked against the registry at load; null in params written before they were declared
    towers_folder: str | None = None
    second_towers_folder: str | None = None


class DistillSettings(Section):
    teachers: dict[Literal[tuple(STUDENTS.values())], StudentSettings]  # type: ignore[valid-type]


class JtcseSettings(Section):
    """The committed run's JTCSE twin (the `jtcse` stage): the `train` settings with `cael` CAELs, so both
    papers' twins train in one `dvc repro` (the `joint` stage trains `train` as set: TNCSE by default)."""

    cael: int | None = Field(
        None, ge=1, description="CAELs of the JTCSE twin; null = half the backbone's layers (the papers' 6 of BERT-base's 12)"
    )


class ModelFolders(Section):
    """The DVC outputs (folders) that hold a model's towers: the deps of its `evaluate@<model>` stage
    (`pipeline.evaluated_models.evaluated_model_folders`). DVC cannot interpolate a list, so a model saved in
    one folder names it twice."""

    towers_folder: str
    second_towers_folder: str


class MtebSettings(Section):
    enabled: bool = False
    suite: list[str] = Field(["jtcse-sts-en"], min_length=1, description="suites of conf/mteb/ (a name or a list)")
    local_items: int | None = Field(
        None, ge=10, description="cap on queries, pairs or sentences per split of the local suites; null = all"
    )

    @field_validator("suite", mode="before")
    @classmethod
    def _one_or_more(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value


class EvalSettings(Section):
    tasks: list[str] = Field(
        list(PAPERS_TASK_NAMES), min_length=1, description="declared STS tasks (pipeline.declarations.sts_tasks); the "
        "headline average is over the papers' seven among them, any other is scored in a column of its own"
    )
    seed: int = Field(
        42, ge=0, description="draws the test-pair sample, the bootstrap indices and the analyses' samples, apart from "
        "the training `seed`: runs that differ only in the training seed score the same pairs with the same resamples"
    )
    max_pairs: int | None = Field(
        None, ge=MIN_EVAL_PAIRS, description="cap on pairs per task (tiny scale): a uniform sample drawn with `eval.seed` "
        "across the task's subsets; the STS-B dev set of model selection is capped too, drawn with the training `seed`; null = all"
    )
    bootstrap: int = Field(
        1000, description="bootstrap resamples of the test pairs (seeded with `eval.seed`) for every STS score's 95 % interval "
        f"and standard error; 0 = off, else {MIN_BOOTSTRAP_RESAMPLES} to {MAX_BOOTSTRAP_RESAMPLES}"
    )
    batch_size: int = Field(128, ge=1, description="sentences per batch where a caller hands over batches (dev scoring, MTEB)")
    max_length: int = Field(128, ge=4)
    token_budget: int | str = Field(  # "auto" or tokens: the rule is settings_rules.validate_token_budget
        "auto", description="the STS evaluator's batches: at most this many padded tokens (sentences × longest); "
        "auto: by device (pipeline.evaluation.embedder.AUTO_TOKEN_BUDGET)"
    )
    pooler: Literal[POOLERS] = "cls_before_pooler"  # type: ignore[valid-type]
    cost_length: int = Field(64, ge=1, description="tokens per sentence for the inference-cost count (GMACs, η)")
    mteb: MtebSettings = MtebSettings()

    @field_validator("tasks")
    @classmethod
    def _declared_tasks(cls, tasks: list[str]) -> list[str]:
        for name in tasks:
            if name not in STS_TASK_REGISTRY:
                raise ValueError(f"{name!r} is not a declared STS task; allowed: {', '.join(STS_TASK_REGISTRY)}")
        if not set(tasks) & set(PAPERS_TASK_NAMES):
            raise ValueError(f"none of the papers' tasks, which the average is over; add one of {', '.join(PAPERS_TASK_NAMES)}")
        return tasks

    @field_validator("bootstrap", mode="before")
    @classmethod
    def _off_or_enough_resamples(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool) and (
            value == 0 or MIN_BOOTSTRAP_RESAMPLES <= value <= MAX_BOOTSTRAP_RESAMPLES
        ):
            return value
        raise ValueError(
            f"allowed: 0 (no intervals) or a whole number of resamples from {MIN_BOOTSTRAP_RESAMPLES} to "
            f"{MAX_BOOTSTRAP_RESAMPLES} (more moves a 95 % interval less than its own Monte Carlo error, and the "
            "resamples take resamples × test pairs × 4 bytes of memory)"
        )

    @model_validator(mode="after")
    def _budget_holds_a_sentence(self) -> "EvalSettings":
        try:
            validate_token_budget(self.token_budget, self.max_length)
        except PipelineError as error:
            raise ValueError(str(error)) from None
        return self


class AnalysisSettings(Section):
    """The analyze stage's data choices (docs/method.md, "Analyses")."""

    align_data: Literal["all", "test"] = Field(
        "all", description="alignment/uniformity on every STS-B split (SimCSE) or the test split capped by eval.max_pairs"
    )
    norm_probe_sentences: int = Field(
        100, ge=2, description="corpus sentences (drawn with `seed`) of the norm probe; the papers use 100"
    )


class CheckpointSettings(Section):
    """The checkpoints stage: which rows of the catalogue it scores, from where (docs/method.md, "Public checkpoints")."""

    catalogue: str = Field("conf/checkpoints.yaml", description="the catalogue of public checkpoints")
    source: Literal["hub", "standin"] = Field(
        "hub", description="hub: the catalogue's rows from the Hugging Face hub (data.hub_endpoint); "
        "standin: only its stand-in rows, served offline by a loopback hub from standin_model",
    )
    standin_model: str = Field(
        "data/backbone", description="what the stand-in serves: a model folder or package:<module>; the backbone "
        "shares its embeddings with evaluate@backbone",
    )
    rows: list[str] | None = Field(
        None, min_length=1, description="keys of the rows to score; null = every row of the source (an empty list scores none)"
    )


class Params(Section):
    scale: Literal[SCALES]  # type: ignore[valid-type]
    seed: int = Field(42, ge=0, le=2**32 - 1, description="numpy's seed range")
    device: Literal[DEVICES] = "auto"  # type: ignore[valid-type]
    threads: int = Field(
        2, ge=1, le=1024,
        description="torch's CPU thread count, fixed by every stage: another count trains other last bits of the weights",
    )
    data: DataSettings
    backbone: BackboneSettings
    towers: dict[str, TowerSettings]
    rtt: RttSettings
    pretrain: PretrainSettings
    train: TrainSettings
    jtcse: JtcseSettings = JtcseSettings()
    distill: DistillSettings
    baselines: dict[str, BaselineSettings] = Field(
        default_factory=dict, description="the seed papers' own models (`baseline@<name>`), by registry model name"
    )
    eval: EvalSettings = EvalSettings()
    analysis: AnalysisSettings = AnalysisSettings()
    checkpoints: CheckpointSettings = CheckpointSettings()
    # Accepted and ignored: no stage reads it and the presets no longer write it, but the
    # params.yaml of experiments made before carry `report: {}`, and refusing the key would make
    # them unreadable (`dvc exp apply`, the report stage's tables built from experiments).
    report: dict[str, Any] = {}
    models: dict[str, ModelFolders] = Field(
        default_factory=lambda: {name: ModelFolders(**entry) for name, entry in evaluated_model_folders().items()
                                 if name not in (*BASELINES, *JTCSE_MODELS)},
        description="the evaluated models (dvc.yaml's evaluate foreach); default: every model of the registry but the "
        "seed papers' and the jtcse stage's (params made before those stages have none of them)",
    )

    @model_validator(mode="after")
    def _check_combinations(self) -> "Params":
        """The rules between settings (`pipeline.settings_rules`), at load: each raises a one-line
        PipelineError, which pydantic lets through and `parse_params` prefixes."""
        validate_towers(self.towers)
        validate_cael(self.train.cael, self.backbone.num_layers, backbone=self.backbone.name)
        validate_cael(self.jtcse_train.cael, self.backbone.num_layers, "jtcse.cael", backbone=self.backbone.name)
        validate_teacher_folders({teacher: (student.towers_folder, student.second_towers_folder)
                                  for teacher, student in self.distill.teachers.items()})
        validate_drop_layernorm(self.train.drop_layernorm, self.backbone.num_layers, backbone=self.backbone.name)
        validate_cross_mode(self.train.cross_mode, self.train.cross_outputs)
        loss_terms.validate_loss_names(self.train.losses)
        validate_hub_endpoint(self.data.hub_endpoint)
        validate_standin_hub(self.data.hub_endpoint, self.checkpoints.source)
        validate_baselines(list(self.baselines))
        gaussians = [("pretrain.gaussian", self.pretrain.gaussian), ("train.gaussian", self.train.gaussian)] + [
            (f"baselines.{name}.gaussian", baseline.gaussian) for name, baseline in self.baselines.items()
        ]
        for key, gaussian in gaussians:
            if gaussian.enabled:
                validate_gaussian(gaussian.count, gaussian.std, gaussian.weight, key)
        validate_evaluated_models(
            {name: entry.model_dump() for name, entry in self.models.items()}, self.distill.teachers, self.baselines
        )
        if self.device == "cpu":  # device auto: checked when the stage resolves it (check_before_loading)
            for key, section in self.training_sections().items():
                validate_precision(section.precision, "cpu", f"{key}.precision", "cpu")
        return self

    def training_sections(self) -> dict[str, OptimSettings]:
        """Every training stage's settings by its dotted key: pretrain, train, distill.teachers.<teacher>."""
        students = {f"distill.teachers.{name}": settings for name, settings in self.distill.teachers.items()}
        baselines = {f"baselines.{name}": settings for name, settings in self.baselines.items()}
        return {"pretrain": self.pretrain, "train": self.train, **students, **baselines}

    @property
    def jtcse_train(self) -> TrainSettings:
        """`train` as the `jtcse` stage trains it: with `jtcse.cael` CAELs (null: half the backbone's layers)."""
        cael = self.jtcse.cael if self.jtcse.cael is not None else max(1, self.backbone.num_layers // 2)
        return self.train.model_copy(update={"cael": cael})

    @property
    def uc_weight(self) -> float:
        """w of the UC ensemble for this twin (the released scripts use another for JTCSE-RoBERTa)."""
        weight = self.backbone.jtcse_uc_weight
        return weight if self.train.cael and weight is not None else self.backbone.uc_weight

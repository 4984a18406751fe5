"""The three kinds of training the papers describe, as tasks for the one loop in `training.py`.

- `SimCSETask` (pretrain@<tower>): unsupervised SimCSE on the corpus plus the tower's round trips;
  the backbone's pooler layer (dense + tanh) is SimCSE's training MLP.
- `TwinTask` (joint): the TNCSE objective (cael 0) or the JTCSE objective (cael > 0).
- `DistillTask` (distill@<teacher>): a fresh backbone regressed by MSE onto a frozen ensemble.

Each also knows how to embed sentences for model selection on STS-B dev (the inference embedding
of the papers: last-layer [CLS], summed over towers for a twin) and how to save its result in
Hugging Face format with a sentence-transformers CLS-pooling config beside it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn
from transformers import AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from pipeline import losses, paths
from pipeline.config import GaussianNegativesSettings, OptimSettings, Params, TrainSettings
from pipeline.io import sha256_of
from pipeline.errors import PipelineError
from pipeline.evaluation.sts import Embedder, evaluate_embedder, load_tasks, reported_score
from pipeline.models import WeightedTowers
from pipeline.modeling import (
    SentenceEncoder,
    TwinEncoder,
    drop_layernorms,
    gather_with_grad,
    last_layer_cls,
    load_backbone,
)
from pipeline.batching import Batch
from pipeline.environment import environment_record, training_compute, write_provenance
from pipeline.runtime import resolve_device, run_context, with_precision
from pipeline.settings_rules import validate_precision
from pipeline.training import TrainingResult, planned_steps, train, use_compile, write_training_report

log = logging.getLogger(__name__)


def gaussian_negatives(settings: GaussianNegativesSettings, seed: int) -> losses.GaussianNegatives | None:
    """GS-InfoNCE's noise when enabled (seeded), else None: plain InfoNCE."""
    if not settings.enabled:
        return None
    generator = torch.Generator().manual_seed(seed)
    return losses.GaussianNegatives(settings.count, settings.mean, settings.std, settings.weight, generator)


def save_sentence_model(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, directory: Path, max_length: int) -> None:
    """Hugging Face format (safetensors) plus the sentence-transformers modules for CLS pooling."""
    model.save_pretrained(directory, safe_serialization=True)
    tokenizer.save_pretrained(directory)
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    (directory / "modules.json").write_text(json.dumps(modules, indent=2))
    (directory / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": max_length, "do_lower_case": False}))
    (directory / "1_Pooling").mkdir(exist_ok=True)
    pooling = {"word_embedding_dimension": model.config.hidden_size, "pooling_mode_cls_token": True,
               "pooling_mode_mean_tokens": False, "pooling_mode_max_tokens": False,
               "pooling_mode_mean_sqrt_len_tokens": False}
    (directory / "1_Pooling" / "config.json").write_text(json.dumps(pooling, indent=2))


def model_embedder(embed, tokenizer: PreTrainedTokenizerBase, max_length: int, device: torch.device) -> Embedder:
    """An `Embedder` over a model being trained: `embed(input_ids, attention_mask)` per batch."""

    def embed_sentences(sentences: list[str]) -> torch.Tensor:
        batch = tokenizer(sentences, padding=True, truncation=True, max_length=max_length, return_tensors="pt").to(device)
        return embed(batch["input_ids"], batch["attention_mask"])

    return embed_sentences


def stsb_dev_scorer(task, senteval_root: Path, tokenizer, max_length: int, device: torch.device,
                    max_pairs: int | None, batch_size: int, seed: int):
    """model → Spearman × 100 on STS-B dev with the task's inference embedding (model selection); with
    `max_pairs`, on the dev pairs sampled with `seed` as the evaluator samples its test pairs."""
    dev = load_tasks(senteval_root, ["STSBenchmark"], max_pairs, split="dev", seed=seed)

    def score(model: nn.Module) -> float:
        embedder = model_embedder(lambda ids, mask: task.embed(model, ids, mask), tokenizer, max_length, device)
        results = evaluate_embedder(embedder, dev, batch_size, description="STS-B dev")
        dev_score = reported_score(results["STSBenchmark"])
        if not math.isfinite(dev_score):  # would make model selection keep an arbitrary checkpoint
            raise PipelineError(
                f"STS-B dev score is {dev_score} on {sum(map(len, dev[0].subsets.values()))} pairs: the model's "
                "embeddings are constant or degenerate; lower the learning rate or check the input model"
            )
        return dev_score

    return score


class SimCSETask:
    """Unsupervised SimCSE (SimCSE Eq. 4; GS-InfoNCE Eq. 2 when enabled) on one tower.

    Examples are (sentence,) — encoded twice, the two dropout views are the positive pair — or
    (sentence, round trip) — the round-trip translation is the positive (`pretrain.rtt_as: pairs`).
    The loss reads the pooler output (SimCSE's MLP); evaluation drops it (`cls_before_pooler`).
    """

    loss_spans_global_batch = True  # embeddings are gathered across DDP ranks

    def __init__(self, backbone: Path, tokenizer, dropout: float, temperature: float,
                 gaussian: losses.GaussianNegatives | None, max_length: int):
        self.model = SentenceEncoder(load_backbone(str(backbone), dropout), pooler="cls_before_pooler")
        self.tokenizer, self.temperature, self.gaussian, self.max_length = tokenizer, temperature, gaussian, max_length

    def loss(self, model: nn.Module, batch: Batch, step: int) -> dict[str, torch.Tensor]:
        if len(batch) == 1:
            ids, mask = batch[0]["input_ids"], batch[0]["attention_mask"]
            views = model(ids.repeat_interleave(2, 0), mask.repeat_interleave(2, 0)).pooler_output
            anchors, positives = views[0::2], views[1::2]
        else:
            anchors = model(batch[0]["input_ids"], batch[0]["attention_mask"]).pooler_output
            positives = model(batch[1]["input_ids"], batch[1]["attention_mask"]).pooler_output
        loss = losses.info_nce(gather_with_grad(anchors), gather_with_grad(positives), self.temperature, self.gaussian)
        return {"loss": loss}

    def embed(self, model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return model(input_ids, attention_mask).last_cls

    def save(self, model: nn.Module, directory: Path) -> None:
        save_sentence_model(model.model, self.tokenizer, directory, self.max_length)


def read_round_trips(path: Path, corpus_lines: int) -> list[str]:
    """The round trips of the rtt stage: one line per corpus line, empty where translation failed."""
    if not path.is_file():
        raise PipelineError(f"{path} not found; the rtt stage writes it (`dvc repro rtt`)")
    lines = path.read_text(encoding="utf-8").split("\n")[:-1]
    if len(lines) != corpus_lines:
        raise PipelineError(f"{path}: {len(lines)} lines but the corpus has {corpus_lines}; rerun `dvc repro -f rtt`")
    return lines


def pretraining_examples(corpus: Sequence[str], round_trips: Sequence[str], rtt_as: str) -> list[tuple[str, ...]]:
    """SimCSE examples from the corpus and its aligned round trips (an empty line = failed translation).

    pairs: (sentence, round trip), falling back to (sentence, sentence) — two dropout views — where
    the translation failed; sentences: every corpus sentence and every distinct new round trip.
    """
    if rtt_as == "pairs":
        return [(sentence, trip or sentence) for sentence, trip in zip(corpus, round_trips)]
    extra = [trip for trip in dict.fromkeys(round_trips) if trip and trip not in set(corpus)]
    return [(sentence,) for sentence in [*corpus, *extra]]


class TwinTask:
    """TNCSE (TNCSE Eq. 8) or JTCSE (JTCSE Eq. 15) on the two pretrained towers."""

    def __init__(self, tower_dirs: tuple[Path, Path], tokenizer, settings: TrainSettings, seed: int):
        self.loss_spans_global_batch = True  # the twin's outputs are gathered across DDP ranks
        # without the norm term on the pooler output the pooler layers get no gradient, which DDP must be told
        self.leaves_parameters_unused = "ictn" not in settings.losses or settings.norm_input != "pooler"
        self.model = TwinEncoder.from_pretrained(
            str(tower_dirs[0]), str(tower_dirs[1]), settings.cael, settings.cross_outputs, settings.mode_dropout,
            cross_mode=settings.cross_mode,
        )
        for tower in self.model.towers:  # the LayerNorm study; 0 leaves the towers as loaded
            drop_layernorms(tower, settings.drop_layernorm)
        self.tokenizer, self.settings, self.seed = tokenizer, settings, seed
        self.gaussian = gaussian_negatives(settings.gaussian, seed)

    def loss(self, model: nn.Module, batch: Batch, step: int) -> dict[str, torch.Tensor]:
        out = model(batch[0]["input_ids"], batch[0]["attention_mask"]).gather()
        # JTCSE's direction R is drawn per step from (seed, step): identical on every rank and after a resume
        direction = torch.Generator().manual_seed(self.seed * 1_000_003 + step)
        objective = losses.twin_objective(
            out, self.settings.losses, self.settings.temperature, self.settings.norm_factor, self.gaussian, direction,
            self.settings.norm_input,
        )
        return {"loss": objective.total, **objective.terms}

    def embed(self, model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return model.encode(input_ids, attention_mask)

    def save(self, model: nn.Module, directory: Path) -> None:
        for name, tower in zip(("I", "II"), model.towers):
            (directory / name).mkdir(parents=True, exist_ok=True)
            save_sentence_model(tower, self.tokenizer, directory / name, self.settings.max_length)


def _tokenizer_definition(tokenizer: PreTrainedTokenizerBase) -> dict:
    """A fast tokenizer's definition without the truncation/padding state that calls leave on it."""
    definition = json.loads(tokenizer.backend_tokenizer.to_str())
    return {key: value for key, value in definition.items() if key not in ("truncation", "padding")}


def same_tokenizer(a: PreTrainedTokenizerBase, b: PreTrainedTokenizerBase) -> bool:
    """Whether two tokenizers give the same ids for every text (fast ones: the same full definition)."""
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if a.is_fast and b.is_fast:
        return _tokenizer_definition(a) == _tokenizer_definition(b)
    return a.get_vocab() == b.get_vocab() and a.init_kwargs == b.init_kwargs


def distinct_tokenizers(tokenizers: Sequence[PreTrainedTokenizerBase]) -> tuple[list[PreTrainedTokenizerBase], list[int]]:
    """(the distinct tokenizers in first-seen order, the index among them of each given one)."""
    distinct: list[PreTrainedTokenizerBase] = []
    indices = []
    for tokenizer in tokenizers:
        index = next((i for i, seen in enumerate(distinct) if same_tokenizer(seen, tokenizer)), None)
        if index is None:
            distinct.append(tokenizer)
            index = len(distinct) - 1
        indices.append(index)
    return distinct, indices


class FrozenEnsemble(nn.Module):
    """A teacher: a model of the registry (`pipeline.models.WeightedTowers`, a twin or the UC
    ensemble) loaded for inference: no dropout, no gradients. Each member keeps its own tokenizer
    (the released RoBERTa UC ensemble pairs RoBERTa towers with InfoCSE-BERT)."""

    def __init__(self, towers: WeightedTowers):
        super().__init__()
        self.ensemble = WeightedTowers.of(towers)
        self.towers = nn.ModuleList(load_backbone(folder).eval().requires_grad_(False) for folder in self.ensemble.folders)
        self.tokenizers = [AutoTokenizer.from_pretrained(folder) for folder in self.ensemble.folders]

    @torch.no_grad()
    def forward(self, member_inputs: Sequence[dict[str, torch.Tensor]]) -> torch.Tensor:
        """`member_inputs[i]`: {input_ids, attention_mask} of the batch in member i's own tokenization."""
        cls = [last_layer_cls(tower, inputs["input_ids"], inputs["attention_mask"])
               for tower, inputs in zip(self.towers, member_inputs, strict=True)]
        return self.ensemble.combine(cls)


class DistillTask:
    """`D` / `UC D`: MSE between a fresh student's [CLS] and the frozen teacher's embedding.

    Examples are a sentence once per distinct tokenizer (`examples`): column 0 in the student's
    tokenization, further columns for teacher members whose tokenizer differs, so each member
    reads the text as it was trained to."""

    leaves_parameters_unused = True  # the student's pooler layer is never read

    def __init__(self, backbone: Path, teacher: FrozenEnsemble, tokenizer, dropout: float, max_length: int):
        self.model = SentenceEncoder(load_backbone(str(backbone), dropout), pooler="cls_before_pooler")
        self.teacher, self.tokenizer, self.max_length = teacher, tokenizer, max_length
        tokenizers, indices = distinct_tokenizers([tokenizer, *teacher.tokenizers])
        self.column_tokenizers, self.teacher_columns = tokenizers, indices[1:]

    def examples(self, sentences: Sequence[str]) -> list[tuple[str, ...]]:
        return [(sentence,) * len(self.column_tokenizers) for sentence in sentences]

    def loss(self, model: nn.Module, batch: Batch, step: int) -> dict[str, torch.Tensor]:
        ids, mask = batch[0]["input_ids"], batch[0]["attention_mask"]
        self.teacher.to(ids.device)
        target = self.teacher([batch[column] for column in self.teacher_columns])
        return {"loss": losses.distillation_loss(model(ids, mask).last_cls, target)}

    def embed(self, model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return model(input_ids, attention_mask).last_cls

    def save(self, model: nn.Module, directory: Path) -> None:
        save_sentence_model(model.model, self.tokenizer, directory, self.max_length)


def check_before_loading(name: str, example_count: int, settings: OptimSettings, params: Params, key: str) -> None:
    """What a training stage checks before it loads any model: the device exists, its `precision`
    (the setting `<key>.precision`) runs there — with device auto this is where a CPU meets it — and
    the run takes at least one optimizer step (a 0-step run would save the untrained model as if trained)."""
    device = resolve_device(params.device)
    validate_precision(settings.precision, device.type, f"{key}.precision", params.device)
    planned_steps(example_count, settings, name)


def run_fingerprint(settings: OptimSettings, lr: float, params: Params, examples, input_models: Sequence[Path]) -> str:
    """What defines a training run: its settings, its examples, the weights it starts from and how
    model selection scores (the eval settings of the STS-B dev scorer, and the dev file): a
    checkpoint is resumed only by a run with the same fingerprint, so a resume never compares dev
    scores measured on different dev sets."""
    # "dev_pairs": how max_pairs cuts the dev set (a seeded sample since it stopped being the first N pairs)
    selection = params.eval.model_dump(include={"max_pairs", "batch_size", "max_length"}) | {"dev_pairs": "seeded sample"}
    digest = hashlib.sha256(
        json.dumps([settings.model_dump(), lr, params.seed, params.backbone.model_dump(), selection]).encode()
    )
    dev_file = paths.SENTEVAL / "STS" / "STSBenchmark" / "sts-dev.csv"
    if dev_file.is_file():
        digest.update(sha256_of(dev_file).encode())
    for example in examples:
        digest.update("\t".join(example).encode() + b"\n")
    for folder in input_models:
        for weights in sorted(Path(folder).rglob("*.safetensors")):
            digest.update(sha256_of(weights).encode())
    return digest.hexdigest()


def run_training(name: str, task, examples, settings: OptimSettings, lr: float, output_dir: Path, params: Params,
                 input_models: Sequence[Path], key: str, data_files: Sequence[Path]) -> TrainingResult:
    """Train a task as a stage does: device from params, precision from `<key>.precision`, STS-B
    dev selection, checkpoints under data/checkpoints/<name>/, metrics, loss curve and the details
    with the environment (`data_files` hashed) under reports/training/, and the run's provenance
    under reports/provenance/<name>.json."""
    context = with_precision(run_context(params.device), settings.precision, f"{key}.precision", params.device)
    dev_score = stsb_dev_scorer(
        task, paths.SENTEVAL, task.tokenizer, params.eval.max_length, context.device, params.eval.max_pairs, params.eval.batch_size,
        params.seed,
    )
    fingerprint = run_fingerprint(settings, lr, params, examples, input_models)
    result = train(
        task, examples, getattr(task, "column_tokenizers", task.tokenizer), settings, lr, output_dir, paths.CHECKPOINTS / name, context, params.seed,
        dev_score, description=name, fingerprint=fingerprint,
    )
    if context.is_main:
        compute = training_compute(settings, context, use_compile(settings.compile, context.device))
        write_training_report(
            result, paths.TRAINING_REPORTS / f"{name}.json", paths.TRAINING_REPORTS / f"{name}.csv",
            paths.TRAINING_DETAILS / f"{name}.json", environment_record(context.device, params, data_files, compute),
        )
        write_provenance(name)
    return result

"""The three kinds of training the papers describe, as `TrainingTask`s (`contract.py`) for the one loop (`loop.py`).

- `SimCSETask` (pretrain@<tower>): unsupervised SimCSE on the corpus plus the tower's round trips;
  the backbone's pooler layer (dense + tanh) is SimCSE's training MLP.
- `TwinTask` (joint): the TNCSE objective (cael 0) or the JTCSE objective (cael > 0).
- `DistillTask` (distill@<teacher>): a fresh backbone regressed by MSE onto a frozen ensemble.

Each also knows how to embed sentences for model selection on STS-B dev (the inference embedding
of the papers: the last layer's sentence vector, [CLS] in BERT's family, summed over towers for a twin)
and how to save its result in Hugging Face format with a sentence-transformers pooling config beside it
(the pooling of the backbone's family: CLS in BERT's). The stages build
them from params in `jobs.py`.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from pipeline import losses
from pipeline.config import GaussianNegativesSettings, TrainSettings
from pipeline.evaluated_models import WeightedTowers
from pipeline.modeling import (
    SentenceEncoder,
    TwinEncoder,
    drop_layernorms,
    gather_with_grad,
    last_layer_cls,
    load_backbone,
)
from pipeline.modeling.architecture import architecture_of
from pipeline.modeling.distributed import process_count
from pipeline.training.batching import Batch, Tokenizers, host_to_device
from pipeline.training.contract import TrainingTask


def gaussian_negatives(settings: GaussianNegativesSettings, seed: int) -> losses.GaussianNegatives | None:
    """GS-InfoNCE's noise when enabled (seeded), else None: plain InfoNCE."""
    if not settings.enabled:
        return None
    generator = torch.Generator().manual_seed(seed)
    return losses.GaussianNegatives(settings.count, settings.mean, settings.std, settings.weight, generator)


def noise_generators(gaussian: losses.GaussianNegatives | None) -> dict[str, torch.Generator]:
    """GS-InfoNCE's noise generator, where the task draws noise from one."""
    return {"gaussian": gaussian.generator} if gaussian is not None and gaussian.generator is not None else {}


# the sentence-transformers pooling modes every saved config lists, in their config.json's order
SENTENCE_TRANSFORMERS_POOLING_MODES = ("cls_token", "mean_tokens", "max_tokens", "mean_sqrt_len_tokens")


def save_sentence_model(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, directory: Path, max_length: int) -> None:
    """Hugging Face format (safetensors) plus the sentence-transformers modules for the pooling of the
    model's family (`Architecture.sentence_transformers_pooling`: CLS in BERT's)."""
    model.save_pretrained(directory, safe_serialization=True)
    tokenizer.save_pretrained(directory)
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    (directory / "modules.json").write_text(json.dumps(modules, indent=2))
    (directory / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": max_length, "do_lower_case": False}))
    (directory / "1_Pooling").mkdir(exist_ok=True)
    mode = architecture_of(model).sentence_transformers_pooling
    pooling = {"word_embedding_dimension": model.config.hidden_size,
               **{f"pooling_mode_{name}": name == mode for name in dict.fromkeys((*SENTENCE_TRANSFORMERS_POOLING_MODES, mode))}}
    (directory / "1_Pooling" / "config.json").write_text(json.dumps(pooling, indent=2))


class SimCSETask(TrainingTask):
    """Unsupervised SimCSE (SimCSE Eq. 4; GS-InfoNCE Eq. 2 when enabled) on one tower.

    Examples are (sentence,) — encoded twice, the two dropout views are the positive pair — or
    (sentence, round trip) — the round-trip translation is the positive (`pretrain.rtt_as: pairs`).
    The loss reads the pooler output (SimCSE's MLP); evaluation drops it (`cls_before_pooler`).
    """

    loss_spans_global_batch = True  # embeddings are gathered across DDP ranks
    leaves_parameters_unused = False

    def __init__(self, backbone: Path, tokenizer: PreTrainedTokenizerBase, dropout: float, temperature: float,
                 gaussian: losses.GaussianNegatives | None, max_length: int):
        super().__init__(SentenceEncoder(load_backbone(str(backbone), dropout), pooler="cls_before_pooler"), tokenizer)
        self.temperature, self.gaussian, self.max_length = temperature, gaussian, max_length

    @property
    def column_tokenizers(self) -> Tokenizers:
        return self.tokenizer  # the sentence and its round trip alike

    @property
    def generators(self) -> dict[str, torch.Generator]:
        return noise_generators(self.gaussian)

    def step_inputs(self, step: int, batch: Batch) -> dict[str, torch.Tensor]:
        """GS-InfoNCE's noise of this step, from the task's generator (the global batch's count)."""
        if self.gaussian is None:
            return {}
        device = batch[0]["input_ids"].device
        sentences = batch[0]["input_ids"].shape[0] * process_count()
        noise = self.gaussian.draw(sentences, self.model.model.config.hidden_size)
        return {"gaussian_noise": host_to_device(noise, device)}

    def objective(self, model: nn.Module, batch: Batch, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        if len(batch) == 1:
            ids, mask = batch[0]["input_ids"], batch[0]["attention_mask"]
            views = model(ids.repeat_interleave(2, 0), mask.repeat_interleave(2, 0)).pooler_output
            anchors, positives = views[0::2], views[1::2]
        else:
            anchors = model(batch[0]["input_ids"], batch[0]["attention_mask"]).pooler_output
            positives = model(batch[1]["input_ids"], batch[1]["attention_mask"]).pooler_output
        anchors, positives = gather_with_grad(anchors), gather_with_grad(positives)
        logits, targets = losses.info_nce_logits(anchors, positives, self.temperature, self.gaussian,
                                                 inputs.get("gaussian_noise"))
        terms = {"loss": F.cross_entropy(logits, targets)}
        if self.gaussian is not None:  # logged: how much of the denominator the Gaussian negatives hold
            terms["gaussian_share"] = losses.gaussian_share(logits, logits.shape[1] - len(anchors))
        return terms

    def embed(self, model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return model(input_ids, attention_mask).last_cls

    def save(self, model: nn.Module, directory: Path) -> None:
        save_sentence_model(model.model, self.tokenizer, directory, self.max_length)


class TwinTask(TrainingTask):
    """TNCSE (TNCSE Eq. 8) or JTCSE (JTCSE Eq. 15) on the two pretrained towers.

    `ictn`: the kernel of the tensor-norm term, the vectorised `losses.ictn` unless given (the
    benchmark's released-code baseline passes its per-sample loop, `with_ictn`)."""

    loss_spans_global_batch = True  # the twin's outputs are gathered across DDP ranks

    def __init__(self, tower_dirs: tuple[Path, Path], tokenizer: PreTrainedTokenizerBase, settings: TrainSettings,
                 seed: int, ictn: losses.IctnKernel = losses.ictn):
        model = TwinEncoder.from_pretrained(
            str(tower_dirs[0]), str(tower_dirs[1]), settings.cael, settings.cross_outputs, settings.mode_dropout,
            cross_mode=settings.cross_mode,
        )
        for tower in model.towers:  # the LayerNorm study; 0 leaves the towers as loaded
            drop_layernorms(tower, settings.drop_layernorm)
        super().__init__(model, tokenizer)
        self.settings, self.seed, self.ictn = settings, seed, ictn
        self.gaussian = gaussian_negatives(settings.gaussian, seed)
        self.twin_objective = self._objective_with(ictn)

    def _objective_with(self, ictn: losses.IctnKernel) -> losses.TwinObjective:
        """The objective's terms and settings resolved once, outside the (compiled) step."""
        return losses.TwinObjective.of(self.settings.losses, temperature=self.settings.temperature, gaussian=self.gaussian,
                                       ictn_kernel=ictn, **self.settings.term_settings)

    @property
    def column_tokenizers(self) -> Tokenizers:
        return self.tokenizer

    @property
    def generators(self) -> dict[str, torch.Generator]:
        return noise_generators(self.gaussian)  # JTCSE's direction is drawn per step from (seed, step): no state

    @property
    def leaves_parameters_unused(self) -> bool:
        # without the norm term on the pooler output the pooler layers (where the family has them) get no
        # gradient, which DDP must be told
        has_pooler = any(architecture.has_pooler_layer for architecture in self.model.architectures)
        return has_pooler and not losses.reads_pooler(self.settings.losses, self.settings.term_settings)

    def with_ictn(self, ictn: losses.IctnKernel) -> TwinTask:
        """This task, on the same model, with another ICTN kernel."""
        twin = copy.copy(self)
        twin.ictn, twin.twin_objective = ictn, self._objective_with(ictn)
        return twin

    def step_inputs(self, step: int, batch: Batch) -> dict[str, torch.Tensor]:
        """JTCSE's direction R of this step, drawn from (seed, step): identical on every rank and after a resume."""
        if self.settings.cael == 0:
            return {}
        direction = losses.draw_direction(torch.Generator().manual_seed(self.seed * 1_000_003 + step))
        return {"direction": host_to_device(torch.tensor(float(direction)), batch[0]["input_ids"].device)}

    def objective(self, model: nn.Module, batch: Batch, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        out = model(batch[0]["input_ids"], batch[0]["attention_mask"]).gather()
        objective = self.twin_objective(out, direction=inputs.get("direction"))
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
    """A teacher: a model of the registry (`pipeline.evaluated_models.WeightedTowers`, a twin or the UC
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


class DistillTask(TrainingTask):
    """`D` / `UC D`: MSE between a fresh student's [CLS] and the frozen teacher's embedding.

    Examples are a sentence once per distinct tokenizer (`column_tokenizers`, `distill_examples`):
    column 0 in the student's tokenization, further columns for teacher members whose tokenizer
    differs, so each member reads the text as it was trained to."""

    loss_spans_global_batch = False  # each rank regresses its own rows
    leaves_parameters_unused = True  # the student's pooler layer is never read
    generators: dict[str, torch.Generator] = {}  # dropout draws from torch's global generator only

    def __init__(self, backbone: Path, teacher: FrozenEnsemble, tokenizer: PreTrainedTokenizerBase, dropout: float,
                 max_length: int):
        super().__init__(SentenceEncoder(load_backbone(str(backbone), dropout), pooler="cls_before_pooler"), tokenizer)
        self.teacher, self.max_length = teacher, max_length
        tokenizers, indices = distinct_tokenizers([tokenizer, *teacher.tokenizers])
        self._column_tokenizers, self.teacher_columns = tokenizers, indices[1:]

    @property
    def column_tokenizers(self) -> Tokenizers:
        return self._column_tokenizers

    def place(self, device: torch.device) -> nn.Module:
        self.teacher.to(device)
        return super().place(device)

    def objective(self, model: nn.Module, batch: Batch, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        ids, mask = batch[0]["input_ids"], batch[0]["attention_mask"]
        target = self.teacher([batch[column] for column in self.teacher_columns])
        return {"loss": losses.distillation_loss(model(ids, mask).last_cls, target)}

    def embed(self, model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return model(input_ids, attention_mask).last_cls

    def save(self, model: nn.Module, directory: Path) -> None:
        save_sentence_model(model.model, self.tokenizer, directory, self.max_length)


def distill_examples(sentences: Sequence[str], column_tokenizers: Sequence[PreTrainedTokenizerBase]) -> list[tuple[str, ...]]:
    """A distillation example: the sentence once per distinct tokenizer of the student and the teacher."""
    return [(sentence,) * len(column_tokenizers) for sentence in sentences]

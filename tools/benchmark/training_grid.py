"""Training throughput: one optimizer step of every training stage over a grid of batch sizes and
maximum lengths, through the stages' own task classes (`pipeline.training.tasks`)."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Mapping
from pathlib import Path

import torch

from tools.benchmark.timing_inputs import BenchInputs, TypicalBatch
from tools.benchmark.scales import BENCH_TRAINING_ITEMS
from tools.benchmark.step import bench_optimizer, timed_step
from tools.benchmark.timing import free_memory, public, synchronizer, time_repeats
from pipeline.config import Params, StudentSettings, TrainSettings
from pipeline.errors import PipelineError

log = logging.getLogger(__name__)

TWIN_STAGE_FORMS = "jtcse-<cael>[-stream|-side|-mean]"
CROSS_SUFFIXES = {"stream": ("stream", "last"), "side": ("side", "last"), "mean": ("side", "mean")}


def _unknown_stage(stage: str) -> PipelineError:
    return PipelineError(f"bench stage {stage} is unknown; allowed: {', '.join(BENCH_TRAINING_ITEMS)}, {TWIN_STAGE_FORMS}")


def twin_settings(stage: str, train: TrainSettings) -> TrainSettings:
    """`tncse` → cael 0; `jtcse-<cael>` → that many CAELs (cross mode as configured); a suffix picks
    the cross mode: `-stream`, `-side` (side outputs of the last CAEL) or `-mean` (side, mean over CAELs)."""
    if stage == "tncse":
        return train.model_copy(update={"cael": 0})
    parts = stage.split("-")
    if len(parts) not in (2, 3) or not parts[1].isdigit() or (len(parts) == 3 and parts[2] not in CROSS_SUFFIXES):
        raise _unknown_stage(stage)
    cross_mode, cross_outputs = CROSS_SUFFIXES[parts[2]] if len(parts) == 3 else (train.cross_mode, train.cross_outputs)
    return train.model_copy(update={"cael": int(parts[1]), "cross_mode": cross_mode, "cross_outputs": cross_outputs})


def validate_stage_name(stage: str) -> str:
    """pretrain, tncse, jtcse-<cael>[-stream|-side|-mean] or distill; else a one-line error."""
    if stage in ("pretrain", "tncse", "distill"):
        return stage
    if stage.startswith("jtcse-"):
        twin_settings(stage, TrainSettings())
        return stage
    raise _unknown_stage(stage)


def make_task(stage: str, backbone: Path, params: Params):
    """(task, lr) of a training stage on `backbone`, built as the stages build it
    (`pipeline.training.jobs`): both towers and the teacher's members start from `backbone`."""
    from pipeline.evaluated_models import WeightedTowers
    from pipeline.training.jobs import distill_job, joint_job, pretrain_job

    if stage == "pretrain":
        job = pretrain_job(params, next(iter(params.towers)), backbone)
    elif stage == "tncse" or stage.startswith("jtcse-"):
        from transformers import AutoConfig

        from pipeline.settings_rules import validate_cael

        train = twin_settings(stage, params.train)
        validate_cael(train.cael, AutoConfig.from_pretrained(backbone).num_hidden_layers, key=f"bench stage {stage}: cael")
        job = joint_job(params, (backbone, backbone), train)
    elif stage == "distill":
        student = params.distill.teachers.get("joint", StudentSettings())
        job = distill_job(params, "joint", backbone, WeightedTowers.twin(backbone, backbone), student)
    else:
        raise _unknown_stage(stage)
    return job.task(), job.lr


def step_record(timing: Mapping, batch: TypicalBatch, padded: bool = False) -> dict:
    """A timed step in the JSON: rates from the median, the batch's real (non-padding) tokens
    counted once per sentence whatever the views or towers, and the padded width fed to the model."""
    real_tokens, sentences = batch.real_tokens, len(batch.token_ids)
    return {
        "steps_per_s": round(1 / timing["median"], 4),
        "tokens_per_s": round(real_tokens / timing["median"], 1),
        "sentences_per_s": round(sentences / timing["median"], 2),
        "step_seconds": public(timing),
        "padded_width": batch.max_length if padded else batch.width,
        "epoch_mean_padded_width": batch.max_length if padded else round(batch.epoch_mean_width, 1),
        "real_tokens": real_tokens,
        "real_tokens_per_sentence": round(real_tokens / sentences, 2),
        "peak_memory_mb": round(timing["peak_memory_mb"], 1),
    }


def _bench_point(inputs: BenchInputs, task, model, optimizer, batch_size: int, max_length: int) -> dict:
    """One grid point: the typical batch's step timed `repeats` times; {"error": ...} when out of GPU memory."""
    batch = inputs.batch(batch_size, max_length)
    counter = itertools.count()
    context = inputs.context

    def step() -> None:
        timed_step(task, model, optimizer, batch.dynamic(), context, next(counter))

    try:
        timing = time_repeats(step, inputs.scale.repeats, inputs.scale.warmup, synchronizer(context.device), context.device)
    except torch.cuda.OutOfMemoryError:
        optimizer.zero_grad(set_to_none=True)
        free_memory(context.device)
        return {"error": "out of memory"}
    return step_record(timing, batch)


def _bench_stage(inputs: BenchInputs, stage: str) -> dict:
    """{"b<batch>_l<length>": record} of one stage (and its cross mode for a JTCSE stage)."""
    scale = inputs.scale
    points = list(itertools.product(scale.batch_sizes, scale.max_lengths))
    try:
        task, lr = make_task(stage, inputs.backbone, inputs.params)
    except PipelineError as error:
        inputs.advance(done=len(points))
        return {"skipped": str(error)}
    model = task.model.to(inputs.context.device).train()
    optimizer = bench_optimizer(model, lr, inputs.context.device)
    results: dict = {}
    if stage.startswith("jtcse-"):
        results.update(cross_mode=task.settings.cross_mode, cross_outputs=task.settings.cross_outputs)
    for batch_size, max_length in points:
        key = f"b{batch_size}_l{max_length}"
        inputs.advance(f"bench {stage} {key}")
        results[key] = record = _bench_point(inputs, task, model, optimizer, batch_size, max_length)
        if "error" not in record:
            log.info("bench %s %s: %.3f steps/s, %.0f tokens/s, peak %.0f MB",
                     stage, key, record["steps_per_s"], record["tokens_per_s"], record["peak_memory_mb"])
        inputs.advance(done=1)
    del task, model, optimizer
    free_memory(inputs.context.device)
    return results


def bench_training(inputs: BenchInputs) -> dict:
    """{stage: {"b<batch>_l<length>": record}} of training steps over the grid (`step_record`).

    Every repeat times the same typical batch (`typical_batch`); every stage times the same one.
    A stage that cannot run on the backbone (a CAEL count not dividing its layers) is
    {"skipped": reason}; a grid point that runs out of GPU memory is {"error": "out of memory"}.
    """
    for stage in inputs.scale.stages:
        validate_stage_name(stage)
    return {stage: _bench_stage(inputs, stage) for stage in inputs.scale.stages}

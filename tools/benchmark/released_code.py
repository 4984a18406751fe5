"""The released code's way of taking the joint step, against the pipeline's, on the same batches.

The released TNCSE/JTCSE code pads every batch to `max_length` and computes the tensor-norm loss
sample by sample in a Python loop. Here that baseline is the pipeline's own `TwinTask.loss` — same
terms, same JTCSE direction R — with only the ICTN kernel given as the per-sample loop
(`TwinTask.with_ictn(looped_ictn)`, a declared argument of the task, nothing patched), fed a
batch padded to the maximum length (`tools.benchmark.timing_inputs.pad_to_length`).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import torch
from torch import nn
from torch.nn import functional as F

from pipeline import losses
from tools.benchmark.timing_inputs import BenchInputs, TypicalBatch
from tools.benchmark.scales import BASELINE_VARIANT, JOINT_VARIANTS, OPTIMISED_VARIANT
from tools.benchmark.step import bench_optimizer, timed_step
from tools.benchmark.timing import free_memory, synchronizer, time_interleaved
from tools.benchmark.training_grid import step_record
from pipeline.config import GaussianNegativesSettings
from pipeline.errors import PipelineError
from pipeline.execution.runtime import RunContext

if TYPE_CHECKING:
    from pipeline.training.tasks import TwinTask

log = logging.getLogger(__name__)


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


def looped_twin_loss(task: TwinTask, model: nn.Module, batch, step: int) -> dict[str, torch.Tensor]:
    """`task.loss` (a `TwinTask`) with the tensor-norm terms computed by the per-sample loop: the
    task's own loss wiring, not a copy of it."""
    return task.with_ictn(looped_ictn).loss(model, batch, step)


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


def _variant_steps(task, model, optimizer, batch: TypicalBatch, context: RunContext,
                   variants) -> dict[str, Callable[[], None]]:
    """One timed step per variant: `padded_*` pads to max_length, `*_looped` runs the looped ICTN."""

    def variant(padded: bool, looped: bool) -> Callable[[], None]:
        counter = itertools.count()
        make = batch.padded if padded else batch.dynamic
        loss_fn = task.with_ictn(looped_ictn).loss if looped else None
        return lambda: timed_step(task, model, optimizer, make(), context, next(counter), loss_fn)

    return {name: variant(name.startswith("padded"), name.endswith("looped")) for name in JOINT_VARIANTS if name in variants}


def _joint_task(inputs: BenchInputs):
    """The joint stage's task (`pipeline.training.jobs.joint_job`) on two copies of the backbone at
    the joint grid point, GS-InfoNCE off (its noise is drawn afresh per call, which would make the
    two losses differ)."""
    from pipeline.training.jobs import joint_job

    scale = inputs.scale
    train = inputs.params.train.model_copy(update={
        "batch_size": scale.joint_batch_size, "max_length": scale.joint_max_length,
        "gaussian": GaussianNegativesSettings(),
    })
    return joint_job(inputs.params, (inputs.backbone, inputs.backbone), train).task()


def bench_joint_padding(inputs: BenchInputs) -> dict:
    """The joint (twin) training step up to four ways, on the same batch, timed in interleaved rounds:

    - dynamic_vectorised: the pipeline (pad to the batch's longest, vectorised `losses.ictn`);
    - padded_looped: the released code (pad to `max_length`, `looped_ictn`);
    - dynamic_looped / padded_vectorised: one change at a time, to attribute the gain.

    `speedup` = padded_looped / dynamic_vectorised median step time; `loss` compares the two on
    the batch (`joint_loss_check`).
    """
    scale, context = inputs.scale, inputs.context
    variants = scale.joint_variants
    if set(variants) - set(JOINT_VARIANTS) or not {BASELINE_VARIANT, OPTIMISED_VARIANT} <= set(variants):
        raise PipelineError(f"joint variants {list(variants)}: allowed {', '.join(JOINT_VARIANTS)}, "
                            f"including {BASELINE_VARIANT} and {OPTIMISED_VARIANT}")
    task = _joint_task(inputs)
    model = task.model.to(context.device).train()
    optimizer = bench_optimizer(model, task.settings.mode_lr, context.device)
    batch = inputs.batch(scale.joint_batch_size, scale.joint_max_length)
    inputs.advance(f"bench joint padding b{scale.joint_batch_size}_l{scale.joint_max_length}")
    loss = joint_loss_check(task, model, batch, context)
    functions = _variant_steps(task, model, optimizer, batch, context, variants)
    timings = time_interleaved(functions, scale.repeats, scale.warmup, synchronizer(context.device), context.device)
    result = _joint_result(timings, batch, task.settings.cael, loss)
    log.info("bench joint padding: dynamic+vectorised %.2fx faster than padded+looped, |Δloss| %.2e",
             result["speedup"], loss["abs_diff"])
    inputs.advance(done=1)
    del task, model, optimizer
    free_memory(context.device)
    return result


def _joint_result(timings: dict, batch: TypicalBatch, cael: int, loss: dict) -> dict:
    optimised = timings[OPTIMISED_VARIANT]["median"]
    result = {
        "batch_size": len(batch.token_ids),
        "max_length": batch.max_length,
        "cael": cael,
        "variants": {name: step_record(timing, batch, padded=name.startswith("padded")) for name, timing in timings.items()},
        "speedup": round(timings[BASELINE_VARIANT]["median"] / optimised, 3),
        "loss": loss,
    }
    if "padded_vectorised" in timings:
        result["speedup_from_dynamic_padding"] = round(timings["padded_vectorised"]["median"] / optimised, 3)
    if "dynamic_looped" in timings:
        result["speedup_from_vectorised_loss"] = round(timings["dynamic_looped"]["median"] / optimised, 3)
    return result

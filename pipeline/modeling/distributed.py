"""DDP glue of the models: global in-batch negatives, and dropout masks that do not depend on the
world size.

**Global in-batch negatives.** Gather the embeddings after the forward pass and before the loss,

    out = twin(input_ids, attention_mask).gather()          # TwinOutput, views along dim 1
    loss = twin_objective(out, ...).total
    z = gather_with_grad(encoder(views_ids, views_mask).pooler_output)   # SimCSE pretraining

Every rank then computes the same loss over the global batch; autograd reaches only its own
embeddings, and DDP's gradient averaging sums the ranks' contributions divided by the world size.
The training loop multiplies such a loss by the world size before backward, so the update is
exactly that of one process on the global batch (SimCSE's released multi-GPU code leaves the
1/world-size factor in). Rank r holds the r-th of N equal contiguous blocks of the global batch
(`pipeline.training.batching.shard_rows`), so concatenating the ranks in order gives the global
batch in its own order, each positive pair adjacent as in one process.

**Dropout independent of the world size** (`shard_dropout`, installed by the training loop when
world_size > 1). Dropout is SimCSE's augmentation: if each rank drew masks for its own rows only,
N processes would train another model than one. Instead every rank — seeded alike — draws the
noise of the whole global batch exactly as one process's dropout draws it (`F.dropout` on a tensor
of the global shape: on CPU `bernoulli_(1 - p)` / (1 - p), on CUDA the fused kernel) and keeps
its own block of rows; the ranks' generators therefore also stay equal. That needs the shapes of
one process: the loop pads each rank's rows to the global batch's longest row. The attention
probabilities' dropout, which the stock `sdpa` path leaves to the fused kernel (its own masks),
runs as eager attention with the same global-batch dropout (`GLOBAL_BATCH_ATTENTION`); the
softmax-then-dropout values are those of torch's CPU math kernel to float rounding. One process
keeps the stock modules untouched.

On CUDA the stock one-GPU path draws its attention-probability masks inside the fused SDPA
kernels, which no slice reproduces: there N GPUs equal one GPU in every dropout but that one
(docs/scaling.md, "Past one GPU").
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional as F
from transformers import PreTrainedModel
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, eager_mask
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

GLOBAL_BATCH_ATTENTION = "pipeline_global_batch_eager"  # the attention implementation `shard_dropout` sets


def process_count() -> int:
    """The processes a gathered loss spans (the process group's size; 1 without DDP)."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def gather_with_grad(x: torch.Tensor, dim: int = 0) -> torch.Tensor:
    """Concatenate `x` from every rank along `dim` (rank order); identity without DDP."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return x
    gathered = [torch.empty_like(x) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, x.contiguous())
    gathered[dist.get_rank()] = x  # all_gather returns no grad; put the local tensor back in
    return torch.cat(gathered, dim=dim)


@dataclass(frozen=True)
class Shard:
    """This process's block of the global batch: rows [rank·n, (rank+1)·n) of world_size·n."""

    rank: int
    world_size: int


def global_batch_dropout(x: torch.Tensor, p: float, shard: Shard) -> torch.Tensor:
    """Dropout of this rank's rows `x` with the mask one process would draw for them on the whole
    batch: the noise of the global shape (world_size × the rows, as `F.dropout` draws it), this
    rank's block of it. Costs the random numbers of the whole batch; the generator advances as one
    process's does."""
    if p == 0.0:
        return x
    rows = x.shape[0]
    noise = F.dropout(x.new_ones((rows * shard.world_size, *x.shape[1:])), p, training=True)
    return x * noise[shard.rank * rows : (shard.rank + 1) * rows].clone()  # clone: keep only this block alive


class GlobalBatchDropout(nn.Dropout):
    """`nn.Dropout` drawing its mask over the global batch (`global_batch_dropout`)."""

    def __init__(self, p: float, shard: Shard):
        super().__init__(p)
        self.shard = shard

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return global_batch_dropout(x, self.p, self.shard) if self.training else x


def _global_batch_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """Eager attention (transformers' BERT `eager_attention_forward`) whose probability dropout is
    `global_batch_dropout`, with the shard of the module's own dropout (`shard_dropout` set it)."""
    scaling = query.size(-1) ** -0.5 if scaling is None else scaling
    scores = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        scores = scores + attention_mask
    weights = F.softmax(scores, dim=-1)
    if module.training and dropout > 0.0:
        weights = global_batch_dropout(weights, dropout, module.dropout.shard)
    return torch.matmul(weights, value).transpose(1, 2).contiguous(), weights


ALL_ATTENTION_FUNCTIONS.register(GLOBAL_BATCH_ATTENTION, _global_batch_attention)
ALL_MASK_ATTENTION_FUNCTIONS.register(GLOBAL_BATCH_ATTENTION, eager_mask)  # the additive float mask eager reads


def shard_dropout(model: nn.Module, shard: Shard) -> int:
    """Make every dropout of `model` draw its masks over the global batch (module doc): each
    `nn.Dropout` becomes a `GlobalBatchDropout` of the same rate, and every backbone's attention
    runs as `GLOBAL_BATCH_ATTENTION` (not saved: the config written keeps no attention choice).
    Returns how many dropouts it replaced."""
    replaced = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Dropout:
                setattr(parent, name, GlobalBatchDropout(child.p, shard).train(child.training))
                replaced += 1
    for backbone in model.modules():
        if isinstance(backbone, PreTrainedModel):
            backbone.config._attn_implementation = GLOBAL_BATCH_ATTENTION
    return replaced

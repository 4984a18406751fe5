"""Global in-batch negatives under DDP: all-gather embeddings, keeping gradients for the local part.

Expected use in the training loop (one process per GPU, equal per-rank batch sizes, e.g.
`drop_last=True`): gather the embeddings after the forward pass and before the loss,

    out = twin(input_ids, attention_mask).gather()          # TwinOutput, views along dim 1
    loss = twin_objective(out, ...).total
    z = gather_with_grad(encoder(views_ids, views_mask).pooler_output)   # SimCSE pretraining

Every rank then computes the same loss over the global batch; autograd reaches only its own
embeddings, and DDP's gradient averaging sums the ranks' contributions divided by the world size.
The training loop multiplies such a loss by the world size before backward, so the update is
exactly that of one process on the global batch (SimCSE's released multi-GPU code leaves the
1/world-size factor in). Each rank's 2N views
are interleaved (2k, 2k+1), so concatenating ranks keeps every positive pair adjacent. Random
choices that must agree across ranks (the JTCSE direction R) need generators seeded alike.
"""

import torch
import torch.distributed as dist


def gather_with_grad(x: torch.Tensor, dim: int = 0) -> torch.Tensor:
    """Concatenate `x` from every rank along `dim` (rank order); identity without DDP."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return x
    gathered = [torch.empty_like(x) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, x.contiguous())
    gathered[dist.get_rank()] = x  # all_gather returns no grad; put the local tensor back in
    return torch.cat(gathered, dim=dim)

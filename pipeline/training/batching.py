"""From examples to padded batches: tokenisation once per stage, the batch order of each epoch, padding.

An example is a tuple of texts, one per column (a sentence; a sentence and its round trip; a
sentence once per distinct teacher tokenizer). `TokenizedExamples` tokenizes every column once,
truncated to `max_length`, and keeps the ids as flat tensors; `epoch_batches` gives the seeded
order of one epoch (uniform random batches, or length-bucketed ones); `batch_loader` is the
`DataLoader` that turns those index lists into one padded {input_ids, attention_mask} per column
(dynamic padding: to the longest row of the batch; with `pad_multiple`, up to the next multiple of
it, at most `max_length`, so that a compiled step sees a few fixed widths and captures each once —
padding changes no result, the attention mask hides it), in pinned memory on CUDA.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset
from transformers import PreTrainedTokenizerBase

from pipeline.errors import PipelineError

Batch = list[dict[str, torch.Tensor]]  # one padded {input_ids, attention_mask} per text column
Tokenizers = PreTrainedTokenizerBase | Sequence[PreTrainedTokenizerBase]  # one, or one per text column


def column_tokenizers(tokenizer: Tokenizers, columns: int) -> list[PreTrainedTokenizerBase]:
    """The tokenizer of each text column: one for all, or one each (e.g. a teacher member's own)."""
    if isinstance(tokenizer, PreTrainedTokenizerBase):
        return [tokenizer] * columns
    if len(tokenizer) != columns:
        raise PipelineError(f"{len(tokenizer)} tokenizers for {columns} text columns; give one per column")
    return list(tokenizer)


def tokenize_columns(tokenizer: Tokenizers, examples: Sequence[Sequence[str]], max_length: int) -> list[list[list[int]]]:
    """Token ids of every text of every example, once, truncated to `max_length`: [column][example]."""
    columns = list(zip(*examples))
    return [
        column_tokenizer(list(column), truncation=True, max_length=max_length, add_special_tokens=True)["input_ids"]
        for column_tokenizer, column in zip(column_tokenizers(tokenizer, len(columns)), columns)
    ]


def random_batches(count: int, batch_size: int, seed: int, epoch: int) -> list[list[int]]:
    """A seeded uniform permutation of the examples cut into batches, the last partial batch kept:
    what the reference code's shuffled `DataLoader` (and SimCSE's `Trainer`) feeds."""
    order = np.random.default_rng([seed, epoch]).permutation(count)
    return [order[start : start + batch_size].tolist() for start in range(0, count, batch_size)]


def length_bucketed_batches(
    lengths: Sequence[int], batch_size: int, seed: int, epoch: int, bucket_batches: int = 50
) -> list[list[int]]:
    """Shuffled batches of similar-length examples, so dynamic padding pads little.

    The corpus is shuffled, cut into windows of `bucket_batches` batches, each window sorted by
    length and cut into batches, and the batch order shuffled again: batches stay random samples of
    the corpus at the scale of a window. Incomplete last batches are dropped (in-batch negatives).
    """
    generator = np.random.default_rng([seed, epoch])
    order = generator.permutation(len(lengths))
    window = batch_size * bucket_batches
    batches = []
    for start in range(0, len(order), window):
        chunk = order[start : start + window]
        chunk = chunk[np.argsort(np.asarray(lengths)[chunk], kind="stable")]
        batches += [chunk[i : i + batch_size].tolist() for i in range(0, len(chunk) - batch_size + 1, batch_size)]
    generator.shuffle(batches)
    return batches


def check_world_size(batch_size: int, world_size: int, setting: str) -> None:
    """The global batch splits into `world_size` equal blocks (`shard_rows`), or a one-line error
    naming the `setting` (its batch_size): every rank must hold as many rows (the gathers need it)."""
    if batch_size % world_size:
        raise PipelineError(
            f"{setting}={batch_size} does not split over {world_size} processes (PIPELINE_NPROC): each "
            f"takes an equal share; set PIPELINE_NPROC to a divisor of {batch_size}, or a batch_size divisible by it"
        )


def shard_rows(batch: Batch, rank: int, world_size: int) -> Batch:
    """Rank `rank`'s block of a padded global batch: rows [rank·n, (rank+1)·n) of world_size·n,
    padded as the whole batch is, so every tensor has one process's shape but for its rows
    (`pipeline.modeling.distributed`: the dropout masks are drawn over the global batch)."""
    rows = batch[0]["input_ids"].shape[0] // world_size
    block = slice(rank * rows, (rank + 1) * rows)
    return [{key: tensor[block] for key, tensor in column.items()} for column in batch]


def _partial_rows(count: int, batch_size: int, world_size: int) -> int:
    """Rows of the last partial batch that are used: a multiple of the world size, so that every
    DDP rank holds as many rows (the embedding gathers need it)."""
    rest = count % batch_size
    return rest - rest % world_size


def epoch_batches(
    sampling: str, lengths: Sequence[int], batch_size: int, seed: int, epoch: int, world_size: int = 1
) -> list[list[int]]:
    """The batches of one epoch under `sampling` (random | length_bucketed)."""
    if sampling == "length_bucketed":
        return length_bucketed_batches(lengths, batch_size, seed, epoch)
    batches = random_batches(len(lengths), batch_size, seed, epoch)
    if len(batches[-1]) < batch_size:
        kept = _partial_rows(len(lengths), batch_size, world_size)
        batches = batches[:-1] + ([batches[-1][:kept]] if kept else [])
    return batches


def steps_per_epoch(sampling: str, count: int, batch_size: int, grad_accum: int, world_size: int = 1) -> int:
    """Optimiser steps per epoch: random keeps the last partial batch (and a last step of fewer
    than `grad_accum` batches); length_bucketed drops incomplete batches and steps."""
    if sampling == "length_bucketed":
        return count // batch_size // grad_accum
    batches = count // batch_size + (1 if _partial_rows(count, batch_size, world_size) else 0)
    return math.ceil(batches / grad_accum)


def padded_width(longest: int, pad_multiple: int | None, max_length: int) -> int:
    """The width a batch whose longest row has `longest` tokens is padded to: `longest` (dynamic
    padding), or with `pad_multiple` the next multiple of it, at most `max_length`."""
    if pad_multiple is None:
        return longest
    return min(-(-longest // pad_multiple) * pad_multiple, max(max_length, longest))


def fixed_widths(pad_multiple: int, max_length: int) -> list[int]:
    """Every width `padded_width` can give under `pad_multiple` (what a compiled step captures)."""
    return sorted({padded_width(longest, pad_multiple, max_length) for longest in range(1, max_length + 1)})


def pad_batch(token_ids: Sequence[Sequence[int] | torch.Tensor], pad_id: int,
              device: torch.device | None = None, width: int | None = None) -> dict[str, torch.Tensor]:
    """Pad to the longest sequence of this batch (dynamic padding), or to `width`; on `device` when given."""
    lengths = torch.tensor([len(ids) for ids in token_ids])
    width = int(lengths.max()) if width is None else width
    input_ids = torch.full((len(token_ids), width), pad_id, dtype=torch.long)
    attention_mask = (torch.arange(width)[None, :] < lengths[:, None]).long()
    flat = [torch.as_tensor(ids, dtype=torch.long) for ids in token_ids]
    input_ids[attention_mask.bool()] = torch.cat(flat) if flat else torch.empty(0, dtype=torch.long)
    if device is None:
        return {"input_ids": input_ids, "attention_mask": attention_mask}
    return {"input_ids": input_ids.to(device), "attention_mask": attention_mask.to(device)}


class TokenizedExamples(Dataset):
    """The examples tokenized once: per column, every example's ids in one flat tensor plus offsets.

    Item i is the tuple of example i's id tensors (one per column); `collate` pads a list of items
    into a `Batch` (to `padded_width` under `pad_multiple`). `lengths` (column 0's) drive length bucketing.
    """

    def __init__(self, tokenizer: Tokenizers, examples: Sequence[Sequence[str]], max_length: int,
                 pad_multiple: int | None = None):
        self.max_length, self.pad_multiple = max_length, pad_multiple
        columns = tokenize_columns(tokenizer, examples, max_length)
        self.pad_ids = [t.pad_token_id for t in column_tokenizers(tokenizer, len(columns))]
        self.lengths = [len(ids) for ids in columns[0]]
        self._flat = [torch.tensor([token for ids in column for token in ids], dtype=torch.long) for column in columns]
        self._offsets = [np.cumsum([0, *map(len, column)]).tolist() for column in columns]

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, ...]:
        return tuple(flat[offsets[index] : offsets[index + 1]] for flat, offsets in zip(self._flat, self._offsets))

    def collate(self, items: Sequence[tuple[torch.Tensor, ...]]) -> Batch:
        return [pad_batch(column, pad_id, width=padded_width(max(map(len, column)), self.pad_multiple, self.max_length))
                for column, pad_id in zip(zip(*items), self.pad_ids)]


def batch_loader(data: TokenizedExamples, batches: Sequence[Sequence[int]], device: torch.device,
                 rank: int = 0, world_size: int = 1) -> DataLoader:
    """Padded batches of `data` in the order of `batches` (lists of example indices) — under DDP
    each one this rank's block (`shard_rows`) of the padded global batch — in pinned
    memory on CUDA so that the copy to the GPU (`to_device`) does not block. Collating pre-tokenized
    tensors is cheap, so it runs in this process: a worker would add only the transfer between processes.
    The loader draws its base seed from a generator of its own, not torch's global one, whose state
    the dropout masks of training come from."""
    collate = data.collate if world_size == 1 else lambda items: shard_rows(data.collate(items), rank, world_size)
    return DataLoader(data, batch_sampler=batches, collate_fn=collate, pin_memory=device.type == "cuda",
                      generator=torch.Generator())


def host_to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A host tensor made inside a step (noise, a drawn direction) on `device` without waiting: pinned
    first on CUDA, since a copy from pageable memory blocks the host until the GPU has done it."""
    if device.type != "cuda":
        return tensor.to(device)
    return tensor.pin_memory().to(device, non_blocking=True)


def to_device(batch: Batch, device: torch.device) -> Batch:
    return [{key: tensor.to(device, non_blocking=True) for key, tensor in column.items()} for column in batch]

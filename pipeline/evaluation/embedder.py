"""A Hugging Face model as an `Embedder`: sentences → pooled embeddings, in evaluation mode.

The poolers are those of training (`pipeline.modeling.encoder.pool`), so a model is evaluated
with exactly the embedding it was trained with. `avg_first_last` there averages
`hidden_states[1]` (the first Transformer layer's output) with the last layer, as SimCSE's
released evaluation.py does (early SimCSE versions used `hidden_states[0]`, the embeddings).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
from pipeline.data.sources import HUB_ID
from pipeline.errors import PipelineError
from pipeline.evaluation.sts import Embedder
from pipeline.modeling.encoder import SentenceEncoder, load_tokenizer, validate_pooler
from pipeline.execution.runtime import resolve_device
from pipeline.settings_rules import validate_token_budget

# `token_budget: auto`: padded tokens per batch by device. Measured on 2 CPU cores (MiniLM, 840 STS
# sentences): 1,024-2,048 tokens 1.45x the old fixed batches of 64, 16,384 0.53x (large activations
# fall out of the caches); a GPU wants few large batches (launch overhead), hence 16,384 there.
AUTO_TOKEN_BUDGET = {"cpu": 2048, "cuda": 16384}



def resolve_model_source(model: str | Path) -> str:
    """A saved model folder, or a string shaped like a hub id; else one line saying what is wrong."""
    text = str(model)
    if Path(text).is_dir():
        if not (Path(text) / "config.json").is_file():
            raise PipelineError(f"model folder {text} has no config.json; it is not a saved Hugging Face model")
        return text
    if HUB_ID.fullmatch(text) and not Path(text).exists():
        return text
    raise PipelineError(f"model folder {text} does not exist; train or download it first (`dvc repro`)")


def token_budget_batches(lengths: Sequence[int], token_budget: int) -> list[list[int]]:
    """Positions of `lengths` in batches of similar length, longest first (a batch too large for memory
    fails at once), ties in position order; a batch's padded size (its count × its longest length)
    stays within `token_budget`, and a batch holds one sentence at least."""
    order = sorted(range(len(lengths)), key=lambda position: (-lengths[position], position))
    batches: list[list[int]] = []
    for position in order:
        # longest first: a batch is as wide as its first sentence
        if batches and (len(batches[-1]) + 1) * lengths[batches[-1][0]] <= token_budget:
            batches[-1].append(position)
        else:
            batches.append([position])
    return batches


def pad_batch(token_ids: Sequence[Sequence[int]], pad_id: int, left: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask) of ragged token lists padded to the longest, as the tokenizer pads."""
    width = max(len(ids) for ids in token_ids)
    input_ids = np.full((len(token_ids), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(token_ids), width), dtype=np.int64)
    for row, ids in enumerate(token_ids):
        columns = slice(width - len(ids), width) if left else slice(0, len(ids))
        input_ids[row, columns], mask[row, columns] = ids, 1
    return torch.from_numpy(input_ids), torch.from_numpy(mask)


class HFEmbedder(Embedder):
    """Pooled embeddings of a Hugging Face model, no gradients.

    `encode` (the evaluator's path) tokenizes all sentences at once, sorts them by length and runs
    batches of at most `token_budget` padded tokens; on CUDA through pinned memory and non-blocking
    copies, the embeddings staying on the device until all are done. Calling the embedder encodes one
    given batch (training's dev scoring, MTEB). With a [CLS] pooler the last layer runs for [CLS] only
    (`SentenceEncoder`); `cls_only_last_layer=False` gives the stock forward (the benchmark's naive loop).
    """

    def __init__(
        self,
        model: str | Path,
        pooler: str = "cls_before_pooler",
        max_length: int = 128,
        batch_size: int = 64,
        device: str = "cpu",
        cls_only_last_layer: bool = True,
        token_budget: int | str = "auto",
    ):
        source = resolve_model_source(model)
        validate_pooler(pooler)
        self.device = resolve_device(device)
        self.tokenizer = load_tokenizer(source)
        self.encoder = SentenceEncoder.from_pretrained(source, pooler, cls_only_last_layer=cls_only_last_layer)
        self.encoder = self.encoder.to(self.device).eval()
        self.max_length = max_length
        self.batch_size = batch_size
        budget = validate_token_budget(token_budget, max_length, "token_budget", "max_length")
        self.token_budget = AUTO_TOKEN_BUDGET[self.device.type] if budget == "auto" else budget

    def token_lengths(self, sentences: list[str]) -> list[int]:
        """Tokens per sentence as the model will see them (for length-sorted batches)."""
        encoded = self.tokenizer(sentences, truncation=True, max_length=self.max_length)["input_ids"]
        return [len(ids) for ids in encoded]

    def __call__(self, sentences: list[str]) -> torch.Tensor:
        pooled = []
        with torch.inference_mode():
            for start in range(0, len(sentences), self.batch_size):
                batch = self.tokenizer(
                    sentences[start : start + self.batch_size],
                    padding=True,
                    truncation=True,
                    max_length=self.max_length,
                    return_tensors="pt",
                ).to(self.device)
                pooled.append(self.encoder(batch["input_ids"], batch["attention_mask"]).pooled.float().cpu())
        return torch.cat(pooled)

    def _to_device(self, tensor: torch.Tensor) -> torch.Tensor:
        if self.device.type != "cuda":
            return tensor
        return tensor.pin_memory().to(self.device, non_blocking=True)

    def encode(self, sentences: Sequence[str], progress: Callable[[int], object] | None = None) -> torch.Tensor:
        """Float32 embeddings of `sentences`, row i for sentence i, on the model's device.

        One tokenizer call for all; batches from `token_budget_batches`; `progress(n)` after each batch."""
        token_ids = self.tokenizer(list(sentences), truncation=True, max_length=self.max_length)["input_ids"]
        batches = token_budget_batches([len(ids) for ids in token_ids], self.token_budget)
        left = self.tokenizer.padding_side == "left"
        chunks = []
        with torch.inference_mode():
            for batch in batches:
                input_ids, mask = pad_batch([token_ids[position] for position in batch], self.tokenizer.pad_token_id, left)
                chunks.append(self.encoder(self._to_device(input_ids), self._to_device(mask)).pooled.float())
                if progress is not None:
                    progress(len(batch))
            if not chunks:
                return torch.empty(0, self.encoder.model.config.hidden_size, device=self.device)
            order = torch.tensor([position for batch in batches for position in batch])
            # rows back into the sentences' order: row order[k] of the result is row k of the batches'
            return torch.cat(chunks)[self._to_device(torch.argsort(order))]


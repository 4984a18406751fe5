"""A Hugging Face model as an `Embedder`: sentences → pooled embeddings, in evaluation mode.

The poolers are those of training (`pipeline.modeling.encoder.pool`), so a model is evaluated
with exactly the embedding it was trained with. `avg_first_last` there averages
`hidden_states[1]` (the first Transformer layer's output) with the last layer, as SimCSE's
released evaluation.py does (early SimCSE versions used `hidden_states[0]`, the embeddings).
"""

from __future__ import annotations

import re
from pathlib import Path

import torch
from pipeline.errors import PipelineError
from pipeline.modeling.encoder import SentenceEncoder, load_tokenizer, validate_pooler
from pipeline.runtime import resolve_device

# owner/name: the only shape of string sent to the Hugging Face hub; anything else is a folder.
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


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


class HFEmbedder:
    """Pooled embeddings of a Hugging Face model, batch by batch with dynamic padding, no gradients.

    With a [CLS] pooler the last layer runs for [CLS] only (`SentenceEncoder`); `cls_only_last_layer=False`
    gives the stock forward (the benchmark's naive loop).
    """

    def __init__(
        self,
        model: str | Path,
        pooler: str = "cls_before_pooler",
        max_length: int = 128,
        batch_size: int = 64,
        device: str = "cpu",
        cls_only_last_layer: bool = True,
    ):
        source = resolve_model_source(model)
        validate_pooler(pooler)
        self.device = resolve_device(device)
        self.tokenizer = load_tokenizer(source)
        self.encoder = SentenceEncoder.from_pretrained(source, pooler, cls_only_last_layer=cls_only_last_layer)
        self.encoder = self.encoder.to(self.device).eval()
        self.max_length = max_length
        self.batch_size = batch_size

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

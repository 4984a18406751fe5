"""Model selection while training: STS-B dev Spearman of the weights being trained, with the task's
inference embedding (`TrainingTask.embed`), scored by the evaluation's own STS code."""

from __future__ import annotations

import math
from pathlib import Path

import torch
from torch import nn
from transformers import PreTrainedTokenizerBase

from pipeline.errors import PipelineError
from pipeline.evaluation.sts import Embedder, evaluate_embedder, load_tasks, reported_score
from pipeline.training.contract import TrainingTask
from pipeline.training.loop import DevScore


def model_embedder(embed, tokenizer: PreTrainedTokenizerBase, max_length: int, device: torch.device) -> Embedder:
    """An `Embedder` over a model being trained: `embed(input_ids, attention_mask)` per batch."""

    def embed_sentences(sentences: list[str]) -> torch.Tensor:
        batch = tokenizer(sentences, padding=True, truncation=True, max_length=max_length, return_tensors="pt").to(device)
        return embed(batch["input_ids"], batch["attention_mask"])

    return embed_sentences


def stsb_dev_scorer(task: TrainingTask, senteval_root: Path, tokenizer: PreTrainedTokenizerBase, max_length: int, device: torch.device,
                    max_pairs: int | None, batch_size: int, seed: int) -> DevScore:
    """model → Spearman × 100 on STS-B dev with the task's inference embedding (model selection); with
    `max_pairs`, on the dev pairs sampled with `seed` as the evaluator samples its test pairs."""
    dev = load_tasks(senteval_root, ["STSBenchmark"], max_pairs, split="dev", seed=seed)

    def score(model: nn.Module) -> float:
        embedder = model_embedder(lambda ids, mask: task.embed(model, ids, mask), tokenizer, max_length, device)
        results = evaluate_embedder(embedder, dev, batch_size, description="STS-B dev")
        dev_score = reported_score(results["STSBenchmark"])
        if not math.isfinite(dev_score):  # would make model selection keep an arbitrary checkpoint
            raise PipelineError(
                f"STS-B dev score is {dev_score} on {sum(map(len, dev[0].subsets.values()))} pairs: the model's "
                "embeddings are constant or degenerate; lower the learning rate or check the input model"
            )
        return dev_score

    return score

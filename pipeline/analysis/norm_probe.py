"""The norm probe of the LayerNorm study (TNCSE Figure 5, JTCSE Fig. 8): ‖h^L‖ and ‖h^P‖ per model
over a fixed, seeded sample of corpus sentences.

TNCSE: "We first randomly select 100 sentences from Wiki1M. Then we remove the last several layers
of LayerNorm of the encoder, and report the average norm of the last hidden state". Each tower is
loaded with `load_backbone`, so a tower trained with LayerNorms removed is probed without them;
its eval-mode forward (no dropout) gives h^L and h^P as its family's adapter reads them
(`Architecture.sentence_outputs`: in BERT's, last_hidden_state[:, 0] and pooler_output).
A model with several towers (a twin, the UC ensemble) pools its towers' norms: the statistics are
over every (tower, sentence), each tower's own under `towers`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from pipeline.analysis.norms import summary_statistics
from pipeline.errors import PipelineError
from pipeline.modeling import load_backbone, load_tokenizer
from pipeline.modeling.architecture import architecture_of
from pipeline.modeling.layernorm import CONFIG_KEY

PROBE_SENTENCES = 100  # the papers' sample size


def probe_sentences(corpus: Sequence[str], count: int = PROBE_SENTENCES, seed: int = 42) -> list[str]:
    """`count` distinct lines of `corpus` drawn without replacement by numpy's `default_rng(seed)`, in
    the order drawn; the same corpus and seed always give the same sample."""
    lines = [line for line in dict.fromkeys(corpus) if line.strip()]
    if len(lines) < count:
        raise PipelineError(
            f"analysis.norm_probe_sentences={count} is more than the corpus's {len(lines)} distinct non-empty lines; "
            "lower it or use a larger corpus (data.wiki.limit)"
        )
    picked = np.random.default_rng(seed).choice(len(lines), size=count, replace=False)
    return [lines[index] for index in picked]


@torch.no_grad()
def tower_norms(
    tower: str, sentences: Sequence[str], max_length: int = 128, batch_size: int = 64, device: torch.device | str = "cpu"
) -> tuple[np.ndarray, np.ndarray]:
    """(‖h^L‖, ‖h^P‖) per sentence of one model folder, in float64 norms of its eval-mode outputs."""
    model, tokenizer = load_backbone(tower).to(device).eval(), load_tokenizer(tower)
    architecture = architecture_of(model)
    last, pooler = [], []
    for start in range(0, len(sentences), batch_size):
        batch = tokenizer(list(sentences[start:start + batch_size]), padding=True, truncation=True,
                          max_length=max_length, return_tensors="pt").to(device)
        output = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
        last_cls, pooler_output = architecture.sentence_outputs(model, output, batch["attention_mask"])
        last.append(last_cls.double().norm(dim=-1).cpu())
        pooler.append(pooler_output.double().norm(dim=-1).cpu())
    return torch.cat(last).numpy(), torch.cat(pooler).numpy()


def _statistics(last: np.ndarray, pooler: np.ndarray) -> dict[str, Any]:
    return {"last_hidden_cls": summary_statistics(last), "pooler": summary_statistics(pooler)}


def norm_probe(
    models: Mapping[str, Sequence[tuple[str, float]]],
    sentences: Sequence[str],
    max_length: int = 128,
    batch_size: int = 64,
    device: torch.device | str = "cpu",
) -> dict[str, dict[str, Any]]:
    """Per model: the statistics (`summary_statistics`: mean, std, min, max, quantiles) of ‖h^L‖ and
    ‖h^P‖ over its towers' sentences pooled, the LayerNorm layers each tower has removed, and each
    tower's own statistics. Every distinct tower folder is run once."""
    towers = list(dict.fromkeys(tower for members in models.values() for tower, _ in members))
    norms = {tower: tower_norms(tower, sentences, max_length, batch_size, device)
             for tower in tqdm(towers, desc="norm probe", unit="tower")}
    probes = {}
    for name, members in models.items():
        folders = [tower for tower, _ in members]
        pooled = _statistics(np.concatenate([norms[t][0] for t in folders]), np.concatenate([norms[t][1] for t in folders]))
        probes[name] = {
            "sentences": len(sentences),
            **pooled,
            CONFIG_KEY: {tower: _dropped(tower) for tower in folders},
            "towers": {tower: _statistics(*norms[tower]) for tower in folders} if len(folders) > 1 else {},
        }
    return probes


def _dropped(tower: str) -> int:
    """The LayerNorm layers a saved model has removed, from its config.json (0 when it has none)."""
    config = Path(tower) / "config.json"
    return int(json.loads(config.read_text(encoding="utf-8")).get(CONFIG_KEY, 0)) if config.is_file() else 0

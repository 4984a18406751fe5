"""Tiny random BERT models with a character-level WordPiece vocabulary, saved like real checkpoints."""

from __future__ import annotations

import string
from collections.abc import Callable
from pathlib import Path

import torch
from transformers import BertConfig, BertModel, BertTokenizerFast, PreTrainedModel

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [
    piece for char in string.ascii_lowercase + string.digits for piece in (char, f"##{char}")
] + list(string.punctuation)


def save_tiny_bert(folder: Path, seed: int, layers: int = 2, reversed_vocab: bool = False) -> Path:
    """A random BERT (hidden 32) with its pooler and a fast tokenizer, in Hugging Face format.

    `reversed_vocab`: the vocabulary in reverse order — another tokenizer (other ids, [PAD] not 0)."""
    folder.mkdir(parents=True)
    (folder / "vocab.txt").write_text("\n".join(VOCAB[::-1] if reversed_vocab else VOCAB) + "\n")
    # transformers 5 takes `vocab=`; `vocab_file=` is silently ignored (every token [UNK])
    tokenizer = BertTokenizerFast(vocab=str(folder / "vocab.txt"))
    assert "[UNK]" not in tokenizer.tokenize("a girl is styling her hair .")
    tokenizer.save_pretrained(folder)
    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=layers, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=512, pad_token_id=tokenizer.pad_token_id,
    )
    BertModel(config).save_pretrained(folder)
    return folder


def save_tiny_family(folder: Path, seed: int, build: Callable[[BertTokenizerFast], PreTrainedModel]) -> Path:
    """Another family's random model, `build(tokenizer)` after seeding, with the tiny BERT's tokenizer, in
    Hugging Face format (the tiny BERT's weights replaced)."""
    save_tiny_bert(folder, seed)
    tokenizer = BertTokenizerFast.from_pretrained(folder)
    for weights in folder.glob("*.safetensors"):
        weights.unlink()
    torch.manual_seed(seed)
    build(tokenizer).save_pretrained(folder)
    return folder


def save_tower_pair(root: Path, save: Callable[[Path, int], Path]) -> tuple[Path, Path]:
    """Two towers of one family under `root` (I seeded 1, II seeded 2)."""
    return save(root / "I", 1), save(root / "II", 2)


def save_tiny_prelayernorm(folder: Path, seed: int, layers: int = 3) -> Path:
    """A random XLM-RoBERTa-XL (another family's layout: pre-LayerNorm layers, a final encoder LayerNorm)
    with its pooler and the tiny BERT's tokenizer, in Hugging Face format."""
    from transformers import XLMRobertaXLConfig, XLMRobertaXLModel

    def build(tokenizer: BertTokenizerFast) -> PreTrainedModel:
        config = XLMRobertaXLConfig(
            vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=layers, num_attention_heads=2, intermediate_size=64,
            max_position_embeddings=512, pad_token_id=tokenizer.pad_token_id, type_vocab_size=2,
        )
        return XLMRobertaXLModel(config, add_pooling_layer=True)

    return save_tiny_family(folder, seed, build)

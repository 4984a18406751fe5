"""pipeline/training/batching.py: the batch order of an epoch."""

import numpy as np

from pipeline.training.batching import length_bucketed_batches


def test_length_bucketed_batches_cover_the_corpus_once_with_less_padding():
    rng = np.random.default_rng(0)
    lengths = rng.integers(5, 60, size=1000).tolist()
    batches = length_bucketed_batches(lengths, batch_size=16, seed=1, epoch=0)
    flat = [i for batch in batches for i in batch]
    assert len(flat) == len(set(flat)) and 1000 - len(flat) < 16 * 2
    assert all(len(batch) == 16 for batch in batches)
    assert batches == length_bucketed_batches(lengths, batch_size=16, seed=1, epoch=0)
    assert batches != length_bucketed_batches(lengths, batch_size=16, seed=1, epoch=1)
    padded = sum(16 * max(lengths[i] for i in batch) for batch in batches)
    random_order = rng.permutation(1000)[: len(flat)].reshape(-1, 16)
    padded_random = sum(16 * max(lengths[i] for i in batch) for batch in random_order)
    assert padded < 0.8 * padded_random

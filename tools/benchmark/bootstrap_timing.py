"""Bootstrap cost: seconds of the evaluate stage's bootstrap intervals for one model, on the full
benchmarks (`BenchScale.bootstrap_max_pairs`: None = every pair) with `eval.bootstrap` resamples.

The model is random embeddings of the backbone's width (one row per unique sentence): the
bootstrap works on cached embeddings, so its cost depends on the pair counts and resamples only.
Timed apart: `draw` (`draw_resamples` and the indices' digest: once per model in the evaluate stage)
and `score` (`bootstrap_scores`: each pair's cosine, then every resample's Spearman and the avg).
"""

from __future__ import annotations

import numpy as np

from tools.benchmark.timing_inputs import BenchInputs
from tools.benchmark.timing import public, time_repeats


def bench_bootstrap(inputs: BenchInputs) -> dict:
    """The benchmark's `bootstrap` section (see the module doc)."""
    from transformers import AutoConfig

    from tools.benchmark.evaluator_timing import check_senteval
    from pipeline.evaluation.bootstrap import bootstrap_scores, draw_resamples
    from pipeline.evaluation.sts import EmbeddingTable, load_tasks, task_sentences

    resamples, seed = inputs.params.eval.bootstrap, inputs.params.seed
    if resamples == 0:
        inputs.advance(done=1)
        return {"skipped": "eval.bootstrap is 0"}
    inputs.advance("bench bootstrap")
    tasks = load_tasks(check_senteval(inputs), inputs.params.eval.tasks, inputs.scale.bootstrap_max_pairs, seed=seed)
    sentences = task_sentences(tasks)
    width = AutoConfig.from_pretrained(inputs.backbone).hidden_size
    vectors = np.random.default_rng(seed).standard_normal((len(sentences), width)).astype(np.float32)
    table = EmbeddingTable({sentence: row for row, sentence in enumerate(sentences)}, vectors)

    def draw():
        drawn = draw_resamples(tasks, resamples, seed)
        return drawn, drawn.digest

    drawn, _ = draw()
    repeats = inputs.scale.eval_repeats
    draw_timing = time_repeats(draw, repeats, warmup=0)
    score_timing = time_repeats(lambda: bootstrap_scores(table, tasks, drawn), repeats, warmup=0)
    inputs.advance(done=1)
    return {
        "resamples": resamples,
        "pairs": {task.name: sum(map(len, task.subsets.values())) for task in tasks},
        "max_pairs": inputs.scale.bootstrap_max_pairs,
        "embedding_width": width,
        "draw_seconds": public(draw_timing),
        "score_seconds": public(score_timing),
        "seconds": round(draw_timing["median"] + score_timing["median"], 3),
    }

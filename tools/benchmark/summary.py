"""What a benchmark run tells at a glance: the headline figures in the JSON, the notes on how to
read them, and the text table the stage prints."""

from __future__ import annotations

from collections.abc import Mapping

HEADLINE_RATES = ("cache_hits_per_s", "apertium_sentences_per_s", "google_loopback_requests_per_s")

NOTES = [
    "Times are seconds per optimizer step (forward, loss, backward, AdamW) or per evaluation pass; "
    "steps_per_s = 1 / median step time.",
    "tokens_per_s counts real (non-padding) tokens of the input sentences once per sentence, whatever "
    "the number of dropout views or towers; padded_width is the padded sequence length fed to the model.",
    "Every repeat times the same batch: of the training loop's batches (length-bucketed, dynamic padding) the one "
    "of median padded width; every stage times the same batch for a given batch size and length. "
    "epoch_mean_padded_width is the mean over all the loop's batches.",
    "joint_padding: the released code's step (padding to max_length, per-sample tensor-norm loop) against the "
    "pipeline's (dynamic padding, vectorised loss) on the same batches, timed in alternating rounds; "
    "speedup = padded_looped / dynamic_vectorised median step time.",
    "evaluation: the same sentences (all pairs of the tasks, duplicates included) embedded by the STS evaluator "
    "(deduplicated, tokenized once, sorted by token count, batches of at most token_budget padded tokens, last layer "
    "for [CLS] only with a [CLS] pooler), by its previous fixed batches of batch_size (evaluator_fixed_batches), by "
    "the evaluator's batches through the stock forward (evaluator_stock_forward), and by a naive loop in file order "
    "through the stock forward; sentences_per_s counts input sentences; max_abs_embedding_diff compares evaluator "
    "and naive embeddings.",
    "bootstrap: the evaluate stage's bootstrap intervals of one model (random embeddings of the backbone's width) on "
    "the full benchmarks unless max_pairs says otherwise: draw = the resample indices and their digest, score = "
    "every resample's Spearman of every task and the avg; seconds = the sum of the medians.",
    "startup: the evaluate stage's start-up in fresh processes (median): interpreter, command line (--help), "
    "imports, model load, first batch; warmup_s = first call - steady call of the same batch.",
    "peak_memory_mb: CPU = peak RSS of the whole process during the measurement (all models it holds); "
    "CUDA = torch.cuda.max_memory_allocated.",
    "On a shared machine compare min with median (iqr shows the spread); machine.load_average is at start and end.",
]


def grid_points(grid: Mapping) -> dict[str, dict]:
    """The measured points of one stage's grid ("b<batch>_l<length>" → record), skips and errors left out."""
    return {key: value for key, value in grid.items() if isinstance(value, dict) and "steps_per_s" in value}


def largest_point(points: Mapping) -> str:
    """The grid key of the largest batch (then length)."""
    return max(points, key=lambda key: tuple(int(part[1:]) for part in key.split("_")))


def headline(results: Mapping) -> dict:
    """The few numbers that answer the issue's questions (also what `dvc metrics diff` shows first)."""
    summary: dict = {}
    joint = results.get("joint_padding")
    if joint:
        summary["joint_speedup_dynamic_vectorised_vs_padded_looped"] = joint["speedup"]
        summary["joint_loss_abs_diff"] = joint["loss"]["abs_diff"]
    evaluation = results.get("evaluation")
    if evaluation:
        summary["evaluator_speedup_vs_naive"] = evaluation["speedup"]
        summary["evaluator_sentences_per_s"] = evaluation["evaluator"]["sentences_per_s"]
        summary["evaluator_max_abs_embedding_diff"] = evaluation["max_abs_embedding_diff"]
        if "speedup_vs_fixed_batches" in evaluation:
            summary["evaluator_speedup_vs_fixed_batches"] = evaluation["speedup_vs_fixed_batches"]
    bootstrap = results.get("bootstrap")
    if bootstrap and "seconds" in bootstrap:
        summary["bootstrap_seconds_per_model"] = bootstrap["seconds"]
    startup = results.get("startup")
    if startup:
        summary["startup_total_s"] = startup["total_s"]
    for stage, grid in results.get("training", {}).items():
        points = grid_points(grid)
        if points:
            largest = largest_point(points)
            summary[f"{stage}_steps_per_s_{largest}"] = points[largest]["steps_per_s"]
    translation = results.get("translation")
    if translation:
        for rate in HEADLINE_RATES:
            if rate in translation:
                summary[rate] = translation[rate]["median"]
    return summary


def _step_row(name: str, batch: str, length: str, record: Mapping) -> tuple[str, ...]:
    return (name, batch, length, f"{record['steps_per_s']:.3f}", f"{record['tokens_per_s']:.0f}",
            f"{record['step_seconds']['iqr']:.3f}", f"{record['peak_memory_mb']:.0f}")


def _grid_rows(results: Mapping) -> list[tuple[str, ...]]:
    """One row per training grid point, then one per joint variant."""
    rows = [("stage", "batch", "len", "steps/s", "tokens/s", "iqr s", "peak MB")]
    for stage, grid in results.get("training", {}).items():
        if "skipped" in grid:
            rows.append((stage, "-", "-", "skipped", "", "", ""))
            continue
        for key, record in grid.items():
            if not isinstance(record, dict):
                continue
            batch, length = (part[1:] for part in key.split("_"))
            rows.append((stage, batch, length, record["error"], "", "", "") if "error" in record
                        else _step_row(stage, batch, length, record))
    joint = results.get("joint_padding")
    if joint:
        for name, record in joint["variants"].items():
            rows.append(_step_row(f"joint:{name}", str(joint["batch_size"]), str(joint["max_length"]), record))
    return rows


def _section_lines(results: Mapping) -> list[str]:
    lines = []
    joint = results.get("joint_padding")
    if joint:
        lines.append(f"joint b{joint['batch_size']} l{joint['max_length']}: dynamic+vectorised {joint['speedup']:.2f}x faster "
                     f"than padded+looped; |loss difference| {joint['loss']['abs_diff']:.1e}")
    evaluation = results.get("evaluation")
    if evaluation:
        lines.append(f"evaluation ({evaluation['sentences']} sentences): evaluator {evaluation['evaluator']['sentences_per_s']:.0f}"
                     f" sentences/s, naive {evaluation['naive']['sentences_per_s']:.0f} sentences/s ({evaluation['speedup']:.2f}x:"
                     f" batching {evaluation['speedup_from_batching']:.2f}x, [CLS]-only last layer"
                     f" {evaluation['speedup_from_cls_only_last_layer']:.2f}x); |embedding difference|"
                     f" {evaluation['max_abs_embedding_diff']:.1e}")
        if "evaluator_fixed_batches" in evaluation:
            lines.append(f"evaluation: token-budget batches {evaluation['speedup_vs_fixed_batches']:.2f}x the fixed batches "
                         f"({evaluation['evaluator_fixed_batches']['sentences_per_s']:.0f} sentences/s); |embedding "
                         f"difference| {evaluation['max_abs_embedding_diff_vs_fixed_batches']:.1e}")
    bootstrap = results.get("bootstrap")
    if bootstrap and "seconds" in bootstrap:
        lines.append(f"bootstrap ({bootstrap['resamples']} resamples, {sum(bootstrap['pairs'].values())} pairs): "
                     f"{bootstrap['seconds']:.2f} s per model (draw {bootstrap['draw_seconds']['median']:.2f} s, "
                     f"score {bootstrap['score_seconds']['median']:.2f} s)")
    startup = results.get("startup")
    if startup:
        lines.append(f"startup (evaluate): import {startup['import_s']:.2f} s, load {startup['load_s']:.2f} s, first batch "
                     f"{startup['first_call_s']:.2f} s (warm-up {startup['warmup_s']:.2f} s); --help {startup['cli_help_s']:.2f} s")
    translation = results.get("translation")
    if translation:
        parts = [f"{rate.replace('_per_s', '')} {translation[rate]['median']:.0f}/s"
                 for rate in HEADLINE_RATES if rate in translation]
        lines.append("translation: " + ", ".join(parts))
    return lines


def format_summary_table(results: Mapping) -> str:
    """A compact text table: one row per training grid point, then the joint, evaluation and
    translation figures."""
    rows = _grid_rows(results)
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    lines = ["  ".join(cell.rjust(width) for cell, width in zip(row, widths)) for row in rows] if len(rows) > 1 else []
    return "\n".join(lines + _section_lines(results))

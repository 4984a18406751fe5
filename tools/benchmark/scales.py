"""What a benchmark run measures: its sections, the training stages it times and the grid sizes."""

from __future__ import annotations

from dataclasses import dataclass, replace

from pipeline.errors import PipelineError

BENCH_TRAINING_ITEMS = ("pretrain", "tncse", "jtcse-1", "jtcse-3", "jtcse-6", "distill")
SECTIONS = ("training", "joint_padding", "evaluation", "bootstrap", "translation", "startup")
# Run only when named (`--section pipeline --clone-dir DIR`): the whole `dvc repro` of a fresh clone.
OPT_IN_SECTIONS = ("pipeline",)
JOINT_VARIANTS = ("dynamic_vectorised", "padded_looped", "dynamic_looped", "padded_vectorised")
BASELINE_VARIANT, OPTIMISED_VARIANT = "padded_looped", "dynamic_vectorised"


@dataclass(frozen=True)
class BenchScale:
    """The grid and the sizes of one benchmark run."""

    name: str
    batch_sizes: tuple[int, ...]
    max_lengths: tuple[int, ...]
    repeats: int = 3
    warmup: int = 1
    joint_batch_size: int = 64  # the released twin stage's batch
    joint_max_length: int = 64  # ... and maximum length
    eval_max_pairs: int | None = 300  # pairs per STS task (a seeded sample; None: all)
    eval_repeats: int = 3
    bootstrap_max_pairs: int | None = None  # pairs per STS task of the bootstrap section (None: all, its cost at paper scale)
    translation_sentences: int = 300
    translation_repeats: int = 3
    corpus_sentences: int = 20_000  # first N corpus lines the batches are drawn from
    stages: tuple[str, ...] = BENCH_TRAINING_ITEMS
    stage_imports: bool = True  # the startup section's per-stage import probes (a fresh process each)
    joint_variants: tuple[str, ...] = JOINT_VARIANTS


SCALES = {
    # 2 CPU cores, under 5 minutes in all: the configured (tiny) backbone, a 2×2 grid; the joint
    # comparison without padded_vectorised (a padded step costs ~5 dynamic ones on CPU; the
    # dynamic_looped variant already shows what the loop alone costs).
    # The evaluator on the first 200 pairs per task (the tiny preset evaluates 300): three
    # variants × three repeats of 300 pairs alone took 2 of the 5 minutes.
    "tiny": BenchScale("tiny", batch_sizes=(16, 64), max_lengths=(32, 64), eval_max_pairs=200,
                       joint_variants=("dynamic_vectorised", "padded_looped", "dynamic_looped")),
    # the papers' batches on a GPU, BERT-base; the full benchmarks for the evaluator.
    "paper": BenchScale(
        "paper", batch_sizes=(64, 128, 256), max_lengths=(32, 64), repeats=5, warmup=2,
        eval_max_pairs=None, translation_sentences=2000, corpus_sentences=50_000,
    ),
}
# the small preset (one GPU, the configured backbone): the paper grid
SCALES["small"] = replace(SCALES["paper"], name="small")
# The smallest run that exercises every code path (tests, `bench --quick`).
QUICK = BenchScale(
    "quick", batch_sizes=(4,), max_lengths=(16,), repeats=1, warmup=0, joint_batch_size=4, joint_max_length=16,
    eval_max_pairs=4, eval_repeats=1, bootstrap_max_pairs=100, translation_sentences=8, translation_repeats=1, corpus_sentences=64,
    stage_imports=False,
)


def bench_scale(name: str, quick: bool = False) -> BenchScale:
    if name not in SCALES:
        raise PipelineError(f"--scale {name} is not a benchmark scale; allowed: {', '.join(SCALES)}")
    return replace(QUICK, name=f"{name}-quick") if quick else SCALES[name]


def check_sections(sections) -> None:
    unknown = set(sections) - set(SECTIONS) - set(OPT_IN_SECTIONS)
    if unknown:
        raise PipelineError(f"benchmark sections {sorted(unknown)} are unknown; allowed: {', '.join(SECTIONS + OPT_IN_SECTIONS)}")


def count_jobs(scale: BenchScale, sections) -> int:
    """Progress-bar units: one per training grid point, one per other section."""
    jobs = 0
    if "training" in sections:
        jobs += len(scale.stages) * len(scale.batch_sizes) * len(scale.max_lengths)
    return jobs + sum(1 for section in SECTIONS[1:] if section in sections)

"""Throughput and memory of the pipeline on the current machine (the `bench` stage, issue 8).

What is measured, each several times (median, min, max and interquartile range of the seconds),
one module per section, all reading one `BenchInputs` (`inputs`):

- `training_grid`: one optimizer step (forward, loss, backward, AdamW) of every training stage —
  `pretrain` (SimCSE), `tncse` (twin, cael 0), `jtcse-1` / `-3` / `-6` (twin with 1 / 3 / 6 CAELs) and
  `distill` (student + frozen two-tower teacher) — through the stages' own tasks
  (`pipeline.training.tasks`) on a batch made as the training loop makes it (`tokenize_columns`,
  `epoch_batches`, `pad_batch`; of its full batches, the one of median padded width), for a grid
  of batch sizes and maximum lengths; steps/s, real (non-padding) tokens/s, peak memory;
- `baseline`: the joint step of the released code — the batch padded to the maximum length and the
  tensor-norm loss computed sample by sample in a Python loop — against dynamic padding and the
  vectorised loss, on the same batch, in alternating rounds so that background load hits both
  alike; the speed ratio and the two losses (dropout off);
- `evaluation`: sentences/s of the STS evaluator (`embed_sentences`: deduplicated sentences
  tokenized once, sorted by token count, batches by token budget), of its previous fixed batches
  and of a naive loop over the same sentences in file order;
- `bootstrap`: seconds of the evaluate stage's bootstrap intervals of one model on the full
  benchmarks (random embeddings; `eval.bootstrap` resamples);
- `translation`: cache hits/s, Apertium sentences/s, packed requests/s against the `loopback`
  Google stand-in;
- `startup`: the evaluate stage's start-up (imports, model load, first batch) in fresh processes;
- `run`: the machine (CPUs, GPU, library versions, load average at start and end) and the whole run;
  `summary`: the headline figures and the printed table; `readme`: the figures of docs/benchmarks.md, rendered
  from the JSON. `timing` holds the clocks and the peak-memory probe (on CUDA the step runs under
  bf16 autocast, the fast choice of the stages' `precision` setting, `RunContext`).

    results = run_benchmarks("tiny", load_params(), device="auto", backbone_dir=Path("data/backbone"),
                             corpus=Path("data/raw/corpus.txt"), senteval=Path("data/raw/senteval"))
    print(format_summary_table(results))
"""

from tools.benchmark.released_code import (
    joint_loss_check,
    looped_ictn,
    looped_tensor_norm_loss,
    looped_twin_loss,
)
from tools.benchmark.timing_inputs import BenchInputs, TypicalBatch, pad_to_length, typical_batch
from tools.benchmark.run import machine_facts, run_benchmarks
from tools.benchmark.scales import QUICK, SCALES, SECTIONS, BENCH_TRAINING_ITEMS, BenchScale, bench_scale
from tools.benchmark.summary import format_summary_table, headline
from tools.benchmark.timing import summarize, time_interleaved, time_repeats

__all__ = [
    "QUICK",
    "SCALES",
    "SECTIONS",
    "BENCH_TRAINING_ITEMS",
    "BenchInputs",
    "BenchScale",
    "TypicalBatch",
    "bench_scale",
    "format_summary_table",
    "headline",
    "joint_loss_check",
    "looped_ictn",
    "looped_tensor_norm_loss",
    "looped_twin_loss",
    "machine_facts",
    "pad_to_length",
    "run_benchmarks",
    "summarize",
    "time_interleaved",
    "time_repeats",
    "typical_batch",
]

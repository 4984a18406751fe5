"""The numbers a column of tables.yaml may name: its metric path checked against the layout of the
file its prefix reads (`pipeline.reporting.inputs` lists the files), when tables.yaml is loaded, so
that a typo (`STS12.al`) is one line instead of a column of "missing" cells.

- a plain path: a number of reports/metrics/details/<model>.json: each STS task's reported score,
  STS12–16's "mean" and subsets (SentEval's fixed lists), "avg";
- `analysis:`: a number of reports/analysis/<model>.json (`analysis_columns`);
- `mteb:`: `suites.<suite>.<number>` of reports/mteb/<model>.json, the suite one of conf/mteb/.
"""

from __future__ import annotations

import difflib

from pipeline.declarations.sts_tasks import AVERAGE, declared_tasks
from pipeline.declarations.loss_terms import NORM_INPUTS


# The numbers of reports/analysis/<model>.json a column may name (pipeline/analysis/per_model.py writes
# them; the norm probe's under `norm_probe`); tests/test_reporting.py checks them against a file the
# analyze stage wrote.
ANALYSIS_NUMBERS = (
    "pairs", "align_pairs", "positive_pairs", "sentences", "align_sentences", "alignment", "uniformity", "e_cls_mean",
    "seq_len", "gmacs", "gmacs_with_attention", "avg", "eta", "sink_end_last", "sink_end_uniform",
)
# The last layer's attention on [SEP] and the final punctuation, and its uniform share (the towers' means;
# pipeline/analysis/per_model.py `_layer_fields`): added after the committed reports/analysis were written,
# so the layout test checks them only once a regenerated file holds them (tests/test_reporting.py).
ATTENTION_SINK_NUMBERS = ("sink_end_last", "sink_end_uniform")
# pipeline.analysis.norms.summary_statistics' keys (not imported: the analysis package is no code the report runs)
NORM_STATISTICS = ("mean", "std", "min", "max", "q05", "q25", "q50", "q75", "q95")
TOWER_NORM_STATISTICS = (*NORM_STATISTICS, "cv")  # pipeline.analysis.norms.norm_statistics adds the coefficient of variation
# `norms.<tower folder>.<which>.<statistic>`: the norm statistics of each tower a model sums, keyed by its folder
TOWER_NORMS = ("last_hidden", "pooler")
MTEB_SUITE_NUMBERS = ("listed", "mapped", "scored", "avg", "metrics_mean")  # pipeline/evaluation/mteb_suites.summarise


def sts_columns() -> list[str]:
    """Every number of a details file a column may name: each declared task's reported score, STS12–16's
    "mean" and subsets (SentEval's fixed lists), and "avg"."""
    columns = []
    for task in declared_tasks():
        columns.append(task.score_column)
        if task.pools_subsets:
            columns += [f"{task.name}.mean", *(f"{task.name}.subsets.{subset}" for subset in task.subsets)]
    return columns + [AVERAGE]


def sts_column_problem(column: str) -> str | None:
    if column in sts_columns():
        return None
    return f"no such score in reports/metrics/details/<model>.json{_closest(column, sts_columns())}"


def analysis_columns() -> list[str]:
    probe = [f"norm_probe.{name}.{statistic}" for name in NORM_INPUTS for statistic in NORM_STATISTICS]
    return [*ANALYSIS_NUMBERS, "norm_probe.sentences", *probe]


def analysis_column_problem(path: str) -> str | None:
    if path in analysis_columns():
        return None
    tower, _, statistic = path.removeprefix("norms.").rpartition(".")
    tower, _, which = tower.rpartition(".")
    if path.startswith("norms.") and tower and which in TOWER_NORMS and statistic in TOWER_NORM_STATISTICS:
        return None
    return f"no such number in reports/analysis/<model>.json{_closest(path, analysis_columns())}"


def mteb_column_problem(path: str) -> str | None:
    """`suites.<suite>.<number>` of reports/mteb/<model>.json, the suite one of conf/mteb/ and the
    number one its results hold: avg, metrics.<metric>, tasks.<task>.main|subsets.<subset>|metrics.<metric>."""
    from pipeline.evaluation.mteb_suites import load_suite, suite_names

    prefix, _, rest = path.partition(".")
    suite_name, _, number = rest.partition(".")
    if prefix != "suites" or not number:
        return "an MTEB column is suites.<suite>.<number>"
    if suite_name not in suite_names():
        return f"no MTEB suite {suite_name!r} in conf/mteb/{_closest(suite_name, suite_names())}"
    suite = load_suite(suite_name)
    known = [*MTEB_SUITE_NUMBERS, *(f"metrics.{metric}" for metric in suite.metrics)]
    for task in suite.tasks:
        known += [f"tasks.{task.paper}.main", *(f"tasks.{task.paper}.metrics.{metric}" for metric in suite.metrics)]
        if task.subsets is None:  # the task's own subsets, whatever mteb holds
            if number.startswith(f"tasks.{task.paper}.subsets.") and number != f"tasks.{task.paper}.subsets.":
                return None
        else:
            known += [f"tasks.{task.paper}.subsets.{subset}" for subset in task.subsets]
    if number in known:
        return None
    return f"suite {suite_name} records no {number!r}{_closest(number, known)}"


def _closest(name: str, known: list[str]) -> str:
    close = difflib.get_close_matches(name, known, n=1)
    return f"; did you mean {close[0]!r}?" if close else ""

"""A claim's subject as an arm: one number per training seed, and the noise of the numbers it lacks.

An arm is every finished run of the subject's settings, the training seed aside (docs/method.md, "Claims and verdicts"). A
fresh clone has no DVC experiments, so its arms come from the committed seed record
(`pipeline.reporting.seed_record`) when the record was made with the run's settings and holds the
run's own number at its seed; otherwise the arm is the one run found. The pair noise, τ², comes from
the run's bootstrap resamples (shared by every model of a run, and by its seed runs: `eval.seed`).
A one-run arm borrows its seed noise from the record (same scale and backbone), else the paper-scale
prior, and says which.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.errors import PipelineError
from pipeline.reporting.runs import SCORE_COLUMNS
from pipeline.reporting.seed_record import SeedRecord
from pipeline.reporting.tables import Row
from pipeline.verdicts.estimates import PAPER_SCALE_PRIOR, SeedNoise
from pipeline.verdicts.rules import reproduction_slack

REMAKE_RECORD = "python scripts/seed_noise.py"


@dataclass(frozen=True)
class Arm:
    values: np.ndarray  # one per training seed
    seeds: list[int]
    source: str  # where the values come from, for the report
    resamples: np.ndarray | None  # this run's bootstrap scores of the column (None: not resampled)
    from_record: bool
    run: str | None = None  # the run a one-run arm is


def arm_of(row: Row, model: str, column: str, record: SeedRecord | None, header: str | None = None) -> Arm:
    """The subject's numbers of `column` (a metrics path: `avg`, `STS12.all`, `analysis:…`; `header`, the
    row's name for it where that differs) over training seeds: the record's, this run's own at its seed, when
    the record holds this run's settings; else the one run."""
    run = row.origin
    value = row.ours[header or column]
    resamples = _resamples(row, model, column)
    seed = run.params.get("seed") if run is not None else None
    if record is not None and run is not None and record.matches(run.params) and seed in record.seeds:
        recorded = record.arm(model, column)
        if recorded is not None:
            at = record.seeds.index(seed)
            slack = reproduction_slack(value, _half_width(row, header or column, resamples))
            if not abs(recorded[at] - value) <= slack:
                raise PipelineError(
                    f"{record.source}: {model} {column} at seed {seed} is {recorded[at]:.6g} there and {value:.6g} in this "
                    f"run ({row.run}), {abs(recorded[at] - value):.3g} apart (allowed {slack:.3g}, what another machine's "
                    f"last bits move it): the record was made from other code or data; remake it: {REMAKE_RECORD}")
            values = recorded.copy()
            values[at] = value
            return Arm(values, list(record.seeds), record.describe(), resamples, True)
    return Arm(np.asarray([value], dtype=float), [seed] if seed is not None else [], f"1 run ({row.run})", resamples, False, row.run)


def _half_width(row: Row, header: str, resamples: np.ndarray | None) -> float | None:
    """The 95% half-width of the run's number: its row's bootstrap interval, else its resamples' percentiles."""
    if header in row.intervals:
        low, high = row.intervals[header]
        return (high - low) / 2
    if resamples is not None and resamples.size > 1:
        low, high = np.percentile(resamples, [2.5, 97.5])
        return float(high - low) / 2
    return None


def _resamples(row: Row, model: str, column: str) -> np.ndarray | None:
    task = SCORE_COLUMNS.get(column)
    entry = row.origin.resamples(model) if (row.origin is not None and task is not None) else None
    scores = (entry or {}).get("scores", {}).get(task) if entry else None
    return np.asarray(scores, dtype=float) if isinstance(scores, list) and scores else None


def pair_variance(better: Arm, worse: Arm) -> float:
    """τ²: the bootstrap variance of a difference of two models of one run (resampled together); 0 where
    the column has no resamples. (Against a paper's number there is none: the paper scored the same pairs.)"""
    if better.resamples is None or worse.resamples is None:
        return 0.0
    if len(better.resamples) != len(worse.resamples):
        return float(np.var(better.resamples, ddof=1) + np.var(worse.resamples, ddof=1))
    return float(np.var(better.resamples - worse.resamples, ddof=1))


def paired(better: Arm, worse: Arm) -> bool:
    """Both arms from the same runs: the record's seeds, or one and the same run."""
    if better.from_record and worse.from_record:
        return better.seeds == worse.seeds
    return not better.from_record and not worse.from_record and better.run is not None and better.run == worse.run


def borrowed_noise(record: SeedRecord | None, params: dict, models: list[str], column: str,
                   is_paired: bool) -> tuple[SeedNoise, bool]:
    """The seed noise of a one-run comparison and whether it is that of the within-run difference (else
    per run): the record's at the same scale and backbone (of the difference when both arms come from
    one run), else the paper-scale prior, named as such."""
    same_kind = record is not None and record.scale == params.get("scale") and record.backbone == params["backbone"]["name"]
    arms = [record.arm(model, column) for model in models] if same_kind else []
    if arms and all(arm is not None for arm in arms):
        seeds = len(record.seeds)
        if is_paired and len(set(models)) == 2:
            sd = float(np.std(arms[0] - arms[1], ddof=1))
            return SeedNoise(sd, seeds - 1, f"measured on the record's {seeds} seeds: the within-run difference ({record.source})"), True
        # pooled over the distinct models; one record of n seeds is one estimate on n − 1 degrees of freedom,
        # however many arms borrow it (the models' scores come from the same runs: not independent estimates)
        distinct = [record.arm(model, column) for model in dict.fromkeys(models)]
        sd = float(np.sqrt(np.mean([np.var(arm, ddof=1) for arm in distinct])))
        return SeedNoise(sd, seeds - 1, f"measured on the record's {seeds} seeds, pooled ({record.source})"), False
    if params.get("scale") == "paper":
        return PAPER_SCALE_PRIOR, False
    return SeedNoise(PAPER_SCALE_PRIOR.sd, None, f"none measured at {params.get('scale')} scale: the paper-scale prior, sd "
                     f"{PAPER_SCALE_PRIOR.sd} per run"), False

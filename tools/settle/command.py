"""`python -m stages settle <claim id>`: plan a settling (`--plan`) or run it.

The design (`pipeline.verdicts.sizing`) is sized by the effect to detect (`--effect`, else the paper's gap,
else the claim's margin and band) at a stated power (`--power`, 90 %); a budget (`--budget H`, in the
scale's unit) or `--max-seeds` only caps it. The noise it is sized with: at the tiny scale the committed
seed record's within-run difference of the two models (its sd, measured) and the workspace's bootstrap pair
noise of that difference (τ); at paper scale the paper-scale prior per run (the difference of two
independent runs: √2 × sd) and the full test sets' τ bracket's upper end. One settling per claim at a time
(`settling_lock`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import yaml

from pipeline.errors import PipelineError
from pipeline.paths import METRICS_BOOTSTRAP, REPORTS
from pipeline.reporting.runs import SCORE_COLUMNS
from pipeline.reporting.seed_record import load_record
from pipeline.verdicts import sequential, sizing
from pipeline.verdicts.estimates import PAPER_SCALE_PRIOR
from tools.settle.rounds import DvcSeeds, record_observations
from tools.settle.lock import settling_lock
from tools.settle.settling import SETTLE_REPORTS, Budget, Settling, differences, run_settling
from tools.settle.target import (SettleTarget, measured_gpu_costs, paper_hours_per_seed, settle_target,
                                 tiny_seconds_per_seed)

TINY_UNIT = "CPU hours here"  # the tiny scale trains on this machine's CPU: its measured seconds price a seed
CLAIMS_JSON = REPORTS / "claims.json"
# A settling on new seeds only, after a published verdict that spent 5 %: at most 5 % + 95 % × 5 % in all.
FRESH_COMBINED_ERROR = round(0.05 + 0.95 * 0.05, 4)
FRESH_NOTE = ("the published verdict's {seeds} seeds are set aside (another effect or power than its design's, or no "
              f"design published): this settling runs new seeds only, and the claim's error is at most {FRESH_COMBINED_ERROR:.2%} "
              "in all (the published 5 % and this one's 5 %)")


def pair_variance(target: SettleTarget, folder: Path = METRICS_BOOTSTRAP) -> float:
    """τ² of better − worse: the variance over the workspace's bootstrap resamples (shared test pairs)."""
    task = SCORE_COLUMNS.get(target.column)
    scores = []
    for model in (target.better, target.worse):
        path = folder / f"{model}.json"
        found = json.loads(path.read_text(encoding="utf-8")).get("scores", {}).get(task) if path.is_file() else None
        if not found:
            return 0.0
        scores.append(np.asarray(found, dtype=float))
    return float(np.var(scores[0] - scores[1], ddof=1))


def _noise(target: SettleTarget, params: dict, paper: bool, record) -> tuple[float, float, dict[int, tuple[float, float]], str]:
    """(sd of the within-run difference, τ², the record's observations, where the noise comes from). At paper
    scale τ is the upper end of the full test sets' bracket (`sizing.PAPER_TAU_BRACKET`): the design is sized
    for the noisier end."""
    if paper:
        low, high = sizing.PAPER_TAU_BRACKET
        return (math.sqrt(2) * PAPER_SCALE_PRIOR.sd, high ** 2, {},
                f"{PAPER_SCALE_PRIOR.source}, × √2 for a difference; pair noise τ {high} of the full test sets' bracket "
                f"[{low}, {high}] (docs/method.md)")
    observed = record_observations(record, target, params)
    if len(observed) < 2:
        raise PipelineError("the committed seed record (reports/seed_noise.json) does not hold the workspace's settings and "
                            f"both {target.better} and {target.worse}: `python scripts/seed_noise.py --seeds 42 1 --run` first")
    sd = float(np.std(differences(observed, list(observed), target.lower_is_better), ddof=1))
    return sd, pair_variance(target), observed, f"the seed record's {len(observed)} seeds and this run's bootstrap"


def _price(target: SettleTarget, params: dict, paper: bool) -> tuple[float, str]:
    """What one new seed costs, and in what unit: GPU hours at paper scale, this machine's CPU hours at tiny."""
    if paper:
        return paper_hours_per_seed(target, measured_gpu_costs()), "GPU hours"
    return tiny_seconds_per_seed(target, params) / 3600, TINY_UNIT


def checked_inputs(budget: float | None, budget_gpu_hours: float | None, max_seeds: int | None, effect: float | None,
                   power: float, paper: bool) -> float | None:
    """The budget in the scale's unit, after every input is checked: one line naming the bad one, else nothing."""
    if budget is not None and budget_gpu_hours is not None:
        raise PipelineError("give --budget H (in the scale's unit) or --budget-gpu-hours H, not both")
    if budget_gpu_hours is not None and not paper:
        raise PipelineError("--budget-gpu-hours prices GPU hours, the paper scale's unit; this plan is at the tiny scale, "
                            f"priced in {TINY_UNIT}: give --budget H in those, or plan with --scale paper")
    hours = budget if budget is not None else budget_gpu_hours
    unit, flag = "GPU hours" if paper else TINY_UNIT, "--budget" if budget is not None else "--budget-gpu-hours"
    if hours is not None and not (math.isfinite(hours) and hours > 0):
        raise PipelineError(f"{flag} {hours:g}: a budget is a positive, finite number of {unit} (leave it out for no cap "
                            "but the design's own)")
    if max_seeds is not None and not 2 <= max_seeds <= sizing.MAX_SEEDS:
        raise PipelineError(f"--max-seeds {max_seeds}: from 2 (a look needs two) to {sizing.MAX_SEEDS:,} seeds per arm")
    if effect is not None and not (math.isfinite(effect) and effect > 0):
        raise PipelineError(f"--effect {effect:g}: the effect to detect is a positive number of the metric's points")
    if not (math.isfinite(power) and 0.5 <= power < 1):
        raise PipelineError(f"--power {power:g}: a power from 0.5 to below 1 (0.9 by default)")
    return hours


def planned_effect(target: SettleTarget, effect: float | None) -> tuple[float, str]:
    """(the effect the design detects, beyond the claim's margin; where it comes from): --effect, else the claim's
    own (`sizing.claim_effect`: the paper's gap beyond the margin, else the margin and band)."""
    if effect is not None:
        return effect, "--effect"
    found = sizing.claim_effect(target.paper_gap, target.margin, target.band)
    if found is None:
        raise PipelineError(f"{target.claim_id}: the paper's gap is not beyond the claim's margin, or there is neither: "
                            "give --effect E, the smallest difference worth detecting")
    return found


def _design(target: SettleTarget, effect: float, sd: float, tau2: float, power: float, cap: int | None,
            paid: int) -> sizing.Design:
    try:
        return sizing.design(effect, sd, tau2, paired=True, power=power, cap=cap, first=max(2, paid), first_fixed=paid >= 2)
    except ValueError as error:
        raise PipelineError(f"settle {target.claim_id}: {error}") from None


def published_design(claim_id: str, claims_file: Path = CLAIMS_JSON) -> dict | None:
    """The claim's own settling design as the report published it (its first look is the published verdict)."""
    if not claims_file.is_file():
        return None
    try:
        details = json.loads(claims_file.read_text(encoding="utf-8")).get("details", {})
    except (OSError, json.JSONDecodeError):
        raise PipelineError(f"{claims_file} is not readable JSON: `dvc repro report` remakes it") from None
    return (details.get(claim_id) or {}).get("settling_design")


def plan_lines(target: SettleTarget, design: sizing.Design, budget: Budget, sd: float, tau2: float, source: str,
               effect_source: str, paper: bool) -> list[str]:
    """What `--plan` prints: the design and what sized it, each look's seeds, boundary and cost, and the chance of
    deciding at the planned effect and half of it."""
    plan, cap = design.plan, budget.max_seeds
    lines = [f"settle {target.claim_id}: {target.better} − {target.worse} ({target.column}) against margin {target.margin:+g}; "
             f"noise: sd {sd:.3f} per seed of the difference, τ {math.sqrt(tau2):.3f} ({source})",
             f"design: an effect of {design.effect:.3g} ({effect_source}) at {design.power:.0%} power; a single look needs "
             f"{design.fixed_seeds} seeds per arm, the sequential looks up to {design.designed_seeds}"]
    if paper:
        low, high = sizing.PAPER_TAU_BRACKET
        lines.append(f"the full test sets' pair noise τ {low}–{high} puts the floor at {sizing.pair_noise_floor(low ** 2, design.power):.3f}–"
                     f"{sizing.pair_noise_floor(high ** 2, design.power):.3f}: no number of seeds decides a smaller effect")
    budget_text = "no budget given" if budget.hours is None else f"budget {budget.hours:.3g} {budget.unit} (pays for {cap:,} seeds per arm)"
    lines.append(f"{budget_text}: {budget.per_seed:.3g} {budget.unit} per new seed, {budget.paid_seeds} seeds paid")
    if design.capped:
        lines.append(f"  the cap lowers the power at {design.effect:.3g} to {design.achieved_power:.0%} ({plan.looks[-1]} seeds per arm, "
                     f"not {design.designed_seeds})")
    lines.append(f"looks at {', '.join(map(str, plan.looks))} seeds per arm")
    for look, (seeds, z) in enumerate(zip(plan.looks, plan.boundaries_z)):
        hours = max(seeds - budget.paid_seeds, 0) * budget.per_seed
        lines.append(f"  look {look + 1}: {seeds} seeds per arm, boundary z {z:.3f} "
                     f"(a {plan.nominal_levels[look]:.4%} interval), {hours:.3g} {budget.unit} spent by then")
    for name, effect in (("the planned effect", design.effect), ("half of it", design.effect / 2)):
        run = sequential.simulate(plan, target.margin + effect, sd, tau2, target.margin, paired=True, trials=4000)
        fixed = sequential.fixed_design_seeds(effect, sd, tau2, paired=True, power=min(max(run.holds, 0.5), 0.999))
        lines.append(f"  at {name} ({effect:.3g}): decides {run.decided:.0%} (holds {run.holds:.0%}), "
                     f"{run.expected_seeds:.1f} seeds per arm expected; a single look at that power needs "
                     + (f"{fixed}" if fixed else "more seeds than any budget (pair noise)"))
    return lines


def _choose_design(target: SettleTarget, paper: bool, observed: dict, sd: float, tau2: float,
                   per_seed: float, unit: str, hours: float | None, max_seeds: int | None, effect: float | None,
                   power: float) -> tuple[Budget, sizing.Design, str, dict]:
    """(the budget, the design, where its effect comes from, the design as numbers). The published verdict is look 1
    of the claim's own design (the report's, reports/claims.json), continued here; another effect or power, or a
    claim with no published design, settles new seeds only, the published seeds set aside (docs/method.md)."""
    published = None if paper or effect is not None or power != sizing.DESIGN_POWER else published_design(target.claim_id)
    fresh = bool(observed) and published is None
    if fresh and effect is None and power == sizing.DESIGN_POWER:
        own = _design(target, *planned_effect(target, None)[:1], sd, tau2, power, None, len(observed))
        if len(own.plan.looks) == 1:
            raise PipelineError(f"{target.claim_id}: the published verdict's {len(observed)} seeds are its whole design (a single "
                                f"look needs {own.fixed_seeds} for {own.effect:.3g} at {own.power:.0%} power): nothing to settle; "
                                "give --effect E to settle a smaller effect on new seeds")
    costs = Budget(hours, per_seed, unit, 0 if fresh else len(observed))
    if costs.max_seeds is not None and costs.max_seeds < 2:
        raise PipelineError(f"--budget {hours:g} {unit} pays for {costs.max_seeds} seed per arm at {per_seed:.3g} each; "
                            "a look needs 2 (leave the budget out to see what the design needs)")
    cap = min([cap for cap in (costs.max_seeds, max_seeds) if cap is not None], default=None)
    if published is not None:
        return costs, sizing.design_of_record(published, cap), f"{published['effect_source']}, the published design", published
    effect_value, effect_source = planned_effect(target, effect)
    design = _design(target, effect_value, sd, tau2, power, cap, costs.paid_seeds)
    record = sizing.design_record(design, effect_source)
    if fresh:
        record |= {"new_seeds_only": True, "set_aside": sorted(observed), "combined_error": FRESH_COMBINED_ERROR}
    return costs, design, effect_source, record


def settle_command(claim_id: str, budget: float | None, max_seeds: int | None, plan_only: bool, scale: str | None,
                   params_file: Path = Path("params.yaml"), budget_gpu_hours: float | None = None,
                   effect: float | None = None, power: float = sizing.DESIGN_POWER) -> str:
    """Plan or run; the line a user reads last."""
    params = yaml.safe_load(params_file.read_text(encoding="utf-8"))
    paper = (scale or params["scale"]) == "paper"
    hours = checked_inputs(budget, budget_gpu_hours, max_seeds, effect, power, paper)
    target = settle_target(claim_id, params)
    if paper and params["scale"] != "paper" and not plan_only:
        raise PipelineError(f"the workspace runs the {params['scale']} scale: settle runs at the workspace's scale "
                            "(`--scale paper` plans only; compose the paper preset to run it)")
    sd, tau2, observed, source = _noise(target, params, paper, load_record())
    per_seed, unit = _price(target, params, paper)
    costs, design, effect_source, record = _choose_design(target, paper, observed, sd, tau2, per_seed, unit,
                                                          hours, max_seeds, effect, power)
    fresh = bool(record.get("new_seeds_only"))
    if plan_only:
        lines = plan_lines(target, design, costs, sd, tau2, source, effect_source, paper)
        return "\n".join(lines + ([FRESH_NOTE.format(seeds=len(observed))] if fresh else []))
    with settling_lock(target.claim_id):
        settling = run_settling(Settling(target, design.plan, costs, tau2, record), DvcSeeds(target, params, load_record()),
                                [] if fresh else list(observed), SETTLE_REPORTS, set_aside=list(observed) if fresh else [])
    last = settling.looks[-1]
    return (f"[settle] {claim_id}: {settling.outcome} after {last['seeds_per_arm']} seeds per arm "
            f"({last['hours_spent']:.3g} {unit}), Δ {last['difference']:+.3f} [{last['interval'][0]:.3f}, "
            f"{last['interval'][1]:.3f}] -> {SETTLE_REPORTS / (claim_id + '.json')}")

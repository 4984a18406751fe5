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
from pipeline.paths import METRICS_BOOTSTRAP
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
    unit = "GPU hours" if paper else TINY_UNIT
    if hours is not None and not (math.isfinite(hours) and hours > 0):
        raise PipelineError(f"--budget {hours:g}: a budget is a positive, finite number of {unit} (leave it out for no cap "
                            "but the design's own)")
    if max_seeds is not None and not 2 <= max_seeds <= sizing.MAX_SEEDS:
        raise PipelineError(f"--max-seeds {max_seeds}: from 2 (a look needs two) to {sizing.MAX_SEEDS:,} seeds per arm")
    if effect is not None and not (math.isfinite(effect) and effect > 0):
        raise PipelineError(f"--effect {effect:g}: the effect to detect is a positive number of the metric's points")
    if not (math.isfinite(power) and 0.5 <= power < 1):
        raise PipelineError(f"--power {power:g}: a power from 0.5 to below 1 (0.9 by default)")
    return hours


def planned_effect(target: SettleTarget, effect: float | None) -> tuple[float, str]:
    """(the effect the design detects, beyond the claim's margin; where it comes from): --effect, else the paper's
    gap beyond the margin, else the claim's margin and band (the difference of no change)."""
    if effect is not None:
        return effect, "--effect"
    if target.paper_gap is not None and abs(target.paper_gap) > target.margin:
        return abs(target.paper_gap) - target.margin, "the paper's gap"
    if target.margin or target.band:
        return abs(target.margin) + target.band, "the claim's margin and band"
    raise PipelineError(f"{target.claim_id}: the paper states no gap and the claim no margin or band: give --effect E, "
                        "the smallest difference worth detecting")


def _design(target: SettleTarget, effect: float, sd: float, tau2: float, power: float, cap: int | None,
            paid: int) -> sizing.Design:
    first = max(2, paid)
    try:
        return sizing.design(effect, sd, tau2, paired=True, power=power, cap=cap, first=first, first_fixed=paid >= 2)
    except ValueError as error:
        raise PipelineError(f"settle {target.claim_id}: {error}") from None


def plan_lines(target: SettleTarget, design: sizing.Design, budget: Budget, sd: float, tau2: float, source: str,
               effect_source: str, paper: bool) -> list[str]:
    """What `--plan` prints: the design and what sized it, each look's seeds, boundary and cost, and the chance of
    deciding at the planned effect and half of it."""
    plan, cap = design.plan, budget.max_seeds
    lines = [f"settle {target.claim_id}: {target.better} − {target.worse} ({target.column}) against margin {target.margin:+g}; "
             f"noise: sd {sd:.3f} per seed of the difference, τ {math.sqrt(tau2):.3f} ({source})",
             f"design: an effect of {design.effect:.3g} ({effect_source}) at {design.power:.0%} power; a single look needs "
             f"{design.fixed_seeds} seeds per arm, the looks {design.designed_seeds}"]
    if paper:
        low, high = sizing.PAPER_TAU_BRACKET
        lines.append(f"the full test sets' pair noise τ {low}–{high} puts the floor at {sizing.pair_noise_floor(low ** 2, design.power):.3f}–"
                     f"{sizing.pair_noise_floor(high ** 2, design.power):.3f}: no number of seeds decides a smaller effect")
    budget_text = "no budget given" if budget.hours is None else f"budget {budget.hours:.3g} {budget.unit} (pays for {cap} seeds per arm)"
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
    costs = Budget(hours, per_seed, unit, len(observed))
    caps = [cap for cap in (costs.max_seeds, max_seeds) if cap is not None]
    effect_value, effect_source = planned_effect(target, effect)
    design = _design(target, effect_value, sd, tau2, power, min(caps) if caps else None, len(observed))
    if plan_only:
        return "\n".join(plan_lines(target, design, costs, sd, tau2, source, effect_source, paper))
    with settling_lock(target.claim_id):
        settling = run_settling(Settling(target, design.plan, costs, tau2, design_record(design, effect_source)),
                                DvcSeeds(target, params, load_record()), list(observed), SETTLE_REPORTS)
    last = settling.looks[-1]
    return (f"[settle] {claim_id}: {settling.outcome} after {last['seeds_per_arm']} seeds per arm "
            f"({last['hours_spent']:.3g} {unit}), Δ {last['difference']:+.3f} [{last['interval'][0]:.3f}, "
            f"{last['interval'][1]:.3f}] -> {SETTLE_REPORTS / (claim_id + '.json')}")


def design_record(design: sizing.Design, effect_source: str) -> dict:
    """What sized the plan, for reports/settle/<claim id>.json."""
    return {"effect": design.effect, "effect_source": effect_source, "power": design.power, "fixed_seeds": design.fixed_seeds,
            "designed_seeds": design.designed_seeds, "capped": design.capped,
            "achieved_power": round(design.achieved_power, 4), "expected_seeds": round(design.expected_seeds, 3)}

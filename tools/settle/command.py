"""`python -m stages settle <claim id>`: plan a settling (`--plan`) or run it.

The noise a plan is sized with: at the tiny scale the committed seed record's within-run difference
of the two models (its sd, measured) and the workspace's bootstrap pair noise of that difference (τ);
at paper scale the paper-scale prior per run (the difference of two independent runs: √2 × sd) and no
pair noise (the full test sets' pair noise is not recorded anywhere the plan reads).
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
from pipeline.verdicts import sequential
from pipeline.verdicts.estimates import PAPER_SCALE_PRIOR
from tools.settle.rounds import DvcSeeds, record_observations
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
    """(sd of the within-run difference, τ², the record's observations, where the noise comes from)."""
    if paper:
        return math.sqrt(2) * PAPER_SCALE_PRIOR.sd, 0.0, {}, f"{PAPER_SCALE_PRIOR.source}, × √2 for a difference; no pair noise"
    observed = record_observations(record, target, params)
    if len(observed) < 2:
        raise PipelineError("the committed seed record (reports/seed_noise.json) does not hold the workspace's settings and "
                            f"both {target.better} and {target.worse}: `python scripts/seed_noise.py --seeds 42 1 --run` first")
    sd = float(np.std(differences(observed, list(observed), target.lower_is_better), ddof=1))
    return sd, pair_variance(target), observed, f"the seed record's {len(observed)} seeds and this run's bootstrap"


def _budget(target: SettleTarget, params: dict, paper: bool, paid: int, hours: float | None, max_seeds: int | None) -> Budget:
    if paper:
        per_seed, unit = paper_hours_per_seed(target, measured_gpu_costs()), "GPU hours"
    else:
        per_seed, unit = tiny_seconds_per_seed(target, params) / 3600, TINY_UNIT
    if (hours is None) == (max_seeds is None):
        raise PipelineError("give one of --budget-gpu-hours H and --max-seeds N")
    if max_seeds is not None:
        hours = max(max_seeds - paid, 0) * per_seed
    budget = Budget(hours, per_seed, unit, paid)
    if budget.max_seeds < 2:
        raise PipelineError(f"{hours:g} {unit} pays for {budget.max_seeds} seed per arm at {per_seed:.3g} each; a look needs 2")
    return budget


def plan_lines(target: SettleTarget, plan: sequential.SequentialPlan, budget: Budget, sd: float, tau2: float,
               source: str) -> list[str]:
    """What `--plan` prints: each look's seeds and hours, and the chance of deciding at the paper's gap and half of it."""
    lines = [f"settle {target.claim_id}: {target.better} − {target.worse} ({target.column}) against margin {target.margin:+g}; "
             f"noise: sd {sd:.3f} per seed of the difference, τ {math.sqrt(tau2):.3f} ({source})",
             f"budget {budget.hours:.3g} {budget.unit}: {budget.per_seed:.3g} per new seed, {budget.paid_seeds} seeds paid; "
             f"looks at {', '.join(map(str, plan.looks))} seeds per arm"]
    for look, (seeds, z) in enumerate(zip(plan.looks, plan.boundaries_z)):
        hours = max(seeds - budget.paid_seeds, 0) * budget.per_seed
        lines.append(f"  look {look + 1}: {seeds} seeds per arm, boundary z {z:.3f} "
                     f"(a {plan.nominal_levels[look]:.4%} interval), {hours:.3g} {budget.unit} spent by then")
    gaps = [("the paper's gap", target.paper_gap), ("half of it", None if target.paper_gap is None else target.paper_gap / 2)]
    for name, gap in gaps:
        if gap is None:
            lines.append(f"  {name}: the paper states none")
            continue
        effect = target.margin + abs(gap)
        run = sequential.simulate(plan, effect, sd, tau2, target.margin, paired=True, trials=4000)
        fixed = sequential.fixed_design_seeds(abs(gap), sd, tau2, paired=True)
        lines.append(f"  at {name} ({abs(gap):.2f}): decides {run.decided:.0%} (holds {run.holds:.0%}), "
                     f"{run.expected_seeds:.1f} seeds per arm expected; a single look needs "
                     + (f"{fixed} seeds for 80 %" if fixed else "more seeds than any budget (pair noise)"))
    return lines


def settle_command(claim_id: str, hours: float | None, max_seeds: int | None, plan_only: bool, scale: str | None,
                   params_file: Path = Path("params.yaml")) -> str:
    """Plan or run; the line a user reads last."""
    params = yaml.safe_load(params_file.read_text(encoding="utf-8"))
    target = settle_target(claim_id, params)
    paper = (scale or params["scale"]) == "paper"
    record = load_record()
    sd, tau2, observed, source = _noise(target, params, paper, record)
    budget = _budget(target, params, paper, len(observed), hours, max_seeds)
    plan = sequential.plan(budget.max_seeds)
    if plan_only:
        return "\n".join(plan_lines(target, plan, budget, sd, tau2, source))
    if paper and params["scale"] != "paper":
        raise PipelineError(f"the workspace runs the {params['scale']} scale: settle runs at the workspace's scale "
                            "(`--scale paper` plans only; compose the paper preset to run it)")
    settling = run_settling(Settling(target, plan, budget, tau2), DvcSeeds(target, params, record),
                            list(observed), SETTLE_REPORTS)
    last = settling.looks[-1]
    return (f"[settle] {claim_id}: {settling.outcome} after {last['seeds_per_arm']} seeds per arm "
            f"({last['hours_spent']:.3g} {budget.unit}), Δ {last['difference']:+.3f} [{last['interval'][0]:.3f}, "
            f"{last['interval'][1]:.3f}] -> {SETTLE_REPORTS / (claim_id + '.json')}")

"""The settling loop: looks in the plan's order, a round of new seeds before each look that needs them,
the sequential rule at each look, a stop when the claim is decided, futile or the budget spent.

Every look is written to `reports/settle/<claim id>.json` as soon as it is judged (a kill keeps the
looks made), with a figure of the interval narrowing against the boundaries.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pipeline.io import write_json_atomic
from pipeline.writeup.decidability import SETTLED_CLAIMS
from pipeline.verdicts import sequential
from tools.settle.rounds import SeedSource, seed_order
from tools.settle.target import SettleTarget

SETTLE_REPORTS = SETTLED_CLAIMS
STOPS = ("holds", "contradicted", "futile")


@dataclass
class Budget:
    """What a settling may spend: `hours` of `unit` (GPU hours at paper scale; this machine's CPU hours at the
    tiny scale; None: no cap but the design's), `per_seed` of them for each new seed, and the seeds already paid
    for (the committed record's)."""

    hours: float | None
    per_seed: float
    unit: str
    paid_seeds: int

    @property
    def max_seeds(self) -> int | None:
        """Seeds per arm the budget reaches: the paid ones and as many new ones as the hours pay for (None: no cap)."""
        if self.hours is None:
            return None
        new = math.floor(min(self.hours / self.per_seed, 1e12) + 1e-9) if self.per_seed > 0 else 0
        return self.paid_seeds + new


@dataclass
class Settling:
    target: SettleTarget
    plan: "sequential.SequentialPlan"
    budget: Budget
    tau2: float
    design: dict | None = None  # what the plan was sized from (`sizing.Design`, as numbers)
    looks: list[dict] = field(default_factory=list)
    outcome: str = "not started"

    def record(self) -> dict:
        """What reports/settle/<claim id>.json holds."""
        last = self.looks[-1] if self.looks else None
        spent = last["hours_spent"] if last else 0.0
        return {
            "claim": self.target.claim_id, "better": self.target.better, "worse": self.target.worse,
            "column": self.target.column, "margin": self.target.margin, "lower_is_better": self.target.lower_is_better,
            "budget": {"hours": self.budget.hours, "unit": self.budget.unit, "per_seed": round(self.budget.per_seed, 6),
                       "paid_seeds": self.budget.paid_seeds, "max_seeds_per_arm": self.budget.max_seeds},
            "tau": round(math.sqrt(self.tau2), 6), "design": self.design,
            "plan": {"looks": list(self.plan.looks), "boundaries_z": [round(z, 6) for z in self.plan.boundaries_z]},
            "looks": self.looks, "outcome": self.outcome,
            "seeds_per_arm": last["seeds_per_arm"] if last else 0, "hours_spent": round(spent, 6),
        }


def differences(observations: dict[int, tuple[float, float]], seeds: list[int], lower_is_better: bool) -> np.ndarray:
    """better − worse per seed (worse − better where lower is better): the improvement the claim asserts."""
    values = np.array([observations[seed] for seed in seeds], dtype=float)
    improvement = values[:, 0] - values[:, 1]
    return -improvement if lower_is_better else improvement


def run_settling(settling: Settling, source: SeedSource, recorded: list[int], output: Path | None = None,
                 set_aside: list[int] | None = None) -> Settling:
    """Look after look: run the seeds a look lacks (if the budget pays for them), judge, write; stop when decided,
    futile, or when the next look is past the budget. `set_aside`: seeds a published verdict saw, never used here."""
    order = seed_order(recorded, settling.plan.looks[-1] - len(recorded), exclude=set_aside or [])
    observed = source.observed()  # read again only after a round: a DVC source reads every experiment to answer
    for index, seeds_at_look in enumerate(settling.plan.looks):
        seeds = order[:seeds_at_look]
        missing = [seed for seed in seeds if seed not in observed]
        if missing:
            pending = source.pending()
            source.queue([seed for seed in missing if seed not in pending])
            source.wait(missing)
            observed = source.observed()
            lost = [seed for seed in missing if seed not in observed]
            if lost:
                raise RuntimeError(f"seeds {lost} finished without the numbers of {settling.target.better} and {settling.target.worse}")
        look = sequential.judge_look(settling.plan, index, differences(observed, seeds, settling.target.lower_is_better),
                                     None, settling.tau2, settling.target.margin, paired=True)
        new_seeds = [seed for seed in seeds if seed not in recorded]
        look.update(seed_list=seeds, hours_spent=round(len(new_seeds) * settling.budget.per_seed, 6))
        settling.looks.append(look)
        settling.outcome = look["decision"]
        if output is not None:
            write_settling(settling, output)  # each look as it is judged: a kill keeps the looks made
        if look["decision"] in STOPS:
            break  # decided, or futile; past the last look the outcome is its verdict (inconclusive: budget spent)
    return settling


def write_settling(settling: Settling, folder: Path = SETTLE_REPORTS) -> Path:
    """reports/settle/<claim id>.json and its figure beside it."""
    path, record = folder / f"{settling.target.claim_id}.json", settling.record()
    write_json_atomic(path, record)
    if settling.looks:
        from tools.settle.figure import looks_figure

        looks_figure(record, path.with_suffix(".png"))
    return path

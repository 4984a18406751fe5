"""What settling a claim compares and what one more seed of it costs.

An order claim between two models of the run (`claims.yaml`, kind `order`, both subjects a `model`
of the workspace's settings) is settled on the paired within-run difference of its metric: both arms
come from one run per training seed. One seed costs the stage instances upstream of the two models'
`evaluate@<model>`: at paper scale their GPU hours from the measured steps (`reports/bench-gpu.json`,
`tools.gpu_hours`), at the tiny scale this machine's measured seconds of those stages
(`reports/bench.json`, the fresh-clone pipeline section).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import PipelineError
from pipeline.paths import REPORTS
from pipeline.reporting.runs import param_at, requirement
from pipeline.reporting.spec import load_tables
from pipeline.verdicts.claims_file import load_claims
from pipeline.verdicts.kinds.order import OrderClaim
from tools.gpu_hours import MeasuredCosts, Producers, StageInstance, compose_paper_params, plan_run, stage_instances

BENCH_GPU = REPORTS / "bench-gpu.json"
BENCH_CPU = REPORTS / "bench.json"


@dataclass(frozen=True)
class SettleTarget:
    """One order claim as settling reads it: better − worse of `column`, over paired seeds, against `margin`."""

    claim_id: str
    better: str  # the models of the registry
    worse: str
    column: str
    margin: float
    lower_is_better: bool
    backbone: str
    paper_gap: float | None
    band: float = 0.0  # a banded metric's: the difference must clear it as well as the margin

    @property
    def stages(self) -> list[str]:
        """The stages a new seed reruns: both models' evaluations (and what they need, DVC runs it)."""
        return [f"evaluate@{self.better}", f"evaluate@{self.worse}"]


def settle_target(claim_id: str, params: dict) -> SettleTarget:
    """The claim of `claims.yaml` named `claim_id` as a `SettleTarget`; one line and exit 2 for a claim that
    is unknown or of a kind settling does not run."""
    tables = load_tables()
    claims = load_claims(tables, params).claims
    found = [claim for claim in claims if claim.id == claim_id]
    if not found:
        raise PipelineError(f"no claim {claim_id!r} in claims.yaml; `grep 'id:' claims.yaml` lists them")
    claim = found[0]
    if not isinstance(claim, OrderClaim):
        raise PipelineError(f"{claim_id} is a {claim.kind} claim; settle runs order claims between two models of the run")
    subjects = (claim.better, claim.worse)
    if any(subject.model is None or subject.column or not _workspace_settings(subject.overrides(), params) for subject in subjects):
        raise PipelineError(f"{claim_id} compares {claim.better.label} and {claim.worse.label}, not two models of the "
                            "workspace's run on one metric; settle runs those")
    return SettleTarget(claim_id, claim.better.model, claim.worse.model, claim.metric, claim.judged_margin(),
                        claim.lower_is_better, claim.backbone, claim.paper_gap())


def _workspace_settings(overrides: list[str], params: dict) -> bool:
    """Whether a subject's experiment overrides are all the workspace's own values (its run is the workspace's)."""
    return all(param_at(params, (wanted := requirement(override, params)).key) == wanted.value for override in overrides)


def upstream(targets: list[str], instances: list[StageInstance]) -> list[StageInstance]:
    """The stage instances `targets` need, themselves included, in dvc.yaml order."""
    producer, by_name = Producers(instances), {instance.name: instance for instance in instances}
    needed, todo = set(), list(targets)
    while todo:
        name = todo.pop()
        if name in needed:
            continue
        needed.add(name)
        todo += [found.name for dep in by_name[name].deps if (found := producer(dep)) is not None and found.name != name]
    return [instance for instance in instances if instance.name in needed]


def tiny_seconds_per_seed(target: SettleTarget, params: dict, bench_file: Path = BENCH_CPU) -> float:
    """Wall seconds of one seed on this machine kind: the measured seconds of the stages it reruns."""
    if not bench_file.is_file():
        raise PipelineError(f"{bench_file} not found: the per-stage seconds price a seed; run `python -m stages bench "
                            f"--section pipeline --output {bench_file}`")
    measured = json.loads(bench_file.read_text(encoding="utf-8")).get("pipeline", {}).get("stages", {})
    needed = [instance.name for instance in upstream(target.stages, stage_instances(params))
              if instance.stage not in ("download", "rtt")]  # the inputs are the workspace's, not rerun per seed
    missing = [name for name in needed if name not in measured]
    if missing:
        raise PipelineError(f"{bench_file} has no seconds of {', '.join(missing)}; rerun the bench's pipeline section")
    return float(sum(measured[name]["wall_s"] for name in needed))


def paper_hours_per_seed(target: SettleTarget, measured: MeasuredCosts) -> float:
    """GPU hours of one seed at paper scale: the planned run's instances the two evaluations need."""
    run = plan_run(target.backbone, [], measured)
    params = compose_paper_params(target.backbone)
    names = {instance.name for instance in upstream(target.stages, stage_instances(params))}
    seconds = sum(cost for cost, how in run.costs.values() if how.split(":")[0] in names)
    return seconds / 3600


def measured_gpu_costs(report_file: Path = BENCH_GPU) -> MeasuredCosts:
    """The measured steps of the committed GPU check (`reports/bench-gpu.json`) as `tools.gpu_hours` prices them."""
    from tools.gpu_check.cost_table import measured_costs

    if not report_file.is_file():
        raise PipelineError(f"{report_file} not found: paper-scale seeds are priced from the GPU check's measured steps")
    report = json.loads(report_file.read_text(encoding="utf-8"))
    measured = measured_costs(report.get("throughput", {}), report.get("cost", {}).get("device", "?"),
                              report.get("cost", {}).get("precision", "bf16"))
    if isinstance(measured, str):
        raise PipelineError(f"{report_file}: {measured}")
    return measured

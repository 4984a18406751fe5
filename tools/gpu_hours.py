"""The GPU hours of the papers' tables at paper scale, from measured seconds per step (issue 41).

docs/tables.md, "The tables and what they cost at paper scale", says how: one epoch of Wiki1M per
training stage at the paper preset's batch sizes (`planned_steps`, the training loop's own count),
each step's seconds, the STS-B dev evaluations of model selection, and one encoder pass over the
seven test sets per tower evaluated; a table costs the experiments its rows need. What one experiment
reruns is what DVC reruns: a stage instance of dvc.yaml runs again only when the params it declares,
or an upstream instance, differ from a run already made (DVC's run cache), so experiments share
every stage their settings do not change, and each instance is counted once, under the first table
that needs it ("experiments it adds").

Nothing here needs dvc or Hydra (the GPU machine has neither): the paper preset is composed from
`conf/` as Hydra composes it for `-S backbone=<b> -S scale=paper` (the base config, then the backbone
and scale presets merged into it; lists replaced), and dvc.yaml is read as YAML with its `${...}`
placeholders filled from the composed params.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from pipeline.config import Params
from pipeline.params_file import parse_params
from pipeline.errors import PipelineError
from pipeline.evaluated_models import TRAINING_STAGES, all_models
from pipeline.reporting.runs import param_at, requirement
from pipeline.reporting.spec import TablesFile, load_tables
from pipeline.training.loop import planned_steps

WIKI1M_LINES = 1_000_000  # princeton-nlp's wiki1m_for_simcse.txt (data.wiki.limit: null)
STSB_DEV_PAIRS = 1_500  # STS-B dev, what model selection scores every eval_every steps
PAPER_SCALE = "paper"
METHOD = ("docs/tables.md: one Wiki1M epoch per training stage at the paper preset's batch sizes x measured s/step, "
          "+ STS-B dev evaluations, + one encoder pass over the seven test sets per evaluated tower; each dvc.yaml stage "
          "instance counted once over all tables (DVC's run cache), under the first table that needs it "
          "(gpu_hours_added; gpu_hours_needed: all the table's runs alone)")
NOT_COUNTED = ("download: the hub; rtt: Google round trips, network-bound (hours of wall time, cached), no GPU; "
               "checkpoints, analyze, report: minutes; MTEB suites (eval.mteb.enabled): not measured, see docs/tables.md")


def _merge(base: dict, preset: Mapping) -> dict:
    """`preset` merged into `base` as Hydra merges a `@package _global_` preset: mappings key by key, the rest replaced."""
    for key, value in preset.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = copy.deepcopy(value)
    return base


def _set(raw: dict, key: str, value: Any) -> None:
    *parents, leaf = key.split(".")
    for part in parents:
        raw = raw.setdefault(part, {})
    raw[leaf] = value


def paper_backbones(conf: Path = Path("conf")) -> tuple[str, ...]:
    """The papers' backbones: the presets of conf/backbone/ that name one (`backbone.title`; a stand-in has none)."""
    return tuple(sorted(preset.stem for preset in (conf / "backbone").glob("*.yaml")
                        if (_read_yaml(preset) or {}).get("backbone", {}).get("title")))


def compose_paper_params(backbone: str, overrides: list[str] = (), conf: Path = Path("conf")) -> dict:
    """params.yaml of `dvc exp run -S scale=paper -S backbone=<backbone> -S <override> ...`, validated."""
    base = copy.deepcopy(_read_yaml(conf / "config.yaml"))
    base.pop("defaults", None)
    for group, option in (("backbone", backbone), ("scale", PAPER_SCALE)):
        preset = conf / group / f"{option}.yaml"
        if not preset.is_file():
            raise PipelineError(f"no preset {preset}: {group}={option} is not one of conf/{group}/")
        _merge(base, _read_yaml(preset) or {})
    for override in overrides:
        wanted = requirement(override, base)
        _set(base, wanted.key, wanted.value)
    parse_params(base)  # an impossible combination fails here, in one line
    return base


# ---- dvc.yaml's stage instances ---------------------------------------------------------------------

_PLACEHOLDER = re.compile(r"\$\{([^}]+)\}")


@dataclass(frozen=True)
class StageInstance:
    name: str  # as dvc names it: pretrain@I, evaluate@uc
    stage: str  # the dvc.yaml stage: pretrain
    key: str | None  # the foreach key: I
    params: tuple[str, ...]
    deps: tuple[str, ...]
    outs: tuple[str, ...]


def _fill(text: str, params: dict, key: str | None, item: Any) -> str:
    def value(match: re.Match) -> str:
        path = match[1]
        if path == "key":
            return str(key)
        if path.startswith("item."):
            return str(item[path.removeprefix("item.")])
        return str(param_at(params, path))

    return _PLACEHOLDER.sub(value, text)


def _names(entries: list) -> list[str]:
    """dvc.yaml lists hold strings or one-key mappings (a path with its options)."""
    return [entry if isinstance(entry, str) else next(iter(entry)) for entry in entries or []]


@functools.lru_cache(maxsize=8)
def _read_yaml(path: Path) -> dict:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def stage_instances(params: dict, dvc_file: Path = Path("dvc.yaml")) -> list[StageInstance]:
    """Every stage instance of dvc.yaml (a `foreach` expanded over its params mapping), in file order."""
    stages = _read_yaml(dvc_file)["stages"]
    instances = []
    for stage, body in stages.items():
        if "foreach" in body:
            items = param_at(params, _PLACEHOLDER.fullmatch(body["foreach"])[1])
            expanded = [(f"{stage}@{key}", key, item, body["do"]) for key, item in items.items()]
        else:
            expanded = [(stage, None, None, body)]
        for name, key, item, spec in expanded:
            fill = lambda entries: tuple(_fill(entry, params, key, item) for entry in _names(entries))  # noqa: E731
            instances.append(StageInstance(name, stage, key, fill(spec.get("params")), fill(spec.get("deps")),
                                           fill(spec.get("outs")) + fill(_names(spec.get("metrics"))) + fill(_names(spec.get("plots")))))
    return instances


class Producers:
    """Which instance's output holds a path (the output itself or a folder above it)."""

    def __init__(self, instances: list[StageInstance]):
        self.by_output = {out.rstrip("/"): instance for instance in instances for out in instance.outs}

    def __call__(self, path: str) -> StageInstance | None:
        candidate = Path(path)
        for folder in (candidate, *candidate.parents):
            if folder.as_posix() in self.by_output:
                return self.by_output[folder.as_posix()]
        return None


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


def run_identities(params: dict, instances: list[StageInstance]) -> dict[str, str]:
    """Instance name -> what DVC's run cache keys it by here: its params' values and its upstream instances'
    identities (code and data files are the same for every experiment of one commit)."""
    identities: dict[str, str] = {}
    producer = Producers(instances)

    def identity(instance: StageInstance) -> str:
        if instance.name not in identities:
            upstream = sorted({identity(found) for dep in instance.deps
                               if (found := producer(dep)) is not None and found is not instance})
            identities[instance.name] = _digest([instance.stage, instance.key,
                                                 [(key, param_at(params, key)) for key in instance.params], upstream])
        return identities[instance.name]

    for instance in instances:
        identity(instance)
    return identities


# ---- the measured inputs and one instance's seconds ----------------------------------------------------


@dataclass(frozen=True)
class StepTiming:
    """Seconds of one optimizer step measured at a batch × length."""

    seconds: float
    batch_size: int
    max_length: int


@dataclass(frozen=True)
class MeasuredCosts:
    """What the GPU run measured. `steps` by kind: `pretrain`, `tncse`, `jtcse-<cael>`, `distill`, each
    optionally per backbone as `<kind>@<backbone>` (the RoBERTa twin); `eval_sentences_per_s` of the
    evaluator and `eval_sentences`, the sentences of one pass over the seven test sets."""

    steps: Mapping[str, StepTiming]
    eval_sentences_per_s: float
    eval_sentences: int
    precision: str  # what the steps computed in
    device: str

    def step_seconds(self, kind: str, backbone: str, batch_size: int, max_length: int) -> tuple[float, str]:
        """(seconds per step at this shape, how it was derived). A shape not measured is scaled by the tokens
        per step (batch × length) from the measured one of that kind, on this backbone if measured, else BERT's;
        a CAEL count not measured is interpolated linearly between TNCSE (0) and the nearest measured count."""
        if kind.startswith("jtcse-") and not any(name.split("@")[0] == kind for name in self.steps):
            cael = int(kind.removeprefix("jtcse-"))
            measured = sorted(int(name.split("@")[0].removeprefix("jtcse-")) for name in self.steps if name.startswith("jtcse-"))
            if not measured:
                raise PipelineError(f"no JTCSE step was measured: {kind} has no basis")
            nearest = min(measured, key=lambda count: (abs(count - cael), count))
            base, _ = self.step_seconds("tncse", backbone, batch_size, max_length)
            cross, _ = self.step_seconds(f"jtcse-{nearest}", backbone, batch_size, max_length)
            return base + (cross - base) * cael / nearest, f"interpolated between tncse and jtcse-{nearest}"
        name = f"{kind}@{backbone}" if f"{kind}@{backbone}" in self.steps else kind
        if name not in self.steps:
            raise PipelineError(f"no {kind} step was measured: it is the basis of the {kind} stages' cost")
        timing = self.steps[name]
        ratio = batch_size * max_length / (timing.batch_size * timing.max_length)
        how = f"measured {name} {timing.batch_size}x{timing.max_length}" + ("" if ratio == 1 else f", scaled x{ratio:g} by tokens")
        return timing.seconds * ratio, how


def _training_seconds(instance: StageInstance, settings: Params, measured: MeasuredCosts) -> tuple[float, str]:
    if instance.stage == "pretrain":
        section, kind = settings.pretrain, "pretrain"
    elif instance.stage in ("joint", "jtcse"):
        section = settings.jtcse_train if instance.stage == "jtcse" else settings.train
        kind = "tncse" if section.cael == 0 else f"jtcse-{section.cael}"
    elif instance.stage == "baseline":  # the seed papers' SimCSE / GS-InfoNCE: a SimCSE step, as pretraining's
        section, kind = settings.baselines[instance.key], "pretrain"
    else:
        section, kind = settings.distill.teachers[instance.key], "distill"
    examples = settings.data.wiki.limit or WIKI1M_LINES
    _, steps = planned_steps(examples, section, instance.name)
    step, how = measured.step_seconds(kind, settings.backbone.name, section.batch_size, section.max_length)
    evaluations = steps // section.eval_every + (1 if section.eval_at_end else 0)
    dev = evaluations * 2 * STSB_DEV_PAIRS / measured.eval_sentences_per_s
    return steps * step + dev, f"{steps} steps x {step:.4g} s ({how}) + {evaluations} STS-B dev evaluations"


def _tower_passes(instance: StageInstance, settings: Params, instances: list[StageInstance],
                  identities: Mapping[str, str]) -> list[str]:
    """The towers an evaluate instance encodes, each named by what the embedding store keys it by: the
    tower (its producer's identity and folder), the pooler and the length."""
    towers = all_models(settings.uc_weight)[instance.key].folders
    eval_key = (settings.eval.pooler, settings.eval.max_length)
    producer = Producers(instances)
    return [_digest([identities[producer(tower).name], tower, eval_key]) for tower in towers]


# ---- the plan of every table ---------------------------------------------------------------------------


def table_runs(tables: TablesFile, table_id: str) -> list[tuple[str, list[str]]]:
    """(backbone, overrides) of each run a table's rows come from at paper scale (its rows without an
    experiment: the backbone's default run, with the table's own overrides)."""
    spec = tables.tables[table_id]
    runs = []
    for row in spec.rows:
        extra = (row.experiment.overrides + row.experiment.paper_overrides) if row.experiment else []
        run = (spec.backbone, list(dict.fromkeys(spec.overrides + extra)))
        if run not in runs:
            runs.append(run)
    return runs


@dataclass
class PlannedRun:
    """One experiment's GPU stage instances: {run-cache identity: (seconds, what)}; an evaluate instance
    counts one entry per tower it encodes (the embedding store shares a tower's rows across models and runs)."""

    backbone: str
    overrides: list[str]
    costs: dict[str, tuple[float, str]] = field(default_factory=dict)


def plan_run(backbone: str, overrides: list[str], measured: MeasuredCosts, conf: Path = Path("conf"),
             dvc_file: Path = Path("dvc.yaml")) -> PlannedRun:
    raw = compose_paper_params(backbone, overrides, conf)
    settings = parse_params(raw)
    instances = stage_instances(raw, dvc_file)
    identities = run_identities(raw, instances)
    pass_seconds = measured.eval_sentences / measured.eval_sentences_per_s
    run = PlannedRun(backbone, list(overrides))
    for instance in instances:
        if instance.stage in TRAINING_STAGES:
            seconds, how = _training_seconds(instance, settings, measured)
            run.costs[identities[instance.name]] = (seconds, f"{instance.name}: {how}")
        elif instance.stage == "evaluate":
            for tower in _tower_passes(instance, settings, instances, identities):
                run.costs.setdefault(tower, (pass_seconds, f"{instance.name}: one tower pass"))
    return run


def paper_cost(measured: MeasuredCosts, tables_file: Path = Path("tables.yaml"), conf: Path = Path("conf"),
               dvc_file: Path = Path("dvc.yaml")) -> dict:
    """GPU hours of every table of `tables_file` at paper scale and of all of them (module docstring).
    A run that cannot be composed (12 CAELs of a 6-layer backbone) is listed under the table's `not_applicable`."""
    tables = load_tables(tables_file)
    seen: set[str] = set()
    results: dict[str, dict] = {}
    for table_id in tables.tables:
        needed: dict[str, float] = {}
        runs, not_applicable = [], []
        for backbone, overrides in table_runs(tables, table_id):
            try:
                run = plan_run(backbone, overrides, measured, conf, dvc_file)
            except PipelineError as error:
                not_applicable.append({"run": [f"backbone={backbone}", *overrides], "reason": str(error)})
                continue
            runs.append([f"backbone={backbone}", *overrides])
            needed.update({identity: seconds for identity, (seconds, _) in run.costs.items()})
        added = sum(seconds for identity, seconds in needed.items() if identity not in seen)
        seen.update(needed)
        results[table_id] = {
            "runs": runs,
            "gpu_hours_needed": round(sum(needed.values()) / 3600, 2),
            "gpu_hours_added": round(added / 3600, 2),
            **({"not_applicable": not_applicable} if not_applicable else {}),
        }
    total = sum(table["gpu_hours_added"] for table in results.values())
    return {
        "device": measured.device,
        "precision": measured.precision,
        "tables": results,
        "gpu_hours_total": round(total, 1),
        "per_run": {backbone: run_breakdown(plan_run(backbone, [], measured, conf, dvc_file)) for backbone in paper_backbones(conf)},
        "not_counted": NOT_COUNTED,
        "method": METHOD,
    }


def run_breakdown(run: PlannedRun) -> dict[str, float]:
    """GPU hours of each stage instance of one whole run, and their sum."""
    hours: dict[str, float] = {}
    for seconds, how in run.costs.values():
        name = how.split(":")[0]
        hours[name] = hours.get(name, 0.0) + seconds / 3600
    return {**{name: round(value, 3) for name, value in hours.items()}, "total": round(sum(hours.values()), 2)}

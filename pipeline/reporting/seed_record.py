"""The committed seed record, `reports/seed_noise.json`: the same pipeline run at several training
seeds, one number per seed for every model and column a claim reads.

A fresh clone has no DVC experiments, so the spread of a model over training seeds is committed
instead, measured with `python scripts/seed_noise.py` (docs/reproducing.md, "Seed noise"). The report reads it as
the training-seed arms of its claims when the record was made with the run's settings: equal in every
setting that changes results, the training seed and `SETTINGS_NOT_CHANGING_RESULTS` aside. Because
`eval.seed` draws the test pairs and the bootstrap indices, the seed runs share them (`indices`), and
a model's spread over the record's seeds is training noise alone.

Layout: {"scale", "backbone", "settings" (the digest), "eval_seed", "indices", "seeds": [s₁, …],
"commands", "environment", "models": {model: {column: [value at s₁, …]}}, "sd": {model: {column:
sd}}, "df"}.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from pipeline.params_file import parse_params
from pipeline.errors import PipelineError
from pipeline.io import dotted_leaves
from pipeline.paths import REPORTS

SEED_NOISE = REPORTS / "seed_noise.json"
# Settings that move no result beyond float bits or where an input is read from (docs/method.md, "Claims and verdicts":
# the "strict equality over every setting that changes results" leaves these out): the training seed is what
# varies within an arm; threads, device and the evaluator's batching change only the last bits (as a
# seed does, and far less); the mirror and hub are places the same verified bytes come from.
SETTINGS_NOT_CHANGING_RESULTS = (
    "seed", "threads", "device", "data.hub_endpoint", "rtt.workers", "rtt.endpoint", "eval.token_budget",
)  # fmt: skip
# the same, by its name in any section: which CUDA kernels run (a CPU's are deterministic anyway), as `threads`
SETTING_NAMES_NOT_CHANGING_RESULTS = ("deterministic",)


def settings_digest(params: dict[str, Any]) -> str:
    """A digest of every setting that changes results: runs of one arm have the same. The params are
    read as the stages read them (defaults filled in), so params.yaml as written and as loaded agree."""
    try:
        params = parse_params(params, of_a_past_run=True).model_dump(mode="json")
    except PipelineError:  # a run of another version's settings: its params as written
        pass
    kept = {key: value for key, value in dotted_leaves(params).items()
            if not any(key == skip or key.startswith(skip + ".") for skip in SETTINGS_NOT_CHANGING_RESULTS)
            and key.rsplit(".", 1)[-1] not in SETTING_NAMES_NOT_CHANGING_RESULTS}
    return hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()


@dataclass(frozen=True)
class SeedRecord:
    scale: str
    backbone: str
    settings: str
    seeds: list[int]
    values: dict[str, dict[str, list[float]]]
    source: str = str(SEED_NOISE)

    def matches(self, params: dict[str, Any]) -> bool:
        """Whether runs with `params` belong to the record's arms (same settings, any training seed)."""
        return settings_digest(params) == self.settings

    def arm(self, model: str, column: str) -> np.ndarray | None:
        """The model's column at every recorded seed, or None when the record lacks it."""
        found = self.values.get(model, {}).get(column)
        if found is None or len(found) != len(self.seeds) or any(value is None for value in found):
            return None
        return np.asarray(found, dtype=float)

    def describe(self) -> str:
        return f"measured: {len(self.seeds)} seeds ({self.source})"


def build_record(runs: Sequence[Any], models: Sequence[str], columns: Sequence[str], commands: list[str],
                 environment: dict[str, Any]) -> dict[str, Any]:
    """The record of seed runs (`pipeline.reporting.runs.Run`s of one setting, each its own training
    seed): every model's `columns` per seed, their sd and df. Refuses runs of different settings or
    with different bootstrap indices (they would not share the test pairs)."""
    if len(runs) < 2:
        raise PipelineError(f"a seed record needs two seed runs or more; found {len(runs)}")
    digests = {settings_digest(run.params) for run in runs}
    if len(digests) != 1:
        raise PipelineError("the seed runs differ in a setting other than the training seed; run them from one commit and params")
    ordered = sorted(runs, key=lambda run: run.params["seed"])
    indices = {(run.resamples(models[0]) or {}).get("indices") for run in ordered}
    if len(indices) != 1:
        raise PipelineError("the seed runs' bootstrap indices differ: they did not share eval.seed and the test pairs")
    values = {model: {column: [run.value(model, column) for run in ordered] for column in columns} for model in models}
    values = {model: {column: found for column, found in by_column.items() if all(v is not None for v in found)}
              for model, by_column in values.items()}
    first = ordered[0].params
    return {
        "scale": first["scale"], "backbone": first["backbone"]["name"], "settings": next(iter(digests)),
        "settings_not_changing_results": list(SETTINGS_NOT_CHANGING_RESULTS),
        "eval_seed": first["eval"]["seed"], "indices": indices.pop(), "seeds": [run.params["seed"] for run in ordered],
        "commands": commands, "environment": environment, "df": len(ordered) - 1,
        "sd": {model: {column: round(float(np.std(found, ddof=1)), 6) for column, found in by_column.items()}
               for model, by_column in values.items()},
        "models": values,
    }


def load_record(path: Path = SEED_NOISE) -> SeedRecord | None:
    """The committed seed record, or None where there is none (a scale never measured)."""
    if not path.is_file():
        return None
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        record = SeedRecord(raw["scale"], raw["backbone"], raw["settings"], [int(seed) for seed in raw["seeds"]],
                            raw["models"], str(path))
    except (ValueError, KeyError, TypeError) as error:
        raise PipelineError(f"{path}: not a seed record ({error}); regenerate it with `python scripts/seed_noise.py`") from None
    if len(record.seeds) < 2 or any(not math.isfinite(v) for by in record.values.values() for found in by.values() for v in found):
        raise PipelineError(f"{path}: a seed record needs two seeds or more and finite values; regenerate it")
    return record

"""Measure the training-seed noise of this scale and commit it as reports/seed_noise.json (issue 48).

    python scripts/seed_noise.py --seeds 42 1 2 3 4 --run    # run the missing seeds as DVC experiments, then record
    python scripts/seed_noise.py --seeds 42 1 2 3 4          # record the finished experiments `seed-<N>` only

Each seed is `dvc exp run -n seed-<N> -S seed=<N>` on the workspace's params: every stage at that
training seed, the test pairs and bootstrap indices unchanged (`eval.seed`). The record holds, per
model, every score column and every `analysis:` column claims.yaml reads, one value per seed
(pipeline/reporting/seed_record.py); the report reads it as the claims' seed arms. About 6 minutes
per seed of the tiny preset on 2 cores: run it with nothing else on the machine. Exit 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import yaml  # noqa: E402

from pipeline.errors import PipelineError  # noqa: E402
from pipeline.io import write_json_atomic  # noqa: E402
from pipeline.evaluated_models import MODEL_NAMES  # noqa: E402
from pipeline.paths import METRICS_DETAILS  # noqa: E402
from pipeline.reporting.runs import SCORE_COLUMNS, search_experiments  # noqa: E402
from pipeline.reporting.seed_record import SEED_NOISE, build_record, settings_digest  # noqa: E402


def claimed_analysis_columns(claims_file: Path = Path("claims.yaml")) -> list[str]:
    """Every `analysis:` metric or column claims.yaml names: the numbers without resamples a claim compares."""
    found: set[str] = set()

    def walk(node) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("metric", "column") and isinstance(value, str) and value.startswith("analysis:"):
                    found.add(value)
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(yaml.safe_load(claims_file.read_text(encoding="utf-8")))
    return sorted(found)


def seed_command(seed: int) -> str:
    return f"dvc exp run -n seed-{seed} -S seed={seed}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", required=True, help="the training seeds (at least two)")
    parser.add_argument("--run", action="store_true", help="run the seeds without a finished experiment first")
    parser.add_argument("--output", type=Path, default=SEED_NOISE)
    arguments = parser.parse_args(argv)
    try:
        params = yaml.safe_load(Path("params.yaml").read_text(encoding="utf-8"))
        wanted = settings_digest(params)
        runs = _finished(arguments.seeds, wanted)
        missing = [seed for seed in arguments.seeds if seed not in runs]
        if missing and arguments.run:
            for seed in missing:
                print(f"seed noise: {seed_command(seed)}", flush=True)
                subprocess.run(seed_command(seed).split(), check=True)
            runs = _finished(arguments.seeds, wanted)
            missing = [seed for seed in arguments.seeds if seed not in runs]
        if missing:
            raise PipelineError(f"no finished experiment of seed(s) {missing} at the workspace's settings; add --run")
        environment = json.loads((METRICS_DETAILS / "backbone.json").read_text(encoding="utf-8")).get("environment", {})
        record = build_record([runs[seed] for seed in arguments.seeds], MODEL_NAMES,
                              [*SCORE_COLUMNS, *claimed_analysis_columns()],
                              [seed_command(seed) for seed in arguments.seeds], environment)
    except (PipelineError, subprocess.CalledProcessError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    write_json_atomic(arguments.output, record)
    print(f"seed noise: {len(record['seeds'])} seeds, {len(record['models'])} models -> {arguments.output}")
    return 0


def _finished(seeds: list[int], digest: str) -> dict:
    """The newest finished experiment of each wanted seed whose settings are the workspace's."""
    search = search_experiments(1)
    if search.problem:
        raise PipelineError(search.problem)
    found = {}
    for run in search.runs:  # newest first
        seed = run.params.get("seed")
        if seed in seeds and seed not in found and run.name.startswith("exp ") and settings_digest(run.params) == digest:
            found[seed] = run
    return found


if __name__ == "__main__":
    sys.exit(main())

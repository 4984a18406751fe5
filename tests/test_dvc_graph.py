"""The stage graph in dvc.yaml: what DVC must be able to restore in a queued experiment's copy."""

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def stage_outputs(dvc_file: Path):
    """(stage, path, options) of every out, metric and plot of every stage, foreach templates included."""
    stages = yaml.safe_load(dvc_file.read_text())["stages"]
    for name, stage in stages.items():
        body = stage.get("do", stage)
        for section in ("outs", "metrics", "plots"):
            for entry in body.get(section) or []:
                path, options = next(iter(entry.items())) if isinstance(entry, dict) else (entry, {})
                yield name, path, options or {}


def test_every_uncached_output_lives_in_git():
    """An uncached output that git ignores is missing in the temporary copy of a queued
    `dvc exp run`, so its stage and everything downstream would run again there (the
    translations and both towers' pretraining for a change of train.cael)."""
    for dvc_file in (ROOT / "dvc.yaml", ROOT / "bench" / "dvc.yaml"):
        for stage, path, options in stage_outputs(dvc_file):
            if options.get("cache") is False:
                assert path.startswith("reports/"), f"{dvc_file.name}:{stage}: {path} is uncached and not in git"
            assert not options.get("persist"), f"{dvc_file.name}:{stage}: {path} is persisted; keep resume state undeclared"


def test_resume_state_is_not_a_stage_output():
    paths = [path for _, path, _ in stage_outputs(ROOT / "dvc.yaml")]
    assert paths, "no outputs read from dvc.yaml"
    assert not [path for path in paths if path.startswith(("data/cache", "data/checkpoints"))]

"""Many machines, one report (issue 29): the recipe of docs/scaling.md "Past one GPU" on a toy DVC project with
a local bare git remote and a local-folder DVC remote. Two clones (two machines, or two jobs of a
Slurm array) each run one experiment and `dvc exp push` it (git refs, and the trained output to the
DVC remote); a third clone `dvc exp pull`s both, sees both rows, and gets a trained output without
training it (`dvc exp apply` + `dvc pull`; the stage is up to date, nothing reruns)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

# The project's environment first on PATH: `dvc` (and the stage's `python`) are the venv's, found
# whether or not the venv is activated (the README's test command does not activate it).
PATH = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])

# The toy stage: "training" writes a model (a cached DVC output, like data/models/) and a metric.
TRAIN = """
import json, pathlib, yaml
seed = yaml.safe_load(open("params.yaml"))["seed"]
pathlib.Path("model").mkdir(exist_ok=True)
pathlib.Path("model/weights.txt").write_text(f"weights of seed {seed}\\n")
pathlib.Path("metrics.json").write_text(json.dumps({"score": seed * 10}))
with open("trainings.log", "a") as log:  # outside git and DVC: counts the trainings on this machine
    log.write(f"{seed}\\n")
"""


def sh(*command: str, cwd: Path) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "DVC_NO_ANALYTICS": "1", "PATH": PATH}
    done = subprocess.run(list(command), cwd=cwd, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, f"{' '.join(command)}: {done.stdout[-2000:]}{done.stderr[-2000:]}"
    return done.stdout


@pytest.fixture
def remotes(tmp_path) -> tuple[Path, Path]:
    """A bare git remote holding the project (its DVC remote set as the default) and the DVC remote."""
    git_remote, dvc_remote, seed_repo = tmp_path / "project.git", tmp_path / "dvc-storage", tmp_path / "seed"
    sh("git", "init", "-q", "--bare", "-b", "main", str(git_remote), cwd=tmp_path)
    seed_repo.mkdir()
    sh("git", "init", "-q", "-b", "main", cwd=seed_repo)
    sh("dvc", "init", "-q", cwd=seed_repo)
    sh("dvc", "remote", "add", "-d", "storage", str(dvc_remote), cwd=seed_repo)  # a path: DVC reads file:// as a relative folder
    (seed_repo / "train.py").write_text(TRAIN)
    (seed_repo / "params.yaml").write_text(yaml.safe_dump({"seed": 0}))
    stage = {"cmd": f"{sys.executable} train.py", "deps": ["train.py"], "params": ["seed"], "outs": ["model"],
             "metrics": [{"metrics.json": {"cache": False}}]}
    (seed_repo / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"train": stage}}))
    (seed_repo / ".gitignore").write_text("trainings.log\n")
    sh("git", "add", "-A", cwd=seed_repo)
    sh("git", "commit", "-qm", "project", cwd=seed_repo)
    sh("git", "push", "-q", str(git_remote), "main", cwd=seed_repo)
    return git_remote, dvc_remote


def clone(git_remote: Path, folder: Path) -> Path:
    sh("git", "clone", "-q", str(git_remote), str(folder), cwd=folder.parent)
    return folder


def test_experiments_of_two_machines_meet_in_a_third_without_retraining(remotes, tmp_path):
    git_remote, _ = remotes
    for machine, seed in (("machine-a", 1), ("machine-b", 2)):
        root = clone(git_remote, tmp_path / machine)
        sh("dvc", "exp", "run", "-n", f"seed-{seed}", "-S", f"seed={seed}", cwd=root)
        sh("dvc", "exp", "push", "origin", f"seed-{seed}", cwd=root)  # git refs, and the model to the DVC remote

    report = clone(git_remote, tmp_path / "report")
    sh("dvc", "exp", "pull", "origin", "seed-1", "seed-2", cwd=report)
    shown = json.loads(sh("dvc", "exp", "show", "--json", cwd=report))
    # the workspace, then the baseline commit with its experiments: [{"revs": [{"name", "data"}, ...]}]
    rows = {run["name"]: run["data"] for commit in shown for exp in commit["experiments"] or [] for run in exp["revs"]}
    assert set(rows) == {"seed-1", "seed-2"}
    scores = {name: data["metrics"]["metrics.json"]["data"]["score"] for name, data in rows.items()}
    assert scores == {"seed-1": 10, "seed-2": 20}

    sh("dvc", "exp", "apply", "seed-2", cwd=report)
    sh("dvc", "pull", cwd=report)  # the trained model from the DVC remote
    assert (report / "model" / "weights.txt").read_text() == "weights of seed 2\n"
    status = sh("dvc", "repro", cwd=report)
    assert "didn't change" in status and not (report / "trainings.log").exists()  # nothing trained here

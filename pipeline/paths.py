"""The data layout every stage shares (relative to the project root; DVC tracks `data/`)."""

import os
from pathlib import Path

# A queued `dvc exp run` runs the stages in a temporary copy of the workspace at
# <workspace>/.dvc/tmp/exps/<...>; settings that name paths outside the project mean the same there.
EXPERIMENT_COPY = (".dvc", "tmp", "exps")

DATA = Path("data")
RAW = DATA / "raw"
CORPUS = RAW / "corpus.txt"
SENTEVAL = RAW / "senteval"
ORIGINAL_BENCHMARKS = RAW / "original"
BACKBONE = DATA / "backbone"
UC = DATA / "uc"
TRAINED_MODELS = DATA / "models"  # the training stages' saved models (pipeline/evaluated_models.py is the registry of evaluated models)
RESUME_STATES = DATA / "checkpoints"  # the training loop's resume states (pipeline.training.resume), not public checkpoints
CACHE = DATA / "cache"
EMBEDDINGS_CACHE = CACHE / "embeddings"
REPORTS = Path("reports")
TRAINING_REPORTS = REPORTS / "training"
METRICS = REPORTS / "metrics"  # headline: `dvc metrics show` (7 task scores + avg per model; best dev + steps per training stage)
METRICS_DETAILS = METRICS / "details"  # every number of the evaluate stage (subsets, "mean", MTEB): plain outs
METRICS_BOOTSTRAP = METRICS / "bootstrap"  # every bootstrap resample's scores of a model (pipeline.evaluation.bootstrap): plain outs
TRAINING_DETAILS = TRAINING_REPORTS / "details"  # every number of a training stage's summary
FIGURES = REPORTS / "figures"  # the papers' figures as PNG (DVC image plots)
ANALYSIS = REPORTS / "analysis"
MTEB = REPORTS / "mteb"  # MTEB suite results per model (pipeline.evaluation.mteb_suites)
TABLES = REPORTS / "tables"
BENCH = REPORTS / "bench.json"
# The git commit, host and time of each stage's run: git-tracked, no DVC output or dependency, so
# dvc.lock stays a function of code, data and params (pipeline.execution.environment).
PROVENANCE = REPORTS / "provenance"


def rtt_file(tower: str) -> Path:
    return DATA / "rtt" / f"{tower}.txt"


def rtt_cache(tower: str) -> Path:
    return CACHE / "rtt" / f"{tower}.sqlite"


def metrics_file(model: str) -> Path:
    return METRICS / f"{model}.json"


def pretrained_tower(tower: str) -> Path:
    return TRAINED_MODELS / "pretrain" / tower


def joint_model() -> Path:
    return TRAINED_MODELS / "joint"


def jtcse_model() -> Path:
    """The committed run's JTCSE twin (`jtcse` stage), beside `joint_model`'s twin of `train`."""
    return TRAINED_MODELS / "jtcse"


def student(teacher: str) -> Path:
    return TRAINED_MODELS / "distill" / teacher


def baseline_model(name: str) -> Path:
    return TRAINED_MODELS / "baseline" / name


def workspace_root(cwd: Path | None = None) -> Path:
    """The workspace the stages run for: the current folder, or the one that queued this experiment."""
    cwd = (cwd or Path.cwd()).resolve()
    parts = cwd.parts
    for start in range(len(parts) - len(EXPERIMENT_COPY) + 1):
        if parts[start : start + len(EXPERIMENT_COPY)] == EXPERIMENT_COPY:
            return Path(*parts[:start])
    return cwd


def setting_path(value: str | Path, cwd: Path | None = None) -> Path:
    """A path given in params.yaml: absolute as is; relative and leaving the project (../shared/data),
    relative to the workspace root (see `workspace_root`: a queued experiment's copy reads the same
    folder beside the workspace); relative and inside the project (data/backbone, a stage's output),
    the current copy's own file."""
    path = Path(value).expanduser()
    if path.is_absolute():
        return path
    here = (cwd or Path.cwd()).resolve()
    leaves_project = Path(os.path.normpath(path)).parts[:1] == ("..",)
    return (workspace_root(here) if leaves_project else here) / path

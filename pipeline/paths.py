"""The data layout every stage shares (relative to the project root; DVC tracks `data/`)."""

from pathlib import Path

DATA = Path("data")
RAW = DATA / "raw"
CORPUS = RAW / "corpus.txt"
SENTEVAL = RAW / "senteval"
ORIGINAL_BENCHMARKS = RAW / "original"
BACKBONE = DATA / "backbone"
UC = DATA / "uc"
MODELS = DATA / "models"
CHECKPOINTS = DATA / "checkpoints"
REPORTS = Path("reports")
TRAINING_REPORTS = REPORTS / "training"
METRICS = REPORTS / "metrics"
ANALYSIS = REPORTS / "analysis"
TABLES = REPORTS / "tables"
BENCH = REPORTS / "bench.json"


def rtt_file(tower: str) -> Path:
    return DATA / "rtt" / f"{tower}.txt"


def rtt_cache(tower: str) -> Path:
    return DATA / "cache" / "rtt" / f"{tower}.sqlite"


def pretrained_tower(tower: str) -> Path:
    return MODELS / "pretrain" / tower


def joint_model() -> Path:
    return MODELS / "joint"


def student(teacher: str) -> Path:
    return MODELS / "distill" / teacher

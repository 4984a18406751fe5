"""The pairs of a declared STS task (`pipeline.declarations.sts_tasks`), read from a folder laid out like SentEval's.

The declaration says where a task's files lie; this module reads them: a SemEval year's fixed
subsets (`STS.input.<subset>.txt` and `STS.gs.<subset>.txt`), or one file per split through the
reader the declaration names (`PAIR_READERS`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pipeline.data.readers import ScoredPair, missing_data_error, read_sick, read_sts_subset, read_stsb
from pipeline.declarations.sts_tasks import SplitFiles, SubsetFiles, sts_task
from pipeline.errors import PipelineError

# The readers a `SplitFiles` declaration may name: one file's scored pairs.
PAIR_READERS: dict[str, Callable[[Path], list[ScoredPair]]] = {"stsb": read_stsb, "sick": read_sick}


def _read_subsets(files: SubsetFiles, senteval_root: Path) -> dict[str, list[ScoredPair]]:
    folder = senteval_root / files.folder
    if not folder.is_dir():
        raise missing_data_error(folder)
    return {
        subset: read_sts_subset(folder / f"STS.input.{subset}.txt", folder / f"STS.gs.{subset}.txt")
        for subset in files.subsets
    }


def _read_split(files: SplitFiles, senteval_root: Path, split: str) -> dict[str, list[ScoredPair]]:
    return {split: PAIR_READERS[files.reader](files.path(senteval_root, split))}


def load_sts_benchmark(senteval_root: Path | str, task: str, split: str = "test") -> dict[str, list[ScoredPair]]:
    """A declared STS task as {subset name: pairs}, from a folder laid out like SentEval's data.

    STS12–16 have only a test split and SentEval's fixed subsets (a missing file is an error naming
    it); STS-B and SICK-R have one subset named after the split (`dev` of SICK is `SICK_trial.txt`).
    """
    declaration = sts_task(task)
    if split not in declaration.splits:
        if len(declaration.splits) == 1:
            raise PipelineError(f"{task} has only a {declaration.splits[0]} split, not {split!r}")
        raise PipelineError(f"{task} has no split {split!r}; allowed: {', '.join(declaration.splits)}")
    if isinstance(declaration.files, SubsetFiles):
        return _read_subsets(declaration.files, Path(senteval_root))
    return _read_split(declaration.files, Path(senteval_root), split)

"""The STS tasks as data: one declaration per task, registered once, every list of tasks derived from them.

A declaration (`StsTaskDeclaration`) says all the pipeline knows of a task: its name (its key in
eval.tasks and in every results file), its table header, where its files lie under the SentEval
root (`SubsetFiles`: a SemEval year's fixed subsets; `SplitFiles`: one file per split, read by a
named reader of `pipeline.data.sts_pairs`), its splits and subsets, and the score a paper's table
reports ("all" over the subsets pooled, or the test split's). The evaluator, the checkpoints table,
the report's columns and its file checks read these declarations instead of restating the names.

`PAPERS_TASKS` are the papers' seven, in their tables' order: the headline average ("7-STS avg.") is
over them whatever else `eval.tasks` holds. Any other task is a module of `pipeline/sts_datasets/` that
registers itself (`register_sts_task`); every module there is loaded with this registry (`pipeline.plugins`),
after the seven, in name order. Its files, which senteval.tar does not ship, are its `downloads`: the
download stage fetches each into the SentEval root and checks it against its pinned digest. The evaluator
reads and scores it like the seven, in a column of its own (reports, metrics, the checkpoints table).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from pipeline.errors import PipelineError
from pipeline.plugins import load_plugins

POOLED = "all"  # a task's score over all its subsets' pairs concatenated (SentEval's "all")
# The mean of the papers' seven tasks' reported scores: its key in every results file and its table header.
AVERAGE, AVERAGE_SHORT_NAME = "avg", "Avg."


@dataclass(frozen=True)
class SubsetFiles:
    """SentEval's layout of a SemEval year: a folder with `STS.input.<subset>.txt` (the pairs) and
    `STS.gs.<subset>.txt` (the gold) per subset, test pairs only. The subsets are fixed, in SentEval's
    order (senteval/sts.py), not found by globbing: a missing input file must stop the evaluation,
    not silently change the task's score."""

    folder: str  # under the SentEval root
    subsets: tuple[str, ...]
    splits: ClassVar[tuple[str, ...]] = ("test",)

    @property
    def file_names(self) -> tuple[str, ...]:
        """Its files' names in its folder: each subset's pairs and gold."""
        return tuple(f"STS.{kind}.{subset}.txt" for subset in self.subsets for kind in ("input", "gs"))


@dataclass(frozen=True)
class SplitFiles:
    """One file per split, its pairs read by the reader named `reader` (`pipeline.data.sts_pairs.PAIR_READERS`):
    the task has one subset, named after the split."""

    folder: str  # under the SentEval root
    files: Mapping[str, str]  # split → file name, in the order the splits are listed
    reader: str  # the name of the function that reads one file's pairs
    subsets: ClassVar[tuple[str, ...]] = ()

    @property
    def splits(self) -> tuple[str, ...]:
        return tuple(self.files)

    @property
    def file_names(self) -> tuple[str, ...]:
        return tuple(self.files.values())

    def path(self, senteval_root: Path | str, split: str) -> Path:
        return Path(senteval_root) / self.folder / self.files[split]


@dataclass(frozen=True)
class Download:
    """A task's file that senteval.tar does not ship: fetched by the download stage from `url` and checked
    against `sha256` (the file's pinned content: a file that differs stops the download)."""

    url: str
    sha256: str

    def __post_init__(self):
        if not (len(self.sha256) == 64 and all(character in "0123456789abcdef" for character in self.sha256)):
            raise ValueError(f"sha256 {self.sha256!r} of {self.url} is not 64 lowercase hex digits")


@dataclass(frozen=True)
class StsTaskDeclaration:
    """One STS task, everything the pipeline knows of it. The bootstrap resamples within each subset
    of a task (`pipeline.evaluation.bootstrap`), so a year's fixed subsets are its strata and a task
    read from split files has one."""

    name: str  # its key in eval.tasks and in every results file, e.g. "STSBenchmark"
    short_name: str  # its table header, e.g. "STS-B"
    files: SubsetFiles | SplitFiles  # where its pairs lie under the SentEval root and how they are read
    reported: str  # the score a paper's table shows: POOLED (its subsets pooled) or its test split's
    downloads: Mapping[str, Download] = field(default_factory=dict)  # file name in its folder → where to fetch it

    @property
    def splits(self) -> tuple[str, ...]:
        return self.files.splits

    @property
    def subsets(self) -> tuple[str, ...]:
        """Its fixed subsets; none for a task whose one subset is the split read."""
        return self.files.subsets

    @property
    def pools_subsets(self) -> bool:
        """Whether its results are {"all", "mean", "subsets"} (a year) rather than {split: score}."""
        return self.reported == POOLED

    @property
    def scored_split(self) -> str:
        """The split its reported score is over: a year's test pairs, else the split it reports."""
        return "test" if self.pools_subsets else self.reported

    @property
    def score_column(self) -> str:
        """The path of its reported score in a details file, as tables.yaml names it: `STS12.all`."""
        return f"{self.name}.{self.reported}"


STS_TASK_REGISTRY: dict[str, StsTaskDeclaration] = {}


def register_sts_task(task: StsTaskDeclaration) -> StsTaskDeclaration:
    """Declare a task once: a second declaration of a name, or a reported score the task does not
    have, is a mistake in the code, not in the data."""
    if task.name in STS_TASK_REGISTRY:
        raise ValueError(f"STS task {task.name!r} is already declared")
    reportable = (POOLED,) if task.subsets else task.splits
    if task.reported not in reportable:
        raise ValueError(f"STS task {task.name!r} reports {task.reported!r}; it has: {', '.join(reportable)}")
    if task.downloads and set(task.downloads) != set(task.files.file_names):
        raise ValueError(f"STS task {task.name!r} downloads {sorted(task.downloads)}; its files are {sorted(task.files.file_names)}")
    STS_TASK_REGISTRY[task.name] = task
    return task


def declared_tasks() -> tuple[StsTaskDeclaration, ...]:
    """Every declared task: the papers' seven in their tables' order, then the others in registration order."""
    return tuple(STS_TASK_REGISTRY.values())


def senteval_year(name: str, subsets: tuple[str, ...]) -> StsTaskDeclaration:
    """A SemEval year as SentEval ships it (STS/<name>-en-test): headed by its name, reporting "all"."""
    return StsTaskDeclaration(name, name, SubsetFiles(f"STS/{name}-en-test", subsets), POOLED)


STS_BENCHMARK = StsTaskDeclaration(
    "STSBenchmark", "STS-B",
    SplitFiles("STS/STSBenchmark", {split: f"sts-{split}.csv" for split in ("train", "dev", "test")}, "stsb"),
    "test",
)
SICK_RELATEDNESS = StsTaskDeclaration(
    "SICKRelatedness", "SICK-R",
    SplitFiles("SICK", {"train": "SICK_train.txt", "dev": "SICK_trial.txt", "test": "SICK_test_annotated.txt"}, "sick"),
    "test",
)
# The papers' seven (SentEval's STS tasks), in their tables' order: the default of eval.tasks and the
# tasks the headline average is over.
PAPERS_TASKS = tuple(register_sts_task(task) for task in (
    senteval_year("STS12", ("MSRpar", "MSRvid", "SMTeuroparl", "surprise.OnWN", "surprise.SMTnews")),
    senteval_year("STS13", ("FNWN", "headlines", "OnWN")),  # SMT is licensed and not distributed
    senteval_year("STS14", ("deft-forum", "deft-news", "headlines", "images", "OnWN", "tweet-news")),
    senteval_year("STS15", ("answers-forums", "answers-students", "belief", "headlines", "images")),
    senteval_year("STS16", ("answer-answer", "headlines", "plagiarism", "postediting", "question-question")),
    STS_BENCHMARK,
    SICK_RELATEDNESS,
))
PAPERS_TASK_NAMES = tuple(task.name for task in PAPERS_TASKS)


def averaged(names) -> list[str]:
    """The tasks among `names` the headline average is over: the papers' seven, whatever else is scored."""
    return [name for name in names if name in PAPERS_TASK_NAMES]


def sts_task(name: str) -> StsTaskDeclaration:
    """The declaration of a task; an undeclared name is a one-line error listing the declared ones."""
    if name not in STS_TASK_REGISTRY:
        raise PipelineError(f"unknown STS task {name!r}; allowed: {', '.join(STS_TASK_REGISTRY)}")
    return STS_TASK_REGISTRY[name]


def pools_subsets(name: str) -> bool:
    """Whether a results key is a task scored over its subsets pooled; False for a name not declared."""
    return name in STS_TASK_REGISTRY and STS_TASK_REGISTRY[name].pools_subsets


def short_name(name: str) -> str:
    """The table header of a results key: the task's declared short name, "Avg." for the average, else the key."""
    if name == AVERAGE:
        return AVERAGE_SHORT_NAME
    return STS_TASK_REGISTRY[name].short_name if name in STS_TASK_REGISTRY else name


# Every other task: a module of pipeline/sts_datasets/ each (after the papers' seven, in name order).
load_plugins("pipeline.sts_datasets")

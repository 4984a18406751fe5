"""The files the report stage reads, each kind read by one reader that checks it (docs/troubleshooting.md, "Bad input").

Absent and corrupt are different things. A file that is not there means "not run": its rows are
missing, its claims "not run", with the command that makes it. A file that is there but is not
what its writer writes is corrupt: not JSON (truncated), a number that is NaN or infinite (the
writers refuse both: `pipeline.io.write_json_atomic`), a key of the wrong type, a bootstrap file
whose scores are not `resamples` numbers each. A corrupt file stops the report with one line naming
it and how to rebuild it (PipelineError, exit 2); it is never read as absent, and a row never takes
another run's number in its place.

The kinds, by folder (`KINDS`; each reader checks the keys its readers use, not every key):
- reports/metrics/<model>.json, the headline: a mapping of numbers (a revision from before the
  details files held the nested scores here);
- reports/metrics/details/<model>.json: each STS task's scores ({"all", "mean", "subsets"} or
  {"test"}), "avg", and the "intervals" and "bootstrap" of `pipeline.evaluation.bootstrap`;
- reports/metrics/bootstrap/<model>.json: `pipeline.evaluation.bootstrap`'s per-resample file;
- reports/analysis/<model>.json, reports/mteb/<model>.json: mappings of finite numbers;
- reports/training/details/<stage>.json: a training stage's summary and its "environment";
- reports/training/<stage>.csv: the training curves (a "step" column, numbers only).
The same readers check what a git revision holds (an experiment's files) and what `dvc exp show`
lists. The column paths of tables.yaml are checked against these files' layout by
`pipeline.reporting.columns`.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from pipeline.declarations.sts_tasks import AVERAGE, STS_TASK_REGISTRY, declared_tasks
from pipeline.errors import PipelineError
from pipeline.io import non_finite_keys
from pipeline.paths import ANALYSIS, METRICS, METRICS_BOOTSTRAP, METRICS_DETAILS, MTEB, TRAINING_DETAILS


class CorruptFile(Exception):
    """What is wrong with a file's content (the message); `corrupt_error` names the file and the fix."""


# --- the checks -----------------------------------------------------------------------------------


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _number(data: dict, key: str, where: str) -> float:
    value = data.get(key)
    if not _is_number(value):
        raise CorruptFile(f"{where}{key} is {_shown(value)}, not a number")
    return value


def _mapping(value: Any, where: str) -> dict:
    if not isinstance(value, dict):
        raise CorruptFile(f"{where or 'the file'} is {_shown(value)}, not a mapping")
    return value


def _shown(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, (dict, list)):
        return f"a {type(value).__name__}"
    return repr(value) if len(repr(value)) <= 20 else f"a {type(value).__name__}"


def check_finite(data: Any) -> None:
    """No NaN or infinite number anywhere (`1e999` parses as infinity)."""
    bad = non_finite_keys(data)
    if bad:
        raise CorruptFile(f"{bad[0]} is not a finite number")


def check_headline(data: Any) -> None:
    """reports/metrics/<model>.json: the seven scores and avg as numbers (older revisions: nested)."""
    _mapping(data, "")
    check_finite(data)
    for key in (*STS_TASK_REGISTRY, AVERAGE):
        if key in data and not (_is_number(data[key]) or isinstance(data[key], dict)):
            raise CorruptFile(f"{key} is {_shown(data[key])}, not a number")


def check_details(data: Any) -> None:
    """reports/metrics/details/<model>.json (pipeline/evaluation/sts.py, bootstrap.py)."""
    _mapping(data, "")
    check_finite(data)
    _number(data, AVERAGE, "")
    for task in declared_tasks():
        if task.name not in data:
            continue  # eval.tasks may leave a task out
        scores = _mapping(data[task.name], task.name)
        _number(scores, task.reported, f"{task.name}.")
        if task.pools_subsets:
            for subset, value in _mapping(scores.get("subsets", {}), f"{task.name}.subsets").items():
                if not _is_number(value):
                    raise CorruptFile(f"{task.name}.subsets.{subset} is {_shown(value)}, not a number")
    for name, interval in _mapping(data.get("intervals", {}), "intervals").items():
        interval = _mapping(interval, f"intervals.{name}")
        low, high = (_number(interval, key, f"intervals.{name}.") for key in ("low", "high"))
        _number(interval, "se", f"intervals.{name}.")
        if low > high:
            raise CorruptFile(f"intervals.{name}: low {low} is above high {high}")
    if "bootstrap" in data:
        about = _mapping(data["bootstrap"], "bootstrap")
        _count(about, "bootstrap.")
    if "environment" in data:
        _mapping(data["environment"], "environment")


def _count(data: dict, where: str) -> int:
    resamples = data.get("resamples")
    if not isinstance(resamples, int) or isinstance(resamples, bool) or resamples < 0:
        raise CorruptFile(f"{where}resamples is {_shown(resamples)}, not a count")
    return resamples


def check_bootstrap(data: Any) -> None:
    """reports/metrics/bootstrap/<model>.json: {"resamples", "seed", "indices", "scores"}, every
    score list `resamples` finite numbers long; none at all when resamples is 0 (eval.bootstrap: 0)."""
    _mapping(data, "")
    resamples = _count(data, "")
    if not isinstance(data.get("seed"), int) or isinstance(data.get("seed"), bool):
        raise CorruptFile(f"seed is {_shown(data.get('seed'))}, not a whole number")
    scores = _mapping(data.get("scores"), "scores")
    indices = data.get("indices")
    if resamples == 0:
        if scores or indices is not None:
            raise CorruptFile("resamples is 0 but the file holds indices or scores")
        return
    if not isinstance(indices, str) or not indices:
        raise CorruptFile(f"indices is {_shown(indices)}, not the digest of the resamples")
    if not scores:
        raise CorruptFile(f"resamples is {resamples} but there are no scores")
    for task, values in scores.items():
        if task not in (*STS_TASK_REGISTRY, AVERAGE):
            raise CorruptFile(f"scores.{task} is no STS task")
        if not isinstance(values, list) or len(values) != resamples:
            count = f"{len(values)} scores" if isinstance(values, list) else _shown(values)
            raise CorruptFile(f"scores.{task} is {count} where {resamples} are expected")
        bad = next((index for index, value in enumerate(values) if not _is_number(value) or not math.isfinite(value)), None)
        if bad is not None:
            raise CorruptFile(f"scores.{task}[{bad}] is {_shown(values[bad])}, not a finite number")


def check_results(data: Any) -> None:
    """reports/analysis/<model>.json and reports/mteb/<model>.json: a mapping of finite numbers."""
    _mapping(data, "")
    check_finite(data)


def check_training_details(data: Any) -> None:
    """reports/training/details/<stage>.json: finite numbers, the "environment" a mapping."""
    _mapping(data, "")
    check_finite(data)
    if "environment" in data:
        _mapping(data["environment"], "environment")


# --- the kinds and their readers ------------------------------------------------------------------


@dataclass(frozen=True)
class FileKind:
    """A kind of report input: the folder its files lie in, its check and the command that rebuilds one."""

    folder: Path
    check: Callable[[Any], None]
    rebuild: Callable[[str], str]  # file stem -> command


def _evaluate(stem: str) -> str:
    return f"dvc repro evaluate@{stem}"


KINDS = (
    FileKind(METRICS, check_headline, _evaluate),
    FileKind(METRICS_DETAILS, check_details, _evaluate),
    FileKind(METRICS_BOOTSTRAP, check_bootstrap, _evaluate),
    FileKind(ANALYSIS, check_results, lambda stem: "dvc repro analyze"),
    FileKind(MTEB, check_results, _evaluate),
    FileKind(TRAINING_DETAILS, check_training_details, lambda stem: "dvc repro (the training stage that wrote it)"),
)


def kind_of(path: str | Path) -> FileKind | None:
    """The kind of a repository-relative .json path (`KINDS`), None for a file the report does not read."""
    path = PurePosixPath(Path(path).as_posix())
    if path.suffix != ".json":
        return None
    return next((kind for kind in KINDS if path.parent == PurePosixPath(kind.folder.as_posix())), None)


def _reject_constant(name: str) -> Any:
    raise CorruptFile(f"it holds {name}, which is not a finite number")


def parse_json(text: str | bytes) -> Any:
    """JSON whose NaN, Infinity and -Infinity (which Python's json accepts) are refused."""
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except UnicodeDecodeError:
        raise CorruptFile("it is not UTF-8 text") from None
    except json.JSONDecodeError as error:
        raise CorruptFile(f"not valid JSON: {error.msg} at line {error.lineno}") from None


def corrupt_error(path: str | Path, reason: str, fix: str) -> PipelineError:
    return PipelineError(f"{Path(path).as_posix()} is corrupt ({reason}); {fix}")


def check_report_data(path: str | Path, data: Any, at: str | None = None) -> Any:
    """`data` (parsed) of the report input at repository-relative `path`, checked by its kind; `at`:
    the run it comes from when not the workspace (then the fix is to leave that run out)."""
    kind = kind_of(path)
    if kind is not None:
        try:
            kind.check(data)
        except CorruptFile as error:
            raise _corrupt(path, at, str(error)) from None
    return data


def read_report_text(path: str | Path, text: str | bytes, at: str | None = None) -> Any:
    """A report input's content (from disk or a git revision), parsed and checked (`check_report_data`)."""
    try:
        data = parse_json(text)
    except CorruptFile as error:
        raise _corrupt(path, at, str(error)) from None
    return check_report_data(path, data, at)


def check_run_files(files: dict[str, Any], at: str | None = None) -> None:
    """A model's details and bootstrap files (`files`: a run's, by path) describe the same resamples,
    or they come from two runs (a half-written set): count and indices equal."""
    for path, details in files.items():
        if PurePosixPath(path).parent != PurePosixPath(METRICS_DETAILS.as_posix()) or "bootstrap" not in details:
            continue
        bootstrap_path = (METRICS_BOOTSTRAP / PurePosixPath(path).name).as_posix()
        resamples = files.get(bootstrap_path)
        if resamples is None:
            continue
        described = (details["bootstrap"].get("resamples"), details["bootstrap"].get("indices"))
        if described != (resamples["resamples"], resamples["indices"]):
            raise _corrupt(bootstrap_path, at, f"its {resamples['resamples']} resamples are not the {described[0]} of {path} "
                           "(other indices): the two files come from different runs")


def read_report_file(root: Path, path: str | Path) -> Any:
    """The workspace's report input at repository-relative `path` under `root`, checked."""
    try:
        text = (root / path).read_bytes()
    except OSError as error:
        raise PipelineError(f"{Path(path).as_posix()} cannot be read: {error.strerror}") from None
    return read_report_text(path, text)


def _corrupt(path: str | Path, at: str | None, reason: str) -> PipelineError:
    """The one line for a corrupt report input: the file (and the run, when not the workspace's), what is
    wrong, and how to rebuild it or leave it out."""
    shown = Path(path).as_posix()
    if at is not None:
        return corrupt_error(f"{shown} of {at}", reason, "leave that run out (`dvc exp remove` an experiment; lower "
                             "experiment_commits in tables.yaml for a commit) or rebuild the file there")
    kind = kind_of(path)
    restore = f"`git checkout -- {shown}` restores the committed one"
    return corrupt_error(shown, reason, f"rebuild it with `{kind.rebuild(Path(path).stem)}`, or {restore}" if kind else restore)


def read_training_curve(path: Path):
    """reports/training/<stage>.csv as a DataFrame: a "step" in every row, every column numeric and
    finite (an empty cell is a step without that value, e.g. no dev score)."""
    import numpy as np
    import pandas as pd

    def corrupt(reason: str) -> PipelineError:
        return corrupt_error(path, reason, "rebuild it with `dvc repro` (the training stage that wrote it)")

    try:
        frame = pd.read_csv(io.BytesIO(path.read_bytes()))
    except (ValueError, pd.errors.ParserError, pd.errors.EmptyDataError) as error:  # UnicodeDecodeError is a ValueError
        raise corrupt(f"not a CSV table: {(str(error).splitlines() or [type(error).__name__])[0]}") from None
    if "step" not in frame:
        raise corrupt("no step column")
    text_columns = [column for column in frame if not pd.api.types.is_numeric_dtype(frame[column])]
    if text_columns:
        raise corrupt(f"column {text_columns[0]} holds text, not numbers")
    if frame["step"].isna().any():
        raise corrupt("a row without its step (a truncated line)")
    if np.isinf(frame.to_numpy(dtype=float)).any():
        raise corrupt("a value that is not a finite number")
    return frame

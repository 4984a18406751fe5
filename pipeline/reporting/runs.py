"""The runs a table row can come from, and how a row's overrides select one.

A run is a set of params and the JSON files it produced: the workspace (params.yaml and
reports/metrics, reports/metrics/details, reports/analysis, reports/mteb on disk) or a finished DVC experiment
or commit as `dvc exp show --json` lists it. `dvc exp show` carries only the headline metrics
(the seven scores and avg); the details, bootstrap, analysis and MTEB files, plain outputs kept in git, are read
from the run's git revision (`revision_files`). A row fits a run when every override it needs (`train.cael=2`,
and the table's `scale=…`, `backbone=…`) equals the run's params. A setting a run's params lack
(the run predates it) counts at its default in `pipeline.config`: that is what the run ran with.
"""

from __future__ import annotations

import json
import logging
import math
import re
import shlex
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from pipeline.params_file import setting_default
from pipeline.declarations.sts_tasks import AVERAGE, declared_tasks
from pipeline.errors import PipelineError
from pipeline.git import git
from pipeline.paths import ANALYSIS, METRICS, METRICS_BOOTSTRAP, METRICS_DETAILS, MTEB, TRAINING_DETAILS
from pipeline.reporting.inputs import check_report_data, check_run_files, read_report_file, read_report_text
from pipeline.reporting.spec import ANALYSIS_PREFIX, MTEB_PREFIX, split_override

log = logging.getLogger(__name__)

DVC_TIMEOUT_SECONDS = 600
# An experiment's executor state when it finished; None: run in the workspace with `dvc exp run`.
# Queued, running and failed experiments list the baseline's metrics files, so they must not count.
FINISHED_STATES = (None, "success")
_PLACEHOLDER = re.compile(r"\{(?P<path>[\w.-]+)(?:\s*\*\s*(?P<factor>[0-9.]+))?\}")
_ABSENT = object()
# The column of each declared STS task's reported score (`sts.reported_score`) → the task its bootstrap interval and
# resamples are keyed by (pipeline/evaluation/bootstrap.py).
SCORE_COLUMNS = {task.score_column: task.name for task in declared_tasks()} | {AVERAGE: AVERAGE}
ReadFiles = Callable[[str], dict[str, Any]]


@dataclass(frozen=True)
class Run:
    name: str
    params: dict[str, Any]
    files: dict[str, Any] = field(default_factory=dict)  # parsed JSON by repository-relative path
    timestamp: str | None = None

    def value(self, model: str, column: str) -> float | None:
        """A table column of one model: `STS12.all` from its metrics details, `analysis:gmacs` from
        its analysis, `mteb:suites.<suite>.avg` from its MTEB results. A revision from before the
        details files held every score in the headline file, so that is read where a run has no
        details file."""
        if column.startswith((ANALYSIS_PREFIX, MTEB_PREFIX)):
            return metric_at(self.files.get(file_of(model, column)), strip_prefix(column))
        details = self.files.get(details_file(model))
        return metric_at(details if details is not None else self.files.get(metrics_file(model)), column)

    def interval(self, model: str, column: str) -> tuple[float, float] | None:
        """The bootstrap interval (low, high) of a score column, from the details file's "intervals"."""
        if column not in SCORE_COLUMNS:
            return None
        details = self.files.get(details_file(model))
        low = metric_at(details, f"intervals.{SCORE_COLUMNS[column]}.low")
        high = metric_at(details, f"intervals.{SCORE_COLUMNS[column]}.high")
        return None if low is None or high is None else (low, high)

    def resamples(self, model: str) -> dict[str, Any] | None:
        """The per-resample scores of a model (reports/metrics/bootstrap/<model>.json), when the run has them."""
        found = self.files.get(bootstrap_file(model))
        return found if isinstance(found, dict) else None


@dataclass(frozen=True)
class ExperimentSearch:
    runs: list[Run]
    problem: str | None = None  # why no experiments could be read, when that happened


@dataclass(frozen=True)
class Requirement:
    """One setting a run must have; `text` is how `dvc exp run -S` takes it (for a setting kept at
    the workspace's value, it says so)."""

    key: str
    value: Any
    text: str


def metrics_file(model: str) -> str:
    return (METRICS / f"{model}.json").as_posix()


def details_file(model: str) -> str:
    return (METRICS_DETAILS / f"{model}.json").as_posix()


def bootstrap_file(model: str) -> str:
    return (METRICS_BOOTSTRAP / f"{model}.json").as_posix()


def analysis_file(model: str) -> str:
    return (ANALYSIS / f"{model}.json").as_posix()


def mteb_file(model: str) -> str:
    return (MTEB / f"{model}.json").as_posix()


def file_of(model: str, column: str) -> str:
    """The report file a column path reads (by its prefix)."""
    if column.startswith(ANALYSIS_PREFIX):
        return analysis_file(model)
    if column.startswith(MTEB_PREFIX):
        return mteb_file(model)
    return metrics_file(model)


def strip_prefix(column: str) -> str:
    return column.removeprefix(ANALYSIS_PREFIX).removeprefix(MTEB_PREFIX)


def metric_at(data: Any, path: str) -> float | None:
    """The number at a dotted path; keys may contain dots themselves (`mteb.STS22.v2`)."""
    parts, node, start = path.split("."), data, 0
    while start < len(parts):
        if not isinstance(node, dict):
            return None
        for end in range(len(parts), start, -1):  # the longest key that matches wins
            key = ".".join(parts[start:end])
            if key in node:
                node, start = node[key], end
                break
        else:
            return None
    if isinstance(node, bool) or not isinstance(node, (int, float)) or math.isnan(node):
        return None
    return float(node)


def param_at(params: dict[str, Any], key: str) -> Any:
    """The value of a dotted params key, or `_ABSENT`."""
    node: Any = params
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return _ABSENT
        node = node[part]
    return node


def has_param(params: dict[str, Any], key: str) -> bool:
    return param_at(params, key) is not _ABSENT


RUN_FOLDERS = (METRICS, METRICS_DETAILS, METRICS_BOOTSTRAP, ANALYSIS, MTEB)  # the files a run's rows read


def workspace_run(params: dict[str, Any], root: Path = Path(".")) -> Run:
    """The workspace's run: its files of `RUN_FOLDERS`, each checked on read (`pipeline.reporting.inputs`:
    a corrupt one stops the report, naming it)."""
    files = {}
    for folder in RUN_FOLDERS:
        for path in sorted((root / folder).glob("*.json")):
            relative = (folder / path.name).as_posix()
            files[relative] = read_report_file(root, relative)
    check_run_files(files)
    return Run("workspace", params, files)


def recorded_environments(root: Path = Path(".")) -> dict[str, dict[str, Any]]:
    """The "environment" record of each training and evaluation details file
    (reports/training/details/<stage>.json, reports/metrics/details/<model>.json), by file; files
    without one are left out."""
    found = {}
    for folder in (TRAINING_DETAILS, METRICS_DETAILS):
        for path in sorted((root / folder).glob("*.json")):
            relative = (folder / path.name).as_posix()
            record = read_report_file(root, relative).get("environment")
            if record:
                found[relative] = record
    return found


def experiment_runs(exp_show: list[dict[str, Any]], read_files: ReadFiles | None = None) -> list[Run]:
    """The finished runs in `dvc exp show --json` output, newest first (the workspace is read from
    disk). `read_files(rev)` adds the JSON files a revision holds beyond its metrics (`revision_files`)."""
    runs = []
    for baseline in exp_show:
        if baseline.get("rev") == "workspace":
            continue
        branch = f" ({baseline['name']})" if baseline.get("name") else ""
        runs += _run_of(baseline, f"commit {str(baseline.get('rev'))[:7]}{branch}", read_files)
        for experiment in baseline.get("experiments") or []:
            if (experiment.get("executor") or {}).get("state") not in FINISHED_STATES:
                continue
            for revision in experiment.get("revs") or []:
                runs += _run_of(revision, f"exp {revision.get('name') or experiment.get('name')}", read_files)
    return sorted(runs, key=lambda run: run.timestamp or "", reverse=True)


def _run_of(entry: dict[str, Any], name: str, read_files: ReadFiles | None) -> list[Run]:
    data = entry.get("data")
    if entry.get("error") or not isinstance(data, dict):
        return []
    params = ((data.get("params") or {}).get("params.yaml") or {}).get("data")
    if not isinstance(params, dict):
        return []
    files = {
        path: check_report_data(path, found["data"], name)
        for path, found in (data.get("metrics") or {}).items() if "data" in (found or {})
    }
    if read_files is not None and isinstance(entry.get("rev"), str):
        files |= read_files(entry["rev"])
    check_run_files(files, name)
    return [Run(name, params, files, data.get("timestamp"))]


def revision_files(rev: str, root: Path = Path(".")) -> dict[str, Any]:
    """The JSON files under reports/metrics/details, reports/metrics/bootstrap, reports/analysis and reports/mteb committed at git revision
    `rev` (an experiment's commit), by repository-relative path, each checked as the workspace's are
    (a corrupt one stops the report, naming it and the revision). A
    revision git cannot read gives none, with a warning naming it."""
    folders = [METRICS_DETAILS.as_posix(), METRICS_BOOTSTRAP.as_posix(), ANALYSIS.as_posix(), MTEB.as_posix()]
    try:
        listed = git(root, "ls-tree", "-r", "--name-only", rev, "--", *folders).decode().splitlines()
        paths = [path for path in listed if path.endswith(".json") and path.rsplit("/", 1)[0] in folders]
        rest = git(root, "cat-file", "--batch", stdin="".join(f"{rev}:{path}\n" for path in paths).encode()) if paths else b""
    except PipelineError as error:
        log.warning("%s; the run's details and analysis count as missing", error)
        return {}
    files = {}
    for path in paths:
        header, _, rest = rest.partition(b"\n")
        size = int(header.split()[2])
        body, rest = rest[:size], rest[size + 1 :]
        files[path] = read_report_text(path, body, f"revision {rev[:7]}")
    return files


def search_experiments(num_commits: int) -> ExperimentSearch:
    """Finished experiments of the last `num_commits` commits, via `dvc exp show --json`, with
    their details and analysis files read from git."""
    command = ["dvc", "exp", "show", "--json", "--num", str(num_commits)]
    try:
        shown = json.loads(_run_dvc(command, DVC_TIMEOUT_SECONDS))
    except PipelineError as error:
        return ExperimentSearch([], str(error))
    except json.JSONDecodeError:
        shown = None
    try:
        return ExperimentSearch(experiment_runs(shown, revision_files))  # a corrupt file of a run stops the report
    except (AttributeError, TypeError):
        return ExperimentSearch([], f"`{' '.join(command)}` did not print the expected JSON")


def run_queue_command(command: str) -> None:
    """Queue one experiment; a refusal by DVC is the user's to fix, in one line."""
    _run_dvc(shlex.split(command), DVC_TIMEOUT_SECONDS)


def _run_dvc(command: list[str], timeout: float) -> str:
    """Run a dvc command and return its stdout; PipelineError with one line when it cannot."""
    shown = " ".join(command)
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise PipelineError("dvc is not installed (scripts/setup.sh installs it)") from None
    except subprocess.TimeoutExpired:
        raise PipelineError(f"`{shown}` took longer than {timeout:.0f} s") from None
    if done.returncode:
        reason = next((line.strip() for line in done.stderr.splitlines() if line.strip()), f"exit {done.returncode}")
        raise PipelineError(f"`{shown}` failed: {reason}")
    return done.stdout


def requirement(override: str, params: dict[str, Any]) -> Requirement:
    """Parse `key=value`, first replacing `{path}` / `{path*factor}` with the workspace's value."""
    key, value = split_override(override)

    def substitute(match: re.Match) -> str:
        found = param_at(params, match["path"])
        if isinstance(found, bool) or not isinstance(found, (int, float)):
            raise PipelineError(f"override {override!r}: {{{match['path']}}} is not a number in params.yaml")
        product = found * float(match["factor"] or 1)
        return str(int(product)) if float(product).is_integer() else str(product)

    text = f"{key}={_PLACEHOLDER.sub(substitute, value)}"
    parsed_value = split_override(text)[1]
    try:
        parsed = yaml.safe_load(parsed_value)
    except yaml.YAMLError:
        parsed = parsed_value
    return Requirement(key, parsed, text)


def fits(params: dict[str, Any], requirements: list[Requirement]) -> bool:
    return all(_same(wanted.value, _selected(params, wanted.key)) for wanted in requirements)


def setting_value(params: dict[str, Any], key: str) -> Any:
    """A run's value of a dotted setting; a setting its params lack (the run predates it) is at its
    default, which is what that run ran with (`_ABSENT` for a key without a default)."""
    value = param_at(params, key)
    if value is _ABSENT:
        known, default = setting_default(key)
        value = default if known else _ABSENT
    return value


def _selected(params: dict[str, Any], key: str) -> Any:
    value = setting_value(params, key)
    # A Hydra group override (`backbone=bert`) selects the preset whose `name` is that option.
    return value.get("name", _ABSENT) if isinstance(value, dict) else value


def same_setting(wanted: Any, actual: Any) -> bool:
    """Whether two values of a setting are equal the way a row's overrides are matched: numbers by
    value (`1e-6` as text or float), booleans as booleans, lists element by element."""
    return _same(wanted, actual)


def _same(wanted: Any, actual: Any) -> bool:
    if isinstance(wanted, list) or isinstance(actual, list):
        return (
            isinstance(wanted, list) and isinstance(actual, list) and len(wanted) == len(actual)
            and all(map(_same, wanted, actual))
        )
    if isinstance(wanted, bool) or isinstance(actual, bool):
        return wanted is actual
    wanted_number, actual_number = _number(wanted), _number(actual)
    if wanted_number is not None and actual_number is not None:
        return math.isclose(wanted_number, actual_number, rel_tol=1e-9)
    return wanted == actual


def _number(value: Any) -> float | None:
    """Numbers, and strings that are numbers: YAML reads `1e-6` as text where Hydra reads a float."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def queue_command(requirements: list[Requirement]) -> str:
    return "dvc exp run --queue " + " ".join(f"-S {shlex.quote(wanted.text)}" for wanted in requirements)

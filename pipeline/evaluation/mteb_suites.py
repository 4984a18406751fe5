"""The papers' MTEB zero-shot suites: one YAML file per suite in conf/mteb/, evaluated per model.

A suite file holds the tasks exactly as the paper's table names them (`paper`), the installed
mteb's name for each (`mteb`, optionally with the `subsets` the paper scores), the tasks that
could not be mapped with the reason (`unmapped`), and, for a suite the seed texts do not list,
`unlisted` (why) instead of tasks. Local suites (`local: true`) name the offline stand-ins of
`pipeline.evaluation.mteb_local`. `eval.mteb.suite` selects the suites a run evaluates.

Scores (× 100): per task mteb's main score, the mean over the task's subsets as mteb computes it,
the score per subset, and the suite's extra `metrics` (Table VI's MAP/MRR/nDCG/precision/recall
@1/5/10); per suite the mean over its scored tasks, as the papers' "Avg." rows. Results are cached
per (model, task) under data/cache/mteb/, so a killed run continues with the next task. A task whose
data cannot be loaded (hub unreachable) is recorded as missing with the reason; the others go on.
"""

from __future__ import annotations

import difflib
import hashlib
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from tqdm import tqdm

from pipeline.params_file import describe_validation_error
from pipeline.errors import PipelineError

log = logging.getLogger(__name__)

SUITES_DIR = Path(__file__).resolve().parents[2] / "conf" / "mteb"  # beside the code, wherever the stage runs
CACHE_DIR = Path("data") / "cache" / "mteb"
SPLIT = "test"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SuiteTask(_Strict):
    paper: str = Field(min_length=1, description="the task as the paper's table names it")
    mteb: str = Field(min_length=1, description="the installed mteb's task name (or a local task's)")
    subsets: list[str] | None = Field(None, description="the subsets the paper scores; null = all of the task's")


class UnmappedTask(_Strict):
    paper: str = Field(min_length=1)
    reason: str = Field(min_length=1)


class Suite(_Strict):
    name: str = ""
    paper: str = Field(min_length=1, description="TNCSE, JTCSE or local")
    source: str = Field(min_length=1, description="seed file and table the task list comes from")
    type: str = Field(min_length=1, description="mteb task type")
    listed: int = Field(ge=0, description="how many tasks the paper says the suite has")
    local: bool = False
    metrics: list[str] = Field([], description="scores recorded beside the main score, averaged over the suite")
    tasks: list[SuiteTask] = []
    unmapped: list[UnmappedTask] = []
    unlisted: str | None = Field(None, description="why the suite has no task list (the list is not in the seeds)")

    @model_validator(mode="after")
    def _check(self) -> "Suite":
        if not self.tasks and not self.unlisted:
            raise ValueError("a suite lists tasks or says why it cannot (unlisted)")
        names = [task.paper for task in self.tasks] + [task.paper for task in self.unmapped]
        if len(set(names)) != len(names):
            raise ValueError(f"paper task names must be unique: {sorted(name for name in set(names) if names.count(name) > 1)}")
        return self


def suite_names(folder: Path = SUITES_DIR) -> list[str]:
    return sorted(path.stem for path in folder.glob("*.yaml"))


def load_suite(name: str, folder: Path = SUITES_DIR) -> Suite:
    path = folder / f"{name}.yaml"
    if not path.is_file():
        known = ", ".join(suite_names(folder)) or "none"
        raise PipelineError(f"eval.mteb.suite: unknown suite {name!r} (no {path}); suites: {known}")
    try:
        return Suite.model_validate({**(yaml.safe_load(path.read_text(encoding="utf-8")) or {}), "name": name})
    except yaml.YAMLError as error:
        raise PipelineError(f"{path} is not valid YAML: {error}".replace("\n", " ")) from None
    except ValidationError as error:
        raise PipelineError(f"invalid {path}: {describe_validation_error(error, str(path))}") from None


def load_suites(names: Sequence[str], folder: Path = SUITES_DIR) -> list[Suite]:
    """The selected suites, each checked against mteb's registry; an unlisted suite cannot run."""
    suites = [load_suite(name, folder) for name in dict.fromkeys(names)]
    for suite in suites:
        if suite.unlisted:
            raise PipelineError(
                f"eval.mteb.suite: suite {suite.name!r} has no task list ({suite.unlisted}); remove it from eval.mteb.suite"
            )
        check_task_names(suite)
    return suites


def check_task_names(suite: Suite) -> None:
    """Every task exists in the installed mteb's registry (metadata only, no download) or among the local tasks."""
    from pipeline.evaluation.mteb_local import LOCAL_TASKS

    for task in suite.tasks:
        if suite.local:
            problem = None if task.mteb in LOCAL_TASKS else _closest(task.mteb, list(LOCAL_TASKS))
        else:
            problem = _mteb_problem(task.mteb)
        if problem:
            raise PipelineError(f"conf/mteb/{suite.name}.yaml: task {task.mteb!r} ({task.paper}) is not an mteb task: {problem}")


def _closest(name: str, known: list[str]) -> str:
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.5)
    return f"closest: {close[0]}" if close else "no similar name"


def _mteb_problem(name: str) -> str | None:
    import mteb

    try:
        task = mteb.get_task(name)
    except KeyError as error:  # mteb's message names the closest registered task
        return str(error).strip("'\"")
    if task.metadata.name != name:
        return f"mteb renamed it to {task.metadata.name}"
    return None


def make_task(entry: SuiteTask, local: bool, raw_dir: Path, items: int | None) -> Any:
    """The mteb task object of a suite entry, restricted to its subsets and the test split."""
    if local:
        from pipeline.evaluation.mteb_local import LOCAL_TASKS

        return LOCAL_TASKS[entry.mteb](raw_dir, items)
    import mteb

    return mteb.get_task(entry.mteb, eval_splits=[SPLIT], hf_subsets=entry.subsets)


def load_reason(task: Any) -> str | None:
    """Load a task's data; None on success, else the one-line reason (hub unreachable, missing file)."""
    from pipeline.evaluation.mteb_tasks import OFFLINE_HINT, load_task_data

    try:
        load_task_data(task)
    except PipelineError as error:
        return str(error).removesuffix(OFFLINE_HINT)
    return None


def task_scores(task_result: Any, metrics: Sequence[str]) -> dict[str, Any]:
    """main (mteb's: the mean over subsets), per subset, and the suite's extra metrics, all × 100."""
    entries = task_result.scores[SPLIT]
    extra = {}
    for metric in metrics:
        values = [entry[metric] for entry in entries if metric in entry]
        if values:
            extra[metric] = 100 * sum(values) / len(values)
    return {
        "main": 100 * task_result.get_score(splits=[SPLIT]),
        "subsets": {entry["hf_subset"]: 100 * entry["main_score"] for entry in entries},
        "metrics": extra,
    }


def model_key(towers: Sequence[tuple[str, float]], settings: str, items: int | None) -> str:
    """The cache folder of one model: its towers' weights and weights in the sum, the embedder settings."""
    from importlib.metadata import version  # not `import mteb`: a rerun that reads every task from the cache never loads it

    from pipeline.evaluation.store import tower_key

    digest = hashlib.sha256(f"{settings}|{items}|mteb {version('mteb')}".encode())
    for tower, weight in towers:
        digest.update(f"{tower_key(tower, settings)}*{weight}".encode())
    return digest.hexdigest()[:24]


def _cache_file(cache: Path, entry: SuiteTask, metrics: Sequence[str]) -> Path:
    subsets = ",".join(entry.subsets or ["all"])
    tag = hashlib.sha256(f"{entry.mteb}|{subsets}|{','.join(metrics)}".encode()).hexdigest()[:12]
    return cache / f"{entry.mteb}-{tag}.json"


def evaluate_suite(
    suite: Suite, run_task: Callable[[Any], Any], raw_dir: Path, items: int | None, cache: Path | None
) -> dict[str, Any]:
    """One suite's per-task scores, missing tasks with their reasons, and the mean over the scored ones."""
    from pipeline.io import write_json_atomic
    from pipeline.cache_entries import read_json_entry

    tasks: dict[str, Any] = {}
    missing = {entry.paper: f"not mapped: {entry.reason}" for entry in suite.unmapped}
    for entry in tqdm(suite.tasks, desc=f"mteb {suite.name}", unit="task"):
        stored = _cache_file(cache, entry, suite.metrics) if cache else None
        cached = read_json_entry(stored, _is_task_scores, "MTEB result cache") if stored else None
        if cached is not None:
            tasks[entry.paper] = cached
            continue
        task = make_task(entry, suite.local, raw_dir, items)
        reason = load_reason(task)
        if reason:
            log.warning("%s: %s", suite.name, reason)
            missing[entry.paper] = reason
            continue
        tasks[entry.paper] = task_scores(run_task(task), suite.metrics)
        if stored:
            write_json_atomic(stored, tasks[entry.paper])
    return {"source": suite.source, **summarise(suite, tasks), "missing": missing, "tasks": tasks}


def _is_task_scores(scores) -> bool:
    """What `task_scores` writes: a numeric main score, per-subset scores and extra metrics."""
    return (isinstance(scores, dict) and isinstance(scores.get("main"), (int, float))
            and isinstance(scores.get("subsets"), dict) and isinstance(scores.get("metrics"), dict))


def summarise(suite: Suite, tasks: dict[str, Any]) -> dict[str, Any]:
    """The suite's "Avg.": the mean of the scored tasks' main scores (and of each extra metric)."""
    summary: dict[str, Any] = {"listed": suite.listed, "mapped": len(suite.tasks), "scored": len(tasks)}
    if tasks:
        summary["avg"] = sum(task["main"] for task in tasks.values()) / len(tasks)
        summary["metrics"] = {
            metric: sum(task["metrics"][metric] for task in tasks.values()) / len(tasks)
            for metric in suite.metrics
            if all(metric in task["metrics"] for task in tasks.values())
        }
        if summary["metrics"]:  # JTCSE Table VI's "45 Avg.": the mean of its 15 metrics
            summary["metrics_mean"] = sum(summary["metrics"].values()) / len(summary["metrics"])
    return summary


def evaluate_suites(
    suites: Sequence[Suite], run_task: Callable[[Any], Any], raw_dir: Path, items: int | None, cache: Path | None
) -> dict[str, Any]:
    """Every selected suite; refused (one line) when not a single task of them could be loaded."""
    results = {suite.name: evaluate_suite(suite, run_task, raw_dir, items, cache) for suite in suites}
    if not any(result["tasks"] for result in results.values()):
        reasons = [reason for result in results.values() for reason in result["missing"].values()]
        first = next((reason for reason in reasons if not reason.startswith("not mapped")), reasons[0])
        raise PipelineError(
            f"no MTEB task of eval.mteb.suite could be loaded ({first}); run where the Hugging Face hub is "
            "reachable, or select the offline suites (eval.mteb.suite: [local-sts, ...], conf/mteb/local-*.yaml)"
        )
    return results


def suite_lines(results: dict[str, Any]) -> list[str]:
    """One summary line per suite."""
    lines = []
    for name, result in results.items():
        average = f"avg {result['avg']:.2f}" if "avg" in result else "no score"
        lines.append(f"mteb {name}: {result['scored']}/{result['listed']} tasks scored ({result['mapped']} mapped), {average}")
    return lines

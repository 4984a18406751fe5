"""Did a run reproduce the committed results? Three verdicts (docs/reproducing.md, "Did it
reproduce?"):

- **not reproduced (inputs differ)**: the code, data, params or locked packages differ from the committed
  run's — never "equivalent", whatever the numbers say;
- **identical**: every output hash equal — required when the machine facts of the environment records
  (CPU model, microarchitecture, vector ISA, caches and logical CPUs, GPU, threads, world size) equal the
  committed run's;
- **equivalent**: the inputs are the same and the machine facts differ: every verdict of the claims is
  unchanged, every step count equal, and every score moved by at most `fraction` (default a tenth) of its
  own 95% interval's half-width — the difference cannot matter against what the benchmark can resolve.

Anything else is **not reproduced**, naming the first output and metric that differ.
"""

from __future__ import annotations

import fnmatch
import json
import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from pipeline import paths
from pipeline.io import dotted_leaves
from pipeline.errors import PipelineError
from pipeline.verdicts.rules import EDGE_FRACTION, RELATIVE_TOLERANCE
from pipeline.git import git, git_text_or_none
from tools.estimate_changes import CLAIMS, compare_estimates
from tools.result_numbers import (
    DEV_TASK, Largest, compare_by_tolerance, compare_labels, compare_scores,
    compare_training, half_widths, resample_summary, tolerance_files,
)
from tools.workspace import workspace_differences

IDENTICAL, EQUIVALENT, NOT_REPRODUCED = "identical", "equivalent", "not reproduced"
DEFAULT_FRACTION = EDGE_FRACTION  # a tenth of a score's half-width: what another CPU's last bits move
# The files that say what environment a run had: every training and evaluation record holds one.
RECORD_FOLDERS = (paths.TRAINING_DETAILS, paths.METRICS_DETAILS)
# What of an environment record is the machine (or how the run was spread over it): another value there
# computes other last bits. Versions are inputs (the lock), not machine facts: see `input_differences`.
MACHINE_FACTS = ("device", "gpu", "cpu", "threads", "world_size", "per_device_batch")
# Requirements locks: the packages a run was made with (scripts/setup.sh installs exactly these).
LOCK_FILES = ("requirements/cpu.txt", "requirements/cuda.txt")

@dataclass
class Check:
    """The outcome: a verdict, its lines, and the largest movements with where: of a score and of a claim's
    estimate (in half-widths), of a number without an interval (relative)."""

    verdict: str = IDENTICAL
    lines: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    largest: dict[str, Largest] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.verdict in (IDENTICAL, EQUIVALENT)


# --- reading ------------------------------------------------------------------------------------


def git_text(root: Path, *arguments: str) -> str:
    return git(root, *arguments).decode()


def resolve_ref(root: Path, ref: str) -> str:
    """The commit `ref` names; one line when it names none."""
    commit = git_text_or_none(root, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    if commit is None:
        raise PipelineError(f"--ref {ref!r}: no such commit in {root.resolve()} (give a branch, tag or commit "
                            "that holds the committed results, e.g. HEAD)")
    return commit.strip()


class Revision:
    """The files of one side of the comparison: a git commit, or the working tree (commit None)."""

    def __init__(self, root: Path, commit: str | None):
        self.root, self.commit = root, commit
        self._listing = set(git_text(root, "ls-tree", "-r", "--name-only", commit).split()) if commit else None
        self._texts: dict[str, str | None] = {}  # each file read once: the records are compared three ways
        self._parsed: dict[str, dict | None] = {}

    @property
    def name(self) -> str:
        return self.commit[:10] if self.commit else "this run"

    def exists(self, path: str) -> bool:
        return path in self._listing if self._listing is not None else (self.root / path).is_file()

    def text(self, path: str) -> str | None:
        if path not in self._texts:
            self._texts[path] = None if not self.exists(path) else (
                git_text(self.root, "show", f"{self.commit}:{path}") if self.commit
                else (self.root / path).read_text(encoding="utf-8"))
        return self._texts[path]

    def json(self, path: str) -> dict | None:
        """`path` parsed, once: the details files are read for their widths, their scores and their records."""
        if path not in self._parsed:
            self._parsed[path] = self._parse(path)
        return self._parsed[path]

    def _parse(self, path: str) -> dict | None:
        text = self.text(path)
        if text is None:
            return None
        try:
            value = json.loads(text)
        except json.JSONDecodeError as error:
            raise PipelineError(f"{path} ({self.name}): not valid JSON ({error.msg} at line {error.lineno}); "
                                "rerun the stage that writes it") from None
        if not isinstance(value, dict):
            raise PipelineError(f"{path} ({self.name}): expected a JSON object")
        return value

    def files(self, folder: Path, pattern: str = "*.json") -> list[str]:
        """The files of `folder` (not its subfolders) whose name matches `pattern`."""
        prefix = folder.as_posix().rstrip("/") + "/"
        if self._listing is not None:
            names = self._listing
        else:
            names = {path.relative_to(self.root).as_posix() for path in (self.root / folder).glob(pattern)}
        return sorted(name for name in names if name.startswith(prefix) and "/" not in name[len(prefix):]
                      and fnmatch.fnmatch(name[len(prefix):], pattern))

    def all_files(self) -> list[str]:
        """Every file under reports/ (git's listing of the commit, or the workspace's files)."""
        if self._listing is not None:
            return sorted(self._listing)
        return sorted(path.relative_to(self.root).as_posix() for path in (self.root / paths.REPORTS).rglob("*") if path.is_file())

    def lock(self) -> dict:
        text = self.text("dvc.lock")
        if text is None:
            where = f"at {self.commit[:10]}" if self.commit else "here (run `dvc repro` first)"
            raise PipelineError(f"dvc.lock: none {where}")
        try:
            lock = yaml.safe_load(text) or {}
        except yaml.YAMLError as error:
            raise PipelineError(f"dvc.lock ({self.name}): not valid YAML: {str(error).splitlines()[0]}") from None
        return lock.get("stages", {}) if isinstance(lock, dict) else {}


# --- the lock: outputs, inputs, params ------------------------------------------------------------


def outputs(stages: dict) -> dict[tuple[str, str], str]:
    """(stage, output path) → md5, in the lock's order."""
    return {(name, out["path"]): out.get("md5", "") for name, stage in stages.items() for out in stage.get("outs", [])}


def _derived(path: str, produced: set[str]) -> bool:
    """Whether a dependency is (or holds, or lies in) some stage's output: another machine may compute it."""
    return any(path == out or path.startswith(out + "/") or out.startswith(path + "/") for out in produced)


def source_stages(stages: dict, history: set[str]) -> set[str]:
    """The stages that read no other stage's output (download): their outputs are the pipeline's data, a
    copy of published files that no machine computes differently. The history-dependent stages aside."""
    produced = {path for _, path in outputs(stages)}
    return {name for name, stage in stages.items()
            if name not in history and not any(_derived(dep["path"], produced) for dep in stage.get("deps", []))}


def inputs(stages: dict, history: set[str]) -> dict[str, str]:
    """Every input of the run by a readable key: the code and configuration files the stages depend on
    (the dependencies that no stage writes), the params each stage ran with, and the data (the source
    stages' outputs)."""
    produced = {path for _, path in outputs(stages)}
    found: dict[str, str] = {}
    for name, stage in stages.items():
        for dep in stage.get("deps", []):
            if not _derived(dep["path"], produced):
                found[f"code or configuration {dep['path']}"] = dep.get("md5", "")
        for file, values in (stage.get("params") or {}).items():
            for key, value in dotted_leaves(values, into_lists=True).items():
                found[f"param {file}:{key}"] = json.dumps(value, sort_keys=True)
    data_stages = source_stages(stages, history)
    for (name, path), digest in outputs(stages).items():
        if name in data_stages:
            found[f"data {path} (stage {name})"] = digest
    return found


def history_stages(dvc_yaml: str) -> set[str]:
    """Stages marked `always_changed`: their outputs also read the git history (the report lists commits
    and experiments), so the commit that adds the results changes them; compared by their numbers."""
    stages = (yaml.safe_load(dvc_yaml) or {}).get("stages", {})
    return {name for name, stage in stages.items() if isinstance(stage, dict) and stage.get("always_changed")}


# --- environment records --------------------------------------------------------------------------


def records(revision: Revision) -> dict[str, dict]:
    """path → the environment of every training and evaluation record."""
    found = {}
    for folder in RECORD_FOLDERS:
        for path in revision.files(folder):
            record = revision.json(path) or {}
            if isinstance(record.get("environment"), dict):
                found[path] = record["environment"]
    return found


def input_differences(expected: Revision, actual: Revision, expected_stages: dict, actual_stages: dict,
                      history: set[str]) -> list[str]:
    """What the run was made from that differs from the committed run: code, configuration, params, data,
    the requirements lock and the package versions the records name."""
    before, after = inputs(expected_stages, history), inputs(actual_stages, history)
    differences = [f"{key}: {after.get(key, 'missing')} vs committed {value}"
                   for key, value in before.items() if after.get(key) != value]
    differences += [f"{key}: not in the committed run" for key in after.keys() - before.keys()]
    differences += [f"{path}: differs from the committed lock" for path in LOCK_FILES
                    if expected.text(path) != actual.text(path)]
    then, now = records(expected), records(actual)
    for path, environment in then.items():
        if path in now and environment.get("versions") != now[path].get("versions"):
            differences.append(f"package versions in {path}: {now[path].get('versions')} vs committed "
                               f"{environment.get('versions')} (install the lock: bash scripts/setup.sh)")
            break
    return differences


def environment_differences(expected: Revision, actual: Revision, keys: tuple[str, ...] | None = None) -> dict[str, list[str]]:
    """Each field of the environment records (`keys`, else every field but the versions, which are inputs)
    that differs from the committed run's, in the first record it differs in: one line per leaf that
    differs (a field holding a dict, the CPU, is compared leaf by leaf), a list as two sets (`fact_line`)."""
    then, now = records(expected), records(actual)
    found: dict[str, list[str]] = {}
    for path, environment in then.items():
        current = now.get(path, {})
        for key in keys or [key for key in environment.keys() | current.keys() if key != "versions"]:
            if key in found or current.get(key) == environment.get(key):
                continue
            before, after = dotted_leaves(environment.get(key), f"{key}."), dotted_leaves(current.get(key), f"{key}.")
            leaves = [leaf for leaf in sorted(before.keys() | after.keys()) if before.get(leaf) != after.get(leaf)]
            found[key] = [f"{fact_line(leaf, before.get(leaf), after.get(leaf))} ({path})" for leaf in leaves]
    return dict(sorted(found.items()))


def fact_line(name: str, committed: Any, here: Any) -> str:
    """One machine fact that differs: a list (the CPU's features) as what only one side has, a scalar as both values."""
    if isinstance(committed, list) and isinstance(here, list):
        only_here = sorted(set(map(str, here)) - set(map(str, committed)))
        only_there = sorted(set(map(str, committed)) - set(map(str, here)))
        parts = ([f"only here: {', '.join(only_here)}"] if only_here else []) + (
            [f"only in the committed run: {', '.join(only_there)}"] if only_there else [])
        return f"{name}: {'; '.join(parts) or 'the same, in another order'}"
    return f"{name}: {here!r} here vs {committed!r} in the committed run"


def machine_differences(expected: Revision, actual: Revision) -> list[str]:
    """The machine facts (`MACHINE_FACTS`) of this run's records that differ from the committed run's, one line each."""
    return [line for lines in environment_differences(expected, actual, MACHINE_FACTS).values() for line in lines]


def differing_by_stage(differing: list[tuple[str, str]]) -> str:
    """"stage (n), ..." in the order of the lock, for a line that shows where a run left the committed one."""
    return ", ".join(f"{stage} ({count})" for stage, count in Counter(stage for stage, _ in differing).items())


# --- the check ------------------------------------------------------------------------------------


def _checked_arguments(root: Path, fraction: float) -> None:
    if not (isinstance(fraction, (int, float)) and math.isfinite(fraction) and 0 < fraction <= 1):
        raise PipelineError(f"--fraction {fraction!r}: must be a number in (0, 1], the share of a score's 95% "
                            f"half-width it may move (default {DEFAULT_FRACTION})")
    if not root.is_dir():
        raise PipelineError(f"--root {root}: no such folder (give the repository's root, the folder holding dvc.lock)")


def _final_verdict(check: Check, differing: list[str], machine: list[str]) -> None:
    """Identical, equivalent or not reproduced, from what differs by hash, the machine and the numbers' problems."""
    if differing and not machine:
        check.verdict = NOT_REPRODUCED
        check.problems.insert(0, f"first output that differs: {differing[0]} (the machine facts equal the "
                                 "committed run's — CPU, ISA, GPU, threads, world size — so outputs must be identical)")
    elif check.problems:
        check.verdict = NOT_REPRODUCED
        if differing:
            check.problems.insert(0, f"first output that differs: {differing[0]}")
    else:
        check.verdict = EQUIVALENT if differing else IDENTICAL


def check_reproduction(root: Path, ref: str = "HEAD", fraction: float = DEFAULT_FRACTION) -> Check:
    _checked_arguments(root, fraction)
    expected, actual = Revision(root, resolve_ref(root, ref)), Revision(root, None)
    expected_stages, actual_stages = expected.lock(), actual.lock()
    check = Check()
    if not outputs(expected_stages):
        raise PipelineError(f"dvc.lock at {ref} has no outputs to compare: is it the commit of the results?")

    # the lock describes the run only if the files here are what it records: else nothing below can be trusted
    stale = workspace_differences(root)
    if stale:
        check.verdict, check.problems = f"{NOT_REPRODUCED} (the workspace is not what the run recorded)", stale
        check.lines.append(f"first file that differs from dvc.lock or git: {stale[0]}")
        return check
    skipped = history_stages(actual.text("dvc.yaml") or "")
    differing_inputs = input_differences(expected, actual, expected_stages, actual_stages, skipped)
    if differing_inputs:
        check.verdict = f"{NOT_REPRODUCED} (inputs differ)"
        check.problems = differing_inputs
        check.lines.append(f"first input that differs: {differing_inputs[0]}")
        return check

    before, after = outputs(expected_stages), outputs(actual_stages)
    changed = [(stage, path) for (stage, path), digest in before.items() if stage not in skipped and after.get((stage, path)) != digest]
    added = sorted(after.keys() - before.keys())
    differing = [f"{stage} {path}: md5 {after.get((stage, path), 'missing')} vs committed {before[stage, path]}"
                 for stage, path in changed]
    differing += [f"{stage} {path}: not in the committed dvc.lock" for stage, path in added]
    compared = sum(stage not in skipped for stage, _ in before)
    check.lines.append(f"outputs compared by hash: {compared}, {len(differing)} differ (not by hash: the outputs of "
                       f"{', '.join(sorted({s for s, _ in before if s in skipped})) or 'no stage'}, which also read the "
                       "git history; their numbers are compared)")
    if differing:
        check.lines.append(f"outputs that differ, by stage: {differing_by_stage(changed + added)}")
    machine = machine_differences(expected, actual)
    check.lines += [f"machine differs: {line}" for line in machine]
    if differing and not machine:
        # the machine facts equal and yet the outputs differ: what else the records say differs (data read,
        # settings as resolved) is where to look
        others = environment_differences(expected, actual)
        check.lines += [f"record differs (not a machine fact): {line}" for lines in others.values() for line in lines]

    compared_files = compare_results(expected, actual, fraction, check, exact=not differing)
    unread = sorted({path for stage, path in changed + added if path not in compared_files}
                    | {path for stage, path in before if stage in skipped and path not in compared_files})
    if unread:
        check.lines.append(f"not compared by number ({len(unread)}: figures, rendered tables and binned plot data, "
                           f"drawn from the numbers compared above): {', '.join(unread)}")
    _final_verdict(check, differing, machine)
    return check




def _pairs(expected: Revision, actual: Revision, paths_: list[str], check) -> list[tuple[str, dict, dict]]:
    """(path, committed, this run's) of each JSON file; one problem for each this run did not write."""
    found = []
    for path in paths_:
        current = actual.json(path)
        if current is None:
            check.problems.append(f"{path}: not produced by this run")
        else:
            found.append((path, expected.json(path) or {}, current))
    return found


def compare_results(expected: Revision, actual: Revision, fraction: float, check: Check, exact: bool) -> set[str]:
    """Every numeric result against the committed run's (`tools.result_numbers`) and the claims' estimates
    (`tools.estimate_changes`). `exact`: every output hash was equal, so every number must be too (the
    history-dependent report aside, whose numbers are compared all the same). Returns the files compared."""
    fraction, tolerance = (0.0, 0.0) if exact else (fraction, RELATIVE_TOLERANCE)
    scores, relative = check.largest.setdefault("score", Largest()), check.largest.setdefault("relative", Largest())
    widths = {Path(path).stem: half_widths(expected.json(path) or {}) for path in expected.files(paths.METRICS_DETAILS)}
    dev_width = min((task_widths[DEV_TASK] for task_widths in widths.values() if DEV_TASK in task_widths), default=None)
    metrics = expected.files(paths.METRICS) + expected.files(paths.METRICS_DETAILS)
    if not metrics:
        check.problems.append(f"no metrics committed at {expected.name} under {paths.METRICS.as_posix()}/")
    for path, committed, current in _pairs(expected, actual, metrics, check):
        compare_scores(path, committed, current, widths.get(Path(path).stem, {}), fraction, check, scores)
        compare_labels(path, committed, current, check)
    resampled = expected.files(paths.METRICS_BOOTSTRAP)
    for path, committed, current in _pairs(expected, actual, resampled, check):
        compare_scores(path, resample_summary(committed), resample_summary(current), widths.get(Path(path).stem, {}),
                       fraction, check, scores)
        compare_labels(path, committed, current, check)
    training = expected.files(paths.TRAINING_REPORTS) + expected.files(paths.TRAINING_DETAILS)
    for path, committed, current in _pairs(expected, actual, training, check):
        compare_training(path, committed, current, dev_width, fraction, check, scores)
    by_tolerance = tolerance_files(expected.all_files())
    for path in by_tolerance:
        if actual.text(path) is None:
            check.problems.append(f"{path}: not produced by this run")
        else:
            compare_by_tolerance(path, expected.text(path), actual.text(path), tolerance, check, relative)
    check.lines.append(f"numbers without an interval compared ({len(by_tolerance)} files: MTEB, analyses, checkpoints, "
                       f"training curves): largest {relative.text('of its size', percent=True)}, allowed {tolerance:.0%}")
    claims = expected.json(CLAIMS.as_posix())
    if claims is not None:
        current_claims = actual.json(CLAIMS.as_posix())
        if current_claims is None:
            check.problems.append(f"{CLAIMS.as_posix()}: not produced by this run")
        else:
            check.largest["estimate"] = compare_estimates(claims, current_claims, fraction, check)
    return set(metrics + resampled + training + by_tolerance + [CLAIMS.as_posix()])

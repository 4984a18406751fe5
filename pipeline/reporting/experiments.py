"""reports/tables/experiments.md: every run the report stage sees side by side, each with the
settings it changed against the workspace and every model's headline 7-STS average.

`dvc exp show` prints one column per setting (some 277) and, piped, shortens each cell to "…";
this keeps only what differs: a run's settings are compared with the workspace's params.yaml, a
setting a run lacks (it predates the setting) counting at its default, as `pipeline.reporting.runs`
does for the tables.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from pipeline.params_file import setting_default
from pipeline.io import dotted_leaves
from pipeline.paths import METRICS
from pipeline.reporting.runs import Run, same_setting

EXPERIMENTS_FILE = "experiments.md"
HEADLINE = "avg"
SHOWN_VALUE_CHARACTERS = 60  # a changed list of settings is cut here; params.yaml has it whole
_UNKNOWN = object()  # a setting a run lacks that has no default


def flat_settings(params: Mapping[str, Any]) -> dict[str, Any]:
    """Dotted leaf → value; lists are leaves (`eval.tasks`). Values go through JSON, so paths and
    tuples read as the text and lists params.yaml holds."""
    return dotted_leaves(json.loads(json.dumps(params, default=str)))


def changed_settings(params: Mapping[str, Any], baseline: Mapping[str, Any]) -> dict[str, Any]:
    """The settings whose value in `params` differs from `baseline`'s, in the baseline's order. A
    setting one side lacks counts at its default; one without a default (inside a mapping such as
    `models.<name>`) cannot be compared and is left out."""
    ours, theirs = flat_settings(params), flat_settings(baseline)

    def value(flat: dict[str, Any], key: str) -> Any:
        if key in flat:
            return flat[key]
        known, default = setting_default(key)
        return flat_settings({"v": default})["v"] if known else _UNKNOWN

    changed = {}
    for key in dict.fromkeys([*theirs, *ours]):
        mine, base = value(ours, key), value(theirs, key)
        if mine is not _UNKNOWN and base is not _UNKNOWN and not same_setting(mine, base):
            changed[key] = mine
    return changed


def headline_models(runs: Sequence[Run]) -> list[str]:
    """Every model with a headline file (reports/metrics/<model>.json) in some run, first seen first."""
    prefix = METRICS.as_posix() + "/"
    names = [
        path.removeprefix(prefix).removesuffix(".json")
        for run in runs
        for path in run.files
        if path.startswith(prefix) and path.endswith(".json") and "/" not in path.removeprefix(prefix)
    ]
    return list(dict.fromkeys(names))


def _shown(key: str, value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    if len(text) > SHOWN_VALUE_CHARACTERS:
        text = text[: SHOWN_VALUE_CHARACTERS - 1] + "…"
    return f"`{key}={text}`"


def _record(run: Run, params: Mapping[str, Any], baseline: Mapping[str, Any], models: list[str]) -> dict[str, str]:
    """One run's row: its name, the settings it changed against the workspace, each model's headline score."""
    changed = changed_settings(params, baseline)
    record = {"Run": run.name,
              "Changed settings (vs the workspace)": ", ".join(_shown(key, value) for key, value in changed.items()) or "—"}
    for model in models:
        score = run.value(model, HEADLINE)
        record[model] = "—" if score is None else f"{score:.2f}"
    return record


def experiments_table(
    workspace: Run, baseline: Mapping[str, Any], runs: Sequence[Run], problem: str | None = None
) -> str:
    """The Markdown of experiments.md: the workspace, then `runs` (the commits and finished DVC
    experiments `search_experiments` found, newest first). `baseline`: the workspace's params.yaml
    as written (as `dvc exp show` has each run's; parsed settings would add every default);
    `problem`: why no experiments could be listed."""
    models = headline_models([workspace, *runs])
    records = [_record(run, params, baseline, models) for run, params in [(workspace, baseline), *((run, run.params) for run in runs)]]
    # a run with the workspace's settings and numbers says nothing the workspace row does not; listing it would
    # also make the committed table name the commits before its own, so that every rerun rewrote it
    same = [record for record in records[1:] if {**record, "Run": ""} == {**records[0], "Run": ""}]
    records = [records[0]] + [record for record in records[1:] if record not in same]
    body = pd.DataFrame(records).map(lambda text: str(text).replace("|", r"\|"))
    lines = [
        "# Runs side by side",
        "",
        "Every run the report stage found: the workspace, then the commits and finished DVC experiments "
        "(newest first) of the last `experiment_commits` commits (tables.yaml). Settings: those that differ "
        "from the workspace's params.yaml. Model columns: each model's 7-STS average (Spearman × 100, "
        f"`reports/metrics/<model>.json` {HEADLINE}); — where the run has none. In a terminal: "
        "`dvc exp show --only-changed --keep '.*:avg$' --drop 'Created|parent' --md`.",
        "",
    ]
    if problem:
        lines += [f"Experiments could not be listed: {problem}.", ""]
    if same:
        lines += [f"{len(same)} of the runs found have the workspace's settings and numbers: not listed.", ""]
    lines.append(body.to_markdown(index=False, disable_numparse=True))  # "73.00" stays as written
    return "\n".join(lines) + "\n"

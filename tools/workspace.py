"""Is the workspace what dvc.lock says it is? The reproduction check reads the files here: one changed after
the run (a corrupted output, code or params edited without a rerun) makes any verdict about the run wrong.

Each output and each code or configuration dependency of the lock is hashed as DVC 3 hashes it: a file by
the md5 of its bytes; a folder by the md5 of the JSON listing of its files' md5s (sorted by relative path),
with ".dir" appended, skipping what the root .dvcignore ignores. The params are compared with the params
files, and the tracked files that are neither outputs nor dvc.lock with git's HEAD.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pathspec
from ruamel.yaml import YAML, YAMLError

from pipeline import paths
from pipeline.errors import PipelineError
from pipeline.git import git

DIR_SUFFIX = ".dir"
RERUN = "rerun `dvc repro` (or restore it: `git checkout` / `dvc checkout`)"


def md5_of(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "md5").hexdigest()


def _ignored(root: Path) -> pathspec.PathSpec:
    dvcignore = root / ".dvcignore"
    lines = dvcignore.read_text(encoding="utf-8").splitlines() if dvcignore.is_file() else []
    return pathspec.GitIgnoreSpec.from_lines(lines)


def listing(root: Path, folder: str, ignored: pathspec.PathSpec) -> list[dict[str, str]]:
    """[{"md5", "relpath"}] of every file under `folder`, as DVC lists a folder output."""
    entries = []
    for current, folders, files in os.walk(root / folder):
        here = Path(current).relative_to(root).as_posix()
        folders[:] = [name for name in folders if not ignored.match_file(f"{here}/{name}/")]
        for name in files:
            if not ignored.match_file(f"{here}/{name}"):
                path = Path(current) / name
                entries.append({"md5": md5_of(path), "relpath": path.relative_to(root / folder).as_posix()})
    return sorted(entries, key=lambda entry: entry["relpath"])


def dvc_md5(root: Path, path: str, ignored: pathspec.PathSpec) -> str | None:
    """The md5 DVC records for `path` as it is here; None when there is nothing there."""
    where = root / path
    if where.is_file():
        return md5_of(where)
    if not where.is_dir():
        return None
    text = json.dumps(listing(root, path, ignored), sort_keys=True)
    return hashlib.md5(text.encode("utf-8")).hexdigest() + DIR_SUFFIX


def _changed_in_folder(root: Path, path: str, recorded: str, ignored: pathspec.PathSpec) -> str:
    """The first file of a folder that differs from the listing DVC's cache holds for `recorded` ("" when the
    cache has no listing: then only the folder is named)."""
    cached = root / ".dvc" / "cache" / "files" / "md5" / recorded[:2] / recorded[2:]
    try:
        before = {entry["relpath"]: entry.get("md5") for entry in json.loads(cached.read_text(encoding="utf-8"))}
    except (OSError, ValueError, TypeError, KeyError):
        return ""
    now = {entry["relpath"]: entry["md5"] for entry in listing(root, path, ignored)}
    for name in sorted(before.keys() | now.keys()):
        if before.get(name) != now.get(name):
            return f" (first file that differs: {path}/{name}, {'missing' if name not in now else 'changed'})"
    return ""


def _within(path: str, outputs: set[str]) -> bool:
    """Whether `path` is, lies in or holds an output: a run rewrites it."""
    return any(path == out or path.startswith(out + "/") or out.startswith(path + "/") for out in outputs)


def stale_files(root: Path, stages: dict, produced: set[str]) -> list[str]:
    """Each output, and each dependency that no stage writes, whose file here is not what the lock records."""
    ignored, found, seen = _ignored(root), [], set()
    for name, stage in stages.items():
        entries = [("output", out) for out in stage.get("outs", [])]
        entries += [("code or configuration", dep) for dep in stage.get("deps", []) if not _within(dep["path"], produced)]
        for kind, entry in entries:
            path, recorded = entry["path"], entry.get("md5", "")
            if path in seen or not recorded:
                continue
            seen.add(path)
            digest = dvc_md5(root, path, ignored)
            if digest != recorded:
                where = _changed_in_folder(root, path, recorded, ignored) if digest else ""
                found.append(f"{kind} {path} (stage {name}): {'missing' if digest is None else 'md5 ' + digest} "
                             f"here vs {recorded} in dvc.lock{where}; {RERUN}")
    return found


def _value(tree, key: str):
    """`key` of a params file: a top-level key, else a dotted path (how dvc.lock names a nested param)."""
    if isinstance(tree, dict) and key in tree:
        return tree[key]
    for part in key.split("."):
        if not isinstance(tree, dict) or part not in tree:
            return "missing"
        tree = tree[part]
    return tree


def stale_params(root: Path, stages: dict) -> list[str]:
    """Each param the lock records that the params file here no longer holds."""
    found, files = [], {}
    for name, stage in stages.items():
        for file, values in (stage.get("params") or {}).items():
            if file not in files:
                text = (root / file).read_text(encoding="utf-8") if (root / file).is_file() else None
                files[file] = _load(text, file) if text is not None else None
            if files[file] is None:
                found.append(f"params file {file} (stage {name}): missing here; {RERUN}")
                continue
            found += [f"param {file}:{key} (stage {name}): {_value(files[file], key)!r} here vs {value!r} in dvc.lock; "
                      "rerun `dvc repro`" for key, value in values.items() if _value(files[file], key) != value]
    return found


# What every run rewrites besides its outputs: the lock, and the stages' provenance (commit, host, time),
# which lives outside dvc.lock on purpose so that the lock stays a function of code, data and params.
REWRITTEN_BY_A_RUN = ("dvc.lock", str(paths.PROVENANCE))


def changed_tracked(root: Path, outputs: set[str]) -> list[str]:
    """Tracked files that differ from git's HEAD, the outputs and what a run rewrites aside (`REWRITTEN_BY_A_RUN`)."""
    entries = git(root, "status", "--porcelain=v1", "-z", "--untracked-files=no").decode().split("\0")
    found, skip = [], False
    for entry in entries:
        if skip or len(entry) < 4:
            skip = False
            continue
        status, path = entry[:2], entry[3:]
        skip = "R" in status or "C" in status  # a rename's next entry is its old name
        if not _within(path, outputs | set(REWRITTEN_BY_A_RUN)):
            found.append(f"{path}: changed since the last commit (git status {status.strip()}); commit it and "
                         "rerun `dvc repro`, or restore it")
    return found


def _load(text: str, name: str):
    # YAML 1.2, as DVC reads and writes: PyYAML would read the lock's `lr: 3e-05` as a string
    try:
        return YAML(typ="safe", pure=True).load(text)
    except YAMLError as error:
        raise PipelineError(f"{name}: not valid YAML: {str(error).splitlines()[0]}") from None


def workspace_differences(root: Path) -> list[str]:
    """Everything in the workspace that is not what dvc.lock and git's HEAD record, first the outputs."""
    lock = _load((root / "dvc.lock").read_text(encoding="utf-8"), "dvc.lock") or {}
    stages = lock.get("stages", {}) if isinstance(lock, dict) else {}
    produced = {out["path"] for stage in stages.values() for out in stage.get("outs", [])}
    return stale_files(root, stages, produced) + stale_params(root, stages) + changed_tracked(root, produced)

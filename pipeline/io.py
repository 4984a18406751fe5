"""Files written whole or not at all: atomic files and folders, JSON metrics that refuse NaN, checksums.

Every output of the pipeline goes through here: a temporary twin is written first and renamed onto
the destination only on success, so a killed stage leaves its previous output or none, never half
a file. Temporaries live in the scratch folder `.tmp/` at the project root (see `SCRATCH`), named
`pipeline-tmp-<pid>-…`: the sweep of a killed run's leftovers removes nothing else.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import math
import os
import re
import secrets
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

from pipeline.errors import PipelineError

log = logging.getLogger(__name__)


# Temporary files and folders of atomic writes under the project root live here, not beside their
# destination: never inside a DVC output folder (or a git-tracked one such as reports/tables/),
# and leftovers of a killed run are swept by the next write (`_sweep_scratch`). The project is the
# working directory when it holds dvc.yaml (DVC runs every stage there); a stage run from elsewhere
# (the home folder, with --output) keeps its temporaries beside their destination, hidden.
SCRATCH = Path(".tmp")
PROJECT_MARKER = "dvc.yaml"
# Every temporary's name starts so: the sweep removes these alone (a user's `.tmp/2024-backup/` is theirs).
TEMPORARY_PREFIX = "pipeline-tmp-"
_SWEPT_NAME = re.compile(rf"{TEMPORARY_PREFIX}(\d+)-")
PID_MAX = 2**22  # Linux's PID_MAX_LIMIT: a larger number in a scratch name is no process of ours


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def _left_by_a_dead_writer(name: str) -> bool:
    """A `pipeline-tmp-<pid>-…` name (hidden or not) whose process no longer runs."""
    match = _SWEPT_NAME.match(name.lstrip("."))
    if match is None:
        return False
    pid = int(match.group(1))
    return 0 < pid <= PID_MAX and pid != os.getpid() and not _pid_alive(pid)


def _sweep_scratch(scratch: Path) -> None:
    """Remove what processes that no longer run left in the scratch folder: `pipeline-tmp-<pid>-…`
    entries alone, whatever else lies there; a set of files such a process was renaming into place
    is completed first (`finish_interrupted_sets`), never dropped half done."""
    finish_interrupted_sets(scratch)
    _remove_left_by_dead_writers(scratch.glob(f"{TEMPORARY_PREFIX}*"))


def _remove_left_by_dead_writers(entries: Iterable[Path]) -> None:
    for entry in entries:
        if _left_by_a_dead_writer(entry.name):
            shutil.rmtree(entry, ignore_errors=True) if entry.is_dir() and not entry.is_symlink() else entry.unlink(missing_ok=True)


def project_scratch() -> Path | None:
    """The project's scratch folder (`.tmp/` beside dvc.yaml in the working directory), or None
    when the working directory is no project of this pipeline."""
    cwd = Path.cwd()
    return cwd / SCRATCH if (cwd / PROJECT_MARKER).is_file() else None


def _temporary_name(destination: Path) -> Path:
    """A fresh path for a temporary twin of `destination`, on the same file system (for the rename).

    Inside the project that is the scratch folder; elsewhere (e.g. an `--output` in /tmp, or a run
    from outside a project) beside the destination, hidden.
    """
    parent = destination.parent.resolve()
    tag = f"{TEMPORARY_PREFIX}{os.getpid()}-{secrets.token_hex(4)}-{destination.name}"
    scratch = project_scratch()
    if scratch is not None and parent.is_relative_to(scratch.parent):
        if scratch.exists() and not scratch.is_dir():
            raise PipelineError(f"{scratch} is not a folder; it is the scratch folder of atomic writes: remove that file and rerun")
        scratch.mkdir(exist_ok=True)
        if scratch.stat().st_dev == parent.stat().st_dev:
            _sweep_scratch(scratch)
            return scratch / tag
    _remove_left_by_dead_writers(parent.glob(f".{TEMPORARY_PREFIX}*"))  # a dead writer's hidden leftovers, nothing else
    return parent / f".{tag}"


def is_temporary(path: Path) -> bool:
    """A writer's file in flight (`_temporary_name` names it `pipeline-tmp-…`, hidden with a leading
    dot beside its destination): readers and pruners of a folder skip it, or they would take it for
    a broken entry and delete it under its writer."""
    name = Path(path).name
    return name.startswith(".") or name.startswith(TEMPORARY_PREFIX)


def _current_umask() -> int:
    """The process's umask, read without setting it (os.umask would change it for other threads meanwhile)."""
    status = Path("/proc/self/status")
    if status.is_file():
        for line in status.read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    umask = os.umask(0o022)  # no /proc (not Linux): read it by setting it back at once
    os.umask(umask)
    return umask


def _usual_permissions(path: Path) -> None:
    """Files 0666 and folders 0777 less the umask, as a plain write makes them: libraries that write
    through `tempfile.mkstemp` (safetensors, a model's save) leave 0600, unreadable to a group."""
    umask = _current_umask()
    entries = [path, *path.rglob("*")] if path.is_dir() else [path]
    for entry in entries:
        if not entry.is_symlink():
            entry.chmod((0o777 if entry.is_dir() else 0o666) & ~umask)


@contextmanager
def atomic_path(destination: Path) -> Iterator[Path]:
    """Yield a temporary path; rename it onto `destination` only on success.

    The temporary file is created with the usual permissions (0666 less the umask), as the
    destination would be: `tempfile.mkstemp`'s 0600 would make outputs unreadable to a group.
    """
    destination = Path(destination)
    _writable_folder(destination.parent)
    temporary = _temporary_name(destination)
    try:
        os.close(os.open(temporary, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
    except PermissionError as error:
        raise _not_writable(destination, error) from None
    try:
        with _disk_full_is_one_line(destination):
            yield temporary
            _usual_permissions(temporary)  # a writer may have replaced the file with its own mkstemp twin
        try:
            os.replace(temporary, destination)
        except PermissionError as error:
            raise _not_writable(destination, error) from None
    finally:
        temporary.unlink(missing_ok=True)


def _not_writable(path: Path, error: OSError) -> PipelineError:
    return PipelineError(f"cannot write {path}: {error.strerror or error}; make {path.parent} writable and rerun")


_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


def is_disk_full(error: BaseException) -> bool:
    """A full disk (or quota): an OSError with ENOSPC/EDQUOT, or a `shutil.Error` (copytree) whose
    list of failed copies holds one (it keeps only their messages)."""
    if isinstance(error, shutil.Error) and error.args and isinstance(error.args[0], list):
        return any(f"[Errno {code}]" in str(entry) for entry in error.args[0] for code in _DISK_FULL)
    return isinstance(error, OSError) and error.errno in _DISK_FULL


def disk_full(path: Path | str | None) -> PipelineError:
    """The one line of a write that ran out of space: what, where to free space, and what is left of the
    previous outputs: unchanged by this write, but under `dvc repro` DVC removed them before the stage ran."""
    stage = os.environ.get("DVC_STAGE")  # set by DVC for a stage's command
    previous = (f"DVC removed this stage's previous outputs before running it: `dvc checkout {stage}` restores the "
                "cached ones and `git checkout -- reports/` those in git" if stage else "the previous outputs are unchanged")
    if not path:
        return PipelineError(f"no space left on the device; {previous}: free space on the disk the stage writes to (df -h) "
                             "and rerun")
    folder = Path(path).parent
    return PipelineError(f"no space left on the device while writing {path}; {previous}: free space on {folder} "
                         f"(df -h {folder}) or write elsewhere, and rerun")


@contextmanager
def _disk_full_is_one_line(destination: Path) -> Iterator[None]:
    try:
        yield
    except OSError as error:
        if is_disk_full(error):
            raise disk_full(destination) from None
        raise


def _writable_folder(folder: Path) -> None:
    """Make `folder` (and its parents); one line when that fails or it cannot be written into."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise PipelineError(f"cannot create the folder {folder}: {error.strerror or error}") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise PipelineError(f"cannot write into {folder}: permission denied; make it writable and rerun")


@contextmanager
def atomic_directory(destination: Path) -> Iterator[Path]:
    """Yield a temporary folder; put it in place of `destination` only on success.

    Rename-over: an existing `destination` is moved aside (one rename), the new folder renamed in,
    and only then the old one deleted, so a failure or kill never loses the old folder before the
    new one is in place (a kill between the two renames leaves the old one in the scratch folder).
    """
    destination = Path(destination)
    destination.parent.mkdir(parents=True, exist_ok=True)
    temporary = _temporary_name(destination)
    temporary.mkdir()  # 0777 less the umask, unlike tempfile.mkdtemp's 0700
    old = temporary.with_name(temporary.name + ".old")
    try:
        with _disk_full_is_one_line(destination):
            yield temporary
            _usual_permissions(temporary)
        if destination.exists():
            os.replace(destination, old)
            try:
                os.replace(temporary, destination)
            except OSError:
                os.replace(old, destination)
                raise
            shutil.rmtree(old)
        else:
            os.replace(temporary, destination)
    finally:
        shutil.rmtree(temporary, ignore_errors=True)


@contextmanager
def scratch_directory(near: Path) -> Iterator[Path]:
    """A temporary work folder on the file system of `near` (in the scratch folder inside the
    project), removed on exit; a killed run's is swept by the next atomic write."""
    folder = _temporary_name(Path(near) / "scratch")
    folder.mkdir()
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def write_text_atomic(path: Path, text: str) -> None:
    with atomic_path(path) as temporary:
        temporary.write_text(text, encoding="utf-8")


def non_finite_keys(value: Any, key: str = "") -> list[str]:
    """The dotted keys of every NaN or infinite number in a nested dict/list of metrics."""
    if isinstance(value, float):
        return [] if math.isfinite(value) else [key or "<value>"]
    if isinstance(value, dict):
        return [bad for name, item in value.items() for bad in non_finite_keys(item, f"{key}.{name}" if key else str(name))]
    if isinstance(value, (list, tuple)):
        return [bad for index, item in enumerate(value) for bad in non_finite_keys(item, f"{key}[{index}]")]
    return []


def json_dumps_compact(data: Any) -> str:
    """JSON on one line, for large arrays (attention maps); NaN or infinity is an error."""
    return json.dumps(data, allow_nan=False, separators=(",", ":"))


def _json_text(path: Path, data: Any) -> str:
    """The text of a metrics/results JSON file; a NaN or infinite number is an error naming it."""
    bad = non_finite_keys(data)
    if bad:
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        raise PipelineError(
            f"{path}: metric {bad[0]}{more} is not a finite number; nothing was written. "
            "Too few pairs (eval.max_pairs) or a degenerate model (constant embeddings) gives NaN correlations"
        )
    return json.dumps(data, indent=2, allow_nan=False) + "\n"


def write_json_atomic(path: Path, data: Any) -> None:
    """A metrics/results JSON file; a NaN or infinite number is an error naming it, never `NaN` in the file."""
    write_text_atomic(Path(path), _json_text(path, data))


def write_json_files_atomic(files: Mapping[Path, Any]) -> None:
    """Several JSON files as one set (`write_files_atomic`), each checked as `write_json_atomic` checks."""
    write_files_atomic({Path(path): _json_text(path, data) for path, data in files.items()})


def write_files_atomic(files: Mapping[Path, str]) -> None:
    """Several text files as one: all new or all as they were, never half a set (a stage's outputs).
    (A killed set is completed only while the files it renamed in are still its own: `finish_interrupted_sets`.)

    Every destination folder is made and checked writable and every temporary twin written before
    any destination changes; then a journal listing the renames is put beside the first twin, and
    each twin renamed in. A process killed between two renames leaves the journal: the next atomic
    write in the project, the next stage, or the next write of the set completes the renames
    (`finish_interrupted_sets`), so the set is all old or all new. A rename that fails still (a
    folder made read-only meanwhile, or writable only to its owner while we run as root) puts back
    the files already replaced, from hard links taken just before, and is one line naming the file.
    """
    finish_interrupted_sets(*{Path(destination).parent for destination in files})
    staged: list[tuple[Path, Path]] = []
    backups: list[Path] = []
    try:
        for destination, text in files.items():
            destination = Path(destination)
            _writable_folder(destination.parent)
            temporary = _temporary_name(destination)
            staged.append((temporary, destination))
            try:
                with _disk_full_is_one_line(destination):
                    temporary.write_text(text, encoding="utf-8")
            except PermissionError as error:
                raise _not_writable(destination, error) from None
        with _disk_full_is_one_line(staged[0][1]):
            journal = _write_journal(staged, [_text_digest(text) for text in files.values()])
        try:
            _replace_all(staged, backups)
        finally:
            journal.unlink(missing_ok=True)  # done, or put back as it was
    finally:
        for temporary in [temporary for temporary, _ in staged] + backups:
            temporary.unlink(missing_ok=True)


def _replace_all(staged: list[tuple[Path, Path]], backups: list[Path]) -> None:
    """Rename each twin onto its destination; on a failure put back those already replaced."""
    replaced: list[tuple[Path, Path | None]] = []
    for temporary, destination in staged:
        backup = None
        try:
            if destination.is_file():
                backup = temporary.with_name(temporary.name + ".old")
                backups.append(backup)
                try:
                    os.link(destination, backup)
                except OSError:  # a file system without hard links
                    shutil.copy2(destination, backup)
            os.replace(temporary, destination)
        except OSError as error:
            for done, kept in reversed(replaced):
                os.replace(kept, done) if kept is not None else done.unlink(missing_ok=True)
            if is_disk_full(error):  # the backup's copy, on a file system without hard links
                raise disk_full(destination) from None
            raise PipelineError(
                f"cannot write {destination}: {error.strerror or error}; none of the {len(staged)} files "
                f"({', '.join(path.name for _, path in staged)}) was changed. Make {destination.parent} writable and rerun"
            ) from None
        replaced.append((destination, backup))


JOURNAL_SUFFIX = ".journal"


def _text_digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _write_journal(staged: list[tuple[Path, Path]], digests: list[str]) -> Path:
    """The renames of a set (twin -> destination, absolute, and the digest of what the twin holds), written
    whole beside its first twin (so named after a process: the sweep knows when its writer is gone)."""
    first = staged[0][0]
    journal = first.with_name(first.name + JOURNAL_SUFFIX)
    part = first.with_name(first.name + ".part")  # a twin of the journal: a kill before the rename changes nothing
    pairs = [[str(temporary.absolute()), str(destination.absolute()), digest]
             for (temporary, destination), digest in zip(staged, digests)]
    try:
        part.write_text(json.dumps(pairs), encoding="utf-8")
        os.replace(part, journal)
    except OSError:
        part.unlink(missing_ok=True)
        raise
    return journal


def _still_as_written(pairs: list[list[str]]) -> bool:
    """Whether every file the killed writer had renamed in still holds what it wrote."""
    for temporary, destination, digest in pairs:
        if not os.path.lexists(temporary):  # renamed in: it must still be the writer's
            try:
                if _text_digest(Path(destination).read_text(encoding="utf-8")) != digest:
                    return False
            except (OSError, ValueError):
                return False
    return True


def finish_interrupted_sets(*folders: Path) -> None:
    """Complete the sets of files that writers killed mid-rename left in `folders` (their journals: the
    renames not done yet are done), so each set is all new; a journal of a live writer is its own. A set
    whose renamed files changed since (restored) is left as it is and its leftover twins removed."""
    for folder in folders:
        if not folder.is_dir():
            continue
        for journal in folder.glob(f"*{TEMPORARY_PREFIX}*{JOURNAL_SUFFIX}"):
            if not _left_by_a_dead_writer(journal.name):
                continue
            try:
                pairs = json.loads(journal.read_text(encoding="utf-8"))
                names = ", ".join(Path(destination).name for _, destination, _ in pairs)
                if not _still_as_written(pairs):
                    for temporary, _, _ in pairs:
                        Path(temporary).unlink(missing_ok=True)
                    journal.unlink()
                    log.warning("a run killed while writing %s had renamed part of them, and those have changed since "
                                "(restored?): left as they are; rerun the stage that writes them for a new set", names)
                    continue
                for temporary, destination, _ in pairs:
                    if os.path.lexists(temporary):  # not renamed yet; one that is gone was
                        os.replace(temporary, destination)
            except (OSError, ValueError) as error:  # e.g. a destination folder removed since: the rerun rewrites the set
                log.warning("could not complete the set of files that %s lists (%s); rerun the stage that writes them",
                            journal, error)
                continue
            journal.unlink()
            log.warning("a run killed while writing %s had renamed part of them; the rest are now in place too", names)


def finish_interrupted_writes() -> None:
    """What a stage does first: complete the sets of files a killed run left half renamed in the
    project (`finish_interrupted_sets`), before anything reads them."""
    scratch = project_scratch()
    if scratch is not None:
        finish_interrupted_sets(scratch)


def dotted_leaves(tree: Any, prefix: str = "", into_lists: bool = False) -> dict[str, Any]:
    """The leaves of a JSON tree by dotted path (`train.gaussian.count`). A non-empty mapping is walked, an empty
    one is a leaf; a list is a leaf (`eval.tasks`) unless `into_lists`, which walks it by index."""
    leaves: dict[str, Any] = {}

    def walk(node: Any, path: str) -> None:
        if isinstance(node, Mapping) and node:
            for key, value in node.items():
                walk(value, f"{path}{key}.")
        elif into_lists and isinstance(node, list) and node:
            for index, value in enumerate(node):
                walk(value, f"{path}{index}.")
        else:
            leaves[path.removesuffix(".")] = node

    walk(tree, prefix)
    return leaves

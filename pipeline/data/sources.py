"""Where the inputs come from: a local mirror folder, the Hugging Face hub, or an installed package.

Every fetch ends in an atomic write (temp file, then rename) so a killed download leaves nothing
half-written, and a file that cannot be had raises one `PipelineError` that names it and the two
ways out (a mirror, or a machine that reaches the source).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import math
import os
import secrets
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from pipeline.errors import PipelineError

PACKAGE_PREFIX = "package:"


# Temporary files and folders of atomic writes under the project root live here, not beside their
# destination: never inside a DVC output folder (or a git-tracked one such as reports/tables/),
# and leftovers of a killed run are swept by the next write (`_sweep_scratch`).
SCRATCH = Path(".tmp")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def _sweep_scratch(scratch: Path) -> None:
    """Remove what processes that no longer run left in the scratch folder (names start `<pid>-`)."""
    for entry in scratch.glob("*-*"):
        pid = entry.name.split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not _pid_alive(int(pid)):
            shutil.rmtree(entry, ignore_errors=True) if entry.is_dir() and not entry.is_symlink() else entry.unlink(missing_ok=True)


def _temporary_name(destination: Path) -> Path:
    """A fresh path for a temporary twin of `destination`, on the same file system (for the rename).

    Inside the project (the working directory) that is the scratch folder; elsewhere (e.g. an
    `--output` in /tmp) beside the destination, hidden.
    """
    parent = destination.parent.resolve()
    tag = f"{os.getpid()}-{secrets.token_hex(4)}-{destination.name}"
    scratch = Path.cwd() / SCRATCH
    if parent.is_relative_to(Path.cwd()):
        scratch.mkdir(exist_ok=True)
        if scratch.stat().st_dev == parent.stat().st_dev:
            _sweep_scratch(scratch)
            return scratch / tag
    return parent / f".{tag}"


@contextmanager
def atomic_path(destination: Path) -> Iterator[Path]:
    """Yield a temporary path; rename it onto `destination` only on success.

    The temporary file is created with the usual permissions (0666 less the umask), as the
    destination would be: `tempfile.mkstemp`'s 0600 would make outputs unreadable to a group.
    """
    destination = Path(destination)
    destination.parent.mkdir(parents=True, exist_ok=True)
    temporary = _temporary_name(destination)
    os.close(os.open(temporary, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
    try:
        yield temporary
        os.replace(temporary, destination)
    finally:
        temporary.unlink(missing_ok=True)


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
        yield temporary
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


def write_json_atomic(path: Path, data: Any) -> None:
    """A metrics/results JSON file; a NaN or infinite number is an error naming it, never `NaN` in the file."""
    bad = non_finite_keys(data)
    if bad:
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        raise PipelineError(
            f"{path}: metric {bad[0]}{more} is not a finite number; nothing was written. "
            "Too few pairs (eval.max_pairs) or a degenerate model (constant embeddings) gives NaN correlations"
        )
    write_text_atomic(Path(path), json.dumps(data, indent=2, allow_nan=False) + "\n")


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class Mirror:
    """A local folder laid out like ../shared/data, with a SHA256SUMS file listing its files."""

    def __init__(self, root: Path):
        self.root = root
        self.checksums = self._read_checksums(root / "SHA256SUMS")

    @staticmethod
    def _read_checksums(path: Path) -> dict[str, str]:
        if not path.is_file():
            return {}
        checksums = {}
        for line in path.read_text().splitlines():
            if line.strip() and not line.startswith("#"):
                digest, name = line.split(maxsplit=1)
                checksums[name.strip().removeprefix("./")] = digest
        return checksums

    def file(self, relative: str) -> Path:
        """The mirrored file, verified against SHA256SUMS when the mirror lists it."""
        path = self.root / relative
        if not path.is_file():
            raise PipelineError(f"mirror {self.root} has no {relative}; complete the mirror or set data.mirror: null")
        expected = self.checksums.get(relative)
        if expected and sha256_of(path) != expected:
            raise PipelineError(f"{path} does not match its checksum in {self.root / 'SHA256SUMS'}; re-copy the mirror")
        return path

    def has(self, relative: str) -> bool:
        return (self.root / relative).exists()

    def copy_tree(self, relative: str, destination: Path) -> int:
        """Copy a mirrored folder (each listed file checksum-verified); returns the file count."""
        source = self.root / relative
        if not source.is_dir():
            raise PipelineError(f"mirror {self.root} has no folder {relative}; complete the mirror or set data.mirror: null")
        count = 0
        with atomic_directory(destination) as temporary:
            for path in sorted(source.rglob("*")):
                if path.is_file():
                    target = temporary / path.relative_to(source)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(self.file(str(path.relative_to(self.root))), target)
                    count += 1
        return count


def unreachable(what: str, where: str, reason: object) -> PipelineError:
    return PipelineError(
        f"could not fetch {what} from {where} ({str(reason).splitlines()[0] if str(reason) else type(reason).__name__}); "
        "either set data.mirror to a local mirror folder laid out like ../shared/data, "
        "or run where that source is reachable"
    )


def fetch_hub_file(repo_id: str, filename: str, destination: Path, endpoint: str | None, repo_type: str = "dataset") -> Path:
    """Download one file of a hub repository to `destination` (atomically)."""
    from huggingface_hub import hf_hub_download, hf_hub_url
    from huggingface_hub.utils import logging as hub_logging

    hub_logging.set_verbosity_error()  # its per-retry warnings would bury the one line that matters
    url = hf_hub_url(repo_id, filename, repo_type=repo_type, endpoint=endpoint)
    destination.parent.mkdir(parents=True, exist_ok=True)
    with scratch_directory(destination.parent) as scratch:
        try:
            downloaded = hf_hub_download(
                repo_id, filename, repo_type=repo_type, endpoint=endpoint, local_dir=scratch, cache_dir=scratch
            )
        except Exception as error:  # network, HTTP and offline-mode errors all mean "not reachable"
            raise unreachable(filename, url, error) from None
        with atomic_path(destination) as temporary:
            shutil.move(downloaded, temporary)
    return destination


def package_model_dir(source: str) -> Path:
    """The model folder shipped inside an installed Python package (`package:<module>`)."""
    module_name = source.removeprefix(PACKAGE_PREFIX)
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        raise PipelineError(
            f"backbone source '{source}': Python package '{module_name}' is not installed; "
            f"pip install {module_name.replace('_', '-')}"
        ) from None
    locate = getattr(module, "get_model_path", None)
    folder = Path(locate()) if locate else Path(module.__file__).parent / "model"
    if not (folder / "config.json").is_file():
        raise PipelineError(f"backbone source '{source}': no Hugging Face model folder found in the package at {folder}")
    return folder


def fetch_backbone(source: str, destination: Path, revision: str = "main", endpoint: str | None = None) -> None:
    """Save a backbone (weights + tokenizer, safetensors) in Hugging Face format."""
    from transformers import AutoModel, AutoTokenizer

    if source.startswith(PACKAGE_PREFIX):
        location, options = str(package_model_dir(source)), {}
    else:
        location, options = source, {"revision": revision}
        if endpoint:
            os.environ["HF_ENDPOINT"] = endpoint
    try:
        tokenizer = AutoTokenizer.from_pretrained(location, **options)
        model = AutoModel.from_pretrained(location, add_pooling_layer=True, use_safetensors=True, **options)
    except OSError as error:
        raise unreachable(f"backbone '{source}'", endpoint or "the Hugging Face hub", error) from None
    with atomic_directory(destination) as temporary:
        model.save_pretrained(temporary, safe_serialization=True)
        tokenizer.save_pretrained(temporary)

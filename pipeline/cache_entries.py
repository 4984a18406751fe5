"""Cache entries read back safely: a file's digest, and an entry that is missing or corrupt is recomputed.

A cache (the embedding store, the translation cache, the checkpoints' results) keeps files that a
killed or older writer may have left broken: `read_cache_entry` names such an entry in one warning,
removes it and returns None, so its caller recomputes it instead of failing or reading garbage.
"""

from __future__ import annotations

import hashlib
import json
import logging
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# ---- caches: verified on read, a corrupt entry discarded and recomputed ---------------------------


class CorruptEntry(Exception):
    """A cache entry that parses but is not what its writer writes (the message says what is wrong)."""


# What reading a damaged file raises: truncated zips (np.load), bad JSON/UTF-8 (ValueError), missing arrays.
_READ_FAILURES = (CorruptEntry, OSError, EOFError, ValueError, KeyError, zipfile.BadZipFile)


def read_cache_entry(path: Path, read: Callable[[Path], T], what: str) -> T | None:
    """The cache entry at `path` as `read` returns it, or None to recompute it: when there is none,
    or when it is corrupt — then it is named in one warning line and removed."""
    path = Path(path)
    if not path.is_file():
        return None
    try:
        return read(path)
    except _READ_FAILURES as error:
        reason = (str(error).splitlines() or [type(error).__name__])[0]
        log.warning("%s %s is corrupt (%s: %s); discarded, it will be recomputed", what, path, type(error).__name__, reason)
        path.unlink(missing_ok=True)
        return None


def read_json_entry(path: Path, is_valid: Callable[[Any], bool], what: str) -> Any | None:
    """A JSON cache entry that `is_valid` accepts (else discarded as `read_cache_entry` does), or None."""

    def read(file: Path) -> Any:
        value = json.loads(file.read_text(encoding="utf-8"))
        if not is_valid(value):
            raise CorruptEntry("not the layout this cache holds")
        return value

    return read_cache_entry(path, read, what)

"""Unpacking a downloaded archive (senteval.tar, STS-B's release) without trusting it.

Every member is checked before anything is extracted: only plain files, folders and links that stay
inside the archive, no absolute path, no `..` that climbs out, and at most `max_bytes` unpacked. A
file that is no tar archive, or a member that breaks these, is one line naming the archive's source and
the member, and nothing is extracted.
"""

from __future__ import annotations

import gzip
import posixpath
import tarfile
import zlib
from pathlib import Path

from pipeline.errors import PipelineError


def _member_problem(member: tarfile.TarInfo) -> str | None:
    """What makes a member unsafe to extract, or None."""
    name = member.name
    if name.startswith("/") or posixpath.isabs(name) or (len(name) > 1 and name[1] == ":"):
        return "has an absolute path"
    if ".." in posixpath.normpath(name).split("/"):
        return "climbs out of the archive (..)"
    if member.issym() or member.islnk():
        # a symbolic link's target is read from the member's folder, a hard link's from the archive's root
        base = posixpath.dirname(name) if member.issym() else ""
        target = posixpath.normpath(posixpath.join(base, member.linkname))
        if posixpath.isabs(member.linkname) or target == ".." or target.startswith("../"):
            return f"is a link pointing outside the archive (-> {member.linkname})"
        return None
    if not (member.isfile() or member.isdir()):
        return "is no plain file or folder (a device, a pipe)"
    return None


def extract_archive(archive: Path, destination: Path, source: str, max_bytes: int | None = None) -> None:
    """Extract the tar (or .tar.gz) `archive`, downloaded from `source` (a URL or a name, for the
    message), into `destination` after checking every member (module docstring)."""
    try:
        with tarfile.open(archive) as tar:
            members = tar.getmembers()
            unpacked = 0
            for member in members:
                problem = _member_problem(member)
                if problem:
                    raise PipelineError(f"{source}: archive member {member.name!r} {problem}; refused, nothing was "
                                        "extracted; is it the archive expected?")
                unpacked += member.size if member.isfile() else 0
            if max_bytes is not None and unpacked > max_bytes:
                raise PipelineError(f"{source}: the archive unpacks to {unpacked} bytes, over the {max_bytes}-byte "
                                    "limit; refused, nothing was extracted; is it the archive expected?")
            tar.extractall(destination, members=members, filter="data")  # the 'data' filter: a second guard
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as error:  # no tar, a truncated or corrupt one
        reason = str(error).splitlines()[0].rstrip(":") if str(error) else type(error).__name__
        raise PipelineError(f"{source}: not a readable tar archive ({reason}); nothing was extracted; "
                            "is it the archive expected?") from None

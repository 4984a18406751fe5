"""One settling per claim at a time: a lock held for the whole settling, so two settles of one claim never queue
the same seeds twice. The lock is an OS file lock (released when its holder exits, even when killed), and its
file names the holder, so a second settling is refused in one line naming the first."""

from __future__ import annotations

import fcntl
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pipeline.errors import PipelineError

LOCKS = Path(".dvc") / "tmp" / "settle"  # DVC's own scratch folder: never tracked


@contextmanager
def settling_lock(claim_id: str, folder: Path = LOCKS) -> Iterator[None]:
    """Hold `<folder>/<claim id>.lock` for the block; a PipelineError naming the holder when it is held."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{claim_id}.lock"
    handle = path.open("a+", encoding="utf-8")
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            raise PipelineError(f"{claim_id} is being settled already ({holder}; lock {path}): wait for it to finish, "
                                "or stop it and settle again (it resumes from the finished seeds)") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()} on {socket.gethostname()}, since {time.strftime('%Y-%m-%d %H:%M:%S')}")
        handle.flush()
        yield
    finally:
        handle.close()  # closing releases the lock

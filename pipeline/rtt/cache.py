"""The persistent translation cache: SQLite, one row per chunk (a request of the round trip).

A chunk's answer depends on the whole chunk (Apertium carries state from line to line), so an
answer is reused only for the very same chunk: the key is (backend, source, target, chunking rule
version, SHA-256 of the chunk's text) and the row holds the per-sentence answers. Rows are
committed as they arrive, in WAL mode, so a killed run loses at most the chunks that were in flight.

Caches from before chunk keys held a `translations` table of single sentences whose answers came
from timing-dependent packings; they cannot be reused without bringing that drift back, so the
table is dropped when such a cache is opened (`discarded_legacy` counts its rows).

The file is checked when opened (`PRAGMA quick_check`): a cache with garbled pages is named in one
warning line, moved aside to `<name>.corrupt`, and the chunks still readable are copied into a fresh
one; the rest are translated again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from pipeline.errors import PipelineError

log = logging.getLogger(__name__)
KEY_COLUMNS = ("backend", "source", "target", "rule", "digest")


@dataclass(frozen=True)
class Leg:
    """One direction through one backend, e.g. apertium en→es: a namespace of the cache."""

    backend: str
    source: str
    target: str


def chunk_digest(texts: Sequence[str]) -> str:
    """The chunk as the backend receives it: its texts joined by newlines."""
    return hashlib.sha256("\n".join(texts).encode("utf-8")).hexdigest()


class TranslationCache:
    def __init__(self, path: Path | str):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._connection = sqlite3.connect(self.path)
        try:
            self._open()
            problems = [row[0] for row in self._connection.execute("PRAGMA quick_check").fetchall()]
            if problems != ["ok"]:
                self._salvage(problems[0])
        except sqlite3.DatabaseError as error:
            self._connection.close()
            raise PipelineError(
                f"{self.path} is not a usable translation cache ({error}); delete it to start the cache afresh"
            ) from None

    def _open(self) -> None:
        self._connection.execute("PRAGMA journal_mode=WAL")
        self._connection.execute("PRAGMA synchronous=NORMAL")  # WAL keeps commits safe from a killed process
        self.discarded_legacy = self._drop_legacy_table()
        self._connection.execute(
            "CREATE TABLE IF NOT EXISTS chunks ("
            " backend TEXT NOT NULL, source TEXT NOT NULL, target TEXT NOT NULL,"
            " rule INTEGER NOT NULL, digest TEXT NOT NULL, answers TEXT NOT NULL,"
            " PRIMARY KEY (backend, source, target, rule, digest)) WITHOUT ROWID"
        )

    def _salvage(self, problem: str) -> None:
        """Move a damaged cache aside and start a fresh one with the rows still readable: a scan in
        key order and one in reverse each stop at the first bad page, so together they keep the rows on
        both sides of it."""
        rows: dict[tuple, tuple] = {}
        for order in ("ASC", "DESC"):
            try:
                query = f"SELECT * FROM chunks ORDER BY {', '.join(f'{column} {order}' for column in KEY_COLUMNS)}"
                for row in self._connection.execute(query):
                    rows[row[:5]] = row
            except sqlite3.DatabaseError:
                pass
        self._connection.close()
        aside = self.path.with_name(self.path.name + ".corrupt")
        os.replace(self.path, aside)
        for journal in ("-wal", "-shm"):
            self.path.with_name(self.path.name + journal).unlink(missing_ok=True)
        self._connection = sqlite3.connect(self.path)
        self._open()
        with self._connection:
            self._connection.executemany("INSERT INTO chunks VALUES (?, ?, ?, ?, ?, ?)", rows.values())
        log.warning("translation cache %s is corrupt (%s); moved to %s, its %d readable chunks kept, the rest "
                    "will be translated again", self.path, problem, aside, len(rows))

    def _drop_legacy_table(self) -> int:
        exists = self._connection.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'translations'"
        ).fetchone()
        if not exists:
            return 0
        rows = self._connection.execute("SELECT COUNT(*) FROM translations").fetchone()[0]
        with self._connection:
            self._connection.execute("DROP TABLE translations")
        self._connection.execute("VACUUM")
        return rows

    def lookup(self, leg: Leg, rule: int, texts: Sequence[str]) -> list[str | None] | None:
        """The cached answers of this chunk, one per text (None: no translation), or None if not cached."""
        row = self._connection.execute(
            "SELECT answers FROM chunks WHERE backend = ? AND source = ? AND target = ? AND rule = ? AND digest = ?",
            (leg.backend, leg.source, leg.target, rule, chunk_digest(texts)),
        ).fetchone()
        if row is None:
            return None
        try:
            answers = json.loads(row[0])
        except ValueError:
            log.warning("translation cache %s: a garbled entry (chunk %s) is translated again", self.path, chunk_digest(texts))
            return None
        # a hash collision (or a garbled entry) would be a different length
        return answers if isinstance(answers, list) and len(answers) == len(texts) else None

    def store(self, leg: Leg, rule: int, texts: Sequence[str], answers: Sequence[str | None]) -> None:
        """Add one chunk's answers and commit them at once."""
        if len(answers) != len(texts):
            raise ValueError(f"{len(answers)} answers for a chunk of {len(texts)} texts")
        with self._connection:
            self._connection.execute(
                "INSERT OR REPLACE INTO chunks VALUES (?, ?, ?, ?, ?, ?)",
                (leg.backend, leg.source, leg.target, rule, chunk_digest(texts), json.dumps(list(answers), ensure_ascii=False)),
            )

    def __len__(self) -> int:
        """Cached chunks."""
        return self._connection.execute("SELECT COUNT(*) FROM chunks").fetchone()[0]

    def close(self) -> None:
        self._connection.close()

    def __enter__(self) -> "TranslationCache":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

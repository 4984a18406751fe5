"""The persistent translation cache: SQLite, keyed by (backend, source language, target language, text).

Results are committed as they arrive, in WAL mode, so a killed run loses at most the requests that
were in flight and the next run asks the backend only for what is missing.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from pipeline.errors import PipelineError

LOOKUP_CHUNK = 900  # texts per SELECT … IN (…); under SQLite's oldest limit of 999 parameters


@dataclass(frozen=True)
class Leg:
    """One direction through one backend, e.g. apertium en→es: a namespace of the cache."""

    backend: str
    source: str
    target: str


class TranslationCache:
    def __init__(self, path: Path | str):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._connection = sqlite3.connect(self.path)
        try:
            self._connection.execute("PRAGMA journal_mode=WAL")
            self._connection.execute("PRAGMA synchronous=NORMAL")  # WAL keeps commits safe from a killed process
            self._connection.execute(
                "CREATE TABLE IF NOT EXISTS translations ("
                " backend TEXT NOT NULL, source TEXT NOT NULL, target TEXT NOT NULL,"
                " text TEXT NOT NULL, translation TEXT NOT NULL,"
                " PRIMARY KEY (backend, source, target, text)) WITHOUT ROWID"
            )
        except sqlite3.DatabaseError as error:
            self._connection.close()
            raise PipelineError(
                f"{self.path} is not a usable translation cache ({error}); delete it to start the cache afresh"
            ) from None

    def lookup(self, leg: Leg, texts: Sequence[str]) -> dict[str, str]:
        """The cached translations of those `texts` that have one."""
        found: dict[str, str] = {}
        for start in range(0, len(texts), LOOKUP_CHUNK):
            chunk = texts[start : start + LOOKUP_CHUNK]
            found.update(
                self._connection.execute(
                    "SELECT text, translation FROM translations WHERE backend = ? AND source = ? AND target = ?"
                    f" AND text IN ({', '.join('?' * len(chunk))})",
                    (leg.backend, leg.source, leg.target, *chunk),
                )
            )
        return found

    def store(self, leg: Leg, translations: Mapping[str, str]) -> None:
        """Add translations and commit them at once."""
        with self._connection:
            self._connection.executemany(
                "INSERT OR REPLACE INTO translations VALUES (?, ?, ?, ?, ?)",
                ((leg.backend, leg.source, leg.target, text, translation) for text, translation in translations.items()),
            )

    def __len__(self) -> int:
        return self._connection.execute("SELECT COUNT(*) FROM translations").fetchone()[0]

    def close(self) -> None:
        self._connection.close()

    def __enter__(self) -> "TranslationCache":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

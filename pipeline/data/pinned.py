"""Inputs pinned by their content (DESIGN §13).

`inputs.sha256` beside this module, under version control, holds the sha256 of every input the
pipeline reads from a canonical source, keyed by the file's path in the canonical layout (see its
header). A file is pinned as well by its digest as by a commit, so a download fetches at the pinned
commit where one is set, else at `main`, and checks every file here before anything is written:
a mismatch is one line (the file, the digest expected, the digest received), nothing written. A file
the manifest does not list (the full 1M-line corpus, a hub model's weights: not knowable offline) is
not refused: its digest is recorded (`InputRecord`, in reports/provenance/download.json) and one log
line names every such file as not verified against a pinned digest. `python -m pipeline.data.pinned --pin
reports/provenance/download.json` then adds what a download recorded to the manifest, so the next
download checks it (commit the manifest to pin it for everyone).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.errors import PipelineError
from pipeline.cache_entries import sha256_of

log = logging.getLogger(__name__)

MANIFEST = Path(__file__).with_name("inputs.sha256")
SHA256 = re.compile(r"[0-9a-f]{64}")
WIKI_KEY = "wiki1m/wiki1m_for_simcse.txt"


def read_sha256sums(path: Path) -> dict[str, str]:
    """A `sha256sum`-style file ({path or key: digest}); '#' lines are comments; a bad line is one error."""
    checksums = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.strip() and not line.startswith("#"):
            fields = line.split(maxsplit=1)
            if len(fields) != 2 or not SHA256.fullmatch(fields[0]):
                raise PipelineError(f"{path}:{number}: not a `<sha256>  <path>` line; regenerate it with sha256sum")
            checksums[fields[1].strip().removeprefix("./")] = fields[0]
    return checksums


def wiki_key(limit: int | None) -> str:
    """The manifest key of the corpus a preset reads: its first `limit` lines, or the whole file."""
    return WIKI_KEY if limit is None else f"{WIKI_KEY}#first-{limit}-lines"


def model_key(source: str, name: str) -> str:
    """The manifest key of a hub model's file."""
    return f"models/{source}/{name}"


def lines_digest(lines: list[bytes]) -> str:
    """The sha256 of lines as bytes, line ends included (a `wiki_key` prefix's digest)."""
    digest = hashlib.sha256()
    for line in lines:
        digest.update(line)
    return digest.hexdigest()


@dataclass
class InputRecord:
    """What one download verified and what it could only record: {key: sha256} each, and the hub commits
    the revisions it asked for resolved to ({url: commit})."""

    verified: dict[str, str] = field(default_factory=dict)
    unverified: dict[str, str] = field(default_factory=dict)
    commits: dict[str, str] = field(default_factory=dict)

    def as_json(self) -> dict:
        return {"verified": len(self.verified), "unverified": self.unverified, "commits": self.commits}


class InputManifest:
    """The pinned digests (`inputs.sha256`), checked file by file into an `InputRecord`."""

    def __init__(self, path: Path = MANIFEST, record: InputRecord | None = None):
        self.path, self.digests = path, read_sha256sums(path)
        self.record = record if record is not None else InputRecord()

    def check_digest(self, key: str, received: str, where: str | None = None) -> None:
        """Compare `received` with the pinned digest of `key`: equal is verified; absent is recorded and
        said in one line; different is the one-line error (`where`: the file or URL it came from)."""
        expected = self.digests.get(key)
        if expected is None:
            self.record.unverified[key] = received
        elif received != expected:
            raise PipelineError(f"{where or key}: sha256 {received} received, {expected} expected ({key} in "
                                f"{self.path.name}); nothing was written")
        else:
            self.record.verified[key] = received

    def say_unverified(self) -> None:
        """One line for everything recorded without a pinned digest (the digests are in the record)."""
        if self.record.unverified:
            log.warning("not verified, no pinned digest in %s (recorded in the provenance; pin with `python -m "
                        "pipeline.data.pinned --pin`): %s", self.path.name, ", ".join(self.record.unverified))

    def check_file(self, key: str, path: Path, where: str | None = None) -> None:
        self.check_digest(key, sha256_of(path), where or str(path))

    def check_complete(self, prefixes: tuple[str, ...], where: str, hint: str) -> None:
        """Every key pinned under `prefixes` was checked (is in the record): the checks walk the files a
        source has, so one it lacks would pass unnoticed; the first missing is one line (`where` lacks it)."""
        missing = sorted(key for key in self.digests if key.startswith(prefixes) and key not in self.record.verified)
        if missing:
            raise PipelineError(f"{where} has no {missing[0]}, which {self.path.name} pins ({len(missing)} pinned "
                                f"file(s) missing); {hint}; nothing was written")

    def check_tree(self, prefix: str, folder: Path, where: str) -> None:
        """Every file under `folder` as key `<prefix>/<relative path>`."""
        for path in sorted(path for path in folder.rglob("*") if path.is_file()):
            self.check_file(f"{prefix}/{path.relative_to(folder).as_posix()}", path, f"{where}: {path.relative_to(folder)}")


def pin_recorded(provenance: Path, manifest: Path = MANIFEST) -> list[str]:
    """Append the digests a download recorded but could not verify (`inputs.unverified` of its
    provenance file) to `manifest`; returns the keys added. A key the manifest pins already is left."""
    try:
        recorded = json.loads(provenance.read_text(encoding="utf-8"))["inputs"]["unverified"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise PipelineError(f"{provenance}: no download record ({error}); give reports/provenance/download.json "
                            "of a finished download") from None
    pinned = read_sha256sums(manifest)
    added = sorted(key for key in recorded if key not in pinned)
    if added:
        with manifest.open("a", encoding="utf-8") as handle:
            handle.writelines(f"{recorded[key]}  {key}\n" for key in added)
    return added


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Pin what a download recorded: add its unverified digests to the manifest.")
    parser.add_argument("--pin", type=Path, required=True, metavar="PROVENANCE", help="reports/provenance/download.json")
    arguments = parser.parse_args()
    try:
        keys = pin_recorded(arguments.pin)
    except PipelineError as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    print(f"pinned {len(keys)} digest(s) in {MANIFEST}: {', '.join(keys) or 'none new'}")

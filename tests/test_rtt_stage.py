"""The rtt stage: files aligned with the corpus, one-line errors with exit 2, and a killed run that
resumes without asking again for what it had cached."""

import copy
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import typer
import yaml
from typer.testing import CliRunner

from pipeline.rtt import ApertiumBackend
from pipeline.rtt.cache import chunk_digest
from pipeline.rtt.loopback import LoopbackGoogle, loopback_translation
from stages import rtt

from conftest import REPO_ROOT

# The stage's own command line, without importing the other stages' heavy modules.
RUN_STAGE = "import typer; from stages import rtt; typer.run(rtt.command)"


@pytest.fixture(scope="module")
def wiki(mirror) -> list[str]:
    with (mirror / "wiki1m" / "wiki1m_for_simcse.head.txt").open(encoding="utf-8") as handle:
        return list(dict.fromkeys(next(handle).rstrip("\n") for _ in range(80)))


def make_project(folder: Path, params: dict, corpus: list[str], **rtt_settings) -> Path:
    """A project folder: params.yaml (the tiny preset with `rtt_settings`) and data/raw/corpus.txt."""
    params = copy.deepcopy(params)
    params["rtt"].update(rtt_settings)
    (folder / "data" / "raw").mkdir(parents=True, exist_ok=True)
    (folder / "params.yaml").write_text(yaml.safe_dump(params), encoding="utf-8")
    (folder / "data" / "raw" / "corpus.txt").write_text("".join(f"{line}\n" for line in corpus), encoding="utf-8")
    return folder


def google_settings(endpoint: str, **overrides) -> dict:
    return dict(backend="google", endpoint=endpoint, workers=2, max_retries=2, backoff_seconds=0.01, max_chars=300) | overrides


def run_stage(folder: Path, monkeypatch, tower: str = "I"):
    monkeypatch.chdir(folder)
    app = typer.Typer()
    app.command()(rtt.command)
    return CliRunner().invoke(app, ["--tower", tower, "--params", "params.yaml"])


def error_lines(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("error:")]


def assert_one_line_error(result, expected: str) -> None:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert len(error_lines(result)) == 1 and expected in error_lines(result)[0], result.stderr


def test_tiny_preset_writes_both_towers_with_apertium(tmp_path, monkeypatch, tiny_params_dict, wiki):
    corpus = wiki[:30]
    make_project(tmp_path, tiny_params_dict, corpus)
    for tower in ("I", "II"):
        result = run_stage(tmp_path, monkeypatch, tower)
        assert result.exit_code == 0, result.output
        assert "sentences/s" in result.stdout and "0 failed" in result.stdout
        lines = (tmp_path / "data" / "rtt" / f"{tower}.txt").read_text(encoding="utf-8").split("\n")
        assert lines[-1] == "" and len(lines[:-1]) == len(corpus) and all(lines[:-1])
        assert (tmp_path / "data" / "cache" / "rtt" / f"{tower}.sqlite").is_file()
    rerun = run_stage(tmp_path, monkeypatch, "I")
    assert "0 leg translations in 0 requests" in rerun.stdout and "(100%)" in rerun.stdout


def test_failed_sentences_are_empty_lines_within_the_allowed_fraction(tmp_path, monkeypatch, tiny_params_dict, wiki):
    corpus = wiki[:10]
    broken = [index for index, sentence in enumerate(corpus) if "Adelaide" in sentence]
    with LoopbackGoogle(untranslatable="Adelaide") as stand_in:
        make_project(tmp_path, tiny_params_dict, corpus, **google_settings(stand_in.url, max_failed_fraction=0.5))
        result = run_stage(tmp_path, monkeypatch)
    assert result.exit_code == 0, result.output
    assert f"{len(broken)} failed (empty lines)" in result.stdout
    lines = (tmp_path / "data" / "rtt" / "I.txt").read_text(encoding="utf-8").splitlines()
    assert [index for index, line in enumerate(lines) if not line] == broken
    assert lines[0] == loopback_translation(loopback_translation(corpus[0], "es"), "en")


def test_too_many_failures_stop_the_stage_without_output(tmp_path, monkeypatch, tiny_params_dict, wiki):
    with LoopbackGoogle(untranslatable="Adelaide") as stand_in:
        make_project(tmp_path, tiny_params_dict, wiki[:10], **google_settings(stand_in.url, max_failed_fraction=0.0))
        result = run_stage(tmp_path, monkeypatch)
    assert_one_line_error(result, "found no round trip, more than rtt.max_failed_fraction=0.0")
    assert not (tmp_path / "data" / "rtt" / "I.txt").exists()


def test_unknown_tower_lists_the_towers(tmp_path, monkeypatch, tiny_params_dict, wiki):
    make_project(tmp_path, tiny_params_dict, wiki[:3])
    assert_one_line_error(run_stage(tmp_path, monkeypatch, "III"), "unknown tower 'III'; the towers in params.yaml are: I, II")


def test_unknown_backend_in_params(tmp_path, monkeypatch, tiny_params_dict, wiki):
    make_project(tmp_path, tiny_params_dict, wiki[:3], backend="deepl")
    assert_one_line_error(run_stage(tmp_path, monkeypatch), "rtt.backend='deepl'")


def test_missing_apertium_pair_names_the_package(tmp_path, monkeypatch, tiny_params_dict, wiki):
    if {"en-gl", "eng-glg"} & ApertiumBackend().installed_modes():
        pytest.skip("apertium-en-gl is installed here")
    tiny_params_dict["towers"]["I"]["lang"] = "gl"
    make_project(tmp_path, tiny_params_dict, wiki[:3])
    assert_one_line_error(run_stage(tmp_path, monkeypatch), "apt-get install apertium-en-gl")


def test_unreachable_endpoint_keeps_the_cache(tmp_path, monkeypatch, tiny_params_dict, wiki):
    with LoopbackGoogle() as stand_in:
        make_project(tmp_path, tiny_params_dict, wiki[:4], **google_settings(stand_in.url))
        assert run_stage(tmp_path, monkeypatch).exit_code == 0
    cached = cached_chunks(tmp_path / "data" / "cache" / "rtt" / "I.sqlite")
    assert len(cached) >= 2  # both legs
    (tmp_path / "data" / "raw" / "corpus.txt").write_text("".join(f"{line}\n" for line in wiki[:8]), encoding="utf-8")
    result = run_stage(tmp_path, monkeypatch)  # the stand-in is gone: its port refuses connections
    assert_one_line_error(result, f"cannot reach the google backend after 3 attempts ({stand_in.url}: ")
    with sqlite3.connect(tmp_path / "data" / "cache" / "rtt" / "I.sqlite") as cache:
        assert cache.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert cached_chunks(tmp_path / "data" / "cache" / "rtt" / "I.sqlite") == cached


def cached_chunks(path: Path) -> set[tuple[str, str, str]]:
    """(source, target, chunk digest) of every cached chunk."""
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as cache:
            return set(cache.execute("SELECT source, target, digest FROM chunks"))
    except sqlite3.Error:  # not created yet
        return set()


def start_stage(folder: Path, tower: str = "I", setup: str = "") -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", f"{setup}\n{RUN_STAGE}", "--tower", tower, "--params", "params.yaml"],
        cwd=folder,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def test_killed_run_resumes_without_repeating_requests(tmp_path, monkeypatch, tiny_params_dict, wiki):
    corpus = wiki[:60]
    killed, reference = tmp_path / "killed", tmp_path / "reference"
    cache_path = killed / "data" / "cache" / "rtt" / "I.sqlite"
    with LoopbackGoogle(delay_seconds=0.1) as slow:
        make_project(killed, tiny_params_dict, corpus, **google_settings(slow.url))
        process = start_stage(killed)
        deadline = time.monotonic() + 30
        while len(cached_chunks(cache_path)) < 6 and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        process.send_signal(signal.SIGKILL)
        assert process.wait() == -signal.SIGKILL, "the run finished before it could be killed"
    cached = cached_chunks(cache_path)
    assert 6 <= len(cached)
    assert not (killed / "data" / "rtt" / "I.txt").exists()

    with LoopbackGoogle() as resumed:
        make_project(killed, tiny_params_dict, corpus, **google_settings(resumed.url))
        assert run_stage(killed, monkeypatch).exit_code == 0
    asked_again = {(r.source, r.target, chunk_digest(r.lines)) for r in resumed.requests}
    assert asked_again and not asked_again & cached

    with LoopbackGoogle() as uninterrupted:
        make_project(reference, tiny_params_dict, corpus, **google_settings(uninterrupted.url))
        assert run_stage(reference, monkeypatch).exit_code == 0
    assert (killed / "data" / "rtt" / "I.txt").read_bytes() == (reference / "data" / "rtt" / "I.txt").read_bytes()


# Small Apertium chunks, so that a few sentences make several requests to kill the stage between.
SMALL_APERTIUM_CHUNKS = "from pipeline.rtt.apertium import ApertiumBackend; ApertiumBackend.request_chars = 1000"


def test_killed_apertium_run_resumes_to_the_same_file(tmp_path, monkeypatch, tiny_params_dict, wiki):
    killed, reference = tmp_path / "killed", tmp_path / "reference"
    cache_path = killed / "data" / "cache" / "rtt" / "II.sqlite"
    corpus = wiki[:40]
    for folder in (killed, reference):
        make_project(folder, tiny_params_dict, corpus, workers=1)
    process = start_stage(killed, "II", SMALL_APERTIUM_CHUNKS)
    deadline = time.monotonic() + 60
    while len(cached_chunks(cache_path)) < 3 and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    assert process.wait() == -signal.SIGKILL, "the run finished before it could be killed"
    assert not (killed / "data" / "rtt" / "II.txt").exists()
    for folder in (killed, reference):
        finished = start_stage(folder, "II", SMALL_APERTIUM_CHUNKS)
        assert finished.wait(timeout=120) == 0
    resumed = (killed / "data" / "rtt" / "II.txt").read_bytes()
    assert resumed == (reference / "data" / "rtt" / "II.txt").read_bytes()
    assert len(resumed.splitlines()) == len(corpus)


def process_groups() -> dict[int, tuple[int, str]]:
    """pid → (process group, command name) of every process, from /proc."""
    groups = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except (OSError, ValueError):
            continue  # not a process, or gone meanwhile
        name, fields = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :].split()
        groups[int(entry.name)] = (int(fields[2]), name)  # fields: state, ppid, pgrp, …
    return groups


def parent_of(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2 :].split()[1])


@pytest.mark.parametrize("kill_signal", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT])
def test_apertium_programs_die_with_the_stage(tmp_path, tiny_params_dict, mirror, kill_signal):
    with (mirror / "wiki1m" / "wiki1m_for_simcse.head.txt").open(encoding="utf-8") as handle:
        corpus = [next(handle).rstrip("\n") for _ in range(2000)]  # chunks of ~450 sentences: seconds each
    make_project(tmp_path, tiny_params_dict, corpus, workers=2)
    process = start_stage(tmp_path, "II")
    request_groups: set[int] = set()
    deadline = time.monotonic() + 60
    while process.poll() is None and time.monotonic() < deadline:
        # a request's shell is a child of the stage and leads its own process group
        request_groups |= {pid for pid, (group, _) in process_groups().items() if group == pid and parent_of(pid) == process.pid}
        running = [name for group, name in process_groups().values() if group in request_groups]
        if len(running) >= 10:  # the whole pipeline has started
            break
        time.sleep(0.05)
    assert len(running) >= 10, f"no Apertium pipeline seen running under the stage: {running}"
    time.sleep(0.5)
    process.send_signal(kill_signal)
    assert process.wait(timeout=10) != 0  # Ctrl-C too stops the stage at once, not after the running chunks
    time.sleep(3)
    survivors = [name for group, name in process_groups().values() if group in request_groups]
    assert survivors == [], f"Apertium programs outlived the stage: {survivors}"

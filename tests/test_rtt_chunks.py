"""Round trips as a fixed function of the corpus: the same requests and the same file whatever the
worker count, the cache's contents, the order answers arrive in, timeouts or misaligned answers."""

import random
import sqlite3
import threading
import time
import zlib

import pytest

from pipeline.config import RttSettings
from pipeline.rtt import TranslationCache, make_translator, normalize, round_trip
from pipeline.rtt.loopback import LoopbackGoogle
from pipeline.rtt.roundtrip import corpus_chunks
from pipeline.rtt.translator import TransientError, Translator


class StatefulStandIn(Translator):
    """Apertium's behaviour in miniature: a line's translation depends on the line before it in the
    same request (so any change of chunking changes the output); a line containing `drop_after`
    ends the answer there when others follow (eng-cat's misaligned answers); `timeouts` of the
    requests (chosen by a seeded draw) fail once with a TransientError; answers come back after a
    random delay, so they arrive out of order."""

    name = "standin"

    def __init__(self, request_chars=800, drop_after="(drop)", timeout_rate=0.0, seed=0, max_delay=0.0, stall=None):
        self.request_chars = request_chars
        self.stall = stall  # a request with a line containing this always times out
        self.drop_after = drop_after
        self.timeout_rate = timeout_rate
        self.max_delay = max_delay
        self.random = random.Random(seed)
        self.requests: list[tuple[str, str, str]] = []
        self.timed_out: set[tuple[str, str, str]] = set()
        self.lock = threading.Lock()

    def check_pair(self, source, target):
        pass

    def translate(self, text, source, target):
        request = (source, target, text)
        with self.lock:
            self.requests.append(request)
            time_out = request not in self.timed_out and self.random.random() < self.timeout_rate
            delay = self.random.uniform(0, self.max_delay)
            if time_out:
                self.timed_out.add(request)
        time.sleep(delay)
        if time_out or (self.stall and self.stall in text):
            raise TransientError("stand-in timeout")
        lines, answer, previous = text.split("\n"), [], ""
        for line in lines:
            answer.append(f"{line} <{target}{zlib.crc32(previous.encode()) % 97}>")
            if self.drop_after in line and len(lines) > 1:
                break
            previous = line
        return "\n".join(answer)


def settings(**overrides) -> RttSettings:
    return RttSettings(**{"backend": "apertium", "workers": 1, "max_retries": 3, "backoff_seconds": 0.0, **overrides})


@pytest.fixture(scope="module")
def corpus(mirror) -> list[str]:
    with (mirror / "wiki1m" / "wiki1m_for_simcse.head.txt").open(encoding="utf-8") as handle:
        lines = [next(handle).rstrip("\n") for _ in range(150)]
    lines[17] += " (drop)"
    lines[90] += " (drop)"
    return lines + lines[:20]  # repeated sentences are translated once


def run(corpus, cache_path, translator, **overrides):
    with TranslationCache(cache_path) as cache:
        return round_trip(corpus, "es", translator, cache, settings(**overrides), show_progress=False)


@pytest.fixture(scope="module")
def reference(corpus, tmp_path_factory):
    translator = StatefulStandIn()
    result = run(corpus, tmp_path_factory.mktemp("reference") / "cache.sqlite", translator)
    assert result.failed == 0 and result.misaligned_chunks >= 2 and result.chunks > 10
    return result, translator.requests


def test_chunks_depend_only_on_the_corpus(corpus):
    translator = StatefulStandIn()
    chunks = corpus_chunks(corpus, translator, "en", "es")
    assert [text for chunk in chunks for text in chunk] == list(dict.fromkeys(normalize(line) for line in corpus))
    assert chunks == corpus_chunks(corpus + corpus[::-1], translator, "en", "es")  # later repeats change nothing
    assert all(len("\n".join(chunk)) <= 800 for chunk in chunks if len(chunk) > 1)


@pytest.mark.parametrize("workers", [1, 8])
def test_same_requests_and_file_with_any_worker_count_and_arrival_order(corpus, tmp_path, reference, workers):
    expected, expected_requests = reference
    translator = StatefulStandIn(seed=workers, max_delay=0.01)
    result = run(corpus, tmp_path / "cache.sqlite", translator, workers=workers)
    assert result.translations == expected.translations
    assert sorted(translator.requests) == sorted(expected_requests)


def test_timeouts_retry_the_same_request(corpus, tmp_path, reference):
    expected, expected_requests = reference
    translator = StatefulStandIn(timeout_rate=0.3, seed=3, max_delay=0.005)
    result = run(corpus, tmp_path / "cache.sqlite", translator, workers=8)
    assert translator.timed_out  # the test injected some
    assert result.translations == expected.translations
    assert set(translator.requests) == set(expected_requests)
    assert result.requests == len(expected_requests) + len(translator.timed_out)


def test_a_chunk_whose_retries_run_out_fails_whole_and_is_asked_again_next_run(corpus, tmp_path, reference):
    expected, _ = reference
    stalled_sentence = normalize(corpus[40])
    stalled_chunk = next(chunk for chunk in corpus_chunks(corpus, StatefulStandIn(), "en", "es") if stalled_sentence in chunk)
    stalling = run(corpus, tmp_path / "cache.sqlite", StatefulStandIn(stall=stalled_sentence), workers=4)
    assert stalling.failed == len(stalled_chunk)
    assert stalling.translations == [
        "" if normalize(line) in stalled_chunk else translation for line, translation in zip(corpus, expected.translations)
    ]
    translator = StatefulStandIn()
    rerun = run(corpus, tmp_path / "cache.sqlite", translator, workers=4)
    assert rerun.translations == expected.translations
    assert {text for _, _, text in translator.requests} == {"\n".join(stalled_chunk)} | {
        text for source, _, text in translator.requests if source == "es"
    }  # forward: only the stalled chunk again


def test_warm_cache_gives_the_same_file_without_requests(corpus, tmp_path, reference):
    expected, _ = reference
    run(corpus, tmp_path / "cache.sqlite", StatefulStandIn(), workers=4)
    translator = StatefulStandIn()
    warm = run(corpus, tmp_path / "cache.sqlite", translator, workers=4)
    assert warm.translations == expected.translations
    assert translator.requests == [] and warm.cache_hit_rate == 1.0


@pytest.mark.parametrize("fill", ["prefix of the corpus", "every other chunk"])
def test_half_filled_cache_gives_the_same_file(corpus, tmp_path, reference, fill):
    expected, expected_requests = reference
    cache_path = tmp_path / "cache.sqlite"
    if fill == "prefix of the corpus":
        run(corpus[:70], cache_path, StatefulStandIn())  # its last chunk is not one of the corpus's
    else:
        run(corpus, cache_path, StatefulStandIn())
        with sqlite3.connect(cache_path) as connection:
            connection.execute(  # half of the chunks, either leg, picked by their hash
                "DELETE FROM chunks WHERE digest IN (SELECT digest FROM chunks ORDER BY digest LIMIT"
                " (SELECT COUNT(*) / 2 FROM chunks))"
            )
        connection.close()
    translator = StatefulStandIn()
    result = run(corpus, cache_path, translator, workers=3)
    assert result.translations == expected.translations
    assert 0 < result.cache_hits < result.lookups
    assert translator.requests and set(translator.requests) <= set(expected_requests)


def test_google_requests_are_the_same_with_any_worker_count_and_throttling(corpus, tmp_path):
    def requests(workers, **misbehaviour):
        with LoopbackGoogle(**misbehaviour) as stand_in:
            google = settings(backend="google", endpoint=stand_in.url, workers=workers, max_chars=400, max_retries=5,
                              backoff_seconds=0.01)
            with TranslationCache(tmp_path / f"{workers}-{len(misbehaviour)}.sqlite") as cache:
                result = round_trip(corpus, "fr", make_translator(google), cache, google, show_progress=False)
        return result, {(r.source, r.target, r.lines) for r in stand_in.requests}

    one, one_requests = requests(1)
    eight, eight_requests = requests(8, throttle_first=5, drop_first=2, delay_seconds=0.002)
    assert one.translations == eight.translations and one.failed == 0
    assert one_requests == eight_requests


def test_without_a_hard_limit_each_back_leg_is_one_request(corpus, tmp_path):
    translator = StatefulStandIn(request_chars=400)
    translator.hard_limit = False  # as Apertium: the limit sizes the chunks only
    result = run(corpus, tmp_path / "cache.sqlite", translator, workers=4)
    forward = [text for source, _, text in translator.requests if source == "en"]
    back = [text for source, _, text in translator.requests if source == "es"]
    unsplit = [text for text in forward if text in {"\n".join(chunk) for chunk in corpus_chunks(corpus, translator, "en", "es")}]
    assert len(unsplit) == result.chunks  # every chunk asked whole once (misaligned ones then in halves)
    assert any(len(text) > 400 for text in back)  # the answers outgrew the limit, yet went as one request
    assert result.failed == 0

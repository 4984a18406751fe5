"""The translation library: packing, the cache, the google backend against the loopback stand-in,
real Apertium round trips, and one-line errors for bad input."""

import socket
import logging
import sqlite3
from urllib.parse import quote_plus

import pytest

from tools.benchmark.translation import benchmark_translation
from pipeline.config import RttSettings
from pipeline.errors import PipelineError
from pipeline.rtt import ApertiumBackend, Leg, TranslationCache, make_translator, normalize, pack, round_trip
from pipeline.rtt.loopback import LoopbackGoogle, loopback_translation


@pytest.fixture(scope="module")
def wiki(mirror) -> list[str]:
    with (mirror / "wiki1m" / "wiki1m_for_simcse.head.txt").open(encoding="utf-8") as handle:
        return [next(handle).rstrip("\n") for _ in range(40)]


def google_settings(endpoint: str, **overrides) -> RttSettings:
    values = dict(backend="google", endpoint=endpoint, workers=2, max_retries=2, backoff_seconds=0.01, max_chars=400)
    return RttSettings(**{**values, **overrides})


def google_round_trip(sentences, settings, cache_path, pivot="fr"):
    with TranslationCache(cache_path) as cache:
        return round_trip(sentences, pivot, make_translator(settings), cache, settings, show_progress=False)


def expected_round_trip(sentence: str, pivot: str = "fr") -> str:
    return loopback_translation(loopback_translation(normalize(sentence), pivot), "en")


def requested_lines(stand_in: LoopbackGoogle) -> list[tuple[str, str, str]]:
    return [(request.source, request.target, line) for request in stand_in.requests for line in request.lines]


def closed_port_url() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}/m"


def test_pack_fills_requests_up_to_the_limit_in_order():
    assert list(pack(["aa", "bbb", "c", "dddddd", "eeeeeeeeee"], 6)) == [["aa", "bbb"], ["c"], ["dddddd"], ["eeeeeeeeee"]]


def test_google_packs_non_latin_text_by_its_url_length():
    backend = make_translator(google_settings(closed_port_url(), max_chars=4500))
    for sentence, per_request in [("Привет, как дела у тебя сегодня?", 2300), ("今天天气很好，我们去公园散步吧。", 1500)]:
        batches = list(pack([sentence] * 1000, backend.request_chars, backend.request_cost))
        assert all(len(quote_plus("\n".join(batch))) <= 3 * 4500 for batch in batches)  # under Google's ~16 KB URL
        assert all(len("\n".join(batch)) > per_request * 0.9 for batch in batches[:-1])  # yet well filled
    english = list(pack(["The weather is fine today."] * 1000, backend.request_chars, backend.request_cost))
    assert all(4400 < len("\n".join(batch)) <= 4500 for batch in english[:-1])


def test_cache_keeps_answers_per_chunk(tmp_path):
    leg = Leg("apertium", "en", "es")
    chunk = [f"sentence {number}" for number in range(50)]
    answers = [text.upper() for text in chunk[:-1]] + [None]  # None: that text found no translation
    with TranslationCache(tmp_path / "cache.sqlite") as cache:
        cache.store(leg, 1, chunk, answers)
    with TranslationCache(tmp_path / "cache.sqlite") as cache:
        assert cache.lookup(leg, 1, chunk) == answers and len(cache) == 1
        assert cache.lookup(leg, 1, chunk[:-1]) is None  # the same sentences in another chunk are not reused
        assert cache.lookup(leg, 2, chunk) is None  # nor under another chunking rule
        assert cache.lookup(Leg("google", "en", "es"), 1, chunk) is None


def test_cache_from_before_chunk_keys_is_dropped(tmp_path):
    path = tmp_path / "I.sqlite"
    with sqlite3.connect(path) as old:
        old.execute(
            "CREATE TABLE translations (backend TEXT NOT NULL, source TEXT NOT NULL, target TEXT NOT NULL,"
            " text TEXT NOT NULL, translation TEXT NOT NULL, PRIMARY KEY (backend, source, target, text)) WITHOUT ROWID"
        )
        old.executemany("INSERT INTO translations VALUES ('apertium', 'en', 'es', ?, ?)", [("a", "A"), ("b", "B")])
    old.close()
    with TranslationCache(path) as cache:
        assert cache.discarded_legacy == 2 and len(cache) == 0
    with TranslationCache(path) as cache:
        assert cache.discarded_legacy == 0
    with sqlite3.connect(path) as reopened:
        assert reopened.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall() == [("chunks",)]
    reopened.close()


def test_cache_with_garbled_pages_is_named_and_keeps_its_readable_chunks(tmp_path, caplog):
    leg = Leg("apertium", "en", "es")
    chunks = [[f"sentence {number} of chunk {index} " * 4 for number in range(20)] for index in range(300)]
    path = tmp_path / "I.sqlite"
    with TranslationCache(path) as cache:
        for chunk in chunks:
            cache.store(leg, 1, chunk, [text.upper() for text in chunk])
        cache._connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = bytearray(path.read_bytes())
    page = 4096
    middle = len(data) // page // 2 * page  # a data page in the middle of the table's B-tree
    data[middle : middle + 2 * page] = bytes(range(256)) * (2 * page // 256)
    path.write_bytes(bytes(data))

    with caplog.at_level(logging.WARNING), TranslationCache(path) as cache:
        answers = [cache.lookup(leg, 1, chunk) for chunk in chunks]  # no sqlite3.DatabaseError
        kept = len(cache)
    assert all(answer in (None, [text.upper() for text in chunk]) for answer, chunk in zip(answers, chunks))
    assert 0 < sum(answer is not None for answer in answers) == kept < len(chunks)
    warnings = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert len(warnings) == 1 and str(path) in warnings[0] and "corrupt" in warnings[0]
    assert (tmp_path / "I.sqlite.corrupt").is_file()


def test_cache_file_that_is_not_sqlite_is_a_one_line_error(tmp_path):
    path = tmp_path / "I.sqlite"
    path.write_text("not a database\n" * 100)
    with pytest.raises(PipelineError, match="is not a usable translation cache.*delete it") as error:
        TranslationCache(path)
    assert "\n" not in str(error.value)
    assert path.read_text() == "not a database\n" * 100


def test_google_round_trip_packs_requests_and_translates_each_text_once(tmp_path, wiki):
    sentences = wiki[:20] + wiki[:5]  # duplicates are translated once
    with LoopbackGoogle() as stand_in:
        result = google_round_trip(sentences, google_settings(stand_in.url), tmp_path / "cache.sqlite")
    assert result.translations == [expected_round_trip(sentence) for sentence in sentences]
    assert (result.sentences, result.unique, result.failed, result.cache_hits) == (25, 20, 0, 0)
    lines = requested_lines(stand_in)
    assert len(lines) == len(set(lines)) == 40  # 20 texts per leg, each asked once
    assert len(stand_in.requests) < 20  # packed: several sentences per request
    assert all(len("\n".join(request.lines)) <= 400 for request in stand_in.requests)

    with LoopbackGoogle() as stand_in:
        again = google_round_trip(sentences, google_settings(stand_in.url), tmp_path / "cache.sqlite")
    assert stand_in.requests == []
    assert again.translations == result.translations
    assert (again.cache_hits, again.requests, again.cache_hit_rate) == (40, 0, 1.0)


def test_throttled_requests_are_retried_with_backoff(tmp_path, wiki):
    with LoopbackGoogle(throttle_first=2) as stand_in:
        result = google_round_trip(wiki[:6], google_settings(stand_in.url, workers=1), tmp_path / "cache.sqlite")
    assert result.translations == [expected_round_trip(sentence) for sentence in wiki[:6]]
    assert stand_in.requests[0] == stand_in.requests[1] == stand_in.requests[2]  # 429, 429, then answered
    assert result.requests == len(stand_in.requests)


def test_dropped_connection_is_retried(tmp_path, wiki):
    with LoopbackGoogle(drop_first=1) as stand_in:
        result = google_round_trip(wiki[:6], google_settings(stand_in.url, workers=1), tmp_path / "cache.sqlite")
    assert result.translations == [expected_round_trip(sentence) for sentence in wiki[:6]]
    assert stand_in.requests[0] == stand_in.requests[1]


def test_stalled_answer_times_out_and_is_retried(tmp_path, wiki):
    settings = google_settings("", max_retries=1, timeout_seconds=0.1)
    with LoopbackGoogle(delay_seconds=2.0) as stand_in:
        settings = settings.model_copy(update={"endpoint": stand_in.url})
        stalled = google_round_trip(wiki[:1], settings, tmp_path / "cache.sqlite")
        assert stalled.failed == 1 and stalled.requests == len(stand_in.requests) == 2
        stand_in.delay_seconds = 0.0
        assert google_round_trip(wiki[:1], settings, tmp_path / "cache.sqlite").failed == 0


def test_misaligned_batch_is_asked_again_sentence_by_sentence(tmp_path, wiki):
    with LoopbackGoogle(drop_line_when_packed=True) as stand_in:
        result = google_round_trip(wiki[:10], google_settings(stand_in.url), tmp_path / "cache.sqlite")
    assert result.translations == [expected_round_trip(sentence) for sentence in wiki[:10]]
    assert result.misaligned_chunks > 0 and result.failed == 0
    single_lines = {(r.source, r.target, r.lines[0]) for r in stand_in.requests if len(r.lines) == 1}
    assert {("en", "fr", normalize(sentence)) for sentence in wiki[:10]} <= single_lines


def test_untranslatable_sentence_fails_alone_with_an_empty_line(tmp_path, wiki):
    sentences = wiki[:12]
    broken = [sentence for sentence in sentences if "Adelaide" in sentence]
    assert 0 < len(broken) < len(sentences)
    with LoopbackGoogle(untranslatable="Adelaide") as stand_in:
        result = google_round_trip(sentences, google_settings(stand_in.url), tmp_path / "cache.sqlite")
    assert result.failed == len(broken)
    assert result.translations == ["" if s in broken else expected_round_trip(s) for s in sentences]


def test_persistent_rate_limit_fails_the_batch_without_asking_per_sentence(tmp_path, wiki):
    settings = google_settings("", max_retries=1)
    with LoopbackGoogle(throttle_first=1000) as stand_in:
        result = google_round_trip(wiki[:8], settings.model_copy(update={"endpoint": stand_in.url}), tmp_path / "c.sqlite")
    assert result.failed == 8 and result.translations == [""] * 8
    batches = [tuple(batch) for batch in pack([normalize(s) for s in wiki[:8]], 400)]
    assert len(batches) > 1
    assert sorted(request.lines for request in stand_in.requests) == sorted(batches * 2)  # never unpacked
    with TranslationCache(tmp_path / "c.sqlite") as cache:
        assert len(cache) == 0  # failures are not cached: a rerun asks again


def test_unreachable_endpoint_is_a_one_line_error_and_keeps_the_cache(tmp_path, wiki):
    cache_path = tmp_path / "cache.sqlite"
    with LoopbackGoogle() as stand_in:
        google_round_trip(wiki[:5], google_settings(stand_in.url), cache_path)
    with TranslationCache(cache_path) as cache:
        cached_chunks = len(cache)
    assert cached_chunks >= 2  # both legs
    url = closed_port_url()
    with pytest.raises(PipelineError, match="cannot reach the google backend after 3 attempts") as error:
        google_round_trip(wiki[:10], google_settings(url), cache_path)
    message = str(error.value)
    assert "\n" not in message and url in message and "Connection refused" in message
    connection = sqlite3.connect(cache_path)
    assert connection.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert connection.execute("SELECT COUNT(*) FROM chunks").fetchone() == (cached_chunks,)


def test_unknown_backend_language_or_pivot_is_a_one_line_error(tmp_path):
    with pytest.raises(PipelineError, match="unknown rtt.backend 'deepl'; choose one of: apertium, google"):
        make_translator(RttSettings.model_construct(backend="deepl"))
    with pytest.raises(PipelineError, match="the google backend has no language 'xx'"):
        google_round_trip(["Hello."], google_settings(closed_port_url()), tmp_path / "c.sqlite", pivot="xx")
    with pytest.raises(PipelineError, match="pivot language 'en' is the source language"):
        google_round_trip(["Hello."], google_settings(closed_port_url()), tmp_path / "c.sqlite", pivot="en")


def test_google_knows_the_papers_pivot_languages():
    backend = make_translator(google_settings(closed_port_url()))
    for pivot in ("fr", "ru", "nl", "zh"):
        backend.check_pair("en", pivot)
        backend.check_pair(pivot, "en")


@pytest.mark.parametrize("pivot", ["es", "ca"])
def test_apertium_round_trip_of_mirror_sentences(tmp_path, wiki, pivot):
    settings = RttSettings(backend="apertium", workers=2)
    sentences = wiki[:6]
    with TranslationCache(tmp_path / "cache.sqlite") as cache:
        result = round_trip(sentences, pivot, make_translator(settings), cache, settings, show_progress=False)
        assert result.failed == 0 and len(result.translations) == 6 and all(result.translations)
        assert result.translations != [normalize(s) for s in sentences]  # really went through Spanish/Catalan
        assert result.chunks == 1 and len(cache) == 2  # one chunk, both legs
        again = round_trip(sentences, pivot, make_translator(settings), cache, settings, show_progress=False)
    assert again.translations == result.translations and again.requests == 0


def test_apertium_missing_pair_names_the_debian_package():
    backend = ApertiumBackend()
    if {"en-gl", "eng-glg"} & backend.installed_modes():
        pytest.skip("apertium-en-gl is installed here")
    with pytest.raises(PipelineError, match=r"no Apertium translator en→gl .*`apt-get install apertium-en-gl`") as error:
        backend.check_pair("en", "gl")
    assert "\n" not in str(error.value) and "eng-spa" in str(error.value)
    with pytest.raises(PipelineError, match="apt-cache search apertium"):
        backend.check_pair("en", "xx")


def test_apertium_command_missing_says_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(PipelineError, match=r"apertium command is not installed; install it with `apt-get install apertium`"):
        ApertiumBackend().check_pair("en", "es")


def test_benchmark_translation_measures_the_three_paths(wiki):
    numbers = benchmark_translation(wiki[:20], RttSettings(backend="apertium", workers=2))
    assert numbers["sentences"] == 20
    for key in ("cache_hits_per_s", "apertium_sentences_per_s", "google_loopback_requests_per_s"):
        assert numbers[key] > 0


def test_apertium_chunk_size_per_pair():
    backend = ApertiumBackend()
    assert backend.request_limit("en", "es") == backend.request_limit("es", "en") == 64_000
    assert backend.request_limit("en", "ca") == backend.request_limit("ca", "en") == 16_000


def test_standin_endpoint_translates_through_the_loopback_under_its_own_cache_name():
    from pipeline.rtt import make_translator, translator_for

    settings = google_settings("standin")
    with translator_for(settings) as translator:
        assert translator.name == "google-standin"  # never cached as Google's answers
        assert translator.translate("a test", "en", "fr") == loopback_translation("a test", "fr")
    with pytest.raises(PipelineError, match="rtt.endpoint=standin"):
        make_translator(settings)

"""The round trip EN→X→EN of a corpus: cache, packing, concurrency and retries.

Each distinct sentence is translated once per leg. A leg is served by the cache where it can be,
otherwise by the backend with many sentences per request (joined by newlines, up to the
backend's character limit); an answer that does not split back into one line per sentence is
asked again in halves, down to single sentences (Apertium's eng-cat pair, for one, silently drops
the rest of a batch at a sentence it cannot handle). Rate-limit and network errors are retried with
exponential backoff, and a backend that stays unreachable stops the run. Answers are cached as
they arrive, so a killed run resumes where it stopped. The legs are pipelined: a sentence's
back-translation is requested as soon as its forward translation is in.
"""

from __future__ import annotations

import random
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Sequence

from tqdm import tqdm

from pipeline.config import RttSettings
from pipeline.errors import PipelineError
from pipeline.rtt.cache import Leg, TranslationCache
from pipeline.rtt.translator import EndpointUnreachable, TransientError, TranslationFailed, Translator


@dataclass
class RoundTripResult:
    """`translated` and `cache_hits` count texts per leg: a sentence's round trip is two legs."""

    translations: list[str]  # aligned with the input; "" for an empty input or a failed round trip
    sentences: int
    unique: int
    translated: int
    cache_hits: int
    lookups: int
    requests: int
    unpacked_batches: int  # packed requests whose answer was misaligned, asked again in halves
    failed: int
    seconds: float

    @property
    def sentences_per_second(self) -> float:
        return self.sentences / self.seconds if self.seconds else float("inf")

    @property
    def cache_hit_rate(self) -> float:
        return self.cache_hits / self.lookups if self.lookups else 0.0


def normalize(sentence: str) -> str:
    """Single spaces: a line separator inside a sentence (CR, U+2028, …) would break the packing."""
    return " ".join(sentence.split())


def pack(texts: Iterable[str], max_chars: int, cost: Callable[[str], int] = len) -> Iterator[list[str]]:
    """Consecutive texts grouped so that each group joined by newlines costs at most `max_chars`
    (a text costs `cost(text)`, a newline 1); a text over the limit goes alone."""
    batch: list[str] = []
    size = -1  # n texts need n - 1 newlines
    for text in texts:
        text_cost = cost(text) + 1
        if batch and size + text_cost > max_chars:
            yield batch
            batch, size = [], -1
        batch.append(text)
        size += text_cost
    if batch:
        yield batch


def round_trip(
    sentences: Sequence[str],
    pivot: str,
    translator: Translator,
    cache: TranslationCache,
    settings: RttSettings,
    show_progress: bool = True,
) -> RoundTripResult:
    """Translate each sentence settings.source_lang → pivot → settings.source_lang."""
    return _RoundTrip(pivot, translator, cache, settings, show_progress).run(sentences)


class _RetriesExhausted(Exception):
    pass


@dataclass
class _BatchOutcome:
    translations: dict[str, str] = field(default_factory=dict)
    failed: list[str] = field(default_factory=list)
    requests: int = 0
    unpacked: bool = False


class _RoundTrip:
    def __init__(self, pivot: str, translator: Translator, cache: TranslationCache, settings: RttSettings, show_progress: bool):
        if pivot == settings.source_lang:
            raise PipelineError(f"pivot language '{pivot}' is the source language; a round trip needs another language")
        self.forward = Leg(translator.name, settings.source_lang, pivot)
        self.backward = Leg(translator.name, pivot, settings.source_lang)
        self.translator = translator
        self.cache = cache
        self.settings = settings
        self.show_progress = show_progress
        self.round_trips: dict[str, str] = {}
        self.awaiting_back_translation: dict[str, list[str]] = {}  # pivot text → its source sentences
        self.backward_queue: list[str] = []
        self.forward_batches: Iterator[list[str]] = iter(())
        self.forward_exhausted = False
        self.translated = self.cache_hits = self.lookups = self.requests = self.unpacked_batches = 0

    def run(self, sentences: Sequence[str]) -> RoundTripResult:
        started = time.perf_counter()
        for leg in (self.forward, self.backward):
            self.translator.check_pair(leg.source, leg.target)
        normalized = [normalize(sentence) for sentence in sentences]
        unique = list(dict.fromkeys(sentence for sentence in normalized if sentence))
        description = f"rtt {self.forward.source}→{self.forward.target}→{self.backward.target}"
        with tqdm(total=len(unique), desc=description, unit="sent", disable=not self.show_progress) as self.progress:
            cached = self._lookup(self.forward, unique)
            self.forward_batches = self._pack(sentence for sentence in unique if sentence not in cached)
            self._accept_forward(cached)
            self._translate_missing()
        return RoundTripResult(
            translations=[self.round_trips.get(sentence, "") for sentence in normalized],
            sentences=len(sentences),
            unique=len(unique),
            translated=self.translated,
            cache_hits=self.cache_hits,
            lookups=self.lookups,
            requests=self.requests,
            unpacked_batches=self.unpacked_batches,
            failed=sum(1 for sentence in normalized if sentence and sentence not in self.round_trips),
            seconds=time.perf_counter() - started,
        )

    # --- bookkeeping, in the calling thread (the only one that touches the cache) ---

    def _lookup(self, leg: Leg, texts: Sequence[str]) -> dict[str, str]:
        found = self.cache.lookup(leg, texts)
        self.cache_hits += len(found)
        self.lookups += len(texts)
        self.progress.set_postfix_str(f"cache hits {self.cache_hits / max(self.lookups, 1):.0%}", refresh=False)
        return found

    def _accept_forward(self, pivots: dict[str, str]) -> None:
        new_pivots = []
        for sentence, pivot in pivots.items():
            if pivot not in self.awaiting_back_translation:  # identical pivot texts are translated once
                self.awaiting_back_translation[pivot] = []
                new_pivots.append(pivot)
            self.awaiting_back_translation[pivot].append(sentence)
        cached = self._lookup(self.backward, new_pivots)
        for pivot, back_translation in cached.items():
            self._finish(pivot, back_translation)
        self.backward_queue += [pivot for pivot in new_pivots if pivot not in cached]

    def _finish(self, pivot: str, back_translation: str | None) -> None:
        sentences = self.awaiting_back_translation.pop(pivot)
        if back_translation is not None:
            self.round_trips.update((sentence, back_translation) for sentence in sentences)
        self.progress.update(len(sentences))

    def _accept(self, leg: Leg, outcome: _BatchOutcome) -> None:
        self.cache.store(leg, outcome.translations)
        self.translated += len(outcome.translations)
        self.requests += outcome.requests
        self.unpacked_batches += outcome.unpacked
        if leg == self.forward:
            self.progress.update(len(outcome.failed))
            self._accept_forward(outcome.translations)
        else:
            for pivot, back_translation in outcome.translations.items():
                self._finish(pivot, back_translation)
            for pivot in outcome.failed:
                self._finish(pivot, None)

    def _next_job(self) -> tuple[Leg, list[str]] | None:
        """Full back-translation batches first, so round trips complete steadily; then forward
        batches; once those run out, whatever back-translations are queued."""
        queued = sum(self.translator.request_cost(text) + 1 for text in self.backward_queue) - 1
        if self.backward_queue and (queued > self.translator.request_chars or self.forward_exhausted):
            batch = next(self._pack(self.backward_queue))
            del self.backward_queue[: len(batch)]
            return self.backward, batch
        batch = next(self.forward_batches, None)
        if batch is not None:
            return self.forward, batch
        self.forward_exhausted = True
        return self._next_job() if self.backward_queue else None

    def _pack(self, texts: Iterable[str]) -> Iterator[list[str]]:
        return pack(texts, self.translator.request_chars, self.translator.request_cost)

    def _translate_missing(self) -> None:
        capacity = 2 * self.settings.workers  # a short queue, so no worker waits for this thread
        in_flight: dict[Future, Leg] = {}
        pool = ThreadPoolExecutor(max_workers=self.settings.workers, thread_name_prefix="rtt")
        try:
            while True:
                while len(in_flight) < capacity and (job := self._next_job()):
                    in_flight[pool.submit(self._translate_batch, *job)] = job[0]
                if not in_flight:
                    break
                done, _ = wait(in_flight, return_when=FIRST_COMPLETED)
                for future in done:
                    self._accept(in_flight.pop(future), future.result())
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    # --- requests, in the worker threads ---

    def _translate_batch(self, leg: Leg, batch: list[str]) -> _BatchOutcome:
        outcome = _BatchOutcome()
        try:
            self._translate_halving(leg, batch, outcome)
        except _RetriesExhausted:
            pass  # the backend keeps refusing; asking sentence by sentence would only add load
        outcome.failed = [text for text in batch if text not in outcome.translations]
        return outcome

    def _translate_halving(self, leg: Leg, texts: list[str], outcome: _BatchOutcome) -> None:
        """Translate a packed batch; an unusable (misaligned) answer is asked again in halves, down to
        single sentences, so one troublesome sentence costs ~2·log2(batch) requests, not one per sentence."""
        lines = self._request(leg, texts, outcome)
        if lines is not None:
            outcome.translations.update(zip(texts, lines))
        elif len(texts) > 1:
            outcome.unpacked = True
            middle = len(texts) // 2
            self._translate_halving(leg, texts[:middle], outcome)
            self._translate_halving(leg, texts[middle:], outcome)

    def _request(self, leg: Leg, texts: list[str], outcome: _BatchOutcome) -> list[str] | None:
        """One request, retried with backoff: a line per text, or None if the answer is unusable."""
        attempt = 0
        while True:
            outcome.requests += 1
            try:
                answer = self.translator.translate("\n".join(texts), leg.source, leg.target)
            except TranslationFailed:
                return None
            except TransientError as error:
                if attempt == self.settings.max_retries:
                    if isinstance(error, EndpointUnreachable):
                        raise PipelineError(
                            f"cannot reach the {leg.backend} backend after {attempt + 1} attempts ({error}); "
                            "check rtt.endpoint and the network, then rerun: finished translations are cached"
                        ) from None
                    raise _RetriesExhausted from error
                # exponential, with jitter so that workers throttled together do not retry together
                time.sleep(self.settings.backoff_seconds * 2**attempt * random.uniform(0.5, 1.5))
                attempt += 1
                continue
            lines = [normalize(line) for line in answer.split("\n")]
            return lines if len(lines) == len(texts) and all(lines) else None

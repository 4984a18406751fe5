"""The round trip EN→X→EN of a corpus: chunks, cache, concurrency and retries.

The requests are a fixed function of the corpus (docs/method.md, "Round-trip translation"): Apertium carries state from one line
to the next, so a sentence's translation depends on the chunk it is sent in, and the chunks must
never depend on the cache's contents, the order answers arrive in, the number of workers or
retries. So the corpus's distinct sentences, in first-occurrence order, are packed into chunks by
the backend's size limit alone; forward chunk k is one request (one fresh Apertium process), and
the back leg of chunk k is the forward answers of chunk k, in order, as one request (packed
again by the limit where the backend refuses longer requests, as Google does). An answer that does not split back into one line per text (eng-cat
drops the rest of a chunk at some sentences) is asked again in halves, recursively — a split that
depends only on the chunk. Timeouts and transient errors retry the same request with backoff; a
backend that stays unreachable stops the run. Each chunk's answers are cached under the chunk, so a
warm, cold or half-filled cache and a killed-and-resumed run all give the same file. The legs are
pipelined: chunk k's back-translation is requested as soon as its forward answer is in.
"""

from __future__ import annotations

import random
import time
from collections import deque
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Sequence

from tqdm import tqdm

from pipeline.config import RttSettings
from pipeline.errors import PipelineError
from pipeline.rtt.cache import Leg, TranslationCache
from pipeline.rtt.translator import EndpointUnreachable, TransientError, TranslationFailed, Translator

CHUNKING_RULE = 1
"""Version of the rule that turns a corpus into requests (part of the cache key): bump it when
`corpus_chunks`, the back leg's packing or the halving changes."""


@dataclass
class RoundTripResult:
    """`translated` and `cache_hits` count texts per leg: a sentence's round trip is two legs."""

    translations: list[str]  # aligned with the input; "" for an empty input or a failed round trip
    sentences: int
    unique: int
    chunks: int  # forward chunks of the corpus
    translated: int
    cache_hits: int
    lookups: int
    requests: int
    misaligned_chunks: int  # chunks (either leg) whose answer did not split into a line per text
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


def corpus_chunks(sentences: Iterable[str], translator: Translator, source: str, target: str) -> list[list[str]]:
    """The forward requests of a corpus: its distinct normalized sentences in first-occurrence
    order, packed up to the backend's limit for source→target."""
    unique = dict.fromkeys(normalized for sentence in sentences if (normalized := normalize(sentence)))
    return list(pack(unique, translator.request_limit(source, target), translator.request_cost))


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


@dataclass(frozen=True)
class _Job:
    leg: Leg
    chunk: int  # index of the forward chunk
    part: int  # index of the back leg's request within the chunk (0 for the forward leg)
    texts: list[str]


@dataclass
class _ChunkOutcome:
    answers: list[str | None]
    requests: int = 0
    misaligned: bool = False
    complete: bool = True  # False: retries ran out, so the answers are not final and not cached


@dataclass
class _ChunkState:
    texts: list[str]
    forward: list[str | None] | None = None
    back_parts: list[list[str]] = field(default_factory=list)
    back: dict[int, list[str | None]] = field(default_factory=dict)


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
        self.chunks: list[_ChunkState] = []
        self.round_trips: dict[str, str] = {}
        self.forward_jobs: deque[_Job] = deque()
        self.back_jobs: deque[_Job] = deque()
        self.translated = self.cache_hits = self.lookups = self.requests = self.misaligned_chunks = 0

    def run(self, sentences: Sequence[str]) -> RoundTripResult:
        started = time.perf_counter()
        for leg in (self.forward, self.backward):
            self.translator.check_pair(leg.source, leg.target)
        normalized = [normalize(sentence) for sentence in sentences]
        chunks = corpus_chunks(normalized, self.translator, self.forward.source, self.forward.target)
        self.chunks = [_ChunkState(texts) for texts in chunks]
        unique = sum(len(chunk.texts) for chunk in self.chunks)
        description = f"rtt {self.forward.source}→{self.forward.target}→{self.backward.target}"
        with tqdm(total=unique, desc=description, unit="sent", disable=not self.show_progress) as self.progress:
            for index, chunk in enumerate(self.chunks):
                job = _Job(self.forward, index, 0, chunk.texts)
                cached = self._lookup(job)
                if cached is None:
                    self.forward_jobs.append(job)
                else:
                    self._accept_forward(index, cached)
            self._translate_missing()
        return RoundTripResult(
            translations=[self.round_trips.get(sentence, "") for sentence in normalized],
            sentences=len(sentences),
            unique=unique,
            chunks=len(self.chunks),
            translated=self.translated,
            cache_hits=self.cache_hits,
            lookups=self.lookups,
            requests=self.requests,
            misaligned_chunks=self.misaligned_chunks,
            failed=sum(1 for sentence in normalized if sentence and sentence not in self.round_trips),
            seconds=time.perf_counter() - started,
        )

    # --- bookkeeping, in the calling thread (the only one that touches the cache) ---

    def _lookup(self, job: _Job) -> list[str | None] | None:
        found = self.cache.lookup(job.leg, CHUNKING_RULE, job.texts)
        self.lookups += len(job.texts)
        if found is not None:
            self.cache_hits += len(job.texts)
        self.progress.set_postfix_str(f"cache hits {self.cache_hits / max(self.lookups, 1):.0%}", refresh=False)
        return found

    def _accept_forward(self, index: int, answers: list[str | None]) -> None:
        chunk = self.chunks[index]
        chunk.forward = answers
        pivots = [answer for answer in answers if answer is not None]
        if self.translator.hard_limit:
            back_limit = self.translator.request_limit(self.backward.source, self.backward.target)
            chunk.back_parts = list(pack(pivots, back_limit, self.translator.request_cost))
        else:
            chunk.back_parts = [pivots] if pivots else []
        for part, texts in enumerate(chunk.back_parts):
            job = _Job(self.backward, index, part, texts)
            cached = self._lookup(job)
            if cached is None:
                self.back_jobs.append(job)
            else:
                chunk.back[part] = cached
        self._finish_if_complete(index)

    def _finish_if_complete(self, index: int) -> None:
        chunk = self.chunks[index]
        if chunk.forward is None or len(chunk.back) < len(chunk.back_parts):
            return
        back_translations = iter(answer for part in range(len(chunk.back_parts)) for answer in chunk.back[part])
        for sentence, pivot in zip(chunk.texts, chunk.forward):
            if pivot is not None and (back_translation := next(back_translations)) is not None:
                self.round_trips[sentence] = back_translation
        self.progress.update(len(chunk.texts))

    def _accept(self, job: _Job, outcome: _ChunkOutcome) -> None:
        if outcome.complete:
            self.cache.store(job.leg, CHUNKING_RULE, job.texts, outcome.answers)
        self.translated += sum(answer is not None for answer in outcome.answers)
        self.requests += outcome.requests
        self.misaligned_chunks += outcome.misaligned
        if job.leg == self.forward:
            # a partly translated chunk would make a back leg the complete run never asks for
            self._accept_forward(job.chunk, outcome.answers if outcome.complete else [None] * len(job.texts))
        else:
            self.chunks[job.chunk].back[job.part] = outcome.answers
            self._finish_if_complete(job.chunk)

    def _next_job(self) -> _Job | None:
        """Back-translations first, so round trips complete steadily; both queues in corpus order."""
        for queue in (self.back_jobs, self.forward_jobs):
            if queue:
                return queue.popleft()
        return None

    def _translate_missing(self) -> None:
        capacity = 2 * self.settings.workers  # a short queue, so no worker waits for this thread
        in_flight: dict[Future, _Job] = {}
        pool = ThreadPoolExecutor(max_workers=self.settings.workers, thread_name_prefix="rtt")
        try:
            while True:
                while len(in_flight) < capacity and (job := self._next_job()):
                    in_flight[pool.submit(self._translate_chunk, job)] = job
                if not in_flight:
                    break
                done, _ = wait(in_flight, return_when=FIRST_COMPLETED)
                for future in done:
                    self._accept(in_flight.pop(future), future.result())
        except BaseException:
            self.translator.cancel_requests()  # e.g. Ctrl-C: stop the running Apertium processes now
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    # --- requests, in the worker threads ---

    def _translate_chunk(self, job: _Job) -> _ChunkOutcome:
        outcome = _ChunkOutcome(answers=[None] * len(job.texts))
        try:
            self._translate_halving(job.leg, job.texts, 0, outcome)
        except _RetriesExhausted:
            outcome.complete = False  # the backend keeps refusing; asking in halves would only add load
        return outcome

    def _translate_halving(self, leg: Leg, texts: list[str], offset: int, outcome: _ChunkOutcome) -> None:
        """Translate texts[offset:offset + len(texts)] of a chunk; an unusable (misaligned) answer is
        asked again in halves, down to single sentences, so one troublesome sentence costs
        ~2·log2(chunk) requests, and the split depends on the chunk alone."""
        lines = self._request(leg, texts, outcome)
        if lines is not None:
            outcome.answers[offset : offset + len(texts)] = lines
        elif len(texts) > 1:
            outcome.misaligned = True
            middle = len(texts) // 2
            self._translate_halving(leg, texts[:middle], offset, outcome)
            self._translate_halving(leg, texts[middle:], offset + middle, outcome)

    def _request(self, leg: Leg, texts: list[str], outcome: _ChunkOutcome) -> list[str] | None:
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

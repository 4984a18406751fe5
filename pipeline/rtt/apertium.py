"""Apertium: offline rule-based machine translation from Debian packages (the tiny preset's system)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading

from pipeline.errors import PipelineError
from pipeline.rtt.translator import RequestsCancelled, TransientError, TranslationFailed, Translator

# Apertium names most pairs by ISO 639-3 (eng-spa), a few older ones by ISO 639-1 (en-gl).
ISO_639_3 = {
    "en": "eng", "es": "spa", "ca": "cat", "gl": "glg", "eo": "epo", "eu": "eus", "is": "isl",
    "mk": "mkd", "hr": "hbs", "sr": "hbs", "bs": "hbs", "fr": "fra", "pt": "por", "it": "ita",
    "oc": "oci", "ro": "ron", "de": "deu", "nl": "nld", "ru": "rus", "zh": "zho",
}  # fmt: skip
# The Debian package of each English pair; both directions come in one package.
DEBIAN_PACKAGES = {
    "es": "apertium-eng-spa", "ca": "apertium-eng-cat", "gl": "apertium-en-gl", "eo": "apertium-eo-en",
    "eu": "apertium-eu-en", "is": "apertium-isl-eng", "mk": "apertium-mkd-eng", "hr": "apertium-hbs-eng",
    "sr": "apertium-hbs-eng", "bs": "apertium-hbs-eng",
}  # fmt: skip
# ~600 sentences per process: each call starts a pipeline of ~10 programs that load their
# transducers (~0.2 s idle, much more on a busy machine), which must stay small against the work.
REQUEST_CHARS = 64_000
# eng-cat slows down on long inputs: the tiny corpus's Catalan round trip took 381 s in 64k chunks
# and 146 s in 16k chunks (Apertium 3.8.3, 2 loaded cores), where eng-spa is faster in 64k
# chunks (21 s vs 37 s: fewer process starts).
PAIR_REQUEST_CHARS = {frozenset({"en", "ca"}): 16_000}
# Apertium is a shell pipeline of ~10 programs. Each request runs in its own session (so a timeout
# or a cancel kills the whole pipeline with one killpg) under this shell, which dies with the stage:
# `setpriv --pdeathsig` has the kernel send it SIGTERM when the stage's thread that started it ends
# (even by kill -9), and its trap then kills its whole process group. (`<&0` would not do for the
# background job's input: a non-interactive sh gives background jobs /dev/null before redirecting.)
PIPELINE_SHELL = 'trap "kill -KILL 0" TERM INT HUP; exec 3<&0; apertium -u "$1" <&3 3<&- & wait $!'


def _install_hint(source: str, target: str) -> str:
    other = target if source == "en" else source if target == "en" else None
    if other in DEBIAN_PACKAGES:
        return f"install it with `apt-get install {DEBIAN_PACKAGES[other]}`"
    return "find its package with `apt-cache search apertium` (pairs are packaged as apertium-<lang>-<lang>)"


class ApertiumBackend(Translator):
    name = "apertium"
    request_chars = REQUEST_CHARS
    hard_limit = False

    def __init__(self, timeout_seconds: float = 30.0):
        self.timeout_seconds = timeout_seconds
        self._installed_modes: set[str] | None = None
        self._running: set[subprocess.Popen] = set()
        self._lock = threading.Lock()
        self._cancelled = False

    def installed_modes(self) -> set[str]:
        """The translation directions (`apertium -l`) the installed language pairs provide."""
        if self._installed_modes is None:
            try:
                listing = subprocess.run(["apertium", "-l"], capture_output=True, text=True, check=True)
            except FileNotFoundError:
                raise PipelineError(
                    "the apertium command is not installed; install it with `apt-get install apertium` "
                    "and a language pair such as apertium-eng-spa"
                ) from None
            except subprocess.CalledProcessError as error:
                raise PipelineError(f"`apertium -l` failed with status {error.returncode}: {error.stderr.strip()}") from None
            self._installed_modes = set(listing.stdout.split())
        return self._installed_modes

    def mode(self, source: str, target: str) -> str:
        """The Apertium mode that translates source→target (ISO 639-1 codes), e.g. 'eng-spa'."""
        modes = self.installed_modes()
        for source_code in dict.fromkeys((ISO_639_3.get(source, source), source)):
            for target_code in dict.fromkeys((ISO_639_3.get(target, target), target)):
                if f"{source_code}-{target_code}" in modes:
                    return f"{source_code}-{target_code}"
        installed = ", ".join(sorted(mode for mode in modes if "_" not in mode)) or "none"
        raise PipelineError(
            f"no Apertium translator {source}→{target} is installed; {_install_hint(source, target)} "
            f"(installed directions: {installed})"
        )

    def check_pair(self, source: str, target: str) -> None:
        self.mode(source, target)

    def request_limit(self, source: str, target: str) -> int:
        return min(self.request_chars, PAIR_REQUEST_CHARS.get(frozenset({source, target}), self.request_chars))

    def translate(self, text: str, source: str, target: str) -> str:
        mode = self.mode(source, target)
        # The timeout guards against a hung process, not a slow one: a full 64k-character batch
        # on a busy machine may take minutes, so it scales with the batch (per 4500 characters).
        timeout = self.timeout_seconds * max(1.0, len(text) / 4500)
        process = subprocess.Popen(
            [*_die_with_parent(), "sh", "-c", PIPELINE_SHELL, "apertium-request", mode],  # -u: no '*' on unknown words
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, encoding="utf-8", start_new_session=True,
        )
        with self._lock:
            self._running.add(process)
            if self._cancelled:  # cancelled while this one started
                _kill_group(process)
        try:
            stdout, stderr = process.communicate(text + "\n", timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(process)
            process.communicate()
            raise TransientError(f"apertium {mode} took longer than {timeout:.0f} s") from None
        finally:
            with self._lock:
                self._running.discard(process)
        if self._cancelled:
            raise RequestsCancelled(f"apertium {mode} cancelled")
        if process.returncode:
            last_words = stderr.strip().splitlines()[-1:] or ["no message"]
            raise TranslationFailed(f"apertium {mode} exited with status {process.returncode}: {last_words[0]}")
        return stdout.removesuffix("\n")

    def cancel_requests(self) -> None:
        with self._lock:
            self._cancelled = True
            for process in self._running:
                _kill_group(process)


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass  # finished meanwhile


def _die_with_parent() -> list[str]:
    """The command prefix that has the kernel signal the request's shell when the stage dies."""
    if shutil.which("setpriv") is None:
        raise PipelineError("the setpriv command is missing; install it with `apt-get install util-linux`")
    return ["setpriv", "--pdeathsig", "TERM"]

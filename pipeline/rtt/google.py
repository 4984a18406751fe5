"""Google Translate's web endpoint through deep-translator's GoogleTranslator: the papers' system."""

from __future__ import annotations

import math
from urllib.parse import quote_plus

import deep_translator.google
import requests
from deep_translator import GoogleTranslator
from deep_translator.constants import BASE_URLS, GOOGLE_LANGUAGES_TO_CODES
from deep_translator.exceptions import NotValidLength, RequestError, TooManyRequests, TranslationNotFound

from pipeline.errors import PipelineError
from pipeline.rtt.translator import EndpointUnreachable, TransientError, TranslationFailed, Translator

DEFAULT_ENDPOINT = BASE_URLS["GOOGLE_TRANSLATE"]
MAX_REQUEST_CHARS = 4999  # deep-translator refuses texts of 5000 characters or more
# The text travels in the URL, and Google refuses URLs beyond ~16 KB (deep-translator issue #224:
# 1,800 Chinese characters pass, 1,900 do not; each is 9 bytes URL-encoded). Counting 3 encoded
# bytes as one character keeps Russian or Chinese requests under 15 KB; English stays bound by
# its length.
URL_BYTES_PER_CHAR = 3
# params name languages by ISO 639-1; Google still uses these older or script-specific codes
GOOGLE_CODES = {"zh": "zh-CN", "he": "iw", "jv": "jw"}


class _RequestsWithTimeout:
    """What deep_translator.google sees as its `requests` module: GoogleTranslator calls
    requests.get without a timeout, so one stalled connection would hold a worker for ever."""

    def __init__(self, seconds: float):
        self.seconds = seconds

    def get(self, *args, **kwargs) -> requests.Response:
        return requests.get(*args, timeout=self.seconds, **kwargs)


def _root_cause(error: BaseException) -> str:
    """The innermost exception of a chain, e.g. 'ConnectionRefusedError: [Errno 111] Connection refused'."""
    while error.__cause__ or error.__context__:
        error = error.__cause__ or error.__context__
    return f"{type(error).__name__}: {error}"


class GoogleBackend(Translator):
    name = "google"

    def __init__(self, endpoint: str | None = None, timeout_seconds: float = 30.0, max_chars: int = 4500, name: str = "google"):
        self.name = name  # the translation cache's key: the loopback stand-in's answers are never Google's
        self.endpoint = endpoint or DEFAULT_ENDPOINT
        self.request_chars = min(max_chars, MAX_REQUEST_CHARS)
        deep_translator.google.requests = _RequestsWithTimeout(timeout_seconds)

    def request_cost(self, text: str) -> int:
        return max(len(text), math.ceil(len(quote_plus(text)) / URL_BYTES_PER_CHAR))

    def check_pair(self, source: str, target: str) -> None:
        known = set(GOOGLE_LANGUAGES_TO_CODES.values())
        for language in (source, target):
            if GOOGLE_CODES.get(language, language) not in known:
                raise PipelineError(
                    f"the google backend has no language '{language}'; use one of: {', '.join(sorted(known))}"
                )

    def translate(self, text: str, source: str, target: str) -> str:
        # One GoogleTranslator per request: it keeps the request's parameters on the instance.
        translator = GoogleTranslator(source=GOOGLE_CODES.get(source, source), target=GOOGLE_CODES.get(target, target))
        translator._base_url = self.endpoint  # deep-translator has no public setting for it
        try:
            translation = translator.translate(text)
        except TooManyRequests:
            raise TransientError("rate limited (HTTP 429)") from None
        except RequestError:
            raise TransientError("the endpoint answered with an error status") from None
        except requests.ConnectionError as error:
            raise EndpointUnreachable(f"{self.endpoint}: {_root_cause(error)}") from None
        except requests.RequestException as error:
            raise TransientError(_root_cause(error)) from None
        except (TranslationNotFound, NotValidLength) as error:
            raise TranslationFailed(type(error).__name__) from None
        # deep-translator returns None when the answer repeats a text that has no letters or digits
        return text.strip() if translation is None else translation

"""URLs as the pipeline records and prints them.

A URL may carry credentials (`http://user:password@host`, e.g. in HF_ENDPOINT or PIPELINE_STSB_URL);
they must reach neither a tracked record (reports/provenance/) nor an error or log line, so every
URL, or message naming one, goes through `without_userinfo` before it is recorded or printed.
"""

from __future__ import annotations

import re

# scheme://userinfo@ — the userinfo runs to the last '@' before the host's end (a '/', '?', '#', quote or space)
_USERINFO = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]*://)[^/?#\s'\"<>]*@")


def without_userinfo(text: object) -> str:
    """`text` (a URL, or a message naming URLs) with every URL's userinfo (`user:password@`) dropped."""
    return _USERINFO.sub(r"\1", str(text))

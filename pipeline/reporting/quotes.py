"""Finding a claim's quote in its seed paper (../shared/seeds/): the text extractions break lines,
hyphenate words at line ends and mix typographic and straight quotes, so both sides are normalised
before a quote is looked for. ' … ' in a quote elides: its parts occur in order. A reconstructed
quote (an overprinted table line, `source.reconstructed`) is checked as its tokens occurring in
order on one line of the seed."""

from __future__ import annotations

import re

ELLIPSIS = "…"
_QUOTES = str.maketrans({"“": '"', "”": '"', "„": '"', "‘": "'", "’": "'", "′": "'", "\u00a0": " ", "\t": " "})
_LINE_END_HYPHEN = re.compile(r"(\w)-\n(\w)")
_SPACE = re.compile(r"\s+")


def normalise(text: str) -> str:
    """One line: words hyphenated at line ends joined, typographic quotes straight, whitespace single."""
    text = text.translate(_QUOTES)
    text = _LINE_END_HYPHEN.sub(r"\1\2", text)
    return _SPACE.sub(" ", text).strip()


def _soft(text: str) -> str:
    """Also join words split at a line end without a hyphen mark lost (`ran- dom` → `random`)."""
    return re.sub(r"(\w)- (\w)", r"\1\2", text)


def _find(haystack: str, part: str, position: int) -> int:
    """Where `part` occurs from `position`: as it is, softened, or with its hyphens optional (a compound
    broken at a line end, `state-` / `of-the-art`, reads `stateof-the-art` once the syllable splits are joined)."""
    for candidate in (part, _soft(part)):
        index = haystack.find(candidate, position)
        if index >= 0:
            return index
    found = re.compile(re.escape(part).replace(r"\-", "-?")).search(haystack, position) if "-" in part else None
    return found.start() if found else -1


def quote_found(seed: str, quote: str) -> bool:
    """Every part of `quote` between ellipses occurs in `seed`, in order (after normalising both)."""
    text = normalise(seed)
    variants = (text, _soft(text))
    for haystack in variants:
        position, found = 0, True
        for part in (normalise(part) for part in quote.split(ELLIPSIS)):
            if not part:
                continue
            index = _find(haystack, part, position)
            if index < 0:
                found = False
                break
            position = index + len(part)
        if found:
            return True
    return False


def reconstructed_found(seed: str, quote: str) -> bool:
    """A reconstructed quote: its tokens (ellipses dropped) occur in order on one line of `seed`."""
    tokens = normalise(quote.replace(ELLIPSIS, " ")).split()
    for line in seed.splitlines():
        words, position = normalise(line).split(), 0
        for word in words:
            if position < len(tokens) and word == tokens[position]:
                position += 1
        if tokens and position == len(tokens):
            return True
    return False

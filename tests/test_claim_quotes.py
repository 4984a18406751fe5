"""Every claim's quote is in its seed paper (../shared/seeds/), as claims.yaml says (docs/method.md, "Claims and verdicts").

The seeds are text extractions: lines break mid-sentence, words are hyphenated at line ends and quotes
are typographic, so both sides are normalised (pipeline/reporting/quotes.py). ' … ' in a quote elides.
A quote marked `reconstructed` (an overprinted table line) is checked as its tokens in order on one
seed line."""

from __future__ import annotations

import pytest
import yaml

from pipeline.reporting.quotes import normalise, quote_found, reconstructed_found

from conftest import REPO_ROOT

SEEDS = REPO_ROOT.parent / "shared"
CLAIMS = yaml.safe_load((REPO_ROOT / "claims.yaml").read_text(encoding="utf-8"))["claims"]
SOURCED = [claim for claim in CLAIMS if claim.get("source")]


@pytest.mark.parametrize("claim", SOURCED, ids=[claim["id"] for claim in SOURCED])
def test_every_quote_is_in_its_seed(claim):
    source = claim["source"]
    seed = (SEEDS / source["file"]).read_text(encoding="utf-8")
    if source.get("reconstructed"):
        assert reconstructed_found(seed, source["quote"]), f"{claim['id']}: the reconstructed quote's tokens are not on one line of {source['file']}"
        assert not quote_found(seed, source["quote"]), f"{claim['id']}: the quote is verbatim; drop `reconstructed`"
    else:
        assert quote_found(seed, source["quote"]), f"{claim['id']}: quote not found in {source['file']}"


def test_only_the_overprinted_line_is_reconstructed():
    assert [claim["id"] for claim in SOURCED if claim["source"].get("reconstructed")] == ["jtcse-uc-roberta-avg"]


SEED = """The results show that TNCSE out-
performs the base-
line, with “CLS” pooling.
JTCSE+UC\t74.52 74.57\t85.26 85.73\t80.61
"""


def test_normalising_joins_lines_hyphenation_and_quotes():
    assert normalise(SEED).startswith('The results show that TNCSE outperforms the baseline, with "CLS" pooling.')


@pytest.mark.parametrize(
    "quote, found",
    [
        ("TNCSE outperforms the baseline", True),
        ('with "CLS" pooling', True),
        ("The results show … with “CLS” pooling", True),
        ("with “CLS” pooling … The results show", False),  # the parts out of order
        ("TNCSE outperforms every baseline", False),
    ],
)
def test_a_quote_is_found_only_verbatim_up_to_layout(quote, found):
    assert quote_found(SEED, quote) is found


def test_a_reconstructed_quote_is_its_tokens_in_order_on_one_line():
    assert reconstructed_found(SEED, "JTCSE+UC … 74.57 85.73 80.61")
    assert not reconstructed_found(SEED, "JTCSE+UC 85.73 74.57")  # out of order
    assert not reconstructed_found(SEED, "JTCSE+UC 74.57 85.73 80.62")  # a number the line lacks


def test_a_compound_broken_at_a_line_end_is_found_beside_a_split_word():
    seed = "with or without extra NLI su-\n\npervision, greatly outperforming the previous state-\n\nof-the-art models."
    assert quote_found(seed, "extra NLI supervision, greatly outperforming the previous state-of-the-art models")
    assert not quote_found(seed, "extra NLI supervision, greatly outperforming the previous state-of-the-art methods")

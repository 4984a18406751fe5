"""Every verdict a claim can get, as the words the report prints, and which of them count as decided.

A leaf (the standard library only): the statistical rules return these names and the claim kinds add the
ones no rule decides (not run, another scale or backbone, cannot hold or run).
"""

from __future__ import annotations

import re

HOLDS, CONTRADICTED, INCONCLUSIVE = "holds", "contradicted", "inconclusive"
REPRODUCED, HIGHER, NOT_REPRODUCED = "reproduced", "reproduced, higher", "not reproduced"
CONSISTENT = "consistent within seed noise"
NOT_RUN, OTHER_SCALE = "not run", "other scale: not compared"
OTHER_BACKBONE = "other backbone: not compared"
# where the truth is "cannot", whatever is run: not "other scale", which more compute would change
CANNOT_HOLD = "cannot hold: the paper's gap is below the band"
CANNOT_RUN = "cannot run: the papers lack the task list"
# an order whose interval lies wholly below the paper's own gap: the sign is open, the paper's effect size is
# excluded (2.5 % of the time when the true difference is the paper's gap)
SMALLER = "smaller than the paper's"
# in this order in reports/claims.json
VERDICTS = (REPRODUCED, HIGHER, NOT_REPRODUCED, CONSISTENT, HOLDS, CONTRADICTED, SMALLER, INCONCLUSIVE, NOT_RUN,
            OTHER_SCALE, OTHER_BACKBONE, CANNOT_HOLD, CANNOT_RUN)
UNDECIDED = (INCONCLUSIVE, CONSISTENT)  # judged, but the noise leaves it open: "what it would take" is said
DECIDED = (REPRODUCED, HIGHER, NOT_REPRODUCED, HOLDS, CONTRADICTED)  # judged and settled by this run
# judged by a rule on this run's numbers (a p-value can be said of it)
JUDGED = (*DECIDED, INCONCLUSIVE, CONSISTENT, SMALLER)
# judged and settled, on the effect's size rather than the claim's sign: listed with the decided ones first
FINDINGS = (SMALLER,)


def verdict_key(verdict: str) -> str:
    """The verdict as a metrics key (`reproduced, higher` → `reproduced_higher`)."""
    return re.sub(r"[^a-z]+", "_", verdict.split(":")[0]).strip("_")

"""The claims file (`claims.yaml`): the papers' claims and the project's own questions as data, validated
(`parse_claims`, one line on error), judged against our runs (`evaluate_claims`) and counted for
reports/claims.json (`verdict_counts`). docs/method.md, "Claims and verdicts", states the rules.

No list here names the kinds: each is a class of its own module of `pipeline/verdicts/kinds/` that registers itself
(`claim.register_claim_kind`), and `Claim` is the union of what registered once this module has loaded that package
(`load_plugins`, at import), in the order of the kinds' names. The kinds the project ships (a new one is a module
there, not a line here):

- value (`value.py`): a table cell of tables.yaml (our number against the paper's, within ε);
- order (`order.py`): one model beats another on a column (the interval of the difference against a band);
- trend (`trend.py`): a sweep's shape (decreasing, first-best, or flat within a width), checked as the
  order claims it implies;
- exact and range (`one_value.py`): a deterministic count (GMACs) equal to the paper's at its printed
  precision; a value within [low, high];
- correlation (`correlation.py`): the sign and strength of a correlation of two columns across models;
- spread (`spread.py`): which of two models varies less across the same seeds;
- unmeasured (`unmeasured.py`): a stated result on a quantity the pipeline measures for no model: "not
  run", with why.

The runs a claim reads are found exactly as the tables' rows are (`tables.find_row`), so a claim whose
runs do not exist is "not run" with the command that runs them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import Field, ValidationError, field_validator

from pipeline.params_file import describe_validation_error, read_yaml_file
from pipeline.errors import PipelineError
from pipeline.reporting.seed_record import SeedRecord
from pipeline.reporting.spec import Spec, TablesFile, split_override
from pipeline.reporting.tables import RunSource, experiment_axes
from pipeline.plugins import load_plugins
from pipeline.verdicts.claim import CLAIM_KINDS, ORIGINS, Judging, Verdict
from pipeline.verdicts.rules import VALUE_TARGETS
from pipeline.verdicts.verdict_names import VERDICTS, verdict_key

CLAIMS_FILE = Path("claims.yaml")


load_plugins("pipeline.verdicts.kinds")  # each kind's module registers it in CLAIM_KINDS as it loads


def registered_kinds() -> tuple[str, ...]:
    """The claim kinds `claims.yaml` may name, sorted: the union's order, whatever order their modules loaded in."""
    return tuple(sorted(CLAIM_KINDS))


# pydantic picks a claim's class by its `kind`; an unknown kind's error lists the registered ones
Claim = Annotated[Union[tuple(CLAIM_KINDS[name] for name in registered_kinds())], Field(discriminator="kind")]


class ClaimsFile(Spec):
    default_epsilon: float = Field(gt=0)
    default_epsilon_reason: str = Field(min_length=1)
    value_against: Literal[VALUE_TARGETS] = Field(  # type: ignore[valid-type]
        "mean", description="a value claim's interval: our seeds' mean against the paper's number, or a prediction of one more run")
    claims: list[Claim] = Field(min_length=1)

    @field_validator("claims")
    @classmethod
    def _unique(cls, claims: list[Claim]) -> list[Claim]:
        ids = [claim.id for claim in claims]
        repeated = sorted({claim_id for claim_id in ids if ids.count(claim_id) > 1})
        if repeated:
            raise ValueError(f"claim ids must be unique: {', '.join(repeated)}")
        return claims


def parse_claims(raw: object, tables: TablesFile, params: dict[str, Any], source: Path | str = CLAIMS_FILE) -> ClaimsFile:
    """Validate the claims file and what it names in tables.yaml and params.yaml; one line on error."""
    try:
        claims = ClaimsFile.model_validate(raw)
    except ValidationError as error:
        raise PipelineError(f"invalid {source}: {describe_validation_error(error, str(source))}{_claim_named(error, raw)}") from None
    for index, claim in enumerate(claims.claims):
        problem = claim.cross_check(tables, params)
        if problem:
            raise PipelineError(f"invalid {source}: claims.{index} ({claim.id}): {problem}")
    return claims


def _claim_named(error: ValidationError, raw: object) -> str:
    """" (claim <id>)" when the first problem lies inside a claim that has an id, for the message."""
    location = error.errors()[0]["loc"]
    if len(location) > 1 and location[0] == "claims" and isinstance(location[1], int) and isinstance(raw, dict):
        claim = raw["claims"][location[1]]
        if isinstance(claim, dict) and isinstance(claim.get("id"), str):
            return f" (claim {claim['id']})"
    return ""


def load_claims(tables: TablesFile, params: dict[str, Any], path: Path | str = CLAIMS_FILE) -> ClaimsFile:
    raw = read_yaml_file(path, "the report stage reads the papers' claims from it")
    return parse_claims(raw, tables, params, path)


def evaluate_claims(claims: ClaimsFile, tables: TablesFile, source: RunSource, record: SeedRecord | None = None) -> list[Verdict]:
    claim_axes = [split_override(override)[0] for claim in claims.claims for subject in claim.subjects()
                  for override in subject.overrides()]
    axes = list(dict.fromkeys(experiment_axes(tables) + claim_axes))
    judging = Judging(claims.default_epsilon, claims.default_epsilon_reason, tables, source, axes, record, claims.value_against)
    return [claim.judge(judging) for claim in claims.claims]


def verdict_counts(verdicts: list[Verdict]) -> dict[str, Any]:
    """reports/claims.json: the number of claims and of each verdict (every verdict listed, 0 included),
    and how many are the papers' claims and how many the project's own questions."""
    counts = {verdict_key(verdict): 0 for verdict in VERDICTS}
    for result in verdicts:
        counts[verdict_key(result.verdict)] += 1
    origins = {origin: sum(result.claim.origin == origin for result in verdicts) for origin in ORIGINS}
    return {"claims": len(verdicts), "verdicts": counts, "origins": origins}

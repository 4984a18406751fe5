"""The value claim: a cell of tables.yaml, our number against the paper's within ε: our seeds' mean against
the paper's number by default (σ/√n), or a prediction of one more run where the claims file says so
(`rules.value_verdict`); a one-run arm borrows its seed noise (pipeline.verdicts.arms).
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from pydantic import Field, model_validator

from pipeline.verdicts.arms import Arm, arm_of, borrowed_noise
from pipeline.reporting.spec import TablesFile, TableSpec
from pipeline.reporting.tables import build_table, find_row
from pipeline.settings_rules import SCALES
from pipeline.verdicts.claim import ClaimSpec, Judging, Verdict, absence, interval_text, noise_text, register_claim_kind, signed_text
from pipeline.verdicts.rules import at_the_edge, value_verdict
from pipeline.verdicts.verdict_names import HIGHER, NOT_REPRODUCED, NOT_RUN, OTHER_SCALE, REPRODUCED, UNDECIDED


def _column_path(spec: TableSpec, header: str) -> str:
    return next(path for path, named in spec.columns.items() if named == header)


@register_claim_kind
class ValueClaim(ClaimSpec):
    """A cell of tables.yaml: its row is the subject, its paper number the claim."""

    kind: Literal["value"]
    scale: Literal[SCALES] = Field("paper", description="the scale the paper's number is at")  # type: ignore[valid-type]
    table: str
    row: str
    column: str = Field(description="the column header, as in the table")
    seeds: str | None = Field(None, description="a table of seed runs of the same model: they are the arm (their spread)")
    epsilon: float | None = Field(None, gt=0, description="the band |Δ| ≤ ε; default: the file's")
    epsilon_reason: str | None = None

    @model_validator(mode="after")
    def _reasoned(self) -> "ValueClaim":
        if (self.epsilon is None) != (self.epsilon_reason is None):
            raise ValueError("epsilon and epsilon_reason go together")
        return self

    def claim_backbone(self, tables: TablesFile) -> str:
        return tables.tables[self.table].backbone

    def cross_check(self, tables: TablesFile, params: dict[str, Any]) -> str | None:
        if self.table not in tables.tables:
            return f"table {self.table!r} is not in tables.yaml"
        spec = tables.tables[self.table]
        row = next((row for row in spec.rows if row.label == self.row), None)
        if row is None:
            return f"row {self.row!r} is not in table {self.table}; rows: {', '.join(r.label for r in spec.rows)}"
        if self.column not in row.paper:
            return f"row {self.row!r} of {self.table} has no paper number for column {self.column!r}"
        if self.seeds is not None:
            seeds = tables.tables.get(self.seeds)
            if seeds is None or seeds.aggregate is None:
                return f"seeds: {self.seeds!r} is not a table of tables.yaml with an aggregate row"
            if _column_path(spec, self.column) not in seeds.columns:
                return f"seeds: table {self.seeds} has no column {_column_path(spec, self.column)!r}"
        return None

    def judge(self, judging: Judging) -> Verdict:
        """The kind's verdict, with the paper's number and ε on every row (another backbone's too: its row still
        says how many seeds "reproduced" would take)."""
        result = super().judge(judging)
        if result.epsilon is None:
            result.paper = judging.tables.tables[self.table].rows[self._row_index(judging.tables)].paper[self.column]
            result.epsilon, result.epsilon_reason = self._band(judging)
        result.against = judging.value_against
        return result

    def _row_index(self, tables: TablesFile) -> int:
        return next(index for index, row in enumerate(tables.tables[self.table].rows) if row.label == self.row)

    def _band(self, judging: Judging) -> tuple[float, str]:
        if self.epsilon is not None:
            return self.epsilon, self.epsilon_reason
        return judging.default_epsilon, judging.default_epsilon_reason

    def judge_here(self, judging: Judging) -> Verdict:
        spec = judging.tables.tables[self.table]
        row_spec = spec.rows[self._row_index(judging.tables)]
        row = find_row(row_spec, spec, judging.axes, judging.source)
        epsilon, reason = self._band(judging)
        result = Verdict(self, NOT_RUN, paper=row_spec.paper[self.column], epsilon=epsilon, epsilon_reason=reason)
        column = _column_path(spec, self.column)
        arm = None
        if row.present and row.ours.get(self.column) is not None:
            arm = arm_of(row, row_spec.model, column, judging.record, header=self.column)
            result.ours, result.run = row.ours[self.column], row.run
        if self.seeds and arm is not None:
            arm = _seed_table_arm(judging, self.seeds, column, arm)
        if arm is not None:  # this scale's seed noise, also where the paper's number is at another scale
            noise = None if len(arm.values) >= 2 else borrowed_noise(judging.record, judging.params, [row_spec.model], column, False)[0]
            result.noise_source = arm.source if noise is None else noise.source
            result.seed_sd = float(np.std(arm.values, ddof=1)) if noise is None else noise.sd
        if judging.scale != self.scale:
            result.verdict, result.note = OTHER_SCALE, f"the paper's number is at {self.scale} scale, this run at {judging.scale}"
        elif arm is None:
            result.note, result.commands = absence(row)
        else:
            result.ours, result.seeds, result.run = float(arm.values.mean()), len(arm.values), arm.source
            # the paper scored the same test pairs: their noise cancels in ours − paper, only the seeds' counts
            result.verdict, result.interval = value_verdict(arm.values, result.paper, result.epsilon, 0.0, noise,
                                                            against=judging.value_against)
        return result

    def at_edge(self, result: Verdict) -> bool:
        return result.interval is not None and at_the_edge(result.interval, (-result.epsilon, 0.0, result.epsilon))

    def ours_text(self, result: Verdict) -> str:
        if result.ours is None:
            return "—"
        if result.seeds is None:
            return f"{result.ours:.2f} ({result.run})"
        return f"{result.ours:.2f} ({noise_text(result.seeds, result.noise_source)})"

    def paper_text(self, result: Verdict, default_reason: str) -> str:
        if result.paper is None:
            return "—"
        reason = "the default" if result.epsilon_reason == default_reason else result.epsilon_reason
        return f"{result.paper:.2f} (ε {result.epsilon:.2f}: {reason})"

    def verdict_text(self, result: Verdict) -> str:
        shown = super().verdict_text(result)
        if result.ours is not None and result.paper is not None and result.verdict in (REPRODUCED, HIGHER, NOT_REPRODUCED, *UNDECIDED):
            delta = f"Δ {signed_text(result.ours - result.paper)}{interval_text(result.interval)}, {interval_kind(result)}"
            shown = shown.replace(f"**{result.verdict}**", f"**{result.verdict}** ({delta})", 1)
        return shown


def interval_kind(result: Verdict) -> str:
    """What a value claim's interval is, in words."""
    return "a prediction interval of one more run" if result.against == "one run" else "our seeds' mean against the paper's number"


def _seed_table_arm(judging: Judging, seeds_table: str, column: str, fallback: Arm) -> Arm:
    """A tables.yaml table of seed runs of the same model (paper scale): its runs are the arm."""
    table = build_table(judging.tables, seeds_table, judging.source)
    header = table.spec.columns[column]
    values = [row.ours[header] for row in table.rows if row.present and row.ours.get(header) is not None]
    if len(values) < 2:
        return fallback
    return Arm(np.asarray(values, dtype=float), [], f"{len(values)} seed runs ({seeds_table})", fallback.resamples, False)

"""The twin objective's switchable terms, declared: names, descriptions and the settings each term owns.

A term's declaration is what the settings need of it: its name (allowed in `train.losses`), what
it is, and its own settings (`train.<setting>`, each with its type, default and constraints, as a
pydantic field). Its implementation lives where the declaration points (`implementation`,
"module:attribute", loaded by `pipeline.losses` on first use), so validating `params.yaml` imports
no torch.

The papers' three terms are declared below. Any other term is a module of `pipeline/objective_terms/` that declares
itself (`declare_loss_term`) and holds its implementation (a `LossTerm`, whose tensor code needs no torch import
at the module's top): every module there is loaded with this registry (`pipeline.plugins`), after the papers'
three, in name order. The schema accepts its settings (`pipeline.config.TrainSettings`), the twin task passes
them on and the objective hands them to the term (`ObjectiveInputs.term_settings`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import Field, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo

from pipeline.errors import PipelineError
from pipeline.plugins import load_plugins

# What the tensor-norm loss takes its norms from: the pooler output h^P (the papers' method) or the
# last hidden [CLS] h^L (their LayerNorm study, TNCSE Figure 5 / JTCSE Fig. 8).
NORM_INPUTS = ("pooler", "last_hidden_cls")


@dataclass(frozen=True)
class TermSetting:
    """One setting a term owns: `train.<name>` of `annotation`, constrained and defaulted by `field`."""

    annotation: Any
    field: FieldInfo

    @property
    def default(self) -> Any:
        return self.field.get_default(call_default_factory=True)

    def validate(self, key: str, value: Any) -> Any:
        """The value, coerced as the schema would; a one-line PipelineError naming `key` otherwise."""
        try:
            return TypeAdapter(Annotated[self.annotation, self.field]).validate_python(value)
        except ValidationError as error:
            message = error.errors()[0]["msg"]
            raise PipelineError(f"{key}={value!r}: {message}") from None


class LossTerm(ABC):
    """The implementation of one declared term of the twin objective. Declared here, with no torch, so that a
    term's module can hold its declaration and its implementation and still be loaded by the settings."""

    @abstractmethod
    def compute(self, inputs: Any) -> Any:
        """The term's value (a 0-dim tensor, differentiable through `inputs.out`) on `inputs`, a
        `pipeline.losses.ObjectiveInputs` (not imported: this layer imports no torch)."""

    def reads_pooler(self, term_settings: Mapping[str, Any]) -> bool:
        """Whether it reads the pooler output h^P under these settings: when no selected term does, the
        pooler layers get no gradient, which DDP must be told (`find_unused_parameters`)."""
        return False


@dataclass(frozen=True)
class LossTermDeclaration:
    """One switchable term of the twin objective (the loss-ablation tables switch them by `name`)."""

    name: str
    description: str
    implementation: str  # "module:attribute" of its `LossTerm`
    settings: Mapping[str, TermSetting] = field(default_factory=dict)  # the train.* keys it owns


LOSS_TERM_DECLARATIONS: dict[str, LossTermDeclaration] = {}


def declare_loss_term(declaration: LossTermDeclaration) -> LossTermDeclaration:
    """Add a term (its order is the objective's summation order); a name or a setting declared twice is an error."""
    if declaration.name in LOSS_TERM_DECLARATIONS:
        raise PipelineError(f"loss term {declaration.name!r} is declared twice")
    owned = term_settings()
    for key in declaration.settings:
        if key in owned:
            raise PipelineError(f"setting train.{key} of loss term {declaration.name!r} is owned by {owned[key][0]!r}")
    LOSS_TERM_DECLARATIONS[declaration.name] = declaration
    return declaration


def term_settings() -> dict[str, tuple[str, TermSetting]]:
    """Every term-owned setting: its key → (the term that owns it, its declaration), in declaration order."""
    return {key: (name, setting) for name, declaration in LOSS_TERM_DECLARATIONS.items()
            for key, setting in declaration.settings.items()}


def term_setting_defaults() -> dict[str, Any]:
    return {key: setting.default for key, (_, setting) in term_settings().items()}


def implementation_modules() -> tuple[str, ...]:
    """The modules the declared terms' implementations live in: `pipeline.losses` loads them by name, so
    `pipeline.code_deps` counts them among the files that running it runs."""
    return tuple(dict.fromkeys(declaration.implementation.split(":")[0] for declaration in LOSS_TERM_DECLARATIONS.values()))


# The papers' objective (TNCSE: L_NCE + L_ICNCE + L_ICTN; JTCSE: its ICTM for ICTN): the default of `train.losses`. A term declared later (a
# project's extension) is allowed in `train.losses` but joins no objective unless a run names it.
PAPERS_OBJECTIVE = ("nce", "icnce", "ictn")


def loss_term_names() -> tuple[str, ...]:
    """The allowed names of `train.losses`, in the objective's summation order."""
    return tuple(LOSS_TERM_DECLARATIONS)


def validate_loss_names(losses: Iterable[str], key: str = "train.losses") -> tuple[str, ...]:
    """A non-empty selection of the twin objective's terms."""
    names = tuple(losses)
    allowed = ", ".join(LOSS_TERM_DECLARATIONS)
    for name in names:
        if name not in LOSS_TERM_DECLARATIONS:
            raise PipelineError(f"{key}={list(names)} names unknown loss {name}; allowed: {allowed}")
    if not names:
        raise PipelineError(f"{key}=[] switches every loss term off; allowed: a non-empty subset of {allowed}")
    return names


declare_loss_term(LossTermDeclaration(
    "nce", "L_NCE of each tower on its own two views (TNCSE Eq. 4, JTCSE Eq. 11)", "pipeline.losses:NCE_TERM"))
declare_loss_term(LossTermDeclaration(
    "icnce", "ICNCE between the towers (TNCSE Eq. 5); JTCSE's ICNCE_J with the cross outputs (Eq. 12)",
    "pipeline.losses:ICNCE_TERM"))
declare_loss_term(LossTermDeclaration(
    "ictn", "ICTN, the tensor-norm term (TNCSE Eq. 7; ICTM in JTCSE Eq. 14)", "pipeline.losses:ICTN_TERM",
    {
        "norm_factor": TermSetting(float, Field(0.5, gt=0, description="the released code's division of the norm loss by 2")),
        "norm_input": TermSetting(Literal[NORM_INPUTS], Field(  # type: ignore[valid-type]
            "pooler", description="the tensor-norm loss's norms: pooler output (the method) or last hidden [CLS] (the study)")),
    },
))

# Every other term: a module of pipeline/objective_terms/ each (after the papers' three, in name order).
load_plugins("pipeline.objective_terms")

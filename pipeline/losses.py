"""Losses of SimCSE, GS-InfoNCE, TNCSE and JTCSE, vectorised over the batch.

Layout: a tower's 2N views are interleaved, rows 2k and 2k+1 being the two dropout views of
sentence k. Twin stacks are (2, 2N, d), index 0 = tower I, 1 = tower II (`TwinOutput`). sim is
cosine similarity, τ = 0.05. NCE and ICNCE read h^L (last-layer [CLS]); the tensor-norm loss reads
h^L for its cosine and h^P (pooler output) for its norms (h^L with `norm_input="last_hidden_cls"`,
the LayerNorm study); JTCSE's ICNCE also reads the cross outputs c.

Every InfoNCE-type loss accepts tensors already gathered across DDP ranks
(`pipeline.modeling.gather_with_grad`, `TwinOutput.gather`): in-batch negatives are whatever
rows it is given.

Readings of the equations, where the papers leave room (see also docs/method.md):
- Tensor-norm loss (TNCSE Eq. 6, JTCSE Eq. 13): the papers write the cosine factor as
  sim(h_I^L, h_II^L) in both directions; we read it (docs/method.md, "Readings we chose") as the cosine of the same
  pair the norm term compares, cos(h_i^L[2k], h_j^L[2k+1]). The factor −log(cos) is not detached
  (neither paper mentions a stop-gradient), so the loss also trains h^L. A cosine ≤ 0 becomes the
  constant 1e-4 (no gradient through it); cosines in (0, 1e-4) are kept. Each direction is
  multiplied by `factor` = 0.5 by default because the released code divides by 2.
- ICNCE (TNCSE Eq. 5): in the 2N×2N matrix between two towers the same-row entries
  sim(a[i], b[i]) are masked like self-similarities in L_NCE, and row i's target is the other
  view i^1 of the same sentence in the other tower. Rows are the first argument's vectors, so
  ICNCE(a, b) ≠ ICNCE(b, a); that asymmetry is what JTCSE's direction R picks (Eq. 12).
- JTCSE's R ∈ {0, 1} (Eq. 12) selects one direction. Given as a 0-dim tensor (the training
  step's, so that one compiled graph serves both draws) both directions are computed and mixed,
  R·forward + (1 − R)·backward: with R exactly 0 or 1 the value and the gradient are the selected
  direction's, bit for bit (the other's enter multiplied by an exact zero).
- GS-InfoNCE (GS-InfoNCE Eq. 2): λ·Σ_k exp(sim(g_k, h_i)/τ) is appended as M extra logits
  sim(g_k, h_i)/τ + log λ; M defaults to 3 × the number of sentences the loss sees (N, not the 2N
  views); fresh noise is drawn on every call.
"""

import functools
import importlib
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

import torch
from torch.nn import functional as F

from pipeline.errors import PipelineError
from pipeline.declarations import loss_terms
from pipeline.declarations.loss_terms import NORM_INPUTS, LossTerm
from pipeline.settings_rules import validate_gaussian


class TwinOutput(Protocol):
    """What the twin objective reads of the twin's outputs (`pipeline.modeling.twin.TwinOutput` is one).
    Declared here so the losses do not import the model code."""

    last_cls: torch.Tensor  # (2, 2N, d) h^L of both towers
    pooler_output: torch.Tensor  # (2, 2N, d) h^P
    cross_cls: torch.Tensor | None  # (2, 2N, d) JTCSE's cross outputs c; None in TNCSE

TEMPERATURE = 0.05
NORM_FACTOR = 0.5  # the released TNCSE/JTCSE code divides each tensor-norm term by 2
MIN_COSINE = 1e-4


class LossTerms(NamedTuple):
    total: torch.Tensor
    terms: dict[str, torch.Tensor]  # each switched-on term, for logging


def cosine_matrix(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """sim(a_i, b_j) for all pairs: (R, d), (C, d) -> (R, C), in float32 even under autocast
    (with τ = 0.05, bf16 rounding of the cosines would move the logits by about 0.1)."""
    with torch.autocast(a.device.type, enabled=False):
        return F.normalize(a.float(), dim=-1) @ F.normalize(b.float(), dim=-1).T


@dataclass
class GaussianNegatives:
    """GS-InfoNCE's extra negatives (GS-InfoNCE Eq. 2).

    ℓ_i = −log( e^{sim(h_i,h_i^+)/τ} / ( Σ_j e^{sim(h_j,h_i)/τ} + λ·Σ_{k=1..M} e^{sim(g_k,h_i)/τ} ) ),
    g_k ~ N(μ, σ²) of the embedding size; never positives. Pass it as `gaussian=` to any
    InfoNCE-type loss. `count` is M (None = 3 × sentences in the batch; 0 = plain InfoNCE exactly),
    `weight` is λ; `generator` makes the noise reproducible (it may live on another device).
    """

    count: int | None = None
    mean: float = 0.0
    std: float = 1.0
    weight: float = 1.0
    generator: torch.Generator | None = None

    def __post_init__(self):
        validate_gaussian(self.count, self.std, self.weight)

    def draw(self, num_sentences: int, dim: int, device: torch.device | None = None) -> torch.Tensor:
        """The M noise vectors of one call (M × dim), from `generator` (on its device), else on `device`."""
        count = 3 * num_sentences if self.count is None else self.count
        where = device if self.generator is None else self.generator.device
        return torch.normal(self.mean, self.std, (count, dim), generator=self.generator, device=where)

    def logits(self, anchors: torch.Tensor, temperature: float, num_sentences: int,
               noise: torch.Tensor | None = None) -> torch.Tensor:
        """sim(g_k, h_i)/τ + log λ for every anchor row and noise vector: (R, M). `noise`: drawn
        beforehand (`draw`, outside a compiled step); None draws it now."""
        if noise is None:
            noise = self.draw(num_sentences, anchors.shape[-1], anchors.device)
        return cosine_matrix(anchors, noise.to(anchors)) / temperature + math.log(self.weight)


def _cross_entropy(
    logits: torch.Tensor,
    targets: torch.Tensor,
    anchors: torch.Tensor,
    temperature: float,
    gaussian: GaussianNegatives | None,
    num_sentences: int,
) -> torch.Tensor:
    if gaussian is not None:
        logits = torch.cat([logits, gaussian.logits(anchors, temperature, num_sentences)], dim=1)
    return F.cross_entropy(logits, targets)


def info_nce(
    anchors: torch.Tensor,
    positives: torch.Tensor,
    temperature: float = TEMPERATURE,
    gaussian: GaussianNegatives | None = None,
) -> torch.Tensor:
    """Unsupervised SimCSE's InfoNCE (SimCSE Eq. 4, GS-InfoNCE Eq. 1, TNCSE Eq. 4).

    ℓ_i = −log( e^{sim(z_i, z_i^+)/τ} / Σ_{j=1..N} e^{sim(z_i, z_j^+)/τ} ), averaged over i:
    the N×N logits sim(anchors_i, positives_j)/τ with the diagonal as targets.
    """
    return F.cross_entropy(*info_nce_logits(anchors, positives, temperature, gaussian))


def info_nce_logits(
    anchors: torch.Tensor,
    positives: torch.Tensor,
    temperature: float = TEMPERATURE,
    gaussian: GaussianNegatives | None = None,
    noise: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`info_nce`'s logits (N × N, then the M Gaussian columns when `gaussian` is given: of `noise`
    when drawn beforehand) and targets."""
    logits = cosine_matrix(anchors, positives) / temperature
    if gaussian is not None:
        logits = torch.cat([logits, gaussian.logits(anchors, temperature, len(anchors), noise)], dim=1)
    return logits, torch.arange(len(anchors), device=anchors.device)


def gaussian_share(logits: torch.Tensor, count: int) -> torch.Tensor:
    """The softmax mass of the last `count` columns (the Gaussian negatives), averaged over rows: the
    share of the denominator they hold, and so the most of each row's gradient they can steer."""
    return torch.softmax(logits.detach().float(), dim=1)[:, logits.shape[1] - count:].sum(1).mean()


def icnce(
    views_a: torch.Tensor,
    views_b: torch.Tensor,
    temperature: float = TEMPERATURE,
    gaussian: GaussianNegatives | None = None,
) -> torch.Tensor:
    """Interaction-constrained InfoNCE, ICNCE(a, b) (TNCSE Eq. 5, JTCSE Eq. 12's terms).

    Over the 2N interleaved views of two towers, with p(i) = i XOR 1 the other view of i's sentence:
    ℓ_i = −log( e^{sim(a_i, b_p(i))/τ} / Σ_{j≠i} e^{sim(a_i, b_j)/τ} ), averaged over the 2N rows;
    the same-row entry sim(a_i, b_i) is masked (−∞).
    """
    logits = cosine_matrix(views_a, views_b) / temperature
    rows = torch.arange(len(views_a), device=views_a.device)
    logits = logits.masked_fill(rows[:, None] == rows[None, :], float("-inf"))
    return _cross_entropy(logits, rows ^ 1, views_a, temperature, gaussian, len(views_a) // 2)


def twin_info_nce(
    views: torch.Tensor,
    temperature: float = TEMPERATURE,
    gaussian: GaussianNegatives | None = None,
) -> torch.Tensor:
    """One tower's L_NCE(h_i^L, h_i^{L+}) in the twin stage (TNCSE Eq. 4/8, JTCSE Eq. 11/15).

    The 2N×2N cosine matrix of the tower's own views, self-similarities masked (−∞), row 2k's
    target 2k+1 and vice versa: ICNCE with both sides from the same tower.
    """
    return icnce(views, views, temperature, gaussian)


def tensor_norm_loss(
    last_i: torch.Tensor,
    last_j: torch.Tensor,
    pooled_i: torch.Tensor,
    pooled_j: torch.Tensor,
    factor: float = NORM_FACTOR,
) -> torch.Tensor:
    """L_TN(h_i, h_j^+) of tower i against tower j (TNCSE Eq. 6, JTCSE Eq. 13 as L_TMC).

    For the N sentences k, with a = h_i^P[2k], b = h_j^P[2k+1] and s = cos(h_i^L[2k], h_j^L[2k+1])
    (s ≤ 0 replaced by 1e-4):
        L_TN = factor · mean_k( −log(s) · ‖a − b‖ / (‖a‖ + ‖b‖) ),
    `factor` = 0.5 because the released code divides by 2.
    """
    cosine = F.cosine_similarity(last_i[0::2], last_j[1::2], dim=-1)
    cosine = torch.where(cosine > 0, cosine, torch.full_like(cosine, MIN_COSINE))
    return factor * (-cosine.log() * norm_ratio(pooled_i[0::2], pooled_j[1::2])).mean()


def norm_ratio(anchor: torch.Tensor, positive: torch.Tensor) -> torch.Tensor:
    """l_TN(h, h^+) = ‖h − h^+‖ / (‖h‖ + ‖h^+‖) per row (TNCSE Eq. 1, JTCSE Eq. 1 as L_TMC): (R, d) -> (R,).

    With ‖h^+‖ = k‖h‖ and t = cos γ it is √(1 + k² − 2kt) / (1 + k) (TNCSE Eq. 3, JTCSE Eq. 5), the
    surface of TNCSE Figure 2 / JTCSE Fig. 3."""
    return (anchor - positive).norm(dim=-1) / (anchor.norm(dim=-1) + positive.norm(dim=-1))


def ictn(last_cls: torch.Tensor, pooler_output: torch.Tensor, factor: float = NORM_FACTOR) -> torch.Tensor:
    """ICTN (TNCSE Eq. 7) = ICTM (JTCSE Eq. 14) = L_TN(h_I, h_II^+) + L_TN(h_II, h_I^+); (2, 2N, d) stacks.

    `pooler_output` is what the norms are taken of: h^P in the method, h^L itself in the LayerNorm
    study (`norm_vectors`)."""
    (h_I, h_II), (p_I, p_II) = last_cls, pooler_output
    return tensor_norm_loss(h_I, h_II, p_I, p_II, factor) + tensor_norm_loss(h_II, h_I, p_II, p_I, factor)


def norm_vectors(out: TwinOutput, norm_input: str = "pooler") -> torch.Tensor:
    """The (2, 2N, d) stack the tensor-norm loss takes its norms from: the pooler output h^P
    (`pooler`, the papers' method) or the last hidden [CLS] h^L (`last_hidden_cls`, their LayerNorm
    study: TNCSE Figure 5, JTCSE Fig. 8)."""
    if norm_input == "pooler":
        return out.pooler_output
    if norm_input == "last_hidden_cls":
        return out.last_cls
    raise PipelineError(f"train.norm_input={norm_input!r} is not known; allowed: {', '.join(NORM_INPUTS)}")


def draw_direction(generator: torch.Generator | None = None) -> int:
    """JTCSE's binary random number R ∈ {0, 1} (Eq. 12), drawn once per step."""
    return int(torch.randint(0, 2, (1,), generator=generator, device="cpu" if generator is None else generator.device))


def joint_icnce(
    last_cls: torch.Tensor,
    cross_cls: torch.Tensor,
    direction: int | torch.Tensor,
    temperature: float = TEMPERATURE,
    gaussian: GaussianNegatives | None = None,
) -> torch.Tensor:
    """JTCSE's ICNCE (Eq. 12) for a drawn R = `direction`:

    R·(ICNCE(h_I, h_II) + ICNCE(c_I, c_II)) + (1 − R)·(ICNCE(h_II, h_I) + ICNCE(c_II, c_I)).
    An int computes the selected direction only; a 0-dim tensor both, mixed (one graph for either R).
    """
    def one_way(first: int, second: int) -> torch.Tensor:
        on_last_cls = icnce(last_cls[first], last_cls[second], temperature, gaussian)
        return on_last_cls + icnce(cross_cls[first], cross_cls[second], temperature, gaussian)

    if not isinstance(direction, torch.Tensor):
        return one_way(0, 1) if direction == 1 else one_way(1, 0)
    return direction * one_way(0, 1) + (1 - direction) * one_way(1, 0)


# ---- the twin objective's terms ---------------------------------------------------------------------
# Each switchable term is declared in `pipeline.declarations.loss_terms` (its name, its own settings and
# where its implementation lives); the implementation is a `LossTerm` found through the declaration.
# The objective sums the selected terms in declaration order; DDP's unused-parameter rule asks each term.

IctnKernel = Callable[[torch.Tensor, torch.Tensor, float], torch.Tensor]  # (last_cls, norm vectors, factor) -> ICTN


@dataclass(frozen=True)
class ObjectiveInputs:
    """What a term may read: the twin's (gathered) outputs, the settings every term shares, and the
    settings the terms own (`term_settings`, by key: each term reads its declared ones)."""

    out: TwinOutput
    temperature: float = TEMPERATURE
    gaussian: GaussianNegatives | None = None
    generator: torch.Generator | None = None  # JTCSE's direction R is drawn from it, unless given as `direction`
    ictn_kernel: IctnKernel = ictn  # the benchmark's baseline passes the released code's per-sample loop
    direction: torch.Tensor | None = None  # JTCSE's R drawn beforehand (a compiled step's input)
    term_settings: Mapping[str, Any] = field(default_factory=loss_terms.term_setting_defaults)


class _BothTowersNce(LossTerm):
    def compute(self, inputs: ObjectiveInputs) -> torch.Tensor:
        return sum(twin_info_nce(views, inputs.temperature, inputs.gaussian) for views in inputs.out.last_cls)


class _InteractionNce(LossTerm):
    def compute(self, inputs: ObjectiveInputs) -> torch.Tensor:
        last_cls, cross_cls = inputs.out.last_cls, inputs.out.cross_cls
        if cross_cls is None:
            return icnce(last_cls[0], last_cls[1], inputs.temperature, inputs.gaussian)
        direction = draw_direction(inputs.generator) if inputs.direction is None else inputs.direction
        return joint_icnce(last_cls, cross_cls, direction, inputs.temperature, inputs.gaussian)


class _TensorNorm(LossTerm):
    def compute(self, inputs: ObjectiveInputs) -> torch.Tensor:
        settings = inputs.term_settings
        return inputs.ictn_kernel(inputs.out.last_cls, norm_vectors(inputs.out, settings["norm_input"]),
                                  settings["norm_factor"])

    def reads_pooler(self, term_settings: Mapping[str, Any]) -> bool:
        return term_settings["norm_input"] == "pooler"


NCE_TERM, ICNCE_TERM, ICTN_TERM = _BothTowersNce(), _InteractionNce(), _TensorNorm()


@functools.cache
def _implementation(where: str) -> LossTerm:
    module, attribute = where.split(":")
    term = getattr(importlib.import_module(module), attribute)
    if not isinstance(term, LossTerm):
        raise TypeError(f"{where} is a {type(term).__name__}, not a LossTerm")
    return term


def loss_term(name: str) -> LossTerm:
    """The implementation of a declared term (the declaration says where it lives)."""
    return _implementation(loss_terms.LOSS_TERM_DECLARATIONS[name].implementation)


def _with_defaults(term_settings: Mapping[str, Any]) -> dict[str, Any]:
    """The terms' own settings: the given ones over the declared defaults; an undeclared key is an error."""
    declared = loss_terms.term_setting_defaults()
    for key in term_settings:
        if key not in declared:
            raise PipelineError(f"{key} is no loss term's setting; the terms' settings: {', '.join(declared)}")
    return declared | dict(term_settings)


def reads_pooler(losses: Iterable[str], term_settings: Mapping[str, Any]) -> bool:
    """Whether any selected term reads the pooler output (else DDP must allow unused parameters)."""
    settings = _with_defaults(term_settings)
    return any(loss_term(name).reads_pooler(settings) for name in loss_terms.validate_loss_names(losses))


@dataclass(frozen=True)
class TwinObjective:
    """The twin objective with its terms and settings resolved once, before any step: a compiled step
    traces only the terms' tensor code (`twin_objective` documents the objective)."""

    terms: tuple[tuple[str, LossTerm], ...]
    temperature: float = TEMPERATURE
    gaussian: GaussianNegatives | None = None
    ictn_kernel: IctnKernel = ictn
    term_settings: Mapping[str, Any] = field(default_factory=loss_terms.term_setting_defaults)

    @classmethod
    def of(cls, losses: Iterable[str] | None = None, *, temperature: float = TEMPERATURE,
           gaussian: GaussianNegatives | None = None, ictn_kernel: IctnKernel = ictn, **term_settings: Any) -> "TwinObjective":
        """The selected terms (None = every declared term) in declaration order, the terms' own settings over
        their declared defaults (an undeclared one is an error)."""
        selected = loss_terms.validate_loss_names(loss_terms.LOSS_TERM_DECLARATIONS if losses is None else losses)
        terms = tuple((name, loss_term(name)) for name in loss_terms.LOSS_TERM_DECLARATIONS if name in selected)
        return cls(terms, temperature, gaussian, ictn_kernel, _with_defaults(term_settings))

    def __call__(self, out: TwinOutput, generator: torch.Generator | None = None,
                 direction: torch.Tensor | None = None) -> LossTerms:
        inputs = ObjectiveInputs(out, self.temperature, self.gaussian, generator, self.ictn_kernel, direction,
                                 self.term_settings)
        terms = {name: term.compute(inputs) for name, term in self.terms}
        return LossTerms(total=sum(terms.values()), terms=terms)


def twin_objective(
    out: TwinOutput,
    losses: Iterable[str] | None = None,
    *,
    temperature: float = TEMPERATURE,
    gaussian: GaussianNegatives | None = None,
    generator: torch.Generator | None = None,
    ictn_kernel: IctnKernel = ictn,
    direction: torch.Tensor | None = None,
    **term_settings: Any,
) -> LossTerms:
    """The TNCSE objective when `out.cross_cls` is None, else the JTCSE objective.

    TNCSE (Eq. 8):  L = L_NCE(I) + L_NCE(II) + ICNCE(h_I, h_II) + ICTN
    JTCSE (Eq. 15): L = L_NCE(I) + L_NCE(II) + ICNCE_J + ICTM, ICNCE_J of Eq. 12 with R = `direction`
    (a 0-dim 0./1. tensor drawn beforehand) or, without it, drawn from `generator` (seed it alike on every
    DDP rank).
    `losses` switches terms by name (`pipeline.declarations.loss_terms`; None = every term), summed in
    declaration order. Returns the total and each switched-on term. `gaussian` applies to every
    InfoNCE-type term; `ictn_kernel` computes the tensor-norm term; `term_settings` are the terms' own
    settings (`norm_factor`, `norm_input`: the norms the tensor-norm term reads, `norm_vectors`), the
    declared defaults where not given. A training step builds the `TwinObjective` once instead.
    """
    objective = TwinObjective.of(losses, temperature=temperature, gaussian=gaussian, ictn_kernel=ictn_kernel, **term_settings)
    return objective(out, generator, direction)


def distillation_loss(student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """The `D` students' objective: mean squared error between the student's [CLS] and the frozen
    teacher ensemble's embedding, mean over batch and dimensions; the teacher gets no gradient."""
    return F.mse_loss(student, teacher.detach())

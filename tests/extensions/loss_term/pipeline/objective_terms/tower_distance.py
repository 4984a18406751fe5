"""The tower distance: the two towers' h^L of the same view pulled together, times `train.distance_weight`.

An example extension (tests/test_extending.py lays it over a copy of the project, as docs/extending.md says a
term is added): its declaration and its implementation in one module, no torch at the top.
"""

from pydantic import Field

from pipeline.declarations.loss_terms import LossTerm, LossTermDeclaration, TermSetting, declare_loss_term


class TowerDistance(LossTerm):
    def compute(self, inputs):
        last_I, last_II = inputs.out.last_cls
        return inputs.term_settings["distance_weight"] * (last_I - last_II).pow(2).sum(-1).mean()


TOWER_DISTANCE = TowerDistance()

declare_loss_term(LossTermDeclaration(
    "distance", "the towers' squared distance between the same view's h^L, weighted", f"{__name__}:TOWER_DISTANCE",
    {"distance_weight": TermSetting(float, Field(1.0, ge=0, description="the tower-distance term's weight"))},
))

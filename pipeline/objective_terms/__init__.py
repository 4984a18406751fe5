"""The twin objective's terms beyond the papers' three: one module each, declaring itself.

A module here calls `pipeline.declarations.loss_terms.declare_loss_term` with its name, description, settings
(`train.<key>`, each a `TermSetting`) and its `LossTerm` ("<this module>:<attribute>"). The registry loads every
module of this package (`pipeline.plugins.load_plugins`), so no list names it; the settings validate against it,
so a module here imports no torch at its top (a term's tensor code calls the tensors' own methods). A term joins
a run's objective only when `train.losses` names it (the default is the papers' three). docs/extending.md says
what else a term takes.
"""

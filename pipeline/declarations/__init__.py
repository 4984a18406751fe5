"""The names the settings are checked against, apart from the code behind them.

Each concept that varies is declared here once, as data: the STS tasks (`sts_tasks`) and the twin
objective's loss terms with their own settings (`loss_terms`), the papers' here and any other in a module of
its own that the registry loads (`pipeline/sts_datasets/`, `pipeline/objective_terms/`). This layer imports no
torch and no `pipeline.data`, so the settings (`pipeline.config`, `pipeline.settings_rules`) validate against it
without loading a model or a reader, and a change to the papers' terms' code (`pipeline/losses.py`) does not rerun
`download`; a term in a module of its own holds its declaration, so every stage that reads the settings depends on it.
The implementations find their declaration here by name (`pipeline.data.sts_pairs` reads a declared
task's pairs; `pipeline.losses` computes a declared term).
"""

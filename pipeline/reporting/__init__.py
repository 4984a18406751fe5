"""Tables and plots: the papers' tables regenerated from this run's metrics and DVC experiments.

`spec` validates tables.yaml, `runs` finds the run a row comes from (workspace or experiment),
`tables` fills each table, `render` writes it as Markdown, CSV and LaTeX, `report` ties them up.
"""

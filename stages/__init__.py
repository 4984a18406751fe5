"""Command-line stages of the pipeline: one Typer command per DVC stage (`python -m stages --help`)."""

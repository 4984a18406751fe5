"""The report written: REPRODUCTION.md and the papers' tables in Markdown and LaTeX (`render`, `report`),
"what would decide" each undecided claim (`decidability`), and the public checkpoints' table
(`checkpoints_table`), from the tables (`pipeline.reporting`) and the verdicts (`pipeline.verdicts`).
"""

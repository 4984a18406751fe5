"""STS tasks beyond the papers' seven: one module each, registering itself.

A module here calls `pipeline.declarations.sts_tasks.register_sts_task` with the task's declaration: its name,
table header, files under the SentEval root, the score it reports, and its `downloads` (each file's URL and
sha256), which the download stage fetches. The registry loads every module of this package
(`pipeline.plugins.load_plugins`), so no list names it; the settings validate against it, so a module here
imports nothing heavy. A task is scored when `eval.tasks` names it; the headline average stays over the papers'
seven. docs/extending.md says what else a task takes.
"""

"""STS-B's dev split as a task of its own, the split the papers select checkpoints on.

An example extension (tests/test_extending.py lays it over a copy of the project, as docs/extending.md says a
task is added). Its file ships in senteval.tar (pinned in pipeline/data/inputs.sha256), so it declares no
downloads.
"""

from pipeline.declarations.sts_tasks import SplitFiles, StsTaskDeclaration, register_sts_task

register_sts_task(StsTaskDeclaration(
    "STSBenchmarkDev", "STS-B dev", SplitFiles("STS/STSBenchmark", {"dev": "sts-dev.csv"}, "stsb"), "dev"))

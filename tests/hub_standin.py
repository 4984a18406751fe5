"""The loopback hub stand-in the tests download through (it lives in the product:
`pipeline.data.hub_standin`, which the checkpoints stage's offline rows use too)."""

from pipeline.data.hub_standin import hub_standin, model_files, standin_commit  # noqa: F401

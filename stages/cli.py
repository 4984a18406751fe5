"""The `python -m stages` command: one sub-command per DVC stage of DESIGN.md §2."""

import typer

from stages import analyze, bench, checkpoints, distill, download, evaluate, joint, pretrain, report, rtt

app = typer.Typer(
    help="TNCSE/JTCSE reproduction pipeline. Each command is one DVC stage; settings come from params.yaml.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

for module in (download, rtt, pretrain, joint, distill, evaluate, checkpoints, analyze, report, bench):
    app.command(module.NAME, help=module.__doc__)(module.command)

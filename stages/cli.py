"""The `python -m stages` command: one sub-command per DVC stage (docs/architecture.md).

Stages that run a model first lease their GPU (`pipeline.execution.lease`); the training stages may spread
over several processes (`PIPELINE_NPROC`, `pipeline.execution.launch`). Both are how a stage runs, not what
it computes, so they live here, outside the code a stage's result depends on (dvc.yaml deps)."""

import functools
import inspect
import sys

import typer

from stages import analyze, baseline, bench, checkpoints, distill, download, evaluate, joint, jtcse, pretrain, report, rtt
from pipeline.evaluated_models import TRAINING_STAGES as TRAINING_STAGE_NAMES
from stages.common import one_line_errors

app = typer.Typer(
    help="TNCSE/JTCSE reproduction pipeline. Each command is one DVC stage; settings come from params.yaml.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

STAGE_MODULES = (download, rtt, pretrain, joint, jtcse, distill, baseline, evaluate, checkpoints, analyze, report, bench)
# spread over PIPELINE_NPROC processes; each has check_processes
TRAINING_STAGE_MODULES = tuple(module for module in STAGE_MODULES if module.NAME in TRAINING_STAGE_NAMES)
MODEL_STAGES = (*TRAINING_STAGE_MODULES, evaluate, checkpoints, analyze, bench)  # lease a GPU where there are GPUs


def on_devices(module):
    """`module.command` run on leased GPUs, as N ranks when it is a training stage that asks for them."""
    command = module.command

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        from pipeline.execution.launch import run_on_devices

        with one_line_errors():
            spread = module in TRAINING_STAGE_MODULES
            check = functools.partial(module.check_processes, *args, **kwargs) if spread else lambda count: None
            run_on_devices(module.NAME, lambda: command(*args, **kwargs), sys.argv[1:], spread, check)

    return wrapper


for module in STAGE_MODULES:
    app.command(module.NAME, help=module.__doc__)(on_devices(module) if module in MODEL_STAGES else module.command)


@app.command("prune-embeddings")
def prune_embeddings(
    max_gb: float = typer.Option(..., "--max-gb", min=0, help="keep at most this many GiB (0 empties the store)"),
) -> None:
    """Prune the embedding store (data/cache/embeddings/, pipeline.evaluation.store) to --max-gb GiB,
    least recently used shards first. Not a DVC stage: the store is a cache every stage shares."""
    from pipeline import paths
    from pipeline.evaluation.store import prune, store_size

    deleted = prune(paths.EMBEDDINGS_CACHE, int(max_gb * 2**30))
    typer.echo(f"[prune-embeddings] deleted {len(deleted)} files; {store_size(paths.EMBEDDINGS_CACHE) / 2**20:.1f} MiB left "
               f"in {paths.EMBEDDINGS_CACHE}")


@app.command("settle")
def settle(
    claim: str = typer.Argument(..., help="the id of an order claim of claims.yaml between two models of the run"),
    budget: float = typer.Option(None, "--budget", help="a cap on what the new seeds cost, in the scale's unit: GPU hours at "
                                 "paper scale, this machine's CPU hours at the tiny scale"),
    budget_gpu_hours: float = typer.Option(None, "--budget-gpu-hours", help="the cap in GPU hours (paper scale only)"),
    max_seeds: int = typer.Option(None, "--max-seeds", help="a cap on the seeds per arm"),
    effect: float = typer.Option(None, "--effect", help="the effect to detect beyond the claim's margin (default: the "
                                 "paper's gap, else the claim's margin and band)"),
    power: float = typer.Option(0.9, "--power", help="the power the design is sized for at that effect"),
    plan: bool = typer.Option(False, "--plan", help="print the design, its looks and their cost; run nothing"),
    scale: str = typer.Option(None, "--scale", help="plan at another scale than the workspace's (paper: priced from reports/bench-gpu.json)"),
) -> None:
    """Settle a claim: a design sized by the effect to detect (the budget only caps it), seeds added in rounds (DVC
    experiments) until the sequential rule decides it or the plan ends (docs/scaling.md, "Settling a claim"). Not a
    DVC stage."""
    from tools.settle.command import settle_command

    with one_line_errors():
        typer.echo(settle_command(claim, budget, max_seeds, plan, scale, budget_gpu_hours=budget_gpu_hours,
                                  effect=effect, power=power))


def unwrapped(text: str | None) -> str | None:
    """Help text with each paragraph's hard line breaks joined: Typer wraps help to the terminal itself, and a
    docstring's own breaks would show as ragged lines."""
    if text is None:
        return None
    paragraphs = [" ".join(line.strip() for line in paragraph.splitlines()) for paragraph in inspect.cleandoc(text).split("\n\n")]
    return "\n\n".join(paragraphs)


for registered in app.registered_commands:  # last: every command above is registered by now
    registered.help = unwrapped(registered.help or (registered.callback.__doc__ if registered.callback else None))

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

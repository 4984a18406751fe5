"""Round-trip translate the corpus EN→X→EN for one tower.

Reads data/raw/corpus.txt and the rtt and towers settings; writes data/rtt/<tower>.txt (aligned
line by line with the corpus) and keeps a persistent translation cache in data/cache/rtt/."""

from pathlib import Path

import typer

from stages.common import ParamsOption, not_implemented, stage

NAME = "rtt"


@stage
def command(tower: str = typer.Option(..., help="tower name from params towers (I or II)"), params: Path = ParamsOption) -> None:
    not_implemented(NAME, 3)

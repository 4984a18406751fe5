"""Twin-tower training: TNCSE (train.cael = 0) or JTCSE (train.cael > 0).

Reads data/models/pretrain/{I,II}/ and data/raw/corpus.txt; writes data/models/joint/{I,II}/ and a
manifest saying how to combine them."""

from pathlib import Path

from stages.common import ParamsOption, not_implemented, stage

NAME = "joint"


@stage
def command(params: Path = ParamsOption) -> None:
    not_implemented(NAME, 5)

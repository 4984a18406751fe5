"""Twin-tower training: TNCSE (train.cael = 0) or JTCSE (train.cael > 0).

Reads data/models/pretrain/{I,II}/, data/raw/corpus.txt and STS-B dev (model selection); writes
data/models/joint/{I,II}/ (Hugging Face format; the twin's embedding is the sum of the two towers'
last-layer [CLS]), resumable checkpoints in data/checkpoints/joint/ and reports/training/joint.{json,csv}.
"""

from pathlib import Path

from pipeline.config import load_params
from stages.common import ParamsOption, stage, summary, training_line

NAME = "joint"


@stage
def command(params: Path = ParamsOption) -> None:
    from pipeline import paths
    from pipeline.data.readers import read_corpus
    from pipeline.modeling import load_tokenizer
    from pipeline.training_tasks import TwinTask, check_before_loading, run_training

    settings = load_params(params)
    towers = (paths.pretrained_tower("I"), paths.pretrained_tower("II"))
    examples = [(sentence,) for sentence in read_corpus(paths.CORPUS)]
    check_before_loading(NAME, len(examples), settings.train, settings)
    task = TwinTask(towers, load_tokenizer(towers[0]), settings.train, settings.seed)
    result = run_training(NAME, task, examples, settings.train, settings.train.mode_lr, paths.joint_model(), settings, towers)
    method = f"JTCSE with {settings.train.cael} CAELs" if settings.train.cael else "TNCSE"
    summary(NAME, f"{method}: {training_line(result, len(examples))}")

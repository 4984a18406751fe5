"""Twin-tower training: TNCSE (train.cael = 0) or JTCSE (train.cael > 0).

Reads data/models/pretrain/{I,II}/, data/raw/corpus.txt and STS-B dev (model selection); writes
data/models/joint/{I,II}/ (Hugging Face format; the twin's embedding is the sum of the two towers'
last-layer [CLS]), resumable checkpoints in data/checkpoints/joint/ and reports/training/joint.{json,csv}.
"""

from pathlib import Path

from stages.common import ParamsOption, stage, stage_params, summary, training_line

NAME = "joint"


@stage
def command(params: Path = ParamsOption) -> None:
    from pipeline import paths
    from pipeline.data.readers import read_corpus
    from pipeline.training_jobs import twin_task
    from pipeline.training_tasks import check_before_loading

    settings = stage_params(params)
    examples = [(sentence,) for sentence in read_corpus(paths.CORPUS)]
    check_before_loading(NAME, len(examples), settings.train, settings, "train")
    result = twin_task(settings).run(examples, settings)
    method = f"JTCSE with {settings.train.cael} CAELs" if settings.train.cael else "TNCSE"
    if settings.train.norm_input != "pooler" or settings.train.drop_layernorm:
        method += (f" (LayerNorm study: norms of {settings.train.norm_input}, "
                   f"LayerNorms of the last {settings.train.drop_layernorm} layers removed)")
    summary(NAME, f"{method}: {training_line(result, len(examples))}")

"""The training stages built from params: what `pretrain@<tower>`, `joint`, `distill@<teacher>` and
`baseline@<name>` run.

A `TrainingJob` holds its stage's settings, read from params once (`pretrain_job`, `joint_job`,
`distill_job`; the benchmark builds the same jobs on its own backbone). `run` then does the
stage's work in order: build the examples from the stage's inputs (`examples`), check what fails
before any model loads (`check`: device, precision, at least one optimizer step), load the task
(`task`), train it with the one loop (`loop.train`: model selection on STS-B dev by
`stsb_dev_scorer`, resume states under data/checkpoints/<name>/) and write the reports
(reports/training/, the environment record, the provenance). `run_pretrain`, `run_joint` and
`run_distill` are what the stage modules call.
"""

from __future__ import annotations

import hashlib
import json
import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from transformers import PreTrainedTokenizerBase

from pipeline import paths
from pipeline.config import BaselineSettings, OptimSettings, Params, PretrainSettings, StudentSettings, TrainSettings
from pipeline.data.download import sick_sentences, wiki_part
from pipeline.data.readers import read_corpus
from pipeline.declarations.sts_tasks import STS_BENCHMARK
from pipeline.execution.environment import environment_record, training_compute, training_data, write_provenance
from pipeline.errors import PipelineError
from pipeline.evaluation.sts import Embedder, evaluate_embedder, load_tasks, reported_score
from pipeline.io import write_json_atomic, write_text_atomic
from pipeline.cache_entries import sha256_of
from pipeline.modeling import load_tokenizer
from pipeline.evaluated_models import TOWER_NAMES, WeightedTowers, teacher_model
from pipeline.execution.runtime import resolve_device, run_context, with_precision
from pipeline.settings_rules import validate_precision
from pipeline.training.batching import check_world_size
from pipeline.training.contract import TrainingTask
from pipeline.training.compiled import step_compilation
from pipeline.training.loop import DevScore, RunSpec, TrainingResult, planned_steps, train
from pipeline.training.tasks import (
    DistillTask, FrozenEnsemble, SimCSETask, TwinTask, distill_examples, distinct_tokenizers, gaussian_negatives,
)

Example = tuple[str, ...]  # one text per column


@dataclass(frozen=True)
class Trained:
    """What a training stage reports when done: its run name, how many examples it trained on,
    the method in words where the stage has several (joint: TNCSE or JTCSE), the loop's result."""

    name: str
    examples: int
    result: TrainingResult
    method: str | None = None


@dataclass(frozen=True)
class TrainingJob(ABC):
    """One training stage, its settings read from params once.

    `name`: the run's name (reports/training/<name>.json, data/checkpoints/<name>/); `key`: the
    dotted key of `settings` in params.yaml; `starts_from`: the model folders the run starts from
    (part of its fingerprint); `data`: the corpus and round trips its environment record hashes
    (declared deps of the stage)."""

    params: Params
    name: str
    key: str
    settings: OptimSettings
    lr: float
    output: Path
    starts_from: tuple[Path, ...]
    data: tuple[Path, ...]

    @abstractmethod
    def examples(self) -> list[Example]:
        """The training examples, read from the stage's inputs (no model loaded)."""

    @abstractmethod
    def task(self) -> TrainingTask:
        """The task, its models loaded."""

    @property
    def method(self) -> str | None:
        """The method in words for the summary line, where the stage has several."""
        return None

    def check(self, example_count: int) -> None:
        """What fails before any model loads: the device exists, the `<key>.precision` runs there
        (with device auto this is where a CPU meets it), and the run takes at least one optimizer
        step (a 0-step run would save the untrained model as if trained)."""
        device = resolve_device(self.params.device)
        validate_precision(self.settings.precision, device.type, f"{self.key}.precision", self.params.device)
        planned_steps(example_count, self.settings, self.name)

    def check_processes(self, world_size: int) -> None:
        """The global batch splits over `world_size` processes (`batching.check_world_size`)."""
        check_world_size(self.settings.batch_size, world_size, f"{self.key}.batch_size")

    def run(self) -> Trained:
        examples = self.examples()
        self.check(len(examples))
        return Trained(self.name, len(examples), train_and_report(self, self.task(), examples), self.method)


@dataclass(frozen=True)
class PretrainJob(TrainingJob):
    """`pretrain@<tower>`: unsupervised SimCSE from `backbone` on the corpus and the tower's round trips."""

    settings: PretrainSettings
    tower: str
    backbone: Path

    def examples(self) -> list[Example]:
        corpus = read_corpus(paths.CORPUS)
        return pretraining_examples(corpus, read_round_trips(paths.rtt_file(self.tower), len(corpus)),
                                    self.settings.rtt_as)

    def task(self) -> SimCSETask:
        pretrain = self.settings
        return SimCSETask(self.backbone, load_tokenizer(self.backbone), pretrain.dropout, pretrain.temperature,
                          gaussian_negatives(pretrain.gaussian, self.params.seed), pretrain.max_length)


@dataclass(frozen=True)
class JointJob(TrainingJob):
    """`joint`: TNCSE or JTCSE on the two pretrained towers, each corpus sentence an example."""

    settings: TrainSettings
    towers: tuple[Path, Path]

    def examples(self) -> list[Example]:
        return [(sentence,) for sentence in read_corpus(paths.CORPUS)]

    def task(self) -> TwinTask:
        return TwinTask(self.towers, load_tokenizer(self.towers[0]), self.settings, self.params.seed)

    @property
    def method(self) -> str:
        train = self.settings
        method = f"JTCSE with {train.cael} CAELs" if train.cael else "TNCSE"
        if train.norm_input != "pooler" or train.drop_layernorm:
            method += (f" (LayerNorm study: norms of {train.norm_input}, "
                       f"LayerNorms of the last {train.drop_layernorm} layers removed)")
        return method


@dataclass(frozen=True)
class DistillJob(TrainingJob):
    """`distill@<teacher>`: a fresh `backbone` regressed onto the frozen `ensemble`."""

    settings: StudentSettings
    backbone: Path
    ensemble: WeightedTowers

    def examples(self) -> list[Example]:
        # the tokenizers alone (no weights) say how many columns an example has
        members = [load_tokenizer(folder) for folder in self.ensemble.folders]
        column_tokenizers, _ = distinct_tokenizers([load_tokenizer(self.backbone), *members])
        return distill_examples(read_corpus(paths.CORPUS), column_tokenizers)

    def task(self) -> DistillTask:
        return DistillTask(self.backbone, FrozenEnsemble(self.ensemble), load_tokenizer(self.backbone),
                           self.settings.dropout, self.settings.max_length)


@dataclass(frozen=True)
class BaselineJob(TrainingJob):
    """`baseline@<name>`: a seed paper's own model (SimCSE; GS-InfoNCE when `gaussian` is on) trained as
    its paper trains it, unsupervised SimCSE from `backbone` on Wiki1M alone: no round trips, and the
    corpus's SICK sentences left out (each sentence is its own positive through two dropout views)."""

    settings: BaselineSettings
    backbone: Path

    def examples(self) -> list[Example]:
        corpus = read_corpus(paths.CORPUS)
        sick = sick_sentences(paths.SENTEVAL, self.params.data.sick_splits) if self.params.data.add_sick else []
        return [(sentence,) for sentence in wiki_part(corpus, sick)]

    def task(self) -> SimCSETask:
        settings = self.settings
        return SimCSETask(self.backbone, load_tokenizer(self.backbone), settings.dropout, settings.temperature,
                          gaussian_negatives(settings.gaussian, self.params.seed), settings.max_length)


def pretrain_job(params: Params, tower: str, backbone: Path = paths.BACKBONE) -> PretrainJob:
    """`pretrain@<tower>` from `backbone` with the tower's learning rate; an unknown tower is an error."""
    if tower not in params.towers:
        raise PipelineError(f"--tower {tower} is not a tower of params.yaml; towers: {', '.join(params.towers)}")
    return PretrainJob(params, f"pretrain-{tower}", "pretrain", params.pretrain, params.towers[tower].lr,
                       paths.pretrained_tower(tower), (backbone,), tuple(training_data(params, [tower])), tower, backbone)


def joint_job(params: Params, towers: tuple[Path, Path] | None = None, train: TrainSettings | None = None,
              name: str = "joint") -> JointJob:
    """`joint` on the pretrained towers (or `towers`), with params' train settings (or `train`); `name`
    jtcse: the `jtcse` stage, the train settings with `jtcse.cael` CAELs (`Params.jtcse_train`)."""
    towers = towers or tuple(paths.pretrained_tower(tower) for tower in TOWER_NAMES)
    train = train or (params.jtcse_train if name == "jtcse" else params.train)
    output = paths.jtcse_model() if name == "jtcse" else paths.joint_model()
    return JointJob(params, name, "train", train, train.mode_lr, output, tuple(towers), tuple(training_data(params)), tuple(towers))


def distill_job(params: Params, teacher: str, backbone: Path = paths.BACKBONE, ensemble: WeightedTowers | None = None,
                student: StudentSettings | None = None) -> DistillJob:
    """`distill@<teacher>`: the registry's model `teacher` (or `ensemble`) distilled into `backbone`,
    with the student settings `distill.teachers.<teacher>` (or `student`)."""
    if student is None and teacher not in params.distill.teachers:
        raise PipelineError(f"--teacher {teacher} is not in distill.teachers; allowed: {', '.join(params.distill.teachers)}")
    ensemble = ensemble or teacher_model(params, teacher)
    student = student or params.distill.teachers[teacher]
    return DistillJob(params, f"distill-{teacher}", f"distill.teachers.{teacher}", student, student.lr,
                      paths.student(teacher), tuple(Path(folder) for folder in ensemble.folders),
                      tuple(training_data(params)), backbone, ensemble)


def baseline_job(params: Params, name: str, backbone: Path = paths.BACKBONE) -> BaselineJob:
    """`baseline@<name>` with the settings `baselines.<name>`; a name not there is an error."""
    if name not in params.baselines:
        raise PipelineError(f"--name {name} is not in baselines of params.yaml; baselines: {', '.join(params.baselines) or 'none'}")
    settings = params.baselines[name]
    return BaselineJob(params, f"baseline-{name}", f"baselines.{name}", settings, settings.lr, paths.baseline_model(name),
                       (backbone,), (paths.CORPUS,), backbone)


def run_pretrain(params: Params, tower: str) -> Trained:
    return pretrain_job(params, tower).run()


def run_joint(params: Params, name: str = "joint") -> Trained:
    return joint_job(params, name=name).run()


def run_distill(params: Params, teacher: str) -> Trained:
    return distill_job(params, teacher).run()


def run_baseline(params: Params, name: str) -> Trained:
    return baseline_job(params, name).run()


# ---- the examples ------------------------------------------------------------------------------


def read_round_trips(path: Path, corpus_lines: int) -> list[str]:
    """The round trips of the rtt stage: one line per corpus line, empty where translation failed."""
    if not path.is_file():
        raise PipelineError(f"{path} not found; the rtt stage writes it (`dvc repro rtt`)")
    lines = path.read_text(encoding="utf-8").split("\n")[:-1]
    if len(lines) != corpus_lines:
        raise PipelineError(f"{path}: {len(lines)} lines but the corpus has {corpus_lines}; rerun `dvc repro -f rtt`")
    return lines


def pretraining_examples(corpus: Sequence[str], round_trips: Sequence[str], rtt_as: str) -> list[Example]:
    """SimCSE examples from the corpus and its aligned round trips (an empty line = failed translation).

    pairs: (sentence, round trip), falling back to (sentence, sentence) — two dropout views — where
    the translation failed; sentences: every corpus sentence and every distinct new round trip.
    """
    if rtt_as == "pairs":
        return [(sentence, trip or sentence) for sentence, trip in zip(corpus, round_trips)]
    extra = [trip for trip in dict.fromkeys(round_trips) if trip and trip not in set(corpus)]
    return [(sentence,) for sentence in [*corpus, *extra]]


# ---- model selection: STS-B dev with the task's inference embedding -----------------------------


def model_embedder(embed, tokenizer: PreTrainedTokenizerBase, max_length: int, device: torch.device) -> Embedder:
    """An `Embedder` over a model being trained: `embed(input_ids, attention_mask)` per batch."""

    def embed_sentences(sentences: list[str]) -> torch.Tensor:
        batch = tokenizer(sentences, padding=True, truncation=True, max_length=max_length, return_tensors="pt").to(device)
        return embed(batch["input_ids"], batch["attention_mask"])

    return embed_sentences


def stsb_dev_scorer(task: TrainingTask, senteval_root: Path, tokenizer: PreTrainedTokenizerBase, max_length: int,
                    device: torch.device, max_pairs: int | None, batch_size: int, seed: int) -> DevScore:
    """model → Spearman × 100 on STS-B dev with the task's inference embedding (model selection); with
    `max_pairs`, on the dev pairs sampled with `seed` as the evaluator samples its test pairs."""
    dev = load_tasks(senteval_root, [STS_BENCHMARK.name], max_pairs, split="dev", seed=seed)

    def score(model: nn.Module) -> float:
        embedder = model_embedder(lambda ids, mask: task.embed(model, ids, mask), tokenizer, max_length, device)
        results = evaluate_embedder(embedder, dev, batch_size, description="STS-B dev")
        dev_score = reported_score(results[STS_BENCHMARK.name])
        if not math.isfinite(dev_score):  # would make model selection keep an arbitrary checkpoint
            raise PipelineError(
                f"STS-B dev score is {dev_score} on {sum(map(len, dev[0].subsets.values()))} pairs: the model's "
                "embeddings are constant or degenerate; lower the learning rate or check the input model"
            )
        return dev_score

    return score


# ---- the run and its reports -------------------------------------------------------------------


def run_fingerprint(settings: OptimSettings, lr: float, params: Params, examples, input_models: Sequence[Path]) -> str:
    """What defines a training run: its settings, its examples, the weights it starts from and how
    model selection scores (the eval settings of the STS-B dev scorer, and the dev file): a
    resume state is resumed only by a run with the same fingerprint, so a resume never compares dev
    scores measured on different dev sets."""
    # "dev_pairs": how max_pairs cuts the dev set (a seeded sample since it stopped being the first N pairs)
    selection = params.eval.model_dump(include={"max_pairs", "batch_size", "max_length"}) | {"dev_pairs": "seeded sample"}
    digest = hashlib.sha256(
        json.dumps([settings.model_dump(), lr, params.seed, params.backbone.model_dump(), selection]).encode()
    )
    dev_file = STS_BENCHMARK.files.path(paths.SENTEVAL, "dev")
    if dev_file.is_file():
        digest.update(sha256_of(dev_file).encode())
    for example in examples:
        digest.update("\t".join(example).encode() + b"\n")
    for folder in input_models:
        for weights in sorted(Path(folder).rglob("*.safetensors")):
            digest.update(sha256_of(weights).encode())
    return digest.hexdigest()


def train_and_report(job: TrainingJob, task: TrainingTask, examples: Sequence[Example]) -> TrainingResult:
    """Train a job's task as a stage does: device from params, precision from `<key>.precision`,
    STS-B dev selection, resume states under data/checkpoints/<name>/; then the metrics, loss curve
    and details with the environment (`job.data` hashed) under reports/training/, and the run's
    provenance under reports/provenance/<name>.json."""
    params, settings = job.params, job.settings
    context = with_precision(run_context(params.device), settings.precision, f"{job.key}.precision", params.device)
    dev_score = stsb_dev_scorer(task, paths.SENTEVAL, task.tokenizer, params.eval.max_length, context.device,
                                params.eval.max_pairs, params.eval.batch_size, params.seed)
    spec = RunSpec(job.lr, params.seed, job.output, paths.RESUME_STATES / job.name, job.name,
                   run_fingerprint(settings, job.lr, params, examples, job.starts_from), dev_score)
    result = train(task, examples, settings, spec, context)
    if context.is_main:
        compilation = step_compilation(settings.compile, context.device, context.world_size, settings.grad_accum)
        compute = training_compute(settings, context, compilation.mode)
        write_training_report(
            result, paths.TRAINING_REPORTS / f"{job.name}.json", paths.TRAINING_REPORTS / f"{job.name}.csv",
            paths.TRAINING_DETAILS / f"{job.name}.json", environment_record(context.device, params, job.data, compute),
        )
        write_provenance(job.name)
    return result


def write_training_report(result: TrainingResult, metrics_path: Path, curve_path: Path, details_path: Path,
                          environment: dict | None = None) -> None:
    """DVC metrics (JSON: best STS-B dev and steps, what `dvc metrics show` prints), the details
    (JSON: also the best step and the final loss) and plot data (CSV, one row per logged step).

    Only what the seed determines goes in: speed and memory vary from run to run, so they would
    make a rerun's dvc.lock differ from the committed one; the stage's summary line prints them and
    the benchmark (`bench`) measures them. `environment` (`pipeline.execution.environment.environment_record`:
    where and how it ran, a function of the machine kind, the packages, params and data) goes in
    the details under "environment"."""
    details = {
        "steps": result.steps,
        "best_dev_stsb": result.best_dev,
        "best_step": result.best_step,
        "final_loss": result.final_loss,
    }
    if environment is not None:
        details["environment"] = environment
    write_json_atomic(details_path, details)
    write_json_atomic(metrics_path, {"best_dev_stsb": result.best_dev, "steps": result.steps})
    columns = sorted({key for row in result.history for key in row} - {"step"})
    lines = [",".join(["step", *columns])]
    for row in sorted(result.history, key=lambda row: row["step"]):
        lines.append(",".join([str(row["step"]), *("" if row.get(c) is None else f"{row[c]:.6g}" for c in columns)]))
    write_text_atomic(curve_path, "\n".join(lines) + "\n")

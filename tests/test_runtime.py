"""The `threads` setting fixes torch's CPU thread count for every stage, so the trained weights do not
depend on OMP_NUM_THREADS (a count of 1 trained other weights than the committed 2-thread run)."""

import json
import os
import subprocess
import sys

import pytest
import yaml

from conftest import MIRROR, REPO_ROOT
from tiny_models import save_tiny_bert

# A stage's start (`stage_params`) then a short SimCSE run through the pipeline's own `train`.
TRAIN_A_FEW_STEPS = """
import json, logging, sys
from pathlib import Path
import torch
from transformers import AutoTokenizer
from stages.common import stage_params
from pipeline.config import OptimSettings
from pipeline.execution.runtime import RunContext
from pipeline.training.loop import RunSpec, train
from pipeline.training.tasks import SimCSETask

params, backbone, corpus, out = map(Path, sys.argv[1:5])
logging.basicConfig(level=logging.INFO, format="%(message)s")  # as a stage does
stage_params(params)
examples = [(line,) for line in corpus.read_text(encoding="utf-8").splitlines()]
task = SimCSETask(backbone, AutoTokenizer.from_pretrained(backbone), 0.1, 0.05, None, 32)
optim = OptimSettings(batch_size=64, max_length=32, max_steps=2, eval_every=100, save_every=100)
result = train(task, examples, optim, RunSpec(1e-3, 7, out / "model", out / "checkpoints"),
               RunContext(torch.device("cpu"), None))
print(json.dumps({"threads": torch.get_num_threads(), "losses": [row["loss"] for row in result.history]}))
"""


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("threads")
    backbone = save_tiny_bert(folder / "backbone", seed=3)
    corpus = folder / "corpus.txt"
    lines = (MIRROR / "wiki1m" / "wiki1m_for_simcse.head.txt").read_text(encoding="utf-8").splitlines()[:128]
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder, backbone, corpus


def train_in_a_process(inputs, tiny_params_dict, threads, omp_num_threads, name):
    folder, backbone, corpus = inputs
    tiny_params_dict["threads"] = threads
    params = folder / f"{name}.yaml"
    params.write_text(yaml.safe_dump(tiny_params_dict))
    out = folder / name
    environment = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": str(omp_num_threads)}
    result = subprocess.run(
        [sys.executable, "-c", TRAIN_A_FEW_STEPS, str(params), str(backbone), str(corpus), str(out)],
        capture_output=True, text=True, env=environment, cwd=folder,
    )
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout.strip().splitlines()[-1])
    return record, (out / "model" / "model.safetensors").read_bytes(), result.stderr


@pytest.mark.slow  # three processes that import torch and transformers
def test_the_threads_setting_not_omp_num_threads_decides_the_weights(inputs, tiny_params_dict):
    one, one_weights, one_log = train_in_a_process(inputs, tiny_params_dict, 2, 1, "omp1")
    two, two_weights, _ = train_in_a_process(inputs, tiny_params_dict, 2, 2, "omp2")
    assert one["threads"] == two["threads"] == 2
    assert one["losses"] == two["losses"] and one_weights == two_weights
    assert "threads: 2 (params.yaml) in place of OMP_NUM_THREADS=1" in one_log
    # the setting matters: one thread trains other bits (what OMP_NUM_THREADS=1 did before)
    single, single_weights, _ = train_in_a_process(inputs, tiny_params_dict, 1, 2, "threads1")
    assert single["threads"] == 1 and single_weights != two_weights

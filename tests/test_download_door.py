"""The download's door (issue 67 item 4): what a source may send or a variable may say that the download
must refuse in one line `error: …`, exit code 2, with nothing written — a bad archive at PIPELINE_STSB_URL,
a malformed URL, a pinned benchmark file a source lacks, credentials in a URL, an endless or trickling
response — and the `--serve` CLI's bad mirrors. Every source is a real loopback HTTP server."""

import base64
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from http.server import BaseHTTPRequestHandler

import pytest

from pipeline.errors import PipelineError
import typer
import yaml

from pipeline.data.hub_standin import STSB_ARCHIVE_PATH, mirror_files
from pipeline.data.sources import URL_DEADLINE_S, URL_MAX_BYTES, fetch_url
from pipeline.urls import without_userinfo
from stages.common import one_line_errors

from conftest import REPO_ROOT
from hub_standin import hub_standin, loopback_server

BAD_ARCHIVE_PATH = "elsewhere/Stsbenchmark.tar.gz"


def run_download(tmp_path, params: dict, **env: str) -> subprocess.CompletedProcess:
    """`python -m stages download` in `tmp_path` from the canonical sources (no mirror) unless `env` names one."""
    params_file = tmp_path / "params.yaml"
    params_file.write_text(yaml.safe_dump(params))
    environment = {key: value for key, value in os.environ.items() if key not in ("PIPELINE_DATA_MIRROR", "HF_ENDPOINT")}
    return subprocess.run([sys.executable, "-m", "stages", "download", "--params", str(params_file)], capture_output=True,
                          text=True, cwd=tmp_path, timeout=600, env={**environment, "PYTHONPATH": str(REPO_ROOT), **env})


def one_line_exit_2(result: subprocess.CompletedProcess) -> str:
    """The promise: exit 2, no traceback, exactly one `error:` line (returned)."""
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    return line


def nothing_written(root) -> bool:
    return not any(path.is_file() for path in (root / "data").rglob("*"))


def _tar_gz(members: dict[str, bytes | tuple[int, str]]) -> bytes:
    """A .tar.gz of {name: bytes of a file, or (tar type, link target) of a link}."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, body in members.items():
            info = tarfile.TarInfo(name)
            if isinstance(body, tuple):
                info.type, info.linkname = body
                tar.addfile(info)
            else:
                info.size = len(body)
                tar.addfile(info, io.BytesIO(body))
    return buffer.getvalue()


def _release(mirror) -> dict[str, bytes]:
    """STS-B's release as the archive holds it ({member: bytes})."""
    folder = mirror / "raw" / "STSBenchmark"
    return {f"stsbenchmark/{path.name}": path.read_bytes() for path in sorted(folder.iterdir())}


BAD_ARCHIVES = {
    "no tar": (lambda mirror: b"<html><body>404 Not Found</body></html>\n", "not a readable tar archive"),
    "climbs out": (lambda mirror: _tar_gz({**_release(mirror), "stsbenchmark/../../../escaped.txt": b"x\n"}),
                   "'stsbenchmark/../../../escaped.txt' climbs out of the archive (..)"),
    "absolute": (lambda mirror: _tar_gz({**_release(mirror), "/tmp/absolute-member.txt": b"x\n"}),
                 "'/tmp/absolute-member.txt' has an absolute path"),
    "link outside": (lambda mirror: _tar_gz({**_release(mirror), "stsbenchmark/passwd": (tarfile.SYMTYPE, "../../../etc/passwd")}),
                     "'stsbenchmark/passwd' is a link pointing outside the archive (-> ../../../etc/passwd)"),
}


@pytest.mark.parametrize("case", BAD_ARCHIVES)
def test_a_bad_stsb_archive_is_one_line_naming_the_url_and_nothing_is_extracted(tmp_path, mirror, tiny_params_dict, case):
    """What PIPELINE_STSB_URL serves is no tar, or a tar with a member that would land outside the folder
    it is extracted to: one line naming the URL and the member, exit 2, nothing under data/ nor beside it."""
    archive, expected = BAD_ARCHIVES[case]
    with hub_standin(mirror_files(mirror) | {BAD_ARCHIVE_PATH: archive(mirror)}, any_revision=True) as (endpoint, requested):
        tiny_params_dict["data"]["hub_endpoint"] = endpoint
        result = run_download(tmp_path, tiny_params_dict, PIPELINE_STSB_URL=f"{endpoint}/{BAD_ARCHIVE_PATH}")
    line = one_line_exit_2(result)
    assert f"GET {BAD_ARCHIVE_PATH}" in requested
    assert line.startswith(f"error: {endpoint}/{BAD_ARCHIVE_PATH}: ") and expected in line and "nothing was extracted" in line
    assert nothing_written(tmp_path)
    assert not list(tmp_path.rglob("escaped.txt")) and not (tmp_path / "data" / "raw" / "original").exists()


@pytest.mark.parametrize("url, expected", [
    ("not a url", "PIPELINE_STSB_URL='not a url' is not a URL this download can fetch: its scheme (none) is not one of http, https, file"),
    ("ftp://127.0.0.1/Stsbenchmark.tar.gz", "its scheme ftp: is not one of http, https, file"),
    ("http:///Stsbenchmark.tar.gz", "it names no host"),
    ("http://127.0.0.1:port/Stsbenchmark.tar.gz", "PIPELINE_STSB_URL='http://127.0.0.1:port/Stsbenchmark.tar.gz' is not a URL"),
    ("http://127.0.0.1/Sts benchmark.tar.gz", "it holds whitespace or a control character"),
])
def test_a_malformed_stsb_url_is_one_line_before_anything_is_fetched(tmp_path, tiny_params_dict, url, expected):
    """Checked before any download (none is reachable here: the hub is offline), so nothing is fetched either."""
    line = one_line_exit_2(run_download(tmp_path, tiny_params_dict, PIPELINE_STSB_URL=url, HF_HUB_OFFLINE="1"))
    assert expected in line and "give http(s)://host[:port]/path or file:///path" in line
    assert nothing_written(tmp_path)


def _copy(mirror, folder):
    shutil.copytree(mirror, folder)
    return folder


@pytest.mark.parametrize("source", ["mirror", "canonical"])
def test_a_pinned_benchmark_file_the_source_lacks_is_named(tmp_path, mirror, tiny_params_dict, source):
    """The checks walked the files a source has, so one it lacked passed ("64 benchmark files" with 65
    pinned, exit 0): every key the manifest pins under senteval/ is now seen, the first missing named."""
    lacking = _copy(mirror, tmp_path / "lacking")
    key = "senteval/STS/STS16-en-test/STS.gs.headlines.txt"
    (lacking / key).unlink()
    sums = lacking / "SHA256SUMS"
    sums.write_text("".join(line for line in sums.read_text().splitlines(keepends=True) if not line.rstrip().endswith(key)))
    root = tmp_path / "run"
    root.mkdir()
    if source == "mirror":
        line = one_line_exit_2(run_download(root, tiny_params_dict, PIPELINE_DATA_MIRROR=str(lacking)))
        assert f"mirror {lacking} has no {key}, which inputs.sha256 pins" in line
    else:
        with hub_standin(mirror_files(lacking), any_revision=True) as (endpoint, _):
            tiny_params_dict["data"]["hub_endpoint"] = endpoint
            line = one_line_exit_2(run_download(root, tiny_params_dict, PIPELINE_STSB_URL=f"{endpoint}/{STSB_ARCHIVE_PATH}"))
        assert f"senteval.tar of princeton-nlp/datasets-for-simcse has no {key}, which inputs.sha256 pins" in line
    assert nothing_written(root)


def test_a_missing_stsb_release_file_in_a_mirror_is_named_not_called_unlisted(tmp_path, mirror, tiny_params_dict):
    lacking = _copy(mirror, tmp_path / "lacking")
    (lacking / "raw" / "STSBenchmark" / "sts-dev.csv").unlink()
    root = tmp_path / "run"
    root.mkdir()
    line = one_line_exit_2(run_download(root, tiny_params_dict, PIPELINE_DATA_MIRROR=str(lacking)))
    assert f"mirror {lacking} has no raw/STSBenchmark/sts-dev.csv, which inputs.sha256 pins; complete the mirror" in line
    assert nothing_written(root)


def test_without_userinfo_drops_credentials_from_urls_and_messages():
    assert without_userinfo("http://user:secret@host:8080/a?b=c@d") == "http://host:8080/a?b=c@d"
    assert without_userinfo("could not fetch x from 'https://tok@hub.example/x' (refused)") == \
        "could not fetch x from 'https://hub.example/x' (refused)"
    assert without_userinfo("http://host/a@b and mail@example.org") == "http://host/a@b and mail@example.org"


def test_credentials_in_the_endpoint_are_neither_recorded_nor_printed(tmp_path, mirror, tiny_params_dict):
    """HF_ENDPOINT and PIPELINE_STSB_URL with `user:secret@`: the download works (urllib sends them as basic
    auth), and neither reports/provenance/download.json nor an error line holds them."""
    with hub_standin(mirror_files(mirror), any_revision=True) as (endpoint, _):
        with_credentials = endpoint.replace("http://", "http://user:secret@")
        result = run_download(tmp_path, tiny_params_dict, HF_ENDPOINT=with_credentials,
                              PIPELINE_STSB_URL=f"{with_credentials}/{STSB_ARCHIVE_PATH}")
        assert result.returncode == 0, result.stderr[-3000:]
        provenance = (tmp_path / "reports" / "provenance" / "download.json").read_text()
        assert json.loads(provenance)["inputs"]["commits"] and endpoint in provenance
        assert "secret" not in provenance and "secret" not in result.stdout + result.stderr

        failed = tmp_path / "failed"
        failed.mkdir()
        line = one_line_exit_2(run_download(failed, tiny_params_dict, HF_ENDPOINT=with_credentials,
                                            PIPELINE_STSB_URL=f"{with_credentials}/no/such/archive.tar.gz"))
    assert f"from {endpoint}/no/such/archive.tar.gz (HTTP Error 404" in line and "secret" not in line and "user" not in line
    assert nothing_written(failed)


class _Source(BaseHTTPRequestHandler):
    """`/endless`: bytes until the client hangs up, no length said; `/trickle`: one byte every 0.2 s;
    `/declared`: a Content-Length over the limit; `/auth`: echoes the Authorization header."""

    def do_GET(self) -> None:  # noqa: N802
        self.send_response(200)
        if self.path == "/declared":
            self.send_header("Content-Length", str(10**12))
        elif self.path == "/auth":
            body = (self.headers.get("Authorization") or "none").encode()
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.end_headers()
        try:
            while True:
                self.wfile.write(b"x" * (1 << 16) if self.path == "/endless" else b"x")
                self.wfile.flush()
                if self.path == "/trickle":
                    time.sleep(0.2)
        except OSError:  # the client hung up
            pass

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def source():
    with loopback_server(_Source) as url:
        yield url


def _one_line_exit_2(capsys, download) -> str:
    """`download()` under the stages' error handling: exit 2 and one `error:` line (returned)."""
    with pytest.raises(typer.Exit) as stopped, one_line_errors():
        download()
    assert stopped.value.exit_code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    return line


@pytest.mark.parametrize("path", ["/endless", "/declared"])
def test_a_response_over_the_size_cap_is_one_line_and_its_partial_file_removed(tmp_path, source, capsys, path):
    destination = tmp_path / "Stsbenchmark.tar.gz"
    line = _one_line_exit_2(capsys, lambda: fetch_url(f"{source}{path}", destination, max_bytes=1 << 20))
    assert line.startswith(f"error: {source}{path}: the response ")
    assert ("over the 1048576-byte limit" in line) == (path == "/declared") and ("past 1048576 bytes" in line) == (path == "/endless")
    assert "URL_MAX_BYTES" in line and "nothing was written" in line
    assert list(tmp_path.iterdir()) == []


def test_a_trickling_response_meets_the_deadline_of_the_whole_download(tmp_path, source, capsys):
    """One byte every 0.2 s never trips a socket timeout; the whole download's deadline stops it."""
    destination = tmp_path / "Stsbenchmark.tar.gz"
    started = time.monotonic()
    line = _one_line_exit_2(capsys, lambda: fetch_url(f"{source}/trickle", destination, timeout_s=60, deadline_s=1.5))
    assert time.monotonic() - started < 10
    assert line.startswith(f"error: {source}/trickle: the download took longer than 1.5 s") and "URL_DEADLINE_S" in line
    assert list(tmp_path.iterdir()) == []


def test_the_limits_are_far_above_the_pinned_archive_and_are_the_defaults(mirror, source, tmp_path):
    """The cap is well above STS-B's release archive (as the stand-in serves it, uncompressed: 1.5 MB), the
    deadline well above its transfer at a slow line's 10 kB/s; a URL's credentials go as basic auth."""
    import inspect

    archive = len(mirror_files(mirror)[STSB_ARCHIVE_PATH])
    assert URL_MAX_BYTES >= 40 * archive and URL_DEADLINE_S >= 4 * archive / 10_000
    defaults = inspect.signature(fetch_url).parameters
    assert defaults["max_bytes"].default == URL_MAX_BYTES and defaults["deadline_s"].default == URL_DEADLINE_S
    fetched = fetch_url(source.replace("http://", "http://user:p%40ss@") + "/auth", tmp_path / "auth")
    assert fetched.read_bytes() == b"Basic " + base64.b64encode(b"user:p@ss")


class _LyingHub(BaseHTTPRequestHandler):
    """A hub whose HEAD lists a file at 10 bytes (with an ETag and a commit), and whose GET then sends bytes
    without end and without a length: `/huge/...` lists 10**12 bytes instead."""

    def _head(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(10**12) if "/huge/" in self.path else "10")
        self.send_header("ETag", '"' + "0" * 64 + '"')
        self.send_header("X-Repo-Commit", "0" * 40)

    def do_HEAD(self) -> None:  # noqa: N802
        self._head()
        self.end_headers()

    def do_GET(self) -> None:  # noqa: N802
        self.send_response(200)
        self.end_headers()
        try:
            while True:
                self.wfile.write(b"x" * (1 << 16))
        except OSError:
            pass

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def lying_hub():
    with loopback_server(_LyingHub) as url:
        yield url


@pytest.mark.parametrize("repo", ["org/data", "org/huge"])
def test_a_hub_download_is_held_to_the_size_the_hub_lists_and_to_a_cap(tmp_path, lying_hub, capsys, repo):
    """A hub file is fetched through the same bounded copy as a URL: at most the size the hub lists (an endless
    answer is cut there), and a listed size over HUB_MAX_BYTES is not fetched at all; one line, nothing written."""
    from pipeline.data.sources import HUB_MAX_BYTES, fetch_hub_file

    destination = tmp_path / "out" / "wiki1m.txt"
    line = _one_line_exit_2(capsys, lambda: fetch_hub_file(repo, "wiki1m.txt", destination, lying_hub))
    shown = f"error: {lying_hub}/datasets/{repo}/resolve/main/wiki1m.txt: "
    if repo == "org/huge":
        assert line == (f"{shown}the hub lists it at {10**12} bytes, over the {HUB_MAX_BYTES}-byte limit of a hub download "
                        "(HUB_MAX_BYTES); is it the file expected? nothing was written")
    else:
        assert line.startswith(shown + "the response ran past 10 bytes") and "(the size the hub lists)" in line
    assert not destination.exists() and list((tmp_path / "out").iterdir()) == []
    assert HUB_MAX_BYTES >= 4 * 14 * 10**9  # above the largest backbone a preset names (XLM-RoBERTa-XL, 14 GB)


def _serve(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeline.data.hub_standin", *args], capture_output=True, text=True,
                          cwd=REPO_ROOT, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})


def _served_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 2 and result.stdout == "", result.stderr[-3000:]
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: ")
    return line


def test_serve_refuses_a_symlink_inside_the_mirror_in_one_line(tmp_path, mirror):
    served = _copy(mirror, tmp_path / "mirror")
    target = served / "senteval" / "STS" / "STS12-en-test" / "STS.input.MSRpar.txt"
    target.unlink()
    target.symlink_to("/etc/passwd")
    assert _served_line(_serve("--serve", str(served))) == (
        f"error: mirror {served}: senteval/STS/STS12-en-test/STS.input.MSRpar.txt is a symbolic link; --serve serves "
        "plain files only (copy the file or folder in its place)")


def test_serve_refuses_an_incomplete_mirror_in_one_line(tmp_path, mirror):
    served = _copy(mirror, tmp_path / "mirror")
    shutil.rmtree(served / "raw" / "STSBenchmark")
    line = _served_line(_serve("--serve", str(served)))
    assert line.startswith(f"error: mirror {served} has no raw/STSBenchmark/LICENSE.txt, which inputs.sha256 pins")
    shutil.rmtree(served / "wiki1m")
    shutil.copytree(mirror / "raw", served / "raw", dirs_exist_ok=True)
    assert "has no wiki1m/wiki1m_for_simcse.txt nor its sample" in _served_line(_serve("--serve", str(served)))


def test_serves_usage_errors_are_one_line(tmp_path):
    assert _served_line(_serve()) == ("error: the following arguments are required: --serve "
                                      "(python -m pipeline.data.hub_standin --help)")
    assert _served_line(_serve("--serve", str(tmp_path / "nowhere"))).endswith("is no data mirror (no senteval/); "
                                                                                 "give the folder PIPELINE_DATA_MIRROR would name")


def test_no_error_line_prints_a_urls_credentials(capsys):
    """The catch-all of every stage (`one_line_errors`) and the hub endpoint's own check drop a URL's userinfo."""
    import typer

    from pipeline.settings_rules import validate_hub_endpoint
    from stages.common import one_line_errors

    with pytest.raises(PipelineError) as refused:
        validate_hub_endpoint("ftp://user:secret@hub.example")
    assert "secret" not in str(refused.value) and "ftp://hub.example" in str(refused.value)
    with pytest.raises(typer.Exit):
        with one_line_errors():
            raise PipelineError("http://user:secret@127.0.0.1:9/x: unreachable")
    shown = capsys.readouterr().err
    assert shown.strip() == "error: http://127.0.0.1:9/x: unreachable" and "secret" not in shown

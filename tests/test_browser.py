"""`dvc plots show` in a real browser (issue 14): headless Chromium (the Debian `chromium` package)
opens the rendered HTML with the network off, driven over the DevTools protocol; every <img> (the
PNG figures of reports/figures/) must have loaded, every interactive Vega plot must have drawn its
canvas (the page template .dvc/offline_plots.html carries Vega itself; DVC's default page loads it
from a CDN), and a screenshot of the page is kept in .tmp/browser/plots.png (git ignores .tmp/).

The workspace test needs the outputs of `dvc repro`, so the module is marked `browser` and
deselected by the default `python -m pytest` (pyproject.toml); .ci/run runs it after the pipeline:
`python -m pytest -m browser`. The other tests build a one-plot DVC project in a temporary folder:
the canvas check passes with the offline template and fails with DVC's default page.
"""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import yaml

from pipeline.reporting.figures import FIGURES
from pipeline.writeup.report import figure_files
from pipeline.reporting.spec import load_tables

from conftest import REPO_ROOT

pytestmark = pytest.mark.browser

SCREENSHOT_DIR = REPO_ROOT / ".tmp" / "browser"
IMAGES_JS = "JSON.stringify([...document.images].map(i => ({src: i.getAttribute('src'), complete: i.complete, width: i.naturalWidth})))"
# Every Vega plot of a DVC page is a <div id=...> whose <script> calls vegaEmbed('#id', spec);
# vega-embed empties that div and draws a <canvas> into it. Per plot id: the canvas size and how
# many of its pixels differ from its top-left one (the background): axes, marks and labels.
VEGA_EMBED = re.compile(r"vegaEmbed\('#(?P<id>[^']+)'")
VEGA_JS = """JSON.stringify(%s.map(id => {
    const div = document.getElementById(id), canvas = div && div.querySelector('canvas');
    let painted = 0;
    if (canvas && canvas.width && canvas.height) {
      const rgba = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
      for (let i = 4; i < rgba.length; i += 4)
        painted += rgba[i] !== rgba[0] || rgba[i + 1] !== rgba[1] || rgba[i + 2] !== rgba[2] || rgba[i + 3] !== rgba[3];
    }
    return {id, width: canvas ? canvas.width : 0, height: canvas ? canvas.height : 0, painted};
  }))"""
VEGA_WAIT_SECONDS = 60  # vega-embed draws after the load event, asynchronously


class DevTools:
    """A minimal Chrome DevTools protocol client over one page's websocket."""

    def __init__(self, url: str):
        import websocket

        self.socket = websocket.create_connection(url, timeout=60, suppress_origin=True)
        self.next_id = 0
        self.events: list[dict] = []

    def call(self, method: str, **params) -> dict:
        self.next_id += 1
        self.socket.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.socket.recv())
            if message.get("id") == self.next_id:
                assert "error" not in message, f"{method}: {message['error']}"
                return message.get("result", {})
            self.events.append(message)

    def wait_for(self, event: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not any(message.get("method") == event for message in self.events):
            assert time.monotonic() < deadline, f"no {event} within {timeout} s"
            self.events.append(json.loads(self.socket.recv()))

    def evaluate(self, expression: str):
        return self.call("Runtime.evaluate", expression=expression, returnByValue=True)["result"].get("value")


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    assert found, "no chromium on PATH; scripts/setup.sh installs the Debian package `chromium`"
    return found


def start_browser(profile: Path) -> tuple[subprocess.Popen, str]:
    """Headless Chromium with no route to the network: every host name fails to resolve and any
    request would go to a proxy that does not exist. Returns the process and the page's websocket URL."""
    process = subprocess.Popen(
        [chromium(), "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
         "--remote-debugging-port=0", "--remote-allow-origins=*", f"--user-data-dir={profile}",
         "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1", "--proxy-server=127.0.0.1:9", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    port_file, deadline = profile / "DevToolsActivePort", time.monotonic() + 60
    while not (port_file.is_file() and port_file.read_text().strip()):
        assert process.poll() is None, f"chromium exited with {process.returncode}"
        assert time.monotonic() < deadline, "chromium did not open its DevTools port within 60 s"
        time.sleep(0.2)
    port = port_file.read_text().split()[0]
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # localhost, whatever the environment says
    targets = json.loads(opener.open(f"http://127.0.0.1:{port}/json/list", timeout=30).read())
    page = next(target for target in targets if target.get("type") == "page")
    return process, page["webSocketDebuggerUrl"]


def render_plots(output: Path, project: Path = REPO_ROOT, *options: str) -> Path:
    """`dvc plots show` of `project` into `output` (with its configured page template); its index.html."""
    done = subprocess.run(["dvc", "plots", "show", *options, "-o", str(output)], cwd=project, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return output / "index.html"


def open_offline(page: Path, profile: Path) -> tuple[subprocess.Popen, DevTools]:
    """Chromium showing `page` with the network off, once its load event has fired."""
    process, url = start_browser(profile)
    tools = None
    try:
        tools = DevTools(url)
        tools.call("Network.enable")
        tools.call("Network.emulateNetworkConditions", offline=True, latency=0, downloadThroughput=-1, uploadThroughput=-1)
        tools.call("Page.enable")
        tools.call("Page.navigate", url=page.as_uri())
        tools.wait_for("Page.loadEventFired")
        assert tools.evaluate("navigator.onLine") is False  # the page really is offline
    except BaseException:
        close(process, tools)
        raise
    return process, tools


def close(process: subprocess.Popen, tools: DevTools | None) -> None:
    if tools is not None:
        tools.socket.close()
    process.terminate()
    process.wait(timeout=30)


def vega_plots(tools: DevTools, page: Path, wait: float = VEGA_WAIT_SECONDS) -> list[dict]:
    """The Vega plots of `page` (each vegaEmbed call in its HTML, as VEGA_JS sees it in the browser),
    once every one has painted its canvas or `wait` s have passed."""
    ids = [match["id"] for match in VEGA_EMBED.finditer(page.read_text(encoding="utf-8"))]
    deadline = time.monotonic() + wait
    while True:
        plots = json.loads(tools.evaluate(VEGA_JS % json.dumps(ids)))
        if all(plot["painted"] for plot in plots) or time.monotonic() > deadline:
            return plots
        time.sleep(0.5)


def undrawn(plots: list[dict]) -> list[str]:
    return [plot["id"] for plot in plots if not (plot["width"] > 0 and plot["height"] > 0 and plot["painted"] > 0)]


def workspace_vega_ids() -> list[str]:
    """The page ids of the Vega plots dvc.yaml defines at the top level (dvc-render's own naming)."""
    from dvc_render.base import Renderer

    plots = yaml.safe_load((REPO_ROOT / "dvc.yaml").read_text())["plots"]
    return [Renderer.remove_special_chars(next(iter(entry))) for entry in plots if isinstance(entry, dict)]


def screenshot(tools: DevTools, path: Path) -> np.ndarray:
    """The whole page as PNG at `path`; returned as an RGB array."""
    from PIL import Image

    height = tools.evaluate("document.documentElement.scrollHeight")
    tools.call("Emulation.setDeviceMetricsOverride", width=1280, height=min(int(height), 16000), deviceScaleFactor=1, mobile=False)
    data = tools.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)["data"]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(base64.b64decode(data))
    return np.asarray(Image.open(path).convert("RGB"))


def test_dvc_plots_page_shows_every_figure_offline(tmp_path):
    figures = [*FIGURES, *figure_files(load_tables(REPO_ROOT / "tables.yaml"))]
    missing = [name for name in figures if not (REPO_ROOT / "reports" / "figures" / name).is_file()]
    assert not missing, f"reports/figures/ lacks {', '.join(missing)}; run `dvc repro` before the browser test"
    page = render_plots(tmp_path / "plots")
    process, tools = open_offline(page, tmp_path / "profile")
    try:
        images = json.loads(tools.evaluate(IMAGES_JS))
        plots = vega_plots(tools, page)
        pixels = screenshot(tools, SCREENSHOT_DIR / "plots.png")
    finally:
        close(process, tools)

    shown = {Path(image["src"]).name: image for image in images}
    print(f"{len(images)} images on the page; screenshot {SCREENSHOT_DIR / 'plots.png'} ({pixels.shape[1]}x{pixels.shape[0]})")
    for name in figures:
        matches = [image for src, image in shown.items() if name.removesuffix(".png") in src]
        assert matches, f"{name} is not an <img> of the dvc plots page; images: {sorted(shown)}"
    broken = [image["src"] for image in images if not (image["complete"] and image["width"] > 0)]
    assert images and not broken, f"images that did not load: {broken}"
    assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > 16, "the screenshot is (nearly) one colour: a blank page"
    shown_plots = {plot["id"] for plot in plots}
    absent = [plot_id for plot_id in workspace_vega_ids() if plot_id not in shown_plots]
    assert not absent, f"dvc.yaml's Vega plots missing from the page: {absent}; on it: {sorted(shown_plots)}"
    assert not undrawn(plots), f"Vega plots that drew no canvas offline: {undrawn(plots)}"


def one_plot_project(folder: Path) -> Path:
    """A DVC project with one Vega plot (three points of a CSV) and no page template of its own."""
    folder.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=folder, check=True)
    subprocess.run(["dvc", "init", "-q"], cwd=folder, check=True)
    subprocess.run(["dvc", "config", "core.analytics", "false"], cwd=folder, check=True)
    (folder / "loss.csv").write_text("step,loss\n1,1.0\n2,0.6\n3,0.4\n")
    (folder / "dvc.yaml").write_text(yaml.safe_dump({"plots": [{"loss.csv": {"x": "step", "y": "loss"}}]}))
    return folder


def drawn_offline(page: Path, profile: Path) -> list[dict]:
    process, tools = open_offline(page, profile)
    try:
        return vega_plots(tools, page, wait=10)
    finally:
        close(process, tools)


def test_the_offline_template_draws_a_vega_plot_without_network(tmp_path):
    project = one_plot_project(tmp_path / "project")
    page = render_plots(tmp_path / "plots", project, "--html-template", str(REPO_ROOT / ".dvc" / "offline_plots.html"))
    plots = drawn_offline(page, tmp_path / "profile")
    assert [plot["id"] for plot in plots] == ["loss_csv"] and not undrawn(plots), plots


def test_dvc_default_page_draws_nothing_offline_so_the_check_fails(tmp_path):
    """The check can fail: DVC's own page loads Vega from a CDN, which offline never comes."""
    project = one_plot_project(tmp_path / "project")
    page = render_plots(tmp_path / "plots", project)
    assert "cdn.jsdelivr.net" in page.read_text()
    plots = drawn_offline(page, tmp_path / "profile")
    assert [plot["id"] for plot in plots] == ["loss_csv"] and undrawn(plots) == ["loss_csv"]


def test_a_page_with_a_missing_image_fails_the_check(tmp_path):
    """The check can fail: an <img> whose file is absent has naturalWidth 0."""
    page = tmp_path / "page.html"
    page.write_text('<html><body><img src="absent.png"><p>text</p></body></html>')
    process, url = start_browser(tmp_path / "profile")
    try:
        tools = DevTools(url)
        tools.call("Page.enable")
        tools.call("Page.navigate", url=page.as_uri())
        tools.wait_for("Page.loadEventFired")
        images = json.loads(tools.evaluate(IMAGES_JS))
        tools.socket.close()
    finally:
        process.terminate()
        process.wait(timeout=30)
    assert [image["width"] for image in images] == [0]

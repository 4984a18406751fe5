"""`dvc plots show` in a real browser (issue 14): headless Chromium (the Debian `chromium` package)
opens the rendered HTML with the network off, driven over the DevTools protocol; every <img> (the
PNG figures of reports/figures/) must have loaded, and a screenshot of the page is kept in
.tmp/browser/plots.png (git ignores .tmp/).

Needs the outputs of `dvc repro`, so it is marked `browser` and deselected by the default
`python -m pytest` (pyproject.toml); .ci/run runs it after the pipeline:
`python -m pytest -m browser`.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from pipeline.reporting.figures import FIGURES

from conftest import REPO_ROOT

pytestmark = pytest.mark.browser

SCREENSHOT_DIR = REPO_ROOT / ".tmp" / "browser"
IMAGES_JS = "JSON.stringify([...document.images].map(i => ({src: i.getAttribute('src'), complete: i.complete, width: i.naturalWidth})))"


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


def render_plots(output: Path) -> Path:
    """`dvc plots show` of the workspace into `output`; its index.html."""
    missing = [name for name in FIGURES if not (REPO_ROOT / "reports" / "figures" / name).is_file()]
    assert not missing, f"reports/figures/ lacks {', '.join(missing)}; run `dvc repro` before the browser test"
    done = subprocess.run(["dvc", "plots", "show", "-o", str(output)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return output / "index.html"


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
    page = render_plots(tmp_path / "plots")
    process, url = start_browser(tmp_path / "profile")
    try:
        tools = DevTools(url)
        tools.call("Network.enable")
        tools.call("Network.emulateNetworkConditions", offline=True, latency=0, downloadThroughput=-1, uploadThroughput=-1)
        tools.call("Page.enable")
        tools.call("Page.navigate", url=page.as_uri())
        tools.wait_for("Page.loadEventFired")
        assert tools.evaluate("navigator.onLine") is False  # the page really is offline
        images = json.loads(tools.evaluate(IMAGES_JS))
        pixels = screenshot(tools, SCREENSHOT_DIR / "plots.png")
        tools.socket.close()
    finally:
        process.terminate()
        process.wait(timeout=30)

    shown = {Path(image["src"]).name: image for image in images}
    print(f"{len(images)} images on the page; screenshot {SCREENSHOT_DIR / 'plots.png'} ({pixels.shape[1]}x{pixels.shape[0]})")
    for name in FIGURES:
        matches = [image for src, image in shown.items() if name.removesuffix(".png") in src]
        assert matches, f"{name} is not an <img> of the dvc plots page; images: {sorted(shown)}"
    broken = [image["src"] for image in images if not (image["complete"] and image["width"] > 0)]
    assert images and not broken, f"images that did not load: {broken}"
    assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > 16, "the screenshot is (nearly) one colour: a blank page"


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

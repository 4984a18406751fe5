"""The page template of `dvc plots show` (.dvc/offline_plots.html, written by
scripts/plots_template.py): Vega, Vega-Lite and Vega-Embed inlined at the versions DVC's default page
loads from the CDN, and configured so plain `dvc plots show` uses it. tests/test_browser.py checks
that the page draws offline."""

import configparser
import importlib.util
import re

import pytest

from conftest import REPO_ROOT

TEMPLATE = REPO_ROOT / ".dvc" / "offline_plots.html"


def load_script():
    spec = importlib.util.spec_from_file_location("plots_template", REPO_ROOT / "scripts" / "plots_template.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_dvc_config_points_plain_plots_show_at_the_template():
    config = configparser.ConfigParser()
    config.read(REPO_ROOT / ".dvc" / "config")
    # DVC resolves a relative html_template against the .dvc folder
    assert REPO_ROOT / ".dvc" / config["plots"]["html_template"] == TEMPLATE


def test_the_template_carries_the_scripts_dvc_would_fetch():
    text = TEMPLATE.read_text(encoding="utf-8")
    assert "{plot_divs}" in text and "{scripts}" not in text  # no placeholder: DVC adds no CDN <script src>
    assert not re.search(r"<script[^>]*\bsrc=", text)
    for package, version in load_script().dvc_default_versions().items():
        assert f"<!-- {package}@{version} (" in text, f"{package}@{version}: rerun scripts/plots_template.py"
    assert text.count("<script>") == 3 and "sourceMappingURL" not in text
    assert TEMPLATE.stat().st_size < 2_000_000


def test_a_build_is_escaped_and_a_placeholder_in_it_is_refused():
    script = load_script()
    element = script.inline_script("vega", "5.0.0", 'x = "</script>";\n//# sourceMappingURL=vega.min.js.map', "MIT -- ok")
    assert 'x = "<\\/script>";' in element and "sourceMappingURL" not in element and "MIT - - ok" in element
    with pytest.raises(SystemExit, match=r"vega@5.0.0 contains \{plot_divs\}"):
        script.inline_script("vega", "5.0.0", 'document.write("{plot_divs}")', "MIT")

"""Write the HTML template of `dvc plots show` that carries Vega, Vega-Lite and Vega-Embed itself.

DVC's default page loads the three scripts from cdn.jsdelivr.net, so its interactive Vega plots stay
blank without network. This writes a page with the same builds inlined (the `build/*.min.js` of each
npm package, at the versions the installed dvc-render's default page names), their licences in a
comment, and no `{scripts}` placeholder, so DVC adds no CDN tags. `.dvc/config` points
`plots.html_template` at the committed output, so plain `dvc plots show` uses it. Rerun after a DVC
upgrade that changes those versions (tests/test_plots_template.py notices); needs `npm` and the
npm registry:

    python scripts/plots_template.py [--output .dvc/offline_plots.html]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

DEFAULT_OUTPUT = Path(".dvc") / "offline_plots.html"
# package → its browser build inside the npm tarball (what jsdelivr serves for `npm/<package>@<version>`)
BUILDS = {"vega": "build/vega.min.js", "vega-lite": "build/vega-lite.min.js", "vega-embed": "build/vega-embed.min.js"}
CDN_SCRIPT = re.compile(r'src="https://cdn\.jsdelivr\.net/npm/(?P<package>[\w-]+)@(?P<version>[\w.-]+)"')
# dvc-render fills these by plain text replacement over the whole page, scripts included
PLACEHOLDERS = ("{plot_divs}", "{refresh_tag}", "{scripts}")
SOURCE_MAP = re.compile(r"^//# sourceMappingURL=.*$", re.MULTILINE)

PAGE = """<!DOCTYPE html>
<html>
<head>
    {{refresh_tag}}
    <meta charset="utf-8">
    <title>DVC Plot</title>
    <!-- Written by scripts/plots_template.py: {packages}, inlined so the page needs no network. -->
{scripts}
    <style>
        table {{
            border-spacing: 15px;
        }}
    </style>
</head>
<body>
    {{plot_divs}}
</body>
</html>
"""


def dvc_default_versions() -> dict[str, str]:
    """package → version of the scripts the installed dvc-render's default page loads from the CDN."""
    from dvc_render.vega import VegaRenderer

    versions = {match["package"]: match["version"] for match in CDN_SCRIPT.finditer(VegaRenderer.SCRIPTS)}
    if set(versions) != set(BUILDS):
        raise SystemExit(f"dvc-render's default page loads {sorted(versions)}, not {sorted(BUILDS)}: update BUILDS")
    return versions


def inline_script(package: str, version: str, code: str, licence: str) -> str:
    """One <script> element: the licence as a comment, the build without its source-map line (the map
    is not shipped) and with `</script` escaped so the HTML parser cannot end the element early."""
    for placeholder in PLACEHOLDERS:
        if placeholder in code:
            raise SystemExit(f"{package}@{version} contains {placeholder}, which dvc-render would replace")
    code = SOURCE_MAP.sub("", code).replace("</script", "<\\/script")
    licence = licence.strip().replace("--", "- -")  # `--` may not appear inside an HTML comment
    return f"    <!-- {package}@{version} ({BUILDS[package]})\n{licence}\n    -->\n    <script>\n{code}\n    </script>"


def page(scripts: dict[str, tuple[str, str, str]]) -> str:
    """The template from package → (version, minified build, licence text), in BUILDS order."""
    packages = ", ".join(f"{package}@{scripts[package][0]}" for package in BUILDS)
    body = "\n".join(inline_script(package, *scripts[package]) for package in BUILDS)
    return PAGE.format(packages=packages, scripts=body)


def npm_build(package: str, version: str, folder: Path) -> tuple[str, str, str]:
    """(version, build, licence) of package@version from the npm registry (`npm pack`)."""
    done = subprocess.run(["npm", "pack", "--silent", f"{package}@{version}"], cwd=folder, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"npm pack {package}@{version} failed: {done.stderr.strip()[-300:]}")
    with tarfile.open(folder / done.stdout.strip().splitlines()[-1]) as archive:
        def read(name: str) -> str:
            return archive.extractfile(f"package/{name}").read().decode("utf-8")

        return version, read(BUILDS[package]), read("LICENSE")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    output = parser.parse_args(argv).output
    with tempfile.TemporaryDirectory() as folder:
        scripts = {package: npm_build(package, version, Path(folder)) for package, version in dvc_default_versions().items()}
    text = page(scripts)
    output.write_text(text, encoding="utf-8")
    print(f"{output}: {len(text.encode()) / 1e6:.2f} MB, {', '.join(f'{p}@{v[0]}' for p, v in scripts.items())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env bash
# Install everything the pipeline needs on a fresh Debian machine: Apertium (offline round-trip
# translation for the tiny preset), Chromium (the browser test of `dvc plots show`) and a virtual
# environment .venv with the project and its tests.
set -euo pipefail
cd "$(dirname "$0")/.."

# util-linux (essential, so normally present) has setpriv: Apertium requests die with the rtt stage
apertium_packages="apertium apertium-eng-spa apertium-eng-cat util-linux"
# chromium: tests/test_browser.py renders `dvc plots show` headless, network off
debian_packages="$apertium_packages chromium"
if ! dpkg -s $debian_packages >/dev/null 2>&1; then
  sudo_cmd=""; [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq $debian_packages >/dev/null
fi

[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# torch first, pinned to the CPU build these machines carry; the rest resolve around it
.venv/bin/python -m pip install -q "torch==2.13.0"
.venv/bin/python -m pip install -q -e ".[test]"
echo "setup done: activate with '. .venv/bin/activate'"

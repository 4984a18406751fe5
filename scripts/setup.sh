#!/usr/bin/env bash
# Install everything the pipeline needs on a fresh Debian machine: Apertium (offline round-trip
# translation for the tiny preset), Chromium (the browser test of `dvc plots show`) and a virtual
# environment .venv with the project and its tests, at the versions of requirements/<build>.txt.
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
# The locked environment (docs/reproducing.md, "The locked environment"): every package at the version and hash
# of the lock, so `pip freeze` equals it and a clone installs what the committed results were made
# with, whatever the registry serves today. TORCH_BUILD=cuda takes the CUDA build of the same torch.
lock=requirements/${TORCH_BUILD:-cpu}.txt
[ -f "$lock" ] || { echo "error: TORCH_BUILD=${TORCH_BUILD:-cpu}: no $lock; use cpu or cuda" >&2; exit 2; }
.venv/bin/python -m pip install -q "pip==26.3"
.venv/bin/python -m pip install -q --require-hashes -r "$lock"
# the project itself, built with the locked setuptools and nothing more
.venv/bin/python -m pip install -q --no-deps --no-build-isolation -e .
echo "setup done ($lock): activate with '. .venv/bin/activate'"

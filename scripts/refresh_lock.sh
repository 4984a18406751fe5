#!/usr/bin/env bash
# Refresh the locks from pyproject.toml: requirements/cpu.txt and requirements/cuda.txt, every package
# at the newest version the registries serve today within pyproject.toml's bounds, with its hashes.
# After a refresh, regenerate the committed results from a fresh clone in the same commit (docs/reproducing.md).
set -euo pipefail
cd "$(dirname "$0")/.."

tool=.tmp/pip-tools  # the lock tool, pinned, in its own environment
[ -x $tool/bin/pip-compile ] || { python3 -m venv $tool && $tool/bin/pip install -q "pip-tools==7.6.2"; }
compile=($tool/bin/pip-compile --generate-hashes --allow-unsafe --extra test --strip-extras
         --no-emit-index-url --no-emit-find-links pyproject.toml)

# CPU: torch's +cpu build, which these machines find through pip's find-links (elsewhere add
# --extra-index-url https://download.pytorch.org/whl/cpu to both this command and setup.sh's install)
"${compile[@]}" --upgrade -o requirements/cpu.txt
torch=$(sed -n 's/^torch==\([^ +]*\)+cpu.*/\1/p' requirements/cpu.txt)
[ -n "$torch" ] || { echo "error: requirements/cpu.txt did not lock a +cpu torch; is its wheel on the index?" >&2; exit 2; }

# CUDA: the same versions, with the same torch release as PyPI builds it (CUDA, with its nvidia-*
# libraries); `===` matches 2.x.y exactly, so never the +cpu wheel
echo "torch===$torch  # the CUDA build of requirements/cpu.txt's torch (scripts/refresh_lock.sh)" > requirements/cuda-torch.txt
# start from the CPU pins and hashes, less torch's (pip-compile would keep the +cpu wheel's hash)
awk '/^torch==/ {skip = 1; next} skip && /^[^ ]/ {skip = 0} !skip' requirements/cpu.txt > requirements/cuda.txt
# against PyPI alone (pip's configuration ignored): a find-links folder holding the +cpu wheel of the
# same release would lend torch==X its hash
env -u PIP_FIND_LINKS PIP_CONFIG_FILE=/dev/null "${compile[@]}" -c requirements/cuda-torch.txt -o requirements/cuda.txt
echo "locked torch $torch: requirements/cpu.txt and requirements/cuda.txt"

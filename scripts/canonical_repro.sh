#!/usr/bin/env bash
# `dvc repro` by the canonical download path, offline: serve a data mirror at the canonical places
# (python -m pipeline.data.hub_standin --serve), point the pipeline at it (HF_ENDPOINT, PIPELINE_STSB_URL)
# with PIPELINE_DATA_MIRROR unset, run, stop the server. CI runs it; so can anyone holding a mirror.
#   bash scripts/canonical_repro.sh <mirror folder> [dvc repro arguments...]
set -euo pipefail
cd "$(dirname "$0")/.."
mirror=${1:?usage: bash scripts/canonical_repro.sh <mirror folder> [dvc repro arguments...]}
shift
mkdir -p .tmp
python -m pipeline.data.hub_standin --serve "$mirror" > .tmp/standin.txt 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
for _ in $(seq 100); do grep -q '^export ' .tmp/standin.txt && break; kill -0 $server 2>/dev/null || break; sleep 0.1; done
grep -q '^export ' .tmp/standin.txt || { cat .tmp/standin.txt >&2; exit 2; }
head -1 .tmp/standin.txt
eval "$(grep '^export ' .tmp/standin.txt)"
env -u PIPELINE_DATA_MIRROR dvc repro "$@"

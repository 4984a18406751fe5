#!/usr/bin/env bash
# The paper preset rehearsed offline on a CPU (issue 32; conf/scale/rehearsal.yaml lists every change):
#   scripts/rehearse.sh bert      # or roberta
# Runs `dvc exp run -S scale=rehearsal -S backbone=<backbone>` in this workspace (params.yaml and the
# outputs become the rehearsal's, as with any `dvc exp run`: use a clone), then prints each stage's
# wall time, CPU seconds and peak memory, and the whole run's wall time. Its numbers mean nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
backbone=${1:-}
case "$backbone" in
  bert|roberta) ;;
  *) echo "error: backbone '$backbone': usage scripts/rehearse.sh bert|roberta" >&2; exit 2 ;;
esac
if [ -z "${PIPELINE_DATA_MIRROR:-}" ]; then
  echo "error: the rehearsal runs offline: set PIPELINE_DATA_MIRROR to a data mirror folder (docs/reproducing.md, \"Where the data comes from\")" >&2
  exit 2
fi
mkdir -p .tmp
log=.tmp/rehearsal-$backbone.log
started=$SECONDS
dvc exp run -S scale=rehearsal -S "backbone=$backbone" 2>&1 | tee "$log"
echo "rehearsal $backbone: every stage in $((SECONDS - started)) s; per stage:"
grep -a -E '^\[[a-z-]+\] (stage took|.*peak memory)' "$log"

#!/usr/bin/env bash
# The CUDA path proven and the papers' cost measured, in one prepared run (issue 41; tools/gpu_check/
# says what it writes). At most 8 minutes on one GPU; the CPU mode (--device cpu) takes a few minutes on 2 cores.
#   here:            bash ../shared/gpu/prepare.sh                 # builds .gpu/ (wheels, MiniLM, the data mirror)
#   on the GPU:      . .gpu/setup.sh && bash scripts/gpu_check.sh --output $OUT/bench-gpu.json
#   CPU mode:        bash scripts/gpu_check.sh --device cpu --output /tmp/gpu-check.json
# then commit the JSON as reports/bench-gpu.json. Exit 0: every check that ran passed; 1: a check failed; 2: bad input.
set -euo pipefail
cd "$(dirname "$0")/.."
# the project's venv where there is one (here), else the machine's python3 (the GPU machine); PYTHON overrides
py=${PYTHON:-python3}
if [ -z "${PYTHON:-}" ] && [ -x .venv/bin/python ]; then py=.venv/bin/python; fi
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false TQDM_DISABLE=1 PYTHONUNBUFFERED=1
exec "$py" -m tools.gpu_check "$@"

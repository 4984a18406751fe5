#!/usr/bin/env bash
# Issue 29's queue acceptance: from a fresh clone that ran the tiny `dvc repro` once (the baseline the
# experiments share through DVC's cache), three tiny experiments (train.cael = 1, 2, 3: joint and
# everything downstream of it retrained) queued and run by `dvc queue start -j 2` on two GPUs — two
# stand-ins by default (PIPELINE_FAKE_GPUS); on a machine with two real GPUs run it with
# PIPELINE_FAKE_GPUS= (empty) — then the same three run one by one after the run cache is emptied (so
# they compute, not restore the queue's results). It checks that all three queued ones finished, that
# their metrics equal the one-by-one runs', and that each recorded its lease
# (reports/provenance/joint.json "gpu_lease").
#
#   scripts/queue_acceptance.sh [work folder] [clone]
#
# Default work folder: ../queue-acceptance beside this checkout, where it clones this checkout and
# runs `dvc repro` first; or give a clone of it that already ran `dvc repro` (e.g. the bench's
# `--clone-dir`). The clone reads the data mirror PIPELINE_DATA_MIRROR names, as any `dvc repro` does.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mkdir -p "${1:-$repo/../queue-acceptance}" && cd "${1:-$repo/../queue-acceptance}" && pwd)
venv=${VENV:-$repo/.venv}
export PIPELINE_FAKE_GPUS=${PIPELINE_FAKE_GPUS-fake0,fake1}
export PIPELINE_LEASE_DIR=$work/leases
. "$venv/bin/activate"
if [ -n "${2:-}" ]; then
  cd "$2"
else
  rm -rf "$work/clone"
  git clone -q "$repo" "$work/clone"
  cd "$work/clone"
  dvc repro >/dev/null
fi
overrides=("train.cael=1" "train.cael=2" "train.cael=3")  # the tiny preset has cael 0: each one retrains

started=$(date +%s)
for index in 0 1 2; do
  dvc exp run --queue -n "queued-$index" -S "${overrides[$index]}"
done
dvc queue start -j 2
sleep 5
# (not `dvc queue status | grep -q`: grep's early exit fails the pipe under pipefail and ends the wait)
while grep -qE 'Queued|Running' <<< "$(dvc queue status)"; do sleep 20; done
echo "queue of 3 with -j 2: $(( $(date +%s) - started )) s wall"
dvc queue status

rm -rf .dvc/cache/runs  # DVC's run cache: now it holds the queue's runs, which the reference must not restore
started=$(date +%s)
for index in 0 1 2; do  # one by one, what the override changes computed again: the reference results
  dvc exp run -n "one-by-one-$index" -S "${overrides[$index]}" >/dev/null
done
echo "the same 3 one by one: $(( $(date +%s) - started )) s wall"

dvc exp show -A --json > "$work/experiments.json"  # -A: every commit's experiments, whatever HEAD is now
python - "$work/experiments.json" <<'PY'
import json, subprocess, sys

shown = json.load(open(sys.argv[1]))
runs = {run["name"]: run for commit in shown for exp in commit["experiments"] or [] for run in exp["revs"]}
failed = []
for index in range(3):
    queued, alone = runs.get(f"queued-{index}"), runs.get(f"one-by-one-{index}")
    if queued is None or (queued["data"].get("executor") or {}).get("state") not in (None, "success"):
        failed.append(f"queued-{index} did not finish")
        continue
    metrics = {name: value.get("data") for name, value in queued["data"]["metrics"].items()}
    reference = {name: value.get("data") for name, value in alone["data"]["metrics"].items()}
    if metrics != reference:
        failed.append(f"queued-{index}: metrics differ from one-by-one-{index}")
    provenance = subprocess.run(["git", "show", f"{queued['rev']}:reports/provenance/joint.json"],
                                capture_output=True, text=True, check=True).stdout
    lease = json.loads(provenance).get("gpu_lease")
    print(f"queued-{index}: joint leased {lease}")
    if not lease:
        failed.append(f"queued-{index}: no lease recorded")
print("\n".join(failed) or "all three finished, equal the one-by-one runs, and recorded their lease")
sys.exit(1 if failed else 0)
PY

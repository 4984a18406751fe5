"""The CUDA path proven and the papers' cost measured, in one prepared run (issue 41).

Writes one JSON (committed as reports/bench-gpu.json): the machine (pipeline/execution/environment.py's records);
`checks`, whether the CUDA path computes what the CPU path does (each: name, passed, numbers,
tolerance; a check that needs CUDA is "skipped: no CUDA" on a CPU, never passed); `throughput` at the
papers' shapes with random weights of the real architectures (the rehearsal's stand-in builder):
steps/s, FLOPs per step (torch.utils.flop_counter), achieved TFLOP/s and its share of the chip's bf16
peak, peak memory, and a torch.profiler summary of the target stages (kernel launches, host syncs,
copies per step, GPU busy fraction); `targets` (H100: pretrain 64x32 >= 70 steps/s, TNCSE 64x64 >= 35,
the evaluator >= 30,000 sentences/s); `cost`, the GPU hours of every table at paper scale from the
measured seconds (tools/gpu_hours.py, the computation docs/tables.md describes).

    bash scripts/gpu_check.sh --output $OUT/bench-gpu.json          # on the GPU machine (`. .gpu/setup.sh` first)
    bash scripts/gpu_check.sh --device cpu --output /tmp/gpu-check.json   # the CPU mode: tiny shapes, seconds (tests)
    python -m tools.gpu_check --cost-table reports/bench-gpu.json   # the GPU hours per table, as docs/tables.md shows them

It reads only the project and the data mirror (PIPELINE_DATA_MIRROR, else the bundle's .gpu/data),
and imports only what ../shared/gpu/prepare.sh's bundle brings (no dvc, no
Hydra, no mteb). The JSON is rewritten (atomically) after each part, so a run stopped by its time
limit keeps what it measured; `--budget-s` skips the throughput items that would start after it, and
`--reuse EARLIER.json` takes the items an earlier run on the same GPU model measured, so a second run
spends its minutes on the checks and the items still missing.
Bad arguments: one line, exit 2.

The parts: `modes` (the shapes of each mode, the machine record, the inputs), `checks` (the CUDA path
against the CPU path), `launcher` (the launched rank and the lease, in processes of their own),
`throughput` (the timed items), `cost_table` (the papers' GPU hours), `device_run` (the run and its JSON)
and `__main__` (the command line).
"""

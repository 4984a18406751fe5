"""The GPU check's command line: `python -m tools.gpu_check` (scripts/gpu_check.sh runs it; the package's
docstring says what it writes)."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

import tools.gpu_check
from pipeline import paths
from pipeline.errors import PipelineError
from tools.gpu_check.cost_table import cost_markdown
from tools.gpu_check.device_run import run, summary_line
from tools.gpu_check.launcher import role_launcher, role_rank


def parse_arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tools.gpu_check", description=tools.gpu_check.__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="cuda (the device run) or cpu (the CPU mode)")
    parser.add_argument("--output", type=Path, default=paths.BENCH.with_name("bench-gpu.json"), help="the JSON to write")
    parser.add_argument("--budget-s", type=float, default=360.0,
                        help="no throughput item starts after this many seconds (one item may take 1-2 minutes more; the run is to fit 8)")
    parser.add_argument("--precision", default="bf16", choices=("bf16", "preset"),
                        help="the training steps' precision: bf16 (the documented fast choice) or each stage's paper preset")
    parser.add_argument("--reuse", type=Path, default=None, metavar="JSON",
                        help="take the throughput items an earlier report (same GPU model) measured; measure only the rest")
    parser.add_argument("--cost-table", type=Path, default=None, metavar="JSON",
                        help="print the GPU hours per table of a written report as docs/tables.md's markdown, and stop")
    parser.add_argument("--role", default="check", choices=("check", "launcher", "rank"), help=argparse.SUPPRESS)
    for internal in ("--report", "--backbone", "--sentences", "--leased"):
        parser.add_argument(internal, default="", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    arguments = parse_arguments(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        if arguments.cost_table is not None:
            if not arguments.cost_table.is_file():
                raise PipelineError(f"--cost-table {arguments.cost_table}: no such file; run the GPU check first")
            print(cost_markdown(json.loads(arguments.cost_table.read_text(encoding="utf-8"))))
        elif arguments.role == "launcher":
            role_launcher(arguments)
        elif arguments.role == "rank":
            role_rank(arguments)
        else:
            results = run(arguments.device, arguments.output, arguments.budget_s, arguments.precision, arguments.reuse)
            print(summary_line(results, arguments.output))
            return 1 if any(item["passed"] is False for item in results["checks"]) else 0
    except PipelineError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Did this run reproduce the committed results? For CI, after `dvc repro` on a fresh clone.

Prints one of three verdicts (tools/reproduction.py; the rule: docs/reproducing.md, "Did it
reproduce?") and exits 0 on the first two:
- identical: every output of dvc.lock has the committed hash (required where the machine facts of the
  environment records — CPU, microarchitecture, vector ISA, caches, logical CPUs, GPU, threads, world size —
  are the committed run's);
- equivalent: the inputs (code, data, params, the requirements lock) are the same, the machine differs, every
  claim's estimate (Δ̂, both interval ends, τ) moved by at most --fraction of that claim's own half-width h (a
  verdict word that flipped inside that is named), every score by at most --fraction of its 95% half-width,
  every number without an interval by at most tools.result_numbers.RELATIVE_TOLERANCE of its size (the
  largest movements are printed with where they occur);
- not reproduced: exit 1, naming the first input, output or metric that differs — or the first file in the
  workspace that is not what dvc.lock (outputs, code, params: hashed here) or git's HEAD records.
Bad arguments (a missing --root) or a missing dvc.lock: one line, exit 2.

    python scripts/check_reproduction.py [--ref HEAD] [--fraction 0.1]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pipeline.errors import PipelineError
from tools.reproduction import DEFAULT_FRACTION, check_reproduction


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ref", default="HEAD", help="the git revision holding the committed results")
    parser.add_argument("--fraction", type=float, default=DEFAULT_FRACTION,
                        help="the share of a score's 95%% half-width it may move on another machine")
    parser.add_argument("--root", type=Path, default=Path("."), help="the repository root")
    arguments = parser.parse_args()
    try:
        check = check_reproduction(arguments.root, arguments.ref, arguments.fraction)
    except PipelineError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for line in check.lines:
        print(line)
    for name, unit in (("score", "of its 95% half-width"), ("estimate", "h, the claim's own half-width")):
        if name in check.largest:
            print(f"largest {name} movement: {check.largest[name].text(unit)}; allowed {arguments.fraction}")
    for problem in check.problems:
        print(f"not reproduced: {problem}")
    print(f"verdict: {check.verdict}" + ("" if check.passed else f" ({len(check.problems)} differences from {arguments.ref})"))
    return 0 if check.passed else 1


if __name__ == "__main__":
    sys.exit(main())

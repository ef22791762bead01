"""Time every hostile input case (benchmarks/hostile_cases.py) as a real subprocess of the CLI.

    python benchmarks/hostile_inputs.py [--timeout SECONDS]

Prints each case's exit code (and whether it is the expected one) and wall time, then the number of
cases tried and the slowest. Exit 0 when every case gives its expected exit code within the timeout and
nothing it must not print appears.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from hostile_cases import build_cases


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds before a case counts as a hang")
    args = parser.parse_args()
    failures = 0
    times: list[tuple[float, str]] = []
    with tempfile.TemporaryDirectory() as folder:
        cases = build_cases(Path(folder))
        for case in cases:
            command = [sys.executable, "-m", "automodel_dist", *case.argv]
            start = time.perf_counter()
            try:
                done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout,
                                      env={**os.environ, **case.env})
                code, output = done.returncode, done.stdout + done.stderr
            except subprocess.TimeoutExpired:
                code, output = None, ""
            elapsed = time.perf_counter() - start
            times.append((elapsed, case.name))
            ok = (code == case.exit_code and case.where in output and "Traceback" not in output
                  and not (case.must_not_print and case.must_not_print in output))
            failures += not ok
            shown = "hang" if code is None else str(code)
            print(f"{'ok  ' if ok else 'FAIL'} exit {shown:>4} (want {case.exit_code})  {elapsed:6.2f} s  {case.name}")
    slowest = max(times)
    print(f"{len(times)} cases tried, {failures} failed; slowest {slowest[0]:.2f} s ({slowest[1]})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

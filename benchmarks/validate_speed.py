"""Validate speed: one `automodel-dist validate` process over every recipe in a folder, libyaml vs ruamel alone.

    .venv/bin/python benchmarks/validate_speed.py FOLDER [--repeat 3]

FOLDER is searched for *.yaml / *.yml recipes (e.g. a checkout of AutoModel's examples/). Prints:

- how many of them libyaml reads (yamlio's fast path); ruamel reads the rest (anchors, tags, block scalars,
  tabs, errors);
- the CPU time of loading them all in this process (`load_document`), ruamel alone and with libyaml;
- the CPU time, user + system, of one whole `automodel-dist validate --format json FILE...` process over all of
  them, from interpreter start to the last report, both ways (the best of --repeat runs, after a warm-up that
  writes the bytecode caches);
- whether the two processes give byte-identical output: every report (rule, message, hint, line, col), every
  input error and the exit code.

Exits 1 when the outputs differ or the libyaml process is over BUDGET_S.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from unittest import mock

from automodel_dist import yamlio
from automodel_dist.errors import AutomodelDistError

BUDGET_S = 3.0
# The CLI, optionally with yamlio's libyaml path switched off (every document then goes to ruamel).
LAUNCHER = """
import sys
from unittest import mock
from automodel_dist import yamlio
from automodel_dist.cli import main
if sys.argv.pop(1) == "ruamel":
    mock.patch.object(yamlio, "parse_with_libyaml", lambda text: None).start()
sys.exit(main(sys.argv[1:]))
"""


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_validate(paths: list[Path], reader: str) -> tuple[float, subprocess.CompletedProcess[str]]:
    """CPU seconds and the result of one validate process over `paths` with `reader` ("libyaml" or "ruamel")."""
    env = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}
    start = _children_cpu_s()
    proc = subprocess.run([sys.executable, "-c", LAUNCHER, reader, "validate", "--format", "json",
                           *map(str, paths)], capture_output=True, text=True, check=False, env=env)
    return _children_cpu_s() - start, proc


def load_all(paths: list[Path]) -> float:
    """CPU seconds to load every file (input errors included: they are part of the work)."""
    start = time.process_time()
    for path in paths:
        with contextlib.suppress(AutomodelDistError):
            yamlio.load_document(path, what="recipe")
    return time.process_time() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="folder searched recursively for *.yaml recipes")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each process; the best is reported")
    args = parser.parse_args()
    if not args.folder.is_dir():
        parser.error(f"{args.folder} is not a folder")
    paths = sorted(p for p in args.folder.rglob("*.y*ml") if p.suffix in (".yaml", ".yml"))
    if not paths:
        parser.error(f"no *.yaml files under {args.folder}")
    fast = sum(yamlio.parse_with_libyaml(p.read_text(encoding="utf-8", errors="replace")) is not None
               for p in paths)
    print(f"{len(paths)} recipes: {fast} read by libyaml, {len(paths) - fast} by ruamel")
    with mock.patch.object(yamlio, "parse_with_libyaml", lambda text: None):
        slow_load = min(load_all(paths) for _ in range(args.repeat))
    fast_load = min(load_all(paths) for _ in range(args.repeat))
    print(f"load_document, all files, CPU: ruamel alone {slow_load:.2f} s, with libyaml {fast_load:.2f} s")
    best: dict[str, float] = {}
    outputs: dict[str, tuple[int, str, str]] = {}
    for reader in ("ruamel", "libyaml"):
        times = []
        for run in range(max(args.repeat, 1) + 1):
            cpu, proc = run_validate(paths, reader)
            if run:  # the first run writes the bytecode caches
                times.append(cpu)
            outputs[reader] = (proc.returncode, proc.stdout, proc.stderr)
        best[reader] = min(times)
    print(f"validate, one process over all files, CPU: ruamel alone {best['ruamel']:.2f} s, "
          f"with libyaml {best['libyaml']:.2f} s (budget {BUDGET_S:.1f} s)")
    same = outputs["ruamel"] == outputs["libyaml"]
    print(f"outputs identical: {'yes' if same else 'NO'} (exit {outputs['libyaml'][0]}, "
          f"{len(outputs['libyaml'][1]):,} bytes of reports, {outputs['libyaml'][2].count(chr(10))} input errors)")
    return 0 if same and best["libyaml"] < BUDGET_S else 1


if __name__ == "__main__":
    sys.exit(main())

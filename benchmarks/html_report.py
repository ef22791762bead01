"""HTML report size and render time for every shipped example intent (and any intents given).

The render time covers gathering the views from the compiled result (explain's data, the memory of
every pp rank, the mesh groups) and writing the page; compiling the intent is timed by compile_speed.py.
Budgets: at most 200 KB and 0.5 s for every example, 1024-GPU worlds included (the rank map draws at
most 16 nodes). Exits 1 over budget.

    .venv/bin/python benchmarks/html_report.py [INTENT ...] [--repeat 5]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from automodel_dist.compiler import compile_intent
from automodel_dist.html_report import from_compile, render_page

ROOT = Path(__file__).resolve().parents[1]
SIZE_BUDGET = 200_000
TIME_BUDGET_S = 0.5


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("intents", nargs="*", type=Path, help="intent files (default: examples/intents/*.yaml)")
    parser.add_argument("--repeat", type=int, default=5, help="renders per intent; the best is reported")
    args = parser.parse_args()
    intents = args.intents or sorted((ROOT / "examples/intents").glob("*.yaml"))
    print(f"{'intent':<40} {'GPUs':>6} {'pp':>3} {'bytes':>9} {'render ms':>10}")
    over = []
    for intent in intents:
        result = compile_intent(intent)
        times, page = [], ""
        for _ in range(max(args.repeat, 1)):
            start = time.perf_counter()
            page = render_page(from_compile(result, top=10))
            times.append(time.perf_counter() - start)
        size, best = len(page.encode()), min(times)
        print(f"{intent.stem:<40} {result.problem.cluster.world_size:>6} {result.layout.pp:>3} {size:>9,} "
              f"{best * 1000:>10.1f}")
        if size > SIZE_BUDGET or best > TIME_BUDGET_S:
            over.append(intent.stem)
    print(f"budgets: {SIZE_BUDGET:,} bytes, {TIME_BUDGET_S * 1000:.0f} ms; over budget: {', '.join(over) or 'none'}")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())

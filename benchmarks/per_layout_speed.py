"""Per-layout cost of the planner's two inner calls: the rule check and the estimate.

The planner calls both on thousands of layouts per compile, so their cost per layout is what a compile's
time scales with. Prints microseconds per call (best of several repeats, CPU time of this process) and
exits 1 over the budgets below, which are loose: a noisy machine should not trip them.

    .venv/bin/python benchmarks/per_layout_speed.py
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from automodel_dist.catalog.hardware import get_gpu
from automodel_dist.catalog.models import resolve_model
from automodel_dist.catalog.specs import ClusterSpec
from automodel_dist.cost.model import estimate_layout
from automodel_dist.layout import Layout
from automodel_dist.problem import Problem, TrainingSpec
from automodel_dist.rules import check_layout

CHECK_BUDGET_US = 20.0
ESTIMATE_BUDGET_US = 500.0


def best_per_call(work: Callable[[], None], calls: int, repeat: int = 5) -> float:
    """Best CPU seconds per call over `repeat` runs of `calls` calls."""
    times = []
    for _ in range(repeat):
        start = time.process_time()
        for _ in range(calls):
            work()
        times.append((time.process_time() - start) / calls)
    return min(times)


def main() -> int:
    moe = resolve_model("qwen3-30b-a3b")
    cluster = ClusterSpec(get_gpu("h100-80gb"), nodes=8, gpus_per_node=8)
    training = TrainingSpec(seq_length=4096, packed_sequences=True)
    valid = Layout(world_size=64, pp=2, cp=2, ep=8, pp_schedule="interleaved1f1b", vpp=2, local_batch_size=4,
                   global_batch_size=1024)
    check_us = best_per_call(lambda: check_layout(valid, model=moe, cluster=cluster, training=training), 2000) * 1e6

    problem = Problem(model=resolve_model("deepseek-v3"), cluster=ClusterSpec(get_gpu("h100-80gb"), nodes=128,
                      gpus_per_node=8), training=TrainingSpec(seq_length=4096, global_batch_size=8192))
    layouts = [Layout(world_size=1024, tp=1, pp=pp, ep=ep, pp_schedule="1f1b", global_batch_size=8192,
                      local_batch_size=8, micro_batch_size=1, activation_checkpointing=True)
               for pp in (4, 8, 16) for ep in (8, 16, 32, 64)]

    def estimate_all() -> None:
        for layout in layouts:
            estimate_layout(problem, layout)

    estimate_us = best_per_call(estimate_all, 5) / len(layouts) * 1e6
    print(f"check_layout on a valid layout: {check_us:8.1f} us/call (budget {CHECK_BUDGET_US:g})")
    print(f"estimate_layout, DeepSeek-V3 on 1024 H100: {estimate_us:8.1f} us/call (budget {ESTIMATE_BUDGET_US:g})")
    return 0 if check_us <= CHECK_BUDGET_US and estimate_us <= ESTIMATE_BUDGET_US else 1


if __name__ == "__main__":
    sys.exit(main())

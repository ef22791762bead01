"""Compile speed: whole-process `automodel-dist compile` wall and CPU time over a grid of unpinned scenarios.

Qwen3-30B-A3B and DeepSeek-V3 on 8 to 16,384 H100 (8 per node), and Llama-3.1-70B at 128K tokens; nothing
pinned (DeepSeek-V3 does not fit on 8 or 64: the answer is then "no layout fits", exit 1). The budget is
BUDGET_S from interpreter start to the recipe on stdout, for every scenario. Prints one line per scenario
(layouts considered, the winner, the best wall time and the best CPU time, user + system, of the child
process); exits 1 when the CPU time is over budget (on a loaded machine wall time measures the neighbours).
Compiles run with bytecode caching on, as an installed tool does (PYTHONDONTWRITEBYTECODE is dropped), after
one warm-up run per scenario. Then the corner cases: intents at the input limits (262,144 GPUs, 16M tokens, a
global batch of 2^20) with 99% of memory kept free, and a global batch of 1 on 8,192 GPUs at 2^20 - 1 tokens (no
CP degree splits an odd sequence, so dp cannot shrink to 1), where nothing is legal and the time goes to the search
for what would make it fit (infeasible.py); printed, not held to the budget. Last, the Megatron-Bridge target's
compile of DeepSeek-V3 on 256 GB200 (`--target megatron-bridge`, the hardware-config card's row): 22,838 layouts,
each judged by Megatron's rules (once per structure, 5,523 of them) and screened with memory bounds, the recompute
ladder and the estimate run only where the bounds cannot answer (about 1,700 layouts); seconds rather than tenths,
printed, not budgeted.

    .venv/bin/python benchmarks/compile_speed.py [--repeat 3] [--only deepseek] [--no-corners] [--no-megatron]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BUDGET_S = 0.5
GPU_COUNTS = (8, 64, 256, 1024, 4096, 16384)
SCENARIOS: tuple[tuple[str, str, int, int, int], ...] = (
    *(("Qwen/Qwen3-30B-A3B", "h100-80gb", gpus, 4096, max(gpus, 512)) for gpus in GPU_COUNTS),
    *(("deepseek-ai/DeepSeek-V3", "h100-80gb", gpus, 4096, max(gpus, 512) * 8) for gpus in GPU_COUNTS),
    ("meta-llama/Llama-3.1-70B", "h100-80gb", 64, 131072, 64),
)
# (model, GPU, GPUs, seq, global batch, memory headroom): at the input limits with 99% kept free, where the memory
# floor rules out every variation; and a global batch of 1 on 8,192 GPUs at an odd 2^20 - 1 tokens (CP 8,192 would
# take 2^20 and compile), where every layout breaks a rule and the remedy search runs to its budget of layouts
# (infeasible.REMEDY_LAYOUTS)
CORNERS: tuple[tuple[str, str, int, int, int, float | None], ...] = (
    *((model, "a100-40gb", 1 << 18, 1 << 24, 1 << 20, 0.99) for model in ("Qwen/Qwen3-30B-A3B",
                                                                         "deepseek-ai/DeepSeek-V3")),
    ("Qwen/Qwen3-30B-A3B", "h100-80gb", 8192, (1 << 20) - 1, 1, None))
# (model, GPU, GPUs, seq, global batch, precision) compiled for the Megatron-Bridge target
MEGATRON_SCENARIOS: tuple[tuple[str, str, int, int, int, str], ...] = (
    ("deepseek-ai/DeepSeek-V3", "gb200-nvl72", 256, 4096, 8192, "fp8"),)


def intent_text(model: str, gpu: str, gpus: int, seq: int, gbs: int, headroom: float | None = None,
                precision: str | None = None, per_node: int = 8) -> str:
    return (f"model: {model}\nhardware:\n  gpu: {gpu}\n  nodes: {max(gpus // per_node, 1)}\n"
            f"  gpus_per_node: {min(gpus, per_node)}\n"
            f"training:\n  task: pretrain\n  seq_length: {seq}\n  global_batch_size: {gbs}\n"
            + ("" if precision is None else f"  precision: {precision}\n")
            + ("" if headroom is None else f"memory_headroom: {headroom}\n"))


def _considered(intent: Path) -> tuple[int, str]:
    """Layouts considered and the winner (or that none fits: DeepSeek-V3 on too few GPUs, exit 1)."""
    from automodel_dist.compiler import compile_intent
    from automodel_dist.errors import InfeasibleError

    try:
        result = compile_intent(intent)
    except InfeasibleError as err:
        return int(str(err).split(" layouts considered")[0].rsplit(" ", 1)[1]), "none (no layout fits)"
    return result.considered, result.layout.short()


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_compile(intent: Path, repeat: int, target: str = "automodel") -> tuple[float, float]:
    """The best wall and the best CPU time (seconds) of `repeat` whole-process compiles."""
    env = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}
    walls, cpus = [], []
    for run in range(max(repeat, 1) + 1):
        start, cpu_start = time.perf_counter(), _children_cpu_s()
        proc = subprocess.run([sys.executable, "-m", "automodel_dist", "compile", str(intent), "--target", target],
                              capture_output=True, text=True, check=False, env=env)
        if run:  # the first run writes the bytecode caches
            walls.append(time.perf_counter() - start)
            cpus.append(_children_cpu_s() - cpu_start)
        if proc.returncode not in (0, 1):
            raise SystemExit(f"{intent.name}: exit {proc.returncode}\n{proc.stderr}")
    return min(walls), min(cpus)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per scenario; the best is reported")
    parser.add_argument("--only", default="", help="only scenarios whose model contains this text")
    parser.add_argument("--no-corners", action="store_true", help="skip the corner cases (nothing fits)")
    parser.add_argument("--no-megatron", action="store_true", help="skip the Megatron-Bridge target's compile")
    args = parser.parse_args()
    worst = 0.0
    corners = () if args.no_corners else CORNERS
    with tempfile.TemporaryDirectory() as tmp:
        for scenario in (*((*s, None) for s in SCENARIOS), *corners):
            model, gpu, gpus, seq, gbs, headroom = scenario
            if args.only.lower() not in model.lower():
                continue
            corner = scenario in corners
            intent = Path(tmp) / f"{model.split('/')[1]}-{gpus}-{seq}-{gbs}.yaml"
            intent.write_text(intent_text(model, gpu, gpus, seq, gbs, headroom), encoding="utf-8")
            considered, winner = _considered(intent)
            wall, cpu = time_compile(intent, args.repeat)
            if not corner:
                worst = max(worst, cpu)
            kept = (f", {headroom:.0%} kept free" if headroom is not None else "") + (" (not budgeted)" if corner
                                                                                      else "")
            print(f"{model} on {gpus} x {gpu}, seq {seq}, global batch {gbs}{kept}: {considered} layouts considered, "
                  f"winner {winner}; best wall {wall:.3f} s, CPU {cpu:.3f} s")
        for model, gpu, gpus, seq, gbs, precision in () if args.no_megatron else MEGATRON_SCENARIOS:
            if args.only.lower() not in model.lower():
                continue
            intent = Path(tmp) / f"{model.split('/')[1]}-{gpus}-{gpu}.yaml"
            intent.write_text(intent_text(model, gpu, gpus, seq, gbs, precision=precision,
                                          per_node=4 if gpu.startswith("gb") else 8), encoding="utf-8")
            wall, cpu = time_compile(intent, args.repeat, target="megatron-bridge")
            print(f"--target megatron-bridge: {model} on {gpus} x {gpu}, seq {seq}, global batch {gbs}, {precision} "
                  f"(not budgeted): best wall {wall:.3f} s, CPU {cpu:.3f} s")
    print(f"slowest scenario: CPU {worst:.3f} s (budget {BUDGET_S:.1f} s)")
    return 0 if worst < BUDGET_S else 1


if __name__ == "__main__":
    sys.exit(main())

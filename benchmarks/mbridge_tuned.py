"""The hardware-config card's tuned MoE layouts against what `compile --target megatron-bridge` picks.

    python benchmarks/mbridge_tuned.py            # the markdown table the README carries

For each measured row of Megatron-Bridge's MoE hardware-config card (reference/megatron-bridge.md §5:
the first-answer rows and card.yaml's best_configs; forced load balancing, mock data), the intent with
the row's model, GPUs, global batch and precision is compiled for the megatron-bridge target, and the
card's own layout is estimated with the same cost model (pinned). Printed: both layouts and dispatchers,
the predicted TFLOP/s/GPU of each and the published figure, and the predicted gap between the two
layouts, which is what `explain --target megatron-bridge` shows for the choice.

The card's TFLOP/s are Megatron-Bridge's own (`num_floating_point_operations`: MTP depths, the padded vocabulary,
Gated DeltaNet's projections and convolution counted), so the predictions are printed in that convention too:
predicted tokens/s times Megatron's FLOPs per token (targets/megatron_bridge/flops.py), with the MTP depths the
override set trains and the vocabulary padding of its recipe (DeepSeek-V3's bridge pads to 1280 x TP).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from automodel_dist.cost.estimate import Estimate
from automodel_dist.errors import AutomodelDistError
from automodel_dist.explain import error_band
from automodel_dist.intent import load_intent, resolve_intent
from automodel_dist.layout import Layout
from automodel_dist.targets.megatron_bridge.compile import compile_megatron
from automodel_dist.targets.megatron_bridge.parse import megatron_layout
from automodel_dist.targets.megatron_bridge.plan import check_planned, estimate_megatron_run, megatron_options

DSV3, Q235, Q30, QNEXT = ("deepseek-ai/DeepSeek-V3", "Qwen/Qwen3-235B-A22B", "Qwen/Qwen3-30B-A3B",
                          "Qwen/Qwen3-Next-80B-A3B-Instruct")


@dataclass(frozen=True)
class CardRow:
    """One card row: model, GPU preset, GPUs, global/micro batch, precision; tp pp vpp ep; dispatcher; TFLOP/s."""

    label: str
    model: str
    gpu: str
    gpus: int
    gbs: int
    mbs: int
    precision: str
    tp: int
    pp: int
    vpp: int
    ep: int
    dispatcher: str
    published: float | None
    # the card run's EP overlap where its recipe states it (None: as the target would set it for the layout)
    ep_overlap: bool | None = None


ROWS = (
    CardRow("DeepSeek-V3", DSV3, "h100-80gb", 1024, 8192, 1, "fp8", 2, 8, 4, 64, "deepep", 370),
    CardRow("DeepSeek-V3", DSV3, "b200", 256, 4096, 1, "bf16", 1, 8, 4, 32, "deepep", 520),
    CardRow("DeepSeek-V3", DSV3, "b200", 256, 8192, 1, "fp8", 1, 8, 2, 32, "deepep", 800),
    CardRow("DeepSeek-V3", DSV3, "gb200-nvl72", 256, 8192, 1, "fp8", 1, 4, 4, 64, "hybridep", 1100),
    CardRow("DeepSeek-V3", DSV3, "gb300-nvl72", 256, 8192, 1, "fp8", 1, 4, 4, 64, "hybridep", 1200),
    CardRow("Qwen3-235B-A22B", Q235, "h100-80gb", 256, 8192, 1, "bf16", 2, 8, 4, 32, "alltoall", None),
    CardRow("Qwen3-235B-A22B", Q235, "b200", 128, 2048, 2, "bf16", 2, 4, 12, 16, "deepep", 590),
    # VPP12 as the measured row lists it (the hardware-config card.yaml's qwen3_235b_gb200_128 and the dispatcher-
    # selection card.yaml); the skill's prose leaves it unspecified for its playbook row
    CardRow("Qwen3-235B-A22B", Q235, "gb200-nvl72", 128, 1024, 1, "bf16", 1, 4, 12, 32, "hybridep", 700),
    CardRow("Qwen3-30B-A3B", Q30, "h100-80gb", 16, 1024, 1, "bf16", 1, 1, 1, 16, "hybridep", 299.352),
    CardRow("Qwen3-30B-A3B", Q30, "h100-80gb", 32, 256, 4, "bf16", 1, 1, 1, 8, "deepep", 210),
    # the card's recipe (perf_recipes/qwen/gb200/qwen3_moe.py qwen3_next_80b_a3b_pretrain_64gpu_gb200_bf16_config,
    # from the GB300 one, megatron-bridge 0.6.2) builds CommOverlapConfig(tp_comm_overlap=True) only: no EP overlap
    CardRow("Qwen3-Next-80B-A3B", QNEXT, "gb200-nvl72", 64, 1024, 2, "bf16", 1, 2, 4, 32, "hybridep", 330,
            ep_overlap=False),
)


def intent(row: CardRow) -> dict:
    per_node = 4 if row.gpu.startswith("gb") else 8
    return {"model": row.model, "hardware": {"gpu": row.gpu, "nodes": row.gpus // per_node},
            "training": {"task": "pretrain", "seq_length": 4096, "global_batch_size": row.gbs,
                         "precision": row.precision}}


def card_layout(row: CardRow) -> str:
    """The card's layout, labelled as explain labels a Megatron layout (Layout.short)."""
    return megatron_layout(row.gpus, tp=row.tp, pp=row.pp, vpp=row.vpp, ep=row.ep, sequence_parallel=row.tp > 1,
                           global_batch_size=row.gbs, micro_batch_size=row.mbs).short()


def card_pinned(row: CardRow) -> tuple[Estimate, Layout] | str:
    """The card's layout under the same rules and cost model, with the EP overlap the card's recipe states: its
    estimate without recompute if that fits, else with selective recompute (and the layout it took), or why it
    cannot run."""
    problem = resolve_intent(load_intent(intent(row)))
    best = None
    for recompute in ("off", "selective"):
        layout = megatron_layout(problem.cluster.world_size, tp=row.tp, pp=row.pp, vpp=row.vpp, ep=row.ep,
                                 sequence_parallel=row.tp > 1, activation_checkpointing=recompute,
                                 global_batch_size=row.gbs, micro_batch_size=row.mbs,
                                 dispatcher="alltoall" if row.dispatcher == "alltoall" else row.dispatcher)
        errors = [f.rule for f in check_planned(layout, model=problem.model, cluster=problem.cluster,
                                                training=problem.training) if f.severity == "error"]
        options = megatron_options(problem, layout)
        if row.ep_overlap is not None:
            options = replace(options, ep_overlap=row.ep_overlap)
        est = estimate_megatron_run(problem, layout, options)
        fits = est.memory_gib <= problem.cluster.gpu.hbm_gib * (1 - problem.memory_headroom)
        if errors:
            return f"breaks {', '.join(errors)}"
        if fits and best is None:
            best = (est, layout)
    return best or "predicted not to fit"


def card_estimate(row: CardRow) -> tuple[str, float | None]:
    """`card_pinned` as the table prints it, and its predicted TFLOP/s in Megatron's count (None: no estimate)."""
    pinned = card_pinned(row)
    if isinstance(pinned, str):
        return pinned, None
    est, layout = pinned
    recompute = layout.activation_checkpointing == "selective"
    tflops = est.tflops_per_gpu  # Megatron's count (plan.estimate_megatron_run)
    return f"{tflops:.0f} ({est.memory_gib:.0f} GiB{', recompute:selective' if recompute else ''})", tflops


HEADER = ("| Model | GPUs | Card layout (dispatcher) | Compiled layout (dispatcher) | Same | Predicted TFLOP/s/GPU "
          "(Megatron's count): compiled / card layout | Published | Compiled ÷ published | Cross-validated band | "
          "Card layout ÷ published |",
          "|---|---|---|---|---|---|---|---|---|---|")


def table_row(row: CardRow) -> str:
    """One README row: the card's layout, the compiled one, their predictions and the published figure."""
    card = f"{card_layout(row)} ({row.dispatcher})"
    try:
        result = compile_megatron(intent(row))
    except AutomodelDistError as exc:
        return f"| {row.label} | {row.gpus}×{row.gpu} {row.precision} | {card} | {str(exc).splitlines()[0]} | | | | | |"
    lay, s = result.layout, result.override.settings if result.override else None
    dispatcher = (s.flex_backend or s.dispatcher_type) if s else "-"
    ours = lay.short()
    same = "yes" if (lay.tp, lay.pp, lay.ep, lay.etp) == (row.tp, row.pp, row.ep, 1) else "no"
    predicted = result.estimate.tflops_per_gpu  # Megatron's count (plan.estimate_planned)
    published = f"{row.published:g}" if row.published else "remeasure"
    ratio = f"{predicted / row.published:.2f}" if row.published else "-"
    band = error_band(result)
    within = "" if not row.published or band is None else (
        " (within)" if abs(predicted / row.published - 1) <= band.median_abs_error else " (outside)")
    band_text = f"±{band.median_abs_error:.0%} {band.group}{within}" if band else "none"
    card_text, card_tflops = card_estimate(row)
    card_ratio = f"{card_tflops / row.published:.2f}" if row.published and card_tflops else "-"
    return (f"| {row.label} | {row.gpus}×{row.gpu} {row.precision} | {card} | {ours} ({dispatcher}) | {same} | "
            f"{predicted:.0f} / {card_text} | {published} | {ratio} | {band_text} | {card_ratio} |")


def table() -> list[str]:
    """The markdown table the README carries (tests/test_mbridge_card.py checks that it is current)."""
    lines = list(HEADER)
    for row in ROWS:
        start = time.perf_counter()
        lines.append(table_row(row))
        print(f"compiled in {time.perf_counter() - start:.1f} s", file=sys.stderr)
    return lines


def main() -> None:
    print("\n".join(table()))


if __name__ == "__main__":
    main()

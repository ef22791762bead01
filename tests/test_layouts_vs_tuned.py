"""Chosen layouts against tuned, measured configurations that are NOT in the cost model's calibration set.

Source of every row: reference/megatron-bridge.md §5 ("MoE hardware configs": the canonical first-answer
rows and the card's `best_configs`) and A1; they are Megatron-Bridge runs (Megatron-Core, not AutoModel),
mostly with forced load balancing and mock data, so they fix a *family* of good layouts, not exact sizes.
The calibration set (benchmarks/calibration_data.py) uses other rows: AutoModel's own benchmarks,
torchtitan, and the Megatron-Bridge Qwen3-30B-A3B 16/32xH100 and Llama-3-8B rows, none of which is here.

What is checked:
1. the tuned layout is legal under our rules, enumerated by the planner, and predicted to fit;
2. our dispatcher policy picks the tuned dispatcher for the tuned EP size (where the source agrees with
   itself; Qwen3-235B on H100 uses all-to-all plus overlap, which AutoModel does not have);
3. the planner's choice is in the tuned family: TP <= 8 inside the NVLink domain, PP across nodes, and
   expert parallelism of at least 8. Three of the seven rows land in the family. Qwen3-235B's three pick
   FSDP2 without PP by less than the model's cross-validated error (a tie, checked below); Qwen3-Next's is
   the cost model's (see XFAIL_REASONS). The xfails are strict: when the cost model learns these, they must go.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import pytest

from automodel_dist.dispatcher import choose_dispatcher, ep_group_in_domain
from automodel_dist.intent import load_intent, resolve_intent
from automodel_dist.planner import Plan, fits, plan, search
from automodel_dist.problem import Problem
from automodel_dist.rules import check_layout


@dataclass(frozen=True)
class Tuned:
    """One measured layout: model, GPU preset, nodes, global batch; tp, pp, ep, cp; dispatcher; source row."""

    key: str
    model: str
    gpu: str
    nodes: int
    global_batch: int
    tp: int
    pp: int
    ep: int
    cp: int
    dispatcher: str | None
    source: str


TUNED = (
    Tuned("dsv3-1024xh100", "deepseek-ai/DeepSeek-V3", "h100-80gb", 128, 8192, 2, 8, 64, 1, "deepep",
          "§5 dsv3_685b_h100_1024: TP2 EP64 PP8 VPP4, DeepEP, ~370 TFLOP/s/GPU (FP8-block)"),
    Tuned("dsv3-256xb200", "deepseek-ai/DeepSeek-V3", "b200", 32, 4096, 1, 8, 32, 1, "deepep",
          "§5 dsv3_685b_b200_256_bf16: TP1 EP32 PP8 VPP4, DeepEP, ~520 TFLOP/s/GPU"),
    Tuned("dsv3-256xgb200", "deepseek-ai/DeepSeek-V3", "gb200-nvl72", 64, 8192, 1, 4, 64, 1, "hybridep",
          "§5 dsv3_685b_gb200_256: TP1 EP64 PP4 VPP4, HybridEP, ~1100 TFLOP/s/GPU (FP8-MX)"),
    Tuned("qwen3-235b-256xh100", "Qwen/Qwen3-235B-A22B", "h100-80gb", 32, 8192, 2, 8, 32, 1, None,
          "§5 qwen3_235b_h100_256 recipe seed: TP2 EP32 PP8 VPP4, all-to-all + EP overlap"),
    Tuned("qwen3-235b-128xb200", "Qwen/Qwen3-235B-A22B", "b200", 16, 2048, 2, 4, 16, 1, "deepep",
          "§5 qwen3_235b_b200_128: TP2 EP16 PP4 VPP12, DeepEP, ~590 TFLOP/s/GPU"),
    Tuned("qwen3-235b-128xgb200", "Qwen/Qwen3-235B-A22B", "gb200-nvl72", 32, 1024, 1, 4, 32, 1, "hybridep",
          "§5 qwen3_235b_gb200_128: TP1 EP32 PP4, HybridEP, ~700 TFLOP/s/GPU"),
    Tuned("qwen3-next-80b-64xgb200", "Qwen/Qwen3-Next-80B-A3B-Instruct", "gb200-nvl72", 16, 1024, 1, 2, 32, 1,
          "hybridep", "§5 qwen3_next_80b_gb200_64: TP1 EP32 PP2 VPP4, HybridEP, ~330 TFLOP/s/GPU"),
)
IDS = [t.key for t in TUNED]
# Since the planner may turn the deferred gradient sync off for MoE layouts too, FSDP2 without PP fits
# Qwen3-235B and wins by less than the model's cross-validated error for AutoModel rows (explain calls it a
# tie): test_out_of_family_winners_are_ties_within_the_error_band holds them to that.
_TIE = ("pp1 fits with the gradient sync every micro batch and wins by less than the cross-validated "
        "error band (a tie explain reports); the in-family pipeline is within it")
XFAIL_REASONS = {
    # selective checkpointing (searched since the planner knows AutoModel's modes) fits DeepSeek-V3 under
    # FSDP2 without PP too: EP64, sync every micro batch, about 4.7% ahead of the in-family PP4 layout
    "dsv3-256xgb200": _TIE,
    "qwen3-235b-256xh100": _TIE,
    "qwen3-235b-128xb200": _TIE,
    "qwen3-235b-128xgb200": _TIE,
    "qwen3-next-80b-64xgb200": (
        "cost model picks pp1 ep64 lbs2 (28,243 tok/s/GPU, 104.9 GiB of 185): FSDP2 fits it without PP, and "
        "PP only costs: the best pp2 layout (ep32, mbs 2) runs 24,293 tok/s/GPU; its compute is 1.919 s vs "
        "1.688 s (stage imbalance 1.083 from the LM head on the last stage, and expert GEMMs at 5,120 tokens "
        "per expert reaching 5120/(5120+EXPERT_GEMM_TOKENS) = 0.83 of their rate vs 0.91 at pp1's 10,240) "
        "plus a 0.158 s bubble"),
}


def in_family_mark(t: Tuned) -> pytest.MarkDecorator | tuple[()]:
    return pytest.mark.xfail(strict=True, reason=XFAIL_REASONS[t.key]) if t.key in XFAIL_REASONS else ()


def problem_of(t: Tuned, **parallelism: int) -> Problem:
    spec = {"model": t.model, "hardware": {"gpu": t.gpu, "nodes": t.nodes},
            "training": {"task": "pretrain", "seq_length": 4096, "global_batch_size": t.global_batch,
                         "packed_sequences": False}}
    if parallelism:
        spec["parallelism"] = parallelism
    return resolve_intent(load_intent(spec))


@cache
def chosen(key: str) -> Plan:
    return plan(problem_of(next(t for t in TUNED if t.key == key)))


@pytest.mark.parametrize("t", TUNED, ids=IDS)
def test_tuned_layout_is_legal_enumerated_and_fits(t: Tuned) -> None:
    problem = problem_of(t, tp=t.tp, pp=t.pp, ep=t.ep, cp=t.cp, strategy="fsdp2")
    found = search(problem)
    if t.tp > 1:  # Megatron shards these MoE models with TP; AutoModel 0.7.0's MoE classes have no TP plan
        assert not found.candidates and set(found.pruned) == {"am-r22-tp-plan"}, found.pruned
        return
    assert found.candidates, f"the planner never generated {t.source}"
    for c in found.candidates:
        assert (c.layout.tp, c.layout.pp, c.layout.ep, c.layout.cp) == (t.tp, t.pp, t.ep, t.cp)
        assert not [f for f in check_layout(c.layout, model=problem.model, cluster=problem.cluster,
                                            training=problem.training) if f.severity == "error"]
    assert any(fits(problem, c.estimate) for c in found.candidates), f"predicted not to fit: {t.source}"


@pytest.mark.parametrize("t", [t for t in TUNED if t.dispatcher], ids=[t.key for t in TUNED if t.dispatcher])
def test_dispatcher_policy_picks_the_tuned_dispatcher(t: Tuned) -> None:
    problem = problem_of(t)
    assert choose_dispatcher(problem.model, problem.cluster, t.ep).name == t.dispatcher


@pytest.mark.parametrize("t", TUNED, ids=IDS)
def test_chosen_tensor_parallelism_stays_in_the_nvlink_domain(t: Tuned) -> None:
    problem = problem_of(t)
    layout = chosen(t.key).best.layout
    assert layout.tp <= 8
    assert ep_group_in_domain(layout.tp, problem.cluster.nvlink_domain, problem.cluster.world_size)


@pytest.mark.parametrize("t", [pytest.param(t, marks=in_family_mark(t)) for t in TUNED], ids=IDS)
def test_chosen_layout_is_in_the_tuned_moe_family(t: Tuned) -> None:
    layout = chosen(t.key).best.layout
    assert layout.ep >= 8, f"tuned {t.source}; chose {layout.short()}"
    assert 2 <= layout.pp <= 16, f"tuned {t.source}; chose {layout.short()}"


@pytest.mark.parametrize("key", [k for k in XFAIL_REASONS if XFAIL_REASONS[k] == _TIE])
def test_out_of_family_winners_are_ties_within_the_error_band(key: str) -> None:
    """The best in-family layout (PP 2-16, EP >= 8) trails the winner by less than the cross-validated
    median error of measured AutoModel rows like it: the measurements cannot tell them apart."""
    from automodel_dist.cost.profiles import parameters
    from automodel_dist.cost.throughput import generation

    t = next(t for t in TUNED if t.key == key)
    result, problem = chosen(key), problem_of(t)
    family = next(c for c in [result.best, *result.alternatives] if c.layout.ep >= 8 and 2 <= c.layout.pp <= 16)
    band = parameters().error_band("automodel", problem.model.family,
                                   generation(problem.cluster.gpu.compute_capability))
    margin = result.best.estimate.tokens_per_s_per_gpu / family.estimate.tokens_per_s_per_gpu - 1
    assert band is not None and margin < band.median_abs_error, (family.layout.short(), margin, band)

"""Compile on AutoModel's own tuned scenarios: its benchmark recipes' pipeline layouts on 256 and 1024 H100.

Layouts from NVIDIA-NeMo/Automodel examples/llm_benchmark (deepseek_v3_te_deepep*.yaml: PP4 VPP8 EP64,
local batch 8, micro batch 1; kimi_k2_te_deepep.yaml: PP8 VPP4 EP32; qwen3_moe_235b_te_deepep.yaml: PP4
VPP12 EP32), with full activation checkpointing, as on AutoModel's performance page. Those runs used the
benchmark's fake balanced gate; a compile plans for a learned router, under which both the tuned layout
and the pick are timed here. What is checked: the tuned layout, pinned, passes the rules and fits (its
VPP 8 and 12 need AutoModel's round-to-pp-multiple split, which the unpinned search does not explore); the
pick is predicted at least as fast; and where the pick differs, explain's part-by-part comparison accounts for
the whole margin, with the part that decides it named (the reason a reader can check).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import pytest

from automodel_dist.compiler import compile_intent
from automodel_dist.explain import advantage_by_part, parts_against, render_explain
from automodel_dist.intent import load_intent, resolve_intent
from automodel_dist.planner import Candidate, fits, search


@dataclass(frozen=True)
class Scenario:
    key: str
    model: str
    nodes: int
    global_batch: int
    pp: int
    vpp: int
    ep: int
    deciding_part: str  # the step-time part where the pick gains most over the tuned layout


SCENARIOS = (
    # without PP DeepSeek-V3 fits on 256 GPUs: no bubble (the tuned layout's idles through its compute and the
    # host time of its 8 micro batches per rank) and no stage imbalance
    Scenario("dsv3-256xh100", "deepseek-ai/DeepSeek-V3", 32, 512, 4, 8, 64, "pipeline_bubble"),
    # EP64 spans 8 nodes: a learned router reaches ~6 of them per token; EP16 spans 2
    Scenario("dsv3-1024xh100", "deepseek-ai/DeepSeek-V3", 128, 8192, 4, 8, 64, "ep_comm"),
    Scenario("kimi-k2-256xh100", "moonshotai/Kimi-K2-Instruct", 32, 512, 8, 4, 32, "pipeline_bubble"),
    Scenario("qwen3-235b-256xh100", "Qwen/Qwen3-235B-A22B", 32, 2048, 4, 12, 32, "ep_comm"),
)
IDS = [s.key for s in SCENARIOS]


def intent(s: Scenario, **parallelism: object) -> dict:
    spec = {"model": s.model, "hardware": {"gpu": "h100-80gb", "nodes": s.nodes},
            "training": {"task": "pretrain", "seq_length": 4096, "global_batch_size": s.global_batch,
                         "packed_sequences": False}}
    return {**spec, "parallelism": parallelism} if parallelism else spec


@cache
def tuned(key: str) -> Candidate:
    s = next(s for s in SCENARIOS if s.key == key)
    problem = resolve_intent(load_intent(intent(
        s, strategy="fsdp2", tp=1, cp=1, pp=s.pp, vpp=s.vpp, ep=s.ep, local_batch_size=8, micro_batch_size=1,
        activation_checkpointing=True)))
    found = [c for c in search(problem).candidates if fits(problem, c.estimate)]
    assert found, f"AutoModel's tuned layout for {key} breaks a rule or is not predicted to fit"
    return max(found, key=lambda c: c.estimate.tokens_per_s_per_gpu)


@pytest.mark.parametrize("s", SCENARIOS, ids=IDS)
def test_pick_is_at_least_as_fast_as_the_tuned_layout_and_explain_says_why(s: Scenario) -> None:
    result = compile_intent(intent(s))
    pick, reference = result.estimate, tuned(s.key).estimate
    assert pick.tokens_per_s_per_gpu >= reference.tokens_per_s_per_gpu
    layout = result.layout
    if (layout.pp, layout.vpp, layout.ep) == (s.pp, s.vpp, s.ep):
        return
    gains = advantage_by_part(pick, reference)
    assert sum(gains.values()) == pytest.approx(reference.step_time_s - pick.step_time_s, rel=1e-9)
    assert max(gains, key=lambda part: gains[part]) == s.deciding_part, gains
    table = "\n".join(parts_against(pick, reference, "tuned"))
    assert s.deciding_part in table and f"{gains[s.deciding_part]:+.3f}" in table
    assert "step time by part against #2" in render_explain(result, top=2)

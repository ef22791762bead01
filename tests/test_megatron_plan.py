"""The Megatron-Bridge target's bounded search is its exhaustive search.

The planner judges a Megatron layout's rules with the settings the emitter writes but a stand-in recompute set
(`choose.RULES_RECOMPUTE_SET`), once per structure, and screens it with bounds instead of running the recompute
ladder and the estimate on every layout (`plan.screen_planned`). Each premise is checked on every layout of several
searches, and the whole plan against the exhaustive one: every layout judged with the settings `decide` writes
(the recompute ladder included), every layout timed.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from automodel_dist.cost.model import memory_limit_gib, peak_gib, tokens_ceiling, with_recompute_modules
from automodel_dist.errors import InfeasibleError
from automodel_dist.findings import Finding
from automodel_dist.layout import Layout
from automodel_dist.planner import Enumerator, plan
from automodel_dist.problem import Problem
from automodel_dist.targets.megatron_bridge.choose import (
    cost_options,
    decide,
    recompute_candidates,
    settings_for_rules,
)
from automodel_dist.targets.megatron_bridge.compile import _megatron_problem
from automodel_dist.targets.megatron_bridge.overrides import OverrideSet
from automodel_dist.targets.megatron_bridge.plan import (
    MegatronSpace,
    _judged,
    _Structure,
    check_planned,
    estimate_planned,
    megatron_options,
    problem_of,
    screen_planned,
)
from automodel_dist.targets.megatron_bridge.rules import check_overrides, check_structure

# (model, GPU, GPUs, GPUs per node, sequence length, global batch, extra training keys): MoE with MLA and MTP on
# Blackwell (the attention graph), MoE on Hopper, a dense model, fine-tuning (packed sequences, CP padding), FP8,
# and a memory-tight world where the ladder decides what fits
PROBLEMS = {
    "deepseek-v3-64xgb200-fp8": ("deepseek-ai/DeepSeek-V3", "gb200-nvl72", 64, 4, 4096, 1024, "precision: fp8"),
    "qwen3-30b-a3b-16xh100": ("Qwen/Qwen3-30B-A3B", "h100-80gb", 16, 8, 4096, 512, ""),
    "moonlight-8xh100": ("moonshotai/Moonlight-16B-A3B", "h100-80gb", 8, 8, 4096, 64, ""),
    "llama-3.1-70b-32xh100-sft": ("meta-llama/Llama-3.1-70B", "h100-80gb", 32, 8, 8192, 64, "task: sft"),
    "llama-3.1-8b-8xb200-peft": ("meta-llama/Llama-3.1-8B", "b200", 8, 8, 16384, 32, "task: peft"),
    "qwen3-235b-a22b-64xh100": ("Qwen/Qwen3-235B-A22B", "h100-80gb", 64, 8, 4096, 512, ""),
}


def problem(name: str, objective: str = "throughput") -> Problem:
    model, gpu, gpus, per_node, seq, gbs, extra = PROBLEMS[name]
    text = (f"model: {model}\nhardware: {{gpu: {gpu}, nodes: {gpus // per_node}, gpus_per_node: {per_node}}}\n"
            f"objective: {objective}\ntraining:\n  seq_length: {seq}\n  global_batch_size: {gbs}\n"
            + (f"  {extra}\n" if extra and not extra.startswith("task") else "")
            + f"  task: {extra.split(': ')[1] if extra.startswith('task') else 'pretrain'}\n")
    return _megatron_problem(text, ())[1]


def layouts(prob: Problem) -> Iterator[Layout]:
    """Every layout of the Megatron space with each batch split it admits."""
    space = MegatronSpace(prob, check_planned, estimate_planned, False)
    for base, dp in space.structures():
        for mbs, lbs_list in space.batches(base["pp"], dp):
            for lbs in lbs_list:
                yield space.make(base, lbs, mbs)


def decided_check(layout: Layout, *, model, cluster, training, first_error: bool = False) -> list[Finding]:
    """The rules on the settings `decide` writes, recompute ladder and all: what the emitter writes."""
    prob = problem_of(model, cluster, training)
    return check_overrides(OverrideSet(layout, decide(prob, layout)[0]), model=model, cluster=cluster)


@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_no_rule_verdict_depends_on_the_recompute_set(name: str) -> None:
    """The rules give the same findings on the stand-in set as on the set the ladder writes, and the two settings
    differ in nothing but the recompute modules and the attention graph they reach."""
    prob = problem(name)
    selective = 0
    for layout in layouts(prob):
        written, stand_in = decide(prob, layout)[0], settings_for_rules(prob, layout)
        kw = {"model": prob.model, "cluster": prob.cluster}
        assert check_overrides(OverrideSet(layout, written), **kw) == check_overrides(OverrideSet(layout, stand_in),
                                                                                   **kw), layout
        if layout.activation_checkpointing == "selective":
            selective += 1
            assert written.with_(recompute_modules=(), cuda_graph_scope=()) == \
                stand_in.with_(recompute_modules=(), cuda_graph_scope=())
        else:
            assert written == stand_in
    assert selective


@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_what_is_judged_once_per_structure_holds_for_every_batch_split(name: str) -> None:
    """The settings, cost options and batch-free findings kept per structure are what each batch split gives."""
    prob = problem(name)
    splits = 0
    for layout in layouts(prob):
        judged = _judged(prob, _Structure(layout))
        settings = settings_for_rules(prob, layout)
        assert judged.settings == settings
        assert judged.options == cost_options(prob, layout, settings)
        assert judged.findings == tuple(check_structure(OverrideSet(layout, settings), model=prob.model,
                                                        cluster=prob.cluster))
        splits += judged.settings is not None
    assert splits > 20


def test_the_ladder_runs_only_where_the_bounds_cannot_answer() -> None:
    """Moonlight on 8 H100 has selective layouts that fit only with some labels recomputed (the screen runs the
    ladder there), and the screen leaves most fitting layouts untimed on Qwen3-30B-A3B on 16 H100."""
    prob = problem("moonlight-8xh100")
    limit = memory_limit_gib(prob)
    between = 0
    for layout in layouts(prob):
        options = _judged(prob, _Structure(layout)).options
        widest = with_recompute_modules(options, recompute_candidates(prob.model))
        if layout.activation_checkpointing == "selective" and \
                peak_gib(prob, layout, widest) <= limit < peak_gib(prob, layout, options):
            between += 1
            assert screen_planned(prob, layout)[0] == (peak_gib(prob, layout, megatron_options(prob, layout)) <= limit)
    assert between > 10
    prob = problem("qwen3-30b-a3b-16xh100")
    search = Enumerator(prob, check_planned, estimate_planned, False, screen_planned).run()
    assert search.untimed_fits > len(search.candidates) > 0


@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_the_screen_bounds_hold(name: str) -> None:
    """The screen's fit is the estimate's, its ceiling is above the estimate and, under the memory objective, its best
    value is at most the estimated peak. On every selective layout:
    recomputing every label frees at least what the written set frees, recomputing none at most; the ceiling
    without recompute is above the written set's (not the estimate itself: recompute can hide more gradient
    reduction behind the backward, a step a hair faster with it)."""
    prob, memory_objective = problem(name), problem(name, "memory")
    limit = memory_limit_gib(prob)
    checked = 0
    for layout in layouts(prob):
        if check_planned(layout, model=prob.model, cluster=prob.cluster, training=prob.training):
            continue
        estimate = estimate_planned(prob, layout)
        fit, best_case, _ = screen_planned(prob, layout)
        assert fit == (estimate.memory_gib <= limit), layout
        if fit:
            assert -best_case >= estimate.tokens_per_s_per_gpu * (1 - 1e-9), layout
            assert screen_planned(memory_objective, layout)[1] <= estimate.memory_gib * (1 + 1e-9), layout
        if layout.activation_checkpointing != "selective":
            continue
        options = _judged(prob, _Structure(layout)).options
        written = megatron_options(prob, layout)
        widest = with_recompute_modules(options, recompute_candidates(prob.model))
        peak = peak_gib(prob, layout, written)
        assert peak_gib(prob, layout, widest) <= peak + 1e-9 <= peak_gib(prob, layout, options) + 2e-9, layout
        assert tokens_ceiling(prob, layout, options) >= tokens_ceiling(prob, layout, written) * (1 - 1e-9), layout
        checked += 1
    assert checked


def assert_bounded_is_exhaustive(prob: Problem) -> None:
    """The compile's plan (stand-in rules once per structure, the screen) is the plan of every layout judged with
    the settings the emitter writes and timed: the same winner, alternatives with their estimates, feasible count,
    layouts considered, rule drops with their findings."""
    kw = {"estimate": estimate_planned, "space": MegatronSpace}
    try:
        exhaustive = plan(prob, check=decided_check, exhaustive=True, **kw)
    except InfeasibleError as err:
        with pytest.raises(InfeasibleError) as bounded_err:
            plan(prob, check=check_planned, screen=screen_planned, **kw)
        assert str(bounded_err.value) == str(err)
        return
    bounded = plan(prob, check=check_planned, screen=screen_planned, **kw)
    assert bounded.best == exhaustive.best
    assert bounded.alternatives == exhaustive.alternatives
    assert (bounded.feasible, bounded.considered) == (exhaustive.feasible, exhaustive.considered)
    assert (bounded.pruned, bounded.reasons) == (exhaustive.pruned, exhaustive.reasons)
    assert bounded.dropped == exhaustive.dropped


@pytest.mark.parametrize("objective", ["throughput", "memory"])
@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_bounded_plan_is_the_exhaustive_plan(name: str, objective: str) -> None:
    assert_bounded_is_exhaustive(problem(name, objective))


def test_a_world_where_nothing_fits_says_the_same() -> None:
    """DeepSeek-V3 on 8 H100: nothing fits; the closest layouts and remedies are the exhaustive search's."""
    text = ("model: deepseek-ai/DeepSeek-V3\nhardware: {gpu: h100-80gb, nodes: 1, gpus_per_node: 8}\n"
            "training: {task: pretrain, seq_length: 4096, global_batch_size: 64}\n")
    prob = _megatron_problem(text, ())[1]
    assert_bounded_is_exhaustive(prob)
    with pytest.raises(InfeasibleError):
        plan(prob, check=check_planned, estimate=estimate_planned, screen=screen_planned, space=MegatronSpace)


def test_a_micro_batch_pin_holds_where_the_data_parallel_size_leaves_no_room_for_it() -> None:
    """16 samples on 16 GPUs: at DP 16 each rank holds one sample, so a micro batch of 4 needs TP4 DP4 (or another
    split of 4 samples per rank); the layout that would silently train micro batches of 1 is not taken."""
    text = ("model: llama-3.1-8b\nhardware: {gpu: h100-80gb, nodes: 2}\nparallelism: {micro_batch_size: 4}\n"
            "training: {task: pretrain, seq_length: 4096, global_batch_size: 16, packed_sequences: false}\n")
    best = plan(_megatron_problem(text, ())[1], check=check_planned, estimate=estimate_planned, screen=screen_planned,
                space=MegatronSpace).best.layout
    assert best.micro_batch_size == 4 and best.world_size // (best.tp * best.pp * best.cp) == 4

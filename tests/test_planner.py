"""Planner: pins are respected, the search is deterministic, ranking follows the objective and breaks ties
toward simpler layouts, pruning counts are the rules' own, and 'nothing fits' suggestions are real."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from automodel_dist.catalog.specs import ClusterSpec
from automodel_dist.cli import main
from automodel_dist.compiler import compile_intent, estimate
from automodel_dist.cost.estimate import Estimate
from automodel_dist.cost.memory import AUTOMODEL_DEFAULTS
from automodel_dist.cost.model import estimate_layout
from automodel_dist.cost.shape import model_shape
from automodel_dist.errors import InfeasibleError, InputError, ValidationFailed
from automodel_dist.intent import load_intent, resolve_intent
from automodel_dist.layout import Layout
from automodel_dist.pipeline_stages import layers_per_stage, virtual_stage_options
from automodel_dist.planner import (
    MAX_VPP,
    MIN_CP_TOKENS,
    Candidate,
    Enumerator,
    distinct_structures,
    fits,
    make_layout,
    plan,
    rank,
    search,
    simplicity,
    structure,
)
from automodel_dist.problem import Problem
from automodel_dist.rules import RULES, check_layout


def intent(model: str = "Qwen/Qwen3-30B-A3B", gpu: str = "h100-80gb", nodes: int = 2, gpus_per_node: int = 8,
           parallelism: dict[str, Any] | None = None, **training: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"model": model, "hardware": {"gpu": gpu, "nodes": nodes, "gpus_per_node": gpus_per_node},
                            "training": {"task": "sft", "seq_length": 4096, "global_batch_size": 256, **training}}
    if parallelism:
        spec["parallelism"] = parallelism
    return spec


def problem_of(spec: dict[str, Any], **changes: Any) -> Problem:
    problem = resolve_intent(load_intent(spec))
    return replace(problem, **changes) if changes else problem


def fake_estimate(memory: float = 10.0, tokens: float = 1000.0, hbm: float = 80.0) -> Estimate:
    return Estimate(memory_gib=memory, memory={"total": memory}, fits=memory <= hbm, hbm_gib=hbm, step_time_s=1.0,
                    time={"compute": 1.0}, tflops_per_gpu=100.0, tokens_per_s_per_gpu=tokens, mfu=0.1,
                    bound="compute")


# -- pins ---------------------------------------------------------------------------------------------------
def test_pins_are_respected_by_the_winner_and_every_alternative() -> None:
    pins = {"strategy": "fsdp2", "tp": [1, 2], "ep": [4, 8], "pp": 1, "activation_checkpointing": True,
            "local_batch_size": [1, 2]}
    result = plan(problem_of(intent(nodes=4, parallelism=pins)))
    for c in [result.best, *result.alternatives]:
        lay = c.layout
        assert (lay.strategy, lay.pp, lay.activation_checkpointing) == ("fsdp2", 1, "full")
        assert lay.tp in (1, 2) and lay.ep in (4, 8) and lay.local_batch_size in (1, 2)
    assert result.alternatives, "several pinned choices should leave runners-up"


def test_a_pin_that_breaks_a_rule_is_reported_with_the_rule() -> None:
    # ep=3 cannot divide 128 experts nor tile 16 GPUs: every layout is pruned, nothing is estimated.
    with pytest.raises(InfeasibleError) as err:
        plan(problem_of(intent(parallelism={"ep": 3})))
    assert "am-r13" in str(err.value) or "am-r26" in str(err.value)
    assert "ep_size=3" in str(err.value)


# -- determinism ------------------------------------------------------------------------------------------------
def test_same_problem_same_plan() -> None:
    problem = problem_of(intent())
    first, second = plan(problem), plan(problem)
    assert first.best == second.best
    assert [c.layout for c in first.alternatives] == [c.layout for c in second.alternatives]
    assert (first.pruned, first.considered) == (second.pruned, second.considered)


# -- ranking ----------------------------------------------------------------------------------------------------
def test_throughput_objective_picks_the_fastest_layout_that_fits() -> None:
    problem = problem_of(intent(model="Qwen/Qwen3-8B"))

    def tp_is_fast(_p: Problem, lay: Layout) -> Estimate:
        return fake_estimate(memory=90.0 if lay.tp == 8 and lay.cp == 1 else 10.0, tokens=1000.0 * lay.tp)

    best = plan(problem, estimate=tp_is_fast).best.layout
    # tp=8 is the fastest tp the 8 KV heads and the node allow; without CP it does not fit, so CP=2 joins it.
    assert best.tp == 8 and best.cp == 2


def test_memory_objective_picks_the_lowest_peak() -> None:
    problem = problem_of(intent(nodes=1), objective="memory")

    def memory_falls_with_ep(_p: Problem, lay: Layout) -> Estimate:
        return fake_estimate(memory=100.0 / lay.ep + lay.local_batch_size, tokens=1.0)

    best = plan(problem, estimate=memory_falls_with_ep).best.layout
    assert best.ep == 8 and best.local_batch_size == 1


def test_ties_go_to_the_simplest_layout() -> None:
    problem = problem_of(intent(nodes=1))
    best = plan(problem, estimate=lambda _p, _l: fake_estimate()).best.layout
    assert (best.strategy, best.tp, best.pp, best.cp, best.ep, best.dp_replicate, best.vpp) == (
        "fsdp2", 1, 1, 1, 1, 1, 1)
    assert best.activation_checkpointing == "off" and best.local_batch_size == 1


def test_throughputs_within_one_percent_tie_and_groups_inside_a_node_win() -> None:
    problem = problem_of(intent(nodes=2))
    base = Layout(world_size=16, global_batch_size=256, dispatcher="deepep")
    in_node = Candidate(base.with_(ep=8, dispatcher="hybridep"), fake_estimate(tokens=1000.0))
    across = Candidate(base.with_(ep=16), fake_estimate(tokens=1004.0))
    much_faster = Candidate(base.with_(ep=16, tp=2), fake_estimate(tokens=1100.0))
    assert rank(problem, [across, in_node]) == [in_node, across]
    assert rank(problem, [in_node, across, much_faster])[0] == much_faster


def test_a_tie_is_measured_against_the_best_not_against_fixed_buckets() -> None:
    """0.3% apart is a tie at every scale (fixed log buckets split such pairs at their edges); a tie is
    within 1% of the best, so a middle layout can tie with the best while the simplest one does not."""
    problem = problem_of(intent(nodes=2))
    base = Layout(world_size=16, global_batch_size=256, dispatcher="deepep")
    simple, middle, complex_ = base.with_(ep=8), base.with_(ep=8, tp=2), base.with_(ep=8, tp=2, cp=2)
    for k in range(400):  # scales sweeping many 1% steps, each crossing where an old bucket edge fell
        tokens = 1000.0 * 1.0025 ** k
        slower = Candidate(simple, fake_estimate(tokens=tokens))
        assert rank(problem, [Candidate(complex_, fake_estimate(tokens=tokens * 1.003)), slower])[0] == slower
        faster = Candidate(complex_, fake_estimate(tokens=tokens * 1.011))
        assert rank(problem, [faster, slower])[0] == faster
    chain = [Candidate(simple, fake_estimate(tokens=1000.0)), Candidate(middle, fake_estimate(tokens=1008.0)),
             Candidate(complex_, fake_estimate(tokens=1015.0))]
    assert [c.layout for c in rank(problem, chain)] == [middle, complex_, simple]


def test_memory_ties_are_within_one_percent_of_the_lowest_peak() -> None:
    problem = problem_of(intent(nodes=2), objective="memory")
    base = Layout(world_size=16, global_batch_size=256, dispatcher="deepep")
    simple, complex_ = base.with_(ep=8), base.with_(ep=8, tp=2)
    tied = [Candidate(complex_, fake_estimate(memory=50.0)), Candidate(simple, fake_estimate(memory=50.4))]
    assert rank(problem, tied)[0].layout == simple
    apart = [Candidate(complex_, fake_estimate(memory=50.0)), Candidate(simple, fake_estimate(memory=50.6))]
    assert rank(problem, apart)[0].layout == complex_


def test_the_simplicity_key_orders_as_documented() -> None:
    base = Layout(world_size=16, global_batch_size=256)
    ordered = [base, base.with_(activation_checkpointing=True), base.with_(strategy="ddp"), base.with_(ep=8),
               base.with_(ep=16), base.with_(tp=2, ep=8)]  # 16 GPUs, 8 per node: ep16 leaves the node
    assert sorted(ordered, key=lambda lay: simplicity(lay, 8)) == ordered


# -- pruning ----------------------------------------------------------------------------------------------------
def test_pruning_counts_are_the_rules_own() -> None:
    problem = problem_of(intent())  # Qwen3-30B-A3B has 4 KV heads: tp=8 breaks the heads rule
    seen_tp8 = []

    def counting_check(layout: Layout, **kwargs: Any) -> list:
        if layout.tp == 8:
            seen_tp8.append(layout)
        return check_layout(layout, **kwargs)

    result = plan(problem, check=counting_check)
    heads_rule = "am-r24-tp-divides-heads"
    assert heads_rule in RULES and set(result.pruned) <= set(RULES)
    assert result.pruned[heads_rule] == len(seen_tp8) > 0
    assert "tp_size=8" in result.reasons[heads_rule]
    assert all(c.layout.tp != 8 for c in [result.best, *result.alternatives])
    assert result.considered >= len(result.dropped) + result.feasible
    for rule, count in result.pruned.items():  # each drop keeps its reasons, and the counts add up
        assert count == sum(any(f.rule == rule for f in errors) for _, errors in result.dropped)
    assert all(errors and all(f.severity == "error" for f in errors) for _, errors in result.dropped)

    narrowed = plan(problem_of(intent(parallelism={"tp": [1, 2, 4]})))
    assert heads_rule not in narrowed.pruned


def test_pipeline_layouts_are_enumerated_with_virtual_stages() -> None:
    found = search(problem_of(intent(model="meta-llama/Llama-3.1-70B", nodes=4)))
    schedules = {(c.layout.pp > 1, c.layout.vpp > 1, c.layout.pp_schedule) for c in found.candidates}
    assert (False, False, None) in schedules
    assert (True, False, "1f1b") in schedules and (True, True, "interleaved1f1b") in schedules
    for c in found.candidates:
        lay = c.layout
        assert lay.global_batch_size % (lay.local_batch_size * lay.dp) == 0
        if lay.pp > 1:
            assert lay.local_batch_size % lay.micro_batch_size == 0 and lay.n_microbatches >= lay.pp


# -- nothing fits -----------------------------------------------------------------------------------------------
def test_every_remedy_is_computed_by_replanning() -> None:
    """A synthetic cost model where each remedy alone makes the layout fit, by a known amount."""
    spec = intent(model="Qwen/Qwen3-8B", nodes=1, seq_length=16384, global_batch_size=16,
                  parallelism={"activation_checkpointing": False, "local_batch_size": 2})

    def memory_model(p: Problem, lay: Layout) -> Estimate:
        mem = (120.0 * p.training.seq_length / 16384 * 8 / lay.world_size
               * (0.5 if lay.checkpointed else 1.0) * lay.local_batch_size / 2)
        return fake_estimate(memory=mem, hbm=p.cluster.gpu.hbm_gib)

    with pytest.raises(InfeasibleError) as err:
        plan(problem_of(spec), estimate=memory_model)
    text = "\n".join(err.value.suggestions)
    assert "more GPUs: 2 node(s) × 8 (16 GPUs)" in text
    assert "another checkpointing mode (parallelism.activation_checkpointing: full)" in text
    assert "local_batch_size 1" in text
    assert "seq_length 9216 is the longest that fits" in text  # 120·s/16384 <= 0.9·79.65 -> s <= 9789
    assert "a larger GPU: h200-141gb" in text                  # the smallest HBM with 0.9·HBM >= 120 GiB
    assert "drop the parallelism pins" in text
    closest = err.value.closest
    assert closest and [c.estimate.memory_gib for c in closest] == sorted(c.estimate.memory_gib for c in closest)


def test_nothing_fits_with_the_real_cost_model_suggests_a_verified_gpu_count() -> None:
    problem = problem_of(intent(model="meta-llama/Llama-3.1-70B", nodes=1, gpus_per_node=2))
    with pytest.raises(InfeasibleError) as err:
        plan(problem)
    text = "\n".join(err.value.suggestions)
    match = re.search(r"more GPUs: (\d+) node\(s\) × (\d+)", text)
    assert match, text
    nodes, per_node = int(match.group(1)), int(match.group(2))
    bigger = replace(problem, cluster=ClusterSpec(gpu=problem.cluster.gpu, nodes=nodes, gpus_per_node=per_node))
    assert plan(bigger).best.estimate.fits


def test_nothing_fits_exits_1_with_the_message(tmp_path: Any, capsys: Any) -> None:
    path = tmp_path / "too-big.yaml"
    path.write_text("model: meta-llama/Llama-3.1-70B\nhardware: {gpu: h100-80gb, nodes: 1, gpus_per_node: 1}\n"
                    "training: {seq_length: 4096, global_batch_size: 8}\n", encoding="utf-8")
    assert main(["compile", str(path)]) == 1
    err = capsys.readouterr().err
    assert "no layout fits" in err and "closest layouts" in err and "more GPUs" in err
    assert "Traceback" not in err


# -- estimate ---------------------------------------------------------------------------------------------------
FULL_PINS = {"strategy": "fsdp2", "tp": 1, "pp": 1, "cp": 1, "ep": 8, "dp_replicate": 1,
             "activation_checkpointing": True, "local_batch_size": 1}


def test_estimate_evaluates_the_pinned_layout_and_never_refuses() -> None:
    est = estimate(intent(parallelism=FULL_PINS))
    assert est.fits and est.memory_gib > 0
    too_big = estimate(intent(nodes=1, gpus_per_node=1, parallelism={**FULL_PINS, "ep": 1}))
    assert not too_big.fits and too_big.memory_gib > too_big.hbm_gib


def test_estimate_names_the_open_pins() -> None:
    with pytest.raises(InputError) as err:
        estimate(intent(parallelism={"tp": 1, "pp": 2}))
    text = str(err.value)
    for name in ("strategy", "cp", "ep", "vpp", "micro_batch_size", "local_batch_size"):
        assert name in text
    assert "tp," not in text.split("still open:")[1]


def test_estimate_refuses_virtual_stages_without_a_pipeline() -> None:
    with pytest.raises(InputError, match="virtual stages but pp is pinned to 1"):
        estimate(intent(parallelism={**FULL_PINS, "vpp": 2}))


def test_estimate_of_an_illegal_pinned_layout_is_a_rule_failure() -> None:
    with pytest.raises(ValidationFailed) as err:
        estimate(intent(parallelism={**FULL_PINS, "ep": 3}))
    assert "ep_size=3" in str(err.value)


def test_compile_uses_the_winner_of_the_plan() -> None:
    spec = intent()
    result = compile_intent(spec)
    assert result.layout == plan(problem_of(spec)).best.layout
    assert result.considered > result.feasible > 0


# -- the shortcuts, checked against a brute-force walk on the real cost model ---------------------------------
def brute_force_fitting(problem: Problem, cp_shards: str = "long") -> list[Candidate]:
    """Every layout of the planner's space (its structures times every batch split), judged one by one."""
    walk = Enumerator(problem, check_layout, estimate_layout, first_fit=False, cp_shards=cp_shards)
    kwargs = {"model": problem.model, "cluster": problem.cluster, "training": problem.training}
    found = []
    for base, dp in walk.structures():
        for mbs, lbs_list in walk.batches(base["pp"], dp):
            for lbs in lbs_list:
                layout = Layout(**base, local_batch_size=lbs, micro_batch_size=mbs)
                if any(f.severity == "error" for f in check_layout(layout, **kwargs)):
                    continue
                est = estimate_layout(problem, layout)
                if fits(problem, est):
                    found.append(Candidate(layout, est))
    return found


def assert_search_is_brute_force(problem: Problem) -> None:
    """The search keeps every fitting layout brute force finds but a pipeline's smaller local batches where a
    larger one at the same micro batch fits and runs at least as fast (throughput objective only), so the
    winner and the best layout of every structure (explain's runners-up) are the same."""
    brute = brute_force_fitting(problem)
    found = search(problem).fitting
    kept = {c.layout for c in found}
    assert kept <= {c.layout for c in brute}
    for c in brute:
        if c.layout not in kept:
            lay = c.layout
            faster = [k for k in found if structure(k.layout) == structure(lay)
                      and k.layout.micro_batch_size == lay.micro_batch_size
                      and k.layout.local_batch_size > lay.local_batch_size]
            assert problem.objective == "throughput" and lay.pp > 1 and faster, lay.short()
            assert all(k.estimate.tokens_per_s_per_gpu >= c.estimate.tokens_per_s_per_gpu for k in faster)
    assert distinct_structures(rank(problem, found)) == distinct_structures(rank(problem, brute))
    # where no layout with long CP shards fits, the plan is the best of the whole space, the short shards too
    brute = brute or brute_force_fitting(problem, cp_shards="all")
    if brute:
        assert plan(problem).best == rank(problem, brute)[0]
    else:
        with pytest.raises(InfeasibleError):
            plan(problem)


# Where the shortcut 'stop at the first batch split that does not fit' missed layouts that fit: without
# gradient accumulation nothing is kept across micro batches, so the largest local batch can fit when a
# smaller one does not (Mixtral LoRA on 16 H200: tp1 ep1 ac lbs4 136 GiB, lbs8 70 GiB).
SHORTCUT_REGRESSIONS = {
    "mixtral-lora-16xh200": intent(model="mistralai/Mixtral-8x7B-v0.1", gpu="h200-141gb", task="peft",
                                   global_batch_size=128),
    "qwen3-235b-128xgb200": intent(model="Qwen/Qwen3-235B-A22B", gpu="gb200-nvl72", nodes=32, gpus_per_node=4,
                                   global_batch_size=1024),
}


@pytest.mark.parametrize("name", sorted(SHORTCUT_REGRESSIONS))
def test_search_finds_every_fitting_layout_where_the_old_shortcut_did_not(name: str) -> None:
    assert_search_is_brute_force(problem_of(SHORTCUT_REGRESSIONS[name]))


def test_the_one_micro_batch_split_can_fit_where_smaller_splits_do_not() -> None:
    """Why the walk judges the split without gradient accumulation on its own (the real cost model): under
    a deferred gradient sync (AutoModel's default, and always under PP) a smaller split accumulates every
    gradient unsharded in fp32 (128 GiB for Qwen3-32B), which the one-micro-batch split does not."""
    problem = problem_of(intent(model="Qwen/Qwen3-32B", gpu="h200-141gb", task="pretrain", global_batch_size=64))
    by_lbs = {lbs: estimate_layout(problem, make_layout(problem, strategy="fsdp2", tp=1, pp=1, cp=1, ep=1,
                                                        dp_replicate=1, vpp=1, activation_checkpointing=True,
                                                        local_batch_size=lbs), options=AUTOMODEL_DEFAULTS)
              for lbs in (2, 4)}  # 4 x 16 GPUs = the global batch of 64
    assert not fits(problem, by_lbs[2]) and fits(problem, by_lbs[4])
    assert any(c.layout.local_batch_size == 4 and c.layout.tp == 1 and c.layout.pp == 1
               for c in search(problem).fitting)


@settings(max_examples=40, deadline=None)
@given(model=st.sampled_from(["Qwen/Qwen3-30B-A3B", "mistralai/Mixtral-8x7B-v0.1", "openai/gpt-oss-20b",
                              "meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.2-1B", "meta-llama/Llama-3.1-70B",
                              "Qwen/Qwen3-Next-80B-A3B-Instruct"]),
       gpu=st.sampled_from(["a100-40gb", "h100-80gb", "h200-141gb", "b200"]),
       nodes=st.sampled_from([1, 2, 4]), gpus_per_node=st.sampled_from([1, 2, 4, 8]),
       seq_length=st.sampled_from([2048, 4096, 16384]), global_batch_size=st.sampled_from([8, 32, 128, 512]),
       task=st.sampled_from(["sft", "peft", "pretrain"]), objective=st.sampled_from(["throughput", "memory"]))
def test_search_finds_what_brute_force_finds(model: str, gpu: str, nodes: int, gpus_per_node: int,
                                             seq_length: int, global_batch_size: int, task: str,
                                             objective: str) -> None:
    """Same fitting layouts and the same winner as judging every layout of the space, over random problems."""
    spec = intent(model=model, gpu=gpu, nodes=nodes, gpus_per_node=gpus_per_node, seq_length=seq_length,
                  global_batch_size=global_batch_size, task=task)
    assert_search_is_brute_force(problem_of(spec, objective=objective))


def assert_bounded_plan_is_exhaustive(problem: Problem) -> None:
    """The plan that skips timing layouts which cannot place is the plan that times every layout: the same
    winner, alternatives (with their estimates), feasible count, rule drops and layouts considered."""
    try:
        exhaustive = plan(problem, exhaustive=True)
    except InfeasibleError as err:
        with pytest.raises(InfeasibleError) as bounded_err:
            plan(problem)
        assert str(bounded_err.value) == str(err)
        return
    bounded = plan(problem)
    assert bounded.best == exhaustive.best
    assert bounded.alternatives == exhaustive.alternatives
    assert (bounded.feasible, bounded.considered) == (exhaustive.feasible, exhaustive.considered)
    assert (bounded.pruned, bounded.reasons) == (exhaustive.pruned, exhaustive.reasons)


@settings(max_examples=20, deadline=None)
@given(model=st.sampled_from(["Qwen/Qwen3-30B-A3B", "mistralai/Mixtral-8x7B-v0.1", "openai/gpt-oss-20b",
                              "meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.1-70B",
                              "Qwen/Qwen3-Next-80B-A3B-Instruct"]),
       gpu=st.sampled_from(["a100-40gb", "h100-80gb", "b200"]), nodes=st.sampled_from([1, 2, 4, 8, 16]),
       seq_length=st.sampled_from([2048, 4096, 32768]), global_batch_size=st.sampled_from([16, 128, 512]),
       task=st.sampled_from(["sft", "peft", "pretrain"]), objective=st.sampled_from(["throughput", "memory"]))
def test_bounded_plan_is_the_exhaustive_plan(model: str, gpu: str, nodes: int, seq_length: int,
                                             global_batch_size: int, task: str, objective: str) -> None:
    spec = intent(model=model, gpu=gpu, nodes=nodes, seq_length=seq_length, global_batch_size=global_batch_size,
                  task=task)
    assert_bounded_plan_is_exhaustive(problem_of(spec, objective=objective))


@pytest.mark.parametrize("objective", ["throughput", "memory"])
def test_the_bound_skips_timing_and_keeps_the_plan(objective: str) -> None:
    """On a large space most fitting layouts are counted without being timed, and the plan is unchanged."""
    from automodel_dist.cost.model import screen_layout
    from automodel_dist.planner import _default_checker

    problem = problem_of(intent(nodes=32, global_batch_size=512, task="pretrain"), objective=objective)
    bounded = Enumerator(problem, _default_checker(), estimate_layout, False, screen_layout).run()
    assert bounded.untimed_fits > len(bounded.fitting)
    assert_bounded_plan_is_exhaustive(problem)


# a base recipe whose settings make a step faster than AutoModel's defaults: fused elementwise ops, the router's
# CUDA graph (less host time), bf16 gradient reduction
FAST_BASE = replace(AUTOMODEL_DEFAULTS, compiled=True, cuda_graphs=("moe_router",), reduce_dtype="bfloat16")


def test_the_bound_holds_with_a_base_recipe_faster_than_the_defaults() -> None:
    """The bound is taken under the settings the compiler writes (the base's fused ops and CUDA graphs too), not
    AutoModel's defaults, which would bound a faster base's layouts too low and skip timing a winner."""
    problem = problem_of(intent(nodes=32, global_batch_size=512, task="pretrain"), recipe_options=FAST_BASE)
    assert_bounded_plan_is_exhaustive(problem)


def test_nothing_fits_says_the_same_as_the_exhaustive_search() -> None:
    """Layouts that do not fit are timed only when nothing fits, in the order the exhaustive search lists them."""
    problem = problem_of(intent(model="deepseek-ai/DeepSeek-V3", nodes=8, global_batch_size=4096, task="pretrain"))
    assert_bounded_plan_is_exhaustive(problem)
    with pytest.raises(InfeasibleError):
        plan(problem)


@pytest.mark.parametrize("base", [None, FAST_BASE], ids=["defaults", "fast-base"])
@pytest.mark.parametrize("model", ["Qwen/Qwen3-30B-A3B", "deepseek-ai/DeepSeek-V3", "meta-llama/Llama-3.1-70B"])
def test_step_time_floor_bounds_the_step_under_every_option(model: str, base: Any) -> None:
    """The premise of the bound: no layout steps faster than its floor (host time included), under any setting the
    compiler may write, with AutoModel's defaults or a base recipe's."""
    from automodel_dist.cost.model import option_choices
    from automodel_dist.cost.throughput import step_time_floor

    problem = problem_of(intent(model=model, nodes=16, global_batch_size=1024, seq_length=8192), recipe_options=base)
    shape, gpu = model_shape(problem.model, problem.training), problem.cluster.gpu
    for c in search(problem).candidates[::3]:
        floors = set()
        for options in option_choices(problem, c.layout):
            floor = step_time_floor(shape, c.layout, problem.training, gpu, options=options)
            assert floor <= estimate_layout(problem, c.layout, options=options).step_time_s * (1 + 1e-12), \
                c.layout.short()
            floors.add(floor)
        assert len(floors) == 1, "one floor for every choice: screen_layout computes it once"


@pytest.mark.parametrize(("model", "task", "parallelism"), [
    ("Qwen/Qwen3-30B-A3B", "pretrain", None), ("deepseek-ai/DeepSeek-V3", "pretrain", None),
    ("meta-llama/Llama-3.1-70B", "peft", None), ("Qwen/Qwen3-8B", "sft", {"strategy": "ddp"}),
    ("Qwen/Qwen3-8B", "sft", {"strategy": "megatron_fsdp"}), ("meta-llama/Llama-3.1-70B", "sft", {"pp": 4})])
def test_no_layout_peaks_below_the_memory_floor(model: str, task: str, parallelism: dict | None) -> None:
    """The premise of skipping a hopeless remedy: every layout's peak, under every setting the compiler may
    write, is at least `peak_floor_gib` (runtime plus the rank's share of the bf16 weights)."""
    from automodel_dist.cost.memory import peak_floor_gib
    from automodel_dist.cost.model import option_choices

    problem = problem_of(intent(model=model, nodes=4, task=task, parallelism=parallelism))
    floor = peak_floor_gib(model_shape(problem.model, problem.training), problem.cluster.world_size)
    layouts = [c.layout for c in search(problem).candidates]
    assert layouts
    for lay in layouts[::3]:
        for options in option_choices(problem, lay):
            assert estimate_layout(problem, lay, options=options).memory_gib >= floor, lay.short()


@pytest.mark.parametrize("spec", [
    intent(model="meta-llama/Llama-3.1-70B", nodes=1, gpus_per_node=1, global_batch_size=8),
    {**intent(model="meta-llama/Llama-3.2-1B", nodes=1, gpus_per_node=2, global_batch_size=8),
     "memory_headroom": 0.99}], ids=["70b-on-1", "headroom-99"])
def test_hopeless_remedies_are_skipped_with_the_same_answer(spec: dict[str, Any]) -> None:
    """The remedy search skips the variations the memory floor rules out and suggests exactly what searching
    every variation suggests."""
    from automodel_dist import infeasible
    from automodel_dist.cost.model import cannot_fit, screen_layout
    from automodel_dist.planner import _default_checker

    problem = problem_of(spec)
    skipped: list[Problem] = []

    def hopeless(varied: Problem) -> bool:
        if cannot_fit(varied):
            skipped.append(varied)
            return True
        return False

    args = (problem, _default_checker(), estimate_layout, screen_layout)
    assert infeasible.suggestions(*args, hopeless=hopeless) == infeasible.suggestions(*args)
    assert cannot_fit(problem) and skipped


def test_where_every_layout_breaks_a_rule_the_batch_remedy_goes_first_and_the_search_stops_at_its_budget(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A global batch of 1 with local batch 2 pinned breaks the batch split on every layout: the remedy search tries
    the remedies that change what the rules read first (a nearby global batch is found), and once it has judged its
    budget of layouts it stops and names the remedies it did not search (a count, not a clock)."""
    from automodel_dist import infeasible
    from automodel_dist.cost.model import screen_layout
    from automodel_dist.planner import _default_checker

    monkeypatch.setattr(infeasible, "REMEDY_LAYOUTS", 6_000)
    problem = problem_of(intent(nodes=4, global_batch_size=1, parallelism={"local_batch_size": 2}))
    hints, untried = infeasible.suggestions(problem, _default_checker(), estimate_layout, screen_layout,
                                            any_legal=False)
    assert any(h.startswith("global_batch_size ") for h in hints)
    assert untried and "nearby global batches" not in untried
    with pytest.raises(InfeasibleError, match=r"not searched \(the remedy search stops after 6,000 layouts\)"):
        plan(problem)


def test_a_problem_too_big_for_its_gpus_searches_every_remedy_within_the_budget() -> None:
    """The neighbour: a 70B model on one GPU judges a few layouts per re-plan, so no remedy is left unsearched."""
    from automodel_dist import infeasible
    from automodel_dist.cost.model import screen_layout
    from automodel_dist.planner import _default_checker

    problem = problem_of(intent(model="meta-llama/Llama-3.1-70B", nodes=1, gpus_per_node=1, global_batch_size=8))
    hints, untried = infeasible.suggestions(problem, _default_checker(), estimate_layout, screen_layout)
    assert hints and untried == []


@pytest.mark.parametrize("model", ["Qwen/Qwen3-30B-A3B", "meta-llama/Llama-3.1-70B", "Qwen/Qwen3-8B"])
def test_checkpointing_never_needs_more_memory_at_the_same_split(model: str) -> None:
    """The premise of skipping a split without checkpointing where the same split with it did not fit."""
    from automodel_dist.cost.model import option_choices

    problem = problem_of(intent(model=model, nodes=4))
    for c in search(problem).candidates[::5]:
        lay = c.layout
        for options in option_choices(problem, lay):  # under each recipe setting the compiler may write
            with_ac = estimate_layout(problem, lay.with_(activation_checkpointing=True), options=options).memory_gib
            without = estimate_layout(problem, lay.with_(activation_checkpointing=False), options=options).memory_gib
            assert with_ac <= without, lay.short()


def test_no_legal_layout_says_so_and_offers_a_global_batch_that_divides() -> None:
    problem = problem_of(intent(model="meta-llama/Llama-3.2-1B", nodes=3, seq_length=2048, global_batch_size=16))
    with pytest.raises(InfeasibleError) as err:
        plan(problem)
    text = str(err.value)
    assert "no layout is legal" in text and "am-r39-gbs-divisible" in text and not err.value.closest
    batch = int(re.search(r"global_batch_size (\d+) instead of 16", text).group(1))
    assert plan(replace(problem, training=replace(problem.training, global_batch_size=batch))).best


@pytest.mark.parametrize("model, nodes, global_batch_size", [("Qwen/Qwen3-30B-A3B", 1, 2),
                                                             ("deepseek-ai/DeepSeek-V3", 64, 128)])
def test_cp_shards_the_heuristic_skips_are_searched_before_nothing_is_legal(model: str, nodes: int,
                                                                           global_batch_size: int) -> None:
    """A global batch smaller than the world needs a data-parallel size only CP shards below MIN_CP_TOKENS leave
    (global batch 2 on 8 GPUs: dp 2, CP 4 at 1,024 tokens a rank). The heuristic only speeds the search: the plan
    searches those shards before it says no layout is legal, and the recipe says why its CP is that wide."""
    problem = problem_of(intent(model=model, nodes=nodes, global_batch_size=global_batch_size))
    assert not search(problem).fitting  # the premise: no layout with long shards fits
    best = plan(problem).best
    assert fits(problem, best.estimate) and 4096 // best.layout.cp < MIN_CP_TOKENS
    result = compile_intent(intent(model=model, nodes=nodes, global_batch_size=global_batch_size))
    assert result.layout == best.layout
    assert f"below {MIN_CP_TOKENS} tokens per rank: no layout with longer shards is legal and fits" in result.yaml


def test_the_short_cp_search_follows_the_exhaustive_plan() -> None:
    assert_bounded_plan_is_exhaustive(problem_of(intent(nodes=1, global_batch_size=2)))


def test_a_plan_that_fits_with_long_cp_shards_searches_no_other() -> None:
    """The fallback costs nothing where a layout fits: the plan walks the layouts the heuristic keeps, no more."""
    problem = problem_of(intent(nodes=1, global_batch_size=8))
    assert plan(problem).considered == search(problem).considered


def test_a_cp_pin_is_never_widened() -> None:
    """With CP pinned to long shards, the pin holds: nothing fits global batch 2 on 8 GPUs, and the message says so."""
    problem = problem_of(intent(nodes=1, global_batch_size=2, parallelism={"cp": 2}))
    with pytest.raises(InfeasibleError, match="no layout is legal"):
        plan(problem)


def test_the_global_batch_remedy_reaches_a_multiple_of_the_widest_data_parallel_size() -> None:
    """gpt-oss-120b PEFT at global batch 1 on 32 A100s (CP pinned to 1) fits at 32, where every rank has a sample:
    the remedy tries every DP size's nearest multiples (not the nearest four, 2-16, none of which fits)."""
    spec = intent(model="openai/gpt-oss-120b", gpu="a100-80gb", nodes=4, task="peft", seq_length=1024,
                  global_batch_size=1, precision="fp8", parallelism={"cp": 1})
    with pytest.raises(InfeasibleError) as err:
        plan(problem_of(spec))
    assert "global_batch_size 32 instead of 1" in str(err.value)
    spec["training"]["global_batch_size"] = 32
    assert fits(problem_of(spec), plan(problem_of(spec)).best.estimate)


@pytest.mark.parametrize("global_batch_size, nodes, tried", [(1, 4, [2, 4, 8, 16, 32]), (4096, 8, []),
                                                             (100, 1, [96, 104])])
def test_the_global_batch_remedy_tries_each_nearby_multiple_once_and_never_the_intents(
        global_batch_size: int, nodes: int, tried: list[int]) -> None:
    """Nearest first, each once; a batch every DP size divides has nothing to try (re-planning the intent's own
    batch would only spend the remedy budget)."""
    from automodel_dist import infeasible

    seen: list[int] = []

    def attempt(problem: Problem) -> None:
        seen.append(problem.training.global_batch_size)

    problem = problem_of(intent(nodes=nodes, global_batch_size=global_batch_size))
    assert infeasible._other_global_batch(problem, attempt) is None
    assert seen == tried


def test_where_no_layout_is_legal_the_remedies_search_short_cp_shards_as_plan_does() -> None:
    """Global batch 2 on 8 GPUs fits only with CP shards below MIN_CP_TOKENS: a remedy re-plan of a rule-bound
    problem finds it (as `plan` would); a memory-bound one leaves them out (and its message says so)."""
    from automodel_dist import infeasible
    from automodel_dist.cost.model import screen_layout
    from automodel_dist.planner import _default_checker

    problem = problem_of(intent(nodes=1, global_batch_size=2))
    args = (_default_checker(), estimate_layout, screen_layout)
    found = infeasible._attempt_with(*args, short_cp=True)(problem)
    assert found is not None and 4096 // found.layout.cp < MIN_CP_TOKENS
    assert infeasible._attempt_with(*args)(problem) is None


def test_a_memory_bound_verdict_says_which_cp_shards_the_remedies_searched() -> None:
    """Nothing fits with 99% of memory kept free, and no remedy helps: the message says the re-plans kept CP
    shards of at least MIN_CP_TOKENS (the plan itself searched the shorter ones)."""
    problem = problem_of(intent(model="meta-llama/Llama-3.1-8B", nodes=1), memory_headroom=0.99)
    with pytest.raises(InfeasibleError) as err:
        plan(problem)
    assert (f"nothing tried makes it fit: more GPUs (up to 1024 nodes), activation checkpointing, a smaller local "
            f"batch, a shorter sequence, every larger GPU preset, nearby global batches, dropping the pins were "
            f"searched (with at least {MIN_CP_TOKENS} tokens per CP rank)") in str(err.value)


def test_local_and_micro_batches_are_every_divisor_not_only_powers_of_two() -> None:
    """A global batch of 384 over 64 data-parallel ranks splits into local batches of 6 (or 3, 2, 1); under a
    pipeline the micro batches divide them. Only powers of two missed Qwen3-235B's 27% faster lbs 6 layout."""
    problem = problem_of(intent(model="Qwen/Qwen3-235B-A22B", nodes=128, global_batch_size=384, seq_length=8192,
                                task="pretrain", init="from_scratch"))
    space = Enumerator(problem, check_layout, estimate_layout, first_fit=False)
    assert space.batches(1, 64) == [(1, [1]), (2, [2]), (3, [3]), (6, [6])]
    assert space.batches(4, 64) == [(1, [6])]
    assert space.batches(2, 128) == [(1, [3])]
    best = plan(problem).best.layout
    assert (best.local_batch_size, best.pp, best.cp) == (6, 4, 4)


def test_a_micro_batch_pin_implies_a_pipeline() -> None:
    """The pin is AutoModel's pipeline micro batch: a layout without a pipeline would drop it without a word."""
    pins = {"micro_batch_size": 1, "local_batch_size": 4, "tp": 1, "cp": 1, "ep": 8, "dp_replicate": 1}
    found = search(problem_of(intent(parallelism=pins)))
    assert found.candidates
    for c in found.candidates:
        lay = c.layout
        assert lay.pp > 1 and lay.local_batch_size == 4 and lay.micro_batch_size == 1
    dense = plan(problem_of(intent(model="meta-llama/Llama-3.1-8B", seq_length=8192, global_batch_size=128,
                                   parallelism={"micro_batch_size": 4})))
    assert dense.best.layout.pp > 1 and dense.best.layout.micro_batch_size == 4


def test_a_virtual_stage_pin_implies_a_pipeline() -> None:
    found = search(problem_of(intent(model="meta-llama/Llama-3.1-70B", nodes=4, parallelism={"vpp": 2})))
    assert found.candidates and all(c.layout.pp > 1 and c.layout.vpp == 2 for c in found.candidates)


# -- pipeline stages against AutoModel's own splitting functions ----------------------------------------------
LAYER_COUNTS = (16, 24, 28, 32, 36, 48, 56, 61, 64, 80, 94, 126)  # the catalog's models


def automodel_stage_layers(num_layers: int, num_stages: int) -> list[int]:
    """Decoder layers per stage as AutoModel 0.7.0 assigns them (generate_hf_model_fqn_per_model_part)."""
    from nemo_automodel.components.distributed.pipelining.functional import generate_hf_model_fqn_per_model_part

    parts = generate_hf_model_fqn_per_model_part(num_stages, num_layers, include_embeddings=False,
                                                 include_lm_head=False, include_rotary_emb=False,
                                                 include_multimodal_encoders=False)
    return [sum(".layers." in name for name in part) for part in parts]


def test_every_pipeline_split_the_planner_enumerates_is_accepted_by_automodel() -> None:
    """pp (up to the layer count) with vpp 1, and each vpp `virtual_stage_options` offers with the
    `layers_per_stage` the emitter writes: AutoModel's calculate_virtual_stages returns exactly pp·vpp stages
    and vpp per rank, and its split gives every stage at least one layer."""
    from nemo_automodel.components.distributed.pipelining.functional import calculate_virtual_stages

    checked = 0
    for layers in LAYER_COUNTS:
        for pp in range(2, min(layers, 64) + 1):
            assert calculate_virtual_stages(layers, None, pp, True) == (pp, 1)
            assert min(automodel_stage_layers(layers, pp)) >= 1
            for vpp in virtual_stage_options(layers, pp, MAX_VPP):
                per_stage = layers_per_stage(layers, pp * vpp)
                assert per_stage is not None
                assert calculate_virtual_stages(layers, per_stage, pp, False) == (pp * vpp, vpp)
                split = automodel_stage_layers(layers, pp * vpp)
                assert len(split) == pp * vpp and min(split) >= 1 and sum(split) == layers
                checked += 1
    assert checked > 100


def test_deepseek_v3_on_pp32_is_compiled_to_a_split_automodel_accepts() -> None:
    """61 layers on 32 pipeline ranks: 29 ranks with 2 layers, 3 with 1 (AutoModel puts the extra layers first)."""
    assert automodel_stage_layers(61, 32) == [2] * 29 + [1] * 3
    found = search(problem_of(intent(model="deepseek-ai/DeepSeek-V3", nodes=64, global_batch_size=4096,
                                     parallelism={"pp": 32, "tp": 1, "ep": 8, "cp": 1, "dp_replicate": 1})))
    assert {c.layout.vpp for c in found.candidates} == {1}  # 61 layers admit no 64-, 96- or 128-stage split
    assert virtual_stage_options(61, 32, MAX_VPP) == []


def test_the_cost_model_splits_stages_as_automodel_does() -> None:
    """The cost model judges the ranks AutoModel builds: 61 layers on 4 stages are 16,15,15,15 (not
    16,16,16,13), and each rank's dense/MoE layers follow AutoModel's split of DeepSeek-V3 (3 dense first)."""
    from automodel_dist.cost.memory import rank_loads
    from automodel_dist.pipeline_stages import pipeline_split

    problem = problem_of(intent(model="deepseek-ai/DeepSeek-V3"))
    shape = model_shape(problem.model, problem.training)
    for stages in range(2, 62):
        split = pipeline_split(61, stages, 1, "1f1b")
        assert [share.num_layers for share in split] == automodel_stage_layers(61, stages)
        loads = {load.rank: load for load in rank_loads(shape, Layout(world_size=stages, pp=stages,
                                                                       pp_schedule="1f1b"))}
        dense_seen = 0
        for share in split:
            if share.rank in loads:
                assert loads[share.rank].dense + loads[share.rank].moe == share.num_layers
                assert loads[share.rank].dense == max(0, min(3 - dense_seen, share.num_layers))
            dense_seen += share.num_layers


def test_a_dispatcher_pin_is_searched_and_written() -> None:
    """parallelism.dispatcher pins the MoE token dispatcher of layouts with EP (several values: each judged)."""
    spec = intent(model="Qwen/Qwen3-30B-A3B", nodes=2, global_batch_size=512,
                  parallelism={"dispatcher": ["torch", "deepep"], "ep": 16, "tp": 1, "pp": 1, "cp": 1})
    found = search(problem_of(spec))
    assert {c.layout.dispatcher for c in found.candidates} == {"torch", "deepep"}
    # across nodes the compiler would pick DeepEP; a HybridEP pin wins and says so
    result = compile_intent({**spec, "parallelism": {**spec["parallelism"], "dispatcher": "hybridep"}})
    assert result.layout.dispatcher == "hybridep"
    assert "dispatcher: hybridep  # the intent's dispatcher pin" in result.yaml
    # without EP the pin does not apply: the experts are FSDP-sharded, no token exchange
    dense_ep = search(problem_of({**spec, "parallelism": {"dispatcher": "deepep", "ep": 1, "tp": 1, "pp": 1}}))
    assert {c.layout.dispatcher for c in dense_ep.candidates} == {"torch"}


def test_the_search_skips_only_warnings() -> None:
    """The planner's checker leaves out the checks that only ever warn, so every layout keeps the same errors
    as under the full rule set."""
    from automodel_dist.findings import ERROR
    from automodel_dist.rules import check_layout

    problem = problem_of(intent(model="Qwen/Qwen3-30B-A3B", nodes=4))
    kwargs = {"model": problem.model, "cluster": problem.cluster, "training": problem.training}
    found = search(problem)
    layouts = [c.layout for c in found.candidates] + [lay for lay, _ in found.dropped]
    assert any(check_layout(lay, **kwargs) != check_layout(lay, **kwargs, warnings=False)
               for lay in layouts)  # some layouts do warn
    for lay in layouts[::3]:
        full = check_layout(lay, **kwargs)
        lean = check_layout(lay, **kwargs, warnings=False)
        assert [f for f in full if f.severity == ERROR] == [f for f in lean if f.severity == ERROR]
        assert all(f.severity != ERROR for f in full if f not in lean)

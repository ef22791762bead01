"""Planner: pins are respected, the search is deterministic, ranking follows the objective and breaks ties
toward simpler layouts, pruning counts are the rules' own, and 'nothing fits' suggestions are real."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import pytest

from automodel_dist.catalog.specs import ClusterSpec
from automodel_dist.cli import main
from automodel_dist.compiler import compile_intent, estimate
from automodel_dist.cost.estimate import Estimate
from automodel_dist.errors import InfeasibleError, InputError, ValidationFailed
from automodel_dist.intent import load_intent, resolve_intent
from automodel_dist.layout import Layout
from automodel_dist.planner import Candidate, plan, rank, search
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
        assert (lay.strategy, lay.pp, lay.activation_checkpointing) == ("fsdp2", 1, True)
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
    problem = problem_of(intent(nodes=1))

    def tp_is_fast(_p: Problem, lay: Layout) -> Estimate:
        return fake_estimate(memory=90.0 if lay.tp == 4 and lay.cp == 1 else 10.0, tokens=1000.0 * lay.tp)

    best = plan(problem, estimate=tp_is_fast).best.layout
    # tp=4 is the fastest tp the 4 KV heads allow; without CP it does not fit, so CP=2 joins it.
    assert best.tp == 4 and best.cp == 2


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
    assert not best.activation_checkpointing and best.local_batch_size == 1


def test_throughputs_within_one_percent_tie_and_groups_inside_a_node_win() -> None:
    problem = problem_of(intent(nodes=2))
    base = Layout(world_size=16, global_batch_size=256, dispatcher="deepep")
    in_node = Candidate(base.with_(ep=8, dispatcher="hybridep"), fake_estimate(tokens=1000.0))
    across = Candidate(base.with_(ep=16), fake_estimate(tokens=1004.0))
    much_faster = Candidate(base.with_(ep=16, tp=2), fake_estimate(tokens=1100.0))
    assert rank(problem, [across, in_node]) == [in_node, across]
    assert rank(problem, [in_node, across, much_faster])[0] == much_faster


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
               * (0.5 if lay.activation_checkpointing else 1.0) * lay.local_batch_size / 2)
        return fake_estimate(memory=mem, hbm=p.cluster.gpu.hbm_gib)

    with pytest.raises(InfeasibleError) as err:
        plan(problem_of(spec), estimate=memory_model)
    text = "\n".join(err.value.suggestions)
    assert "more GPUs: 2 node(s) × 8 (16 GPUs)" in text
    assert "activation checkpointing (parallelism.activation_checkpointing: true)" in text
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


# -- the shortcuts' premises, checked on the real cost model ------------------------------------------------
@pytest.mark.parametrize("model", ["Qwen/Qwen3-30B-A3B", "meta-llama/Llama-3.1-70B", "Qwen/Qwen3-8B"])
def test_memory_grows_with_the_micro_batch_and_checkpointing_saves_it(model: str) -> None:
    """The planner stops at the first micro batch that does not fit, and skips a layout without activation
    checkpointing when the same layout with it does not fit: both rest on these two facts."""
    from automodel_dist.cost.model import estimate_layout

    problem = problem_of(intent(model=model, nodes=4))
    for c in search(problem).candidates[::7]:
        lay = c.layout
        doubled = lay.with_(micro_batch_size=2 * lay.micro_batch_size,
                            local_batch_size=max(lay.local_batch_size, 2 * lay.micro_batch_size * lay.pp)
                            if lay.pp > 1 else 2 * lay.local_batch_size)
        assert estimate_layout(problem, doubled).memory_gib >= c.estimate.memory_gib, lay.short()
        with_ac = estimate_layout(problem, lay.with_(activation_checkpointing=True)).memory_gib
        without = estimate_layout(problem, lay.with_(activation_checkpointing=False)).memory_gib
        assert with_ac <= without, lay.short()


def test_no_legal_layout_says_so_and_offers_a_global_batch_that_divides() -> None:
    problem = problem_of(intent(model="meta-llama/Llama-3.2-1B", nodes=3, seq_length=2048, global_batch_size=16))
    with pytest.raises(InfeasibleError) as err:
        plan(problem)
    text = str(err.value)
    assert "no layout is legal" in text and "am-r39-gbs-divisible" in text and not err.value.closest
    batch = int(re.search(r"global_batch_size (\d+) instead of 16", text).group(1))
    assert plan(replace(problem, training=replace(problem.training, global_batch_size=batch))).best


def test_a_micro_batch_pin_binds_pipeline_layouts_only() -> None:
    pins = {"micro_batch_size": 1, "local_batch_size": 4, "tp": 1, "cp": 1, "ep": 8, "dp_replicate": 1}
    found = search(problem_of(intent(parallelism=pins)))
    by_pp = {c.layout.pp > 1 for c in found.candidates}
    assert by_pp == {False, True}
    for c in found.candidates:
        lay = c.layout
        assert lay.local_batch_size == 4 and lay.micro_batch_size == (1 if lay.pp > 1 else 4)


def test_a_virtual_stage_pin_implies_a_pipeline() -> None:
    found = search(problem_of(intent(model="meta-llama/Llama-3.1-70B", nodes=4, parallelism={"vpp": 2})))
    assert found.candidates and all(c.layout.pp > 1 and c.layout.vpp == 2 for c in found.candidates)

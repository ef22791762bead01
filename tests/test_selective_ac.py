"""Activation checkpointing as a mode (off | selective | full): the cost of each mode as AutoModel runs it,
the rule that limits selective to fsdp2/ddp, the planner's search and pins, the emitted recipe, and
AutoModel's own verdict on it."""

from __future__ import annotations

from typing import Any

import pytest
from automodel_oracle import Oracle
from hypothesis import given, settings
from hypothesis import strategies as st

from automodel_dist.catalog.hardware import get_gpu
from automodel_dist.catalog.models import resolve_model
from automodel_dist.catalog.specs import ClusterSpec
from automodel_dist.compiler import compile_intent
from automodel_dist.cost import memory, throughput
from automodel_dist.cost.memory import RecipeOptions
from automodel_dist.cost.model import estimate_layout, option_choices
from automodel_dist.cost.shape import model_shape
from automodel_dist.errors import InfeasibleError, InputError
from automodel_dist.intent import load_intent, resolve_intent
from automodel_dist.layout import AC_MODES, Layout
from automodel_dist.planner import make_layout, plan, search
from automodel_dist.problem import Problem, TrainingSpec
from automodel_dist.rules import check_layout
from automodel_dist.targets.automodel.emit import emit_recipe
from automodel_dist.targets.automodel.parse import parse_recipe
from automodel_dist.validate import validate_recipe

GIB = 2**30
# Qwen3-8B on one 8 x H100 node at 24K tokens.
SELECTIVE_WINS: dict[str, Any] = {"model": "Qwen/Qwen3-8B", "hardware": {"gpu": "h100-80gb", "nodes": 1},
                                  "training": {"seq_length": 24576, "global_batch_size": 64}}
# With TP1 CP2 pinned the layout does not fit without checkpointing; selective fits and replays less of the
# forward than full checkpointing, so it wins. (Unpinned, TP2 or CP4 without checkpointing fit and win.)
SELECTIVE_PINNED: dict[str, Any] = {**SELECTIVE_WINS, "parallelism": {"tp": 1, "cp": 2}}


def problem(model: str = "meta-llama/Llama-3.1-70B", nodes: int = 8, **training: Any) -> Problem:
    spec = {"task": "pretrain", "seq_length": 4096, "global_batch_size": 512, **training}
    return Problem(resolve_model(model), ClusterSpec(get_gpu("h100"), nodes, 8), TrainingSpec(**spec))


def layout(world: int = 64, **fields: Any) -> Layout:
    return Layout(world_size=world, **{"global_batch_size": 512, "local_batch_size": 2, "micro_batch_size": 2,
                                       **fields})


def resolved(spec: dict[str, Any], **parallelism: Any) -> Problem:
    return resolve_intent(load_intent({**spec, "parallelism": parallelism} if parallelism else spec))


def mode_options(mode: str) -> RecipeOptions:
    return RecipeOptions(checkpointing={"off": "none"}.get(mode, mode))


# -- cost: what each mode keeps and replays -------------------------------------------------------------------
def test_a_bool_is_read_as_automodel_reads_it() -> None:
    assert layout(activation_checkpointing=True).activation_checkpointing == "full"
    assert layout(activation_checkpointing=False) == layout()
    assert [layout(activation_checkpointing=m).checkpointed for m in AC_MODES] == [True, True, False]


def test_selective_keeps_the_policys_share_of_each_layers_activations() -> None:
    """Selective keeps the saved ops' outputs (SELECTIVE_AC_KEEP of the layer's activations), full only each
    layer's input plus the layer being recomputed; the embedding output is kept either way."""
    p = problem()
    shape = model_shape(p.model, p.training)
    act = {m: estimate_layout(p, layout(activation_checkpointing=m)).memory["activations"] for m in AC_MODES}
    embedding = shape.hidden * p.training.seq_length * 2 * 2 / GIB  # 2 samples, bf16, first rank
    assert act["selective"] - embedding == pytest.approx(memory.SELECTIVE_AC_KEEP * (act["off"] - embedding))
    assert act["full"] < act["selective"] < act["off"]
    assert memory.kept_activation_share("selective") == memory.SELECTIVE_AC_KEEP
    assert memory.kept_activation_share("none") == 1.0


def test_compiled_blocks_keep_fewer_activations_under_selective_only() -> None:
    """torch.compile fuses the cheap ops whose intermediates the eager policy keeps: selective keeps
    SELECTIVE_AC_KEEP_FUSED of the eager no-checkpointing activations; no and full checkpointing are unchanged."""
    p = problem()
    compiled = RecipeOptions(compiled=True)
    eager = {m: estimate_layout(p, layout(activation_checkpointing=m)).memory["activations"] for m in AC_MODES}
    fused = {m: estimate_layout(p, layout(activation_checkpointing=m), options=compiled).memory["activations"]
             for m in AC_MODES}
    embedding = model_shape(p.model, p.training).hidden * p.training.seq_length * 2 * 2 / GIB
    assert fused["selective"] - embedding == pytest.approx(
        memory.SELECTIVE_AC_KEEP_FUSED * (eager["off"] - embedding))
    assert fused["off"] == eager["off"] and fused["full"] == eager["full"]
    assert memory.SELECTIVE_AC_KEEP_FUSED < memory.SELECTIVE_AC_KEEP
    # torchtitan's benchmarks compile by default; AutoModel runs eager unless the recipe compiles
    assert memory.runs_fused(RecipeOptions(framework="torchtitan"))
    assert not memory.runs_fused(RecipeOptions()) and memory.runs_fused(compiled)


@pytest.mark.parametrize("seq", [4096, 32768])
def test_selective_replays_half_the_gemms_and_the_elementwise_ops_but_no_attention(seq: int) -> None:
    """Full replays the whole forward (a third of the compute); selective saves attention's output and every
    other matmul's, so it replays 0.5 GEMMs + elementwise: less than full without attention, more than half."""
    p = problem(seq_length=seq)
    shape, gpu = model_shape(p.model, p.training), p.cluster.gpu
    lay = layout(local_batch_size=1, micro_batch_size=1, cp=seq // 4096)
    runs = {m: throughput.compute_seconds(shape, lay, p.training, gpu, options=mode_options(m)) for m in AC_MODES}
    compute, full, attention = runs["full"]
    selective = runs["selective"][1]
    assert runs["off"][1] == 0.0
    assert full == pytest.approx(compute / 3)
    assert (full - attention / 3) / 2 < selective < full - attention / 3
    assert throughput.replayed_forward("selective", lay)[:3] == (0.0, 0.5, 1.0)


def test_selective_replays_only_the_collectives_whose_outputs_it_does_not_save() -> None:
    """CP's ring runs inside the saved attention op and the flex dispatchers' dispatch/combine are saved
    (no extra exchange); plain TP's all-reduce is replayed, as full replays everything."""
    p = problem("Qwen/Qwen3-30B-A3B", seq_length=16384)
    shape, gpu = model_shape(p.model, p.training), p.cluster.gpu

    def part(name: str, **fields: Any) -> dict[str, float]:
        return {m: throughput.time_breakdown(shape, layout(local_batch_size=1, micro_batch_size=1, **fields),
                                             p.training, gpu, options=mode_options(m))[name] for m in AC_MODES}

    cp = part("cp_comm", cp=4)
    assert cp["selective"] == cp["off"] < cp["full"]
    flex = part("ep_comm", ep=8, dispatcher="deepep")
    assert flex["selective"] == flex["off"] < flex["full"]
    torch_path = part("ep_comm", ep=8, dispatcher="torch")
    assert torch_path["off"] < torch_path["selective"] < torch_path["full"]
    tp = part("tp_comm", tp=2)
    assert tp["off"] < tp["selective"] == tp["full"]
    sp = part("tp_comm", tp=2, sequence_parallel=True)
    assert sp["off"] < sp["selective"] < sp["full"]


@settings(max_examples=60, deadline=None)
@given(model=st.sampled_from(["meta-llama/Llama-3.1-8B", "Qwen/Qwen3-30B-A3B", "deepseek-v3"]),
       tp=st.sampled_from([1, 2]), pp=st.sampled_from([1, 2, 8]), cp=st.sampled_from([1, 2]),
       lbs=st.sampled_from([8, 16]), mbs=st.sampled_from([1, 2]), seq=st.sampled_from([2048, 16384]),
       defer=st.booleans())
def test_selective_never_needs_more_memory_than_no_checkpointing(model: str, tp: int, pp: int, cp: int, lbs: int,
                                                                 mbs: int, seq: int, defer: bool) -> None:
    """The planner's shortcut skips a batch split without checkpointing where its selective twin did not fit."""
    p = problem(model, nodes=4, seq_length=seq)
    lay = layout(world=32, tp=tp, pp=pp, cp=cp, local_batch_size=lbs, micro_batch_size=mbs,
                 pp_schedule="1f1b" if pp > 1 else None)
    peaks = {m: estimate_layout(p, lay.with_(activation_checkpointing=m),
                                options=RecipeOptions(defer_grad_sync=defer)).memory_gib
             for m in ("selective", "off")}
    assert peaks["selective"] <= peaks["off"]


# -- the rule: selective on fsdp2 and ddp only (AutoModel R5) ------------------------------------------------
def test_r5_selective_checkpointing_needs_fsdp2_or_ddp() -> None:
    def rules(strategy: str, mode: str, world: int = 8) -> set[str]:
        return {f.rule for f in check_layout(Layout(world_size=world, strategy=strategy,
                                                    activation_checkpointing=mode, global_batch_size=8))}

    assert "am-r5-selective-ac" in rules("megatron_fsdp", "selective")
    assert "am-r5-selective-ac" in rules("megatron_fsdp", "selective", world=1)
    assert "am-r5-selective-ac" not in rules("fsdp2", "selective")
    assert "am-r5-selective-ac" not in rules("ddp", "selective")
    # MegatronFSDP accepts full checkpointing and then skips it on more than one GPU (a warning, not R5)
    assert rules("megatron_fsdp", "full") == {"mfsdp-ac-skipped"}
    assert "mfsdp-ac-skipped" not in rules("megatron_fsdp", "full", world=1)
    assert "mfsdp-ac-skipped" not in rules("megatron_fsdp", "selective")


def test_validate_reports_r5_at_the_recipes_key_and_accepts_its_neighbour() -> None:
    recipe = ("distributed:\n  strategy: megatron_fsdp\n  activation_checkpointing: selective\n"
              "step_scheduler:\n  global_batch_size: 8\n  local_batch_size: 1\n")
    report = validate_recipe(recipe, world_size=8)
    r5 = [f for f in report.errors if f.rule == "am-r5-selective-ac"]
    assert len(r5) == 1 and (r5[0].line, r5[0].col) == (3, 3)
    assert "supported only for FSDP2 and DDP" in r5[0].message + str(r5[0].hint) + str(
        getattr(r5[0], "automodel_message", ""))
    neighbour = validate_recipe(recipe.replace("megatron_fsdp", "fsdp2"), world_size=8)
    assert not [f for f in neighbour.errors if f.rule == "am-r5-selective-ac"]


# -- the planner ----------------------------------------------------------------------------------------------
def test_selective_wins_where_nothing_fits_without_checkpointing_and_full_replays_more() -> None:
    result = compile_intent(SELECTIVE_PINNED)
    best = result.layout
    assert best.activation_checkpointing == "selective" and best.strategy == "fsdp2"
    p = result.problem
    off = best.with_(activation_checkpointing="off")
    assert not any(estimate_layout(p, off, options=o).fits for o in option_choices(p, off))
    full = estimate_layout(p, best.with_(activation_checkpointing="full"))
    assert full.fits and full.tokens_per_s_per_gpu < result.estimate.tokens_per_s_per_gpu
    line = next(x for x in result.yaml.splitlines() if "activation_checkpointing:" in x)
    assert line.split("#")[0].strip() == "activation_checkpointing: selective"
    assert "every other matmul" in line.split("#")[1]


@pytest.mark.parametrize(("pin", "modes"), [
    ("selective", {"selective"}), ("off", {"off"}), (True, {"full"}), (["full", "off"], {"full", "off"}),
])
def test_pins_bound_the_checkpointing_modes_of_the_winner_and_every_alternative(pin: Any, modes: set[str]) -> None:
    spec = {**SELECTIVE_WINS, "training": {"seq_length": 4096, "global_batch_size": 64}}
    result = plan(resolved(spec, activation_checkpointing=pin))
    seen = {c.layout.activation_checkpointing for c in [result.best, *result.alternatives]}
    assert seen <= modes and result.best.layout.activation_checkpointing in modes


def test_a_selective_pin_on_megatron_fsdp_is_refused_by_r5() -> None:
    p = resolved(SELECTIVE_WINS, activation_checkpointing="selective", strategy="megatron_fsdp")
    with pytest.raises(InfeasibleError, match="am-r5-selective-ac"):
        plan(p)


def test_a_layout_is_unfit_only_when_unfit_under_every_sync_setting_and_checkpointing_mode() -> None:
    """Beside the deferred-sync choice (test_cost_model), every checkpointing mode the planner may emit is
    judged: the search keeps each mode's fitting layouts, the shortcut that skips a split without
    checkpointing drops only splits that fit under no setting, and 'nothing fits' means nothing fits in any
    mode under any setting."""
    p = resolved(SELECTIVE_WINS)
    found = search(p)
    judged = {c.layout: c.estimate.fits for c in found.candidates}
    for lay in {c.layout.with_(activation_checkpointing="off") for c in found.candidates}:
        unfit_everywhere = not any(estimate_layout(p, lay, options=o).fits for o in option_choices(p, lay))
        if lay not in judged:  # skipped by the shortcut: its selective twin did not fit
            assert unfit_everywhere, lay.short()
        else:
            assert judged[lay] != unfit_everywhere, lay.short()
    assert {"selective", "full"} <= {c.layout.activation_checkpointing for c in found.fitting}

    pinned = resolved(SELECTIVE_WINS, strategy="fsdp2", tp=1, pp=1, cp=1, local_batch_size=8)
    with pytest.raises(InfeasibleError):
        plan(pinned)
    lay = Layout(world_size=8, global_batch_size=64, local_batch_size=8, micro_batch_size=8, dispatcher="torch")
    for mode in AC_MODES:
        twin = lay.with_(activation_checkpointing=mode)
        assert not any(estimate_layout(pinned, twin, options=o).fits for o in option_choices(pinned, twin)), mode


# -- the recipe: emitted, read back, merged ----------------------------------------------------------------
@pytest.mark.parametrize("strategy", ["fsdp2", "ddp"])
@pytest.mark.parametrize("mode", AC_MODES)
def test_every_mode_round_trips_through_the_recipe(strategy: str, mode: str) -> None:
    p = resolved(SELECTIVE_WINS)
    est = plan(p).best.estimate
    lay = make_layout(p, strategy=strategy, tp=1, pp=1, cp=1, ep=1, dp_replicate=1, vpp=1,
                      activation_checkpointing=mode, local_batch_size=8)
    text, recipe = emit_recipe(p, lay, est)
    assert recipe["distributed"]["activation_checkpointing"] == {"full": True, "off": False}.get(mode, mode)
    assert parse_recipe(recipe, world_size=8, model=p.model) == lay
    report = validate_recipe(text, world_size=8, model=p.model, gpu="h100-80gb")
    assert [f.rule for f in report.errors if f.rule != "memory-fit"] == []  # 24K tokens x 8 need not fit


def test_validate_suggests_the_checkpointing_that_would_save_memory() -> None:
    """A recipe that does not fit is told to checkpoint: full or selective without any, full with selective."""
    p = resolved(SELECTIVE_WINS)
    est = plan(p).best.estimate
    hints = {}
    for mode in AC_MODES:
        lay = make_layout(p, strategy="fsdp2", tp=1, pp=1, cp=1, ep=1, dp_replicate=1, vpp=1,
                          activation_checkpointing=mode, local_batch_size=8)
        text, _ = emit_recipe(p, lay, est)
        report = validate_recipe(text, world_size=8, model=p.model, gpu="h100-80gb")
        hints[mode] = next(f.hint for f in report.errors if f.rule == "memory-fit")
    assert "activation_checkpointing: true" in hints["off"] and "or selective" in hints["off"]
    assert "activation_checkpointing: true (full" in hints["selective"] and "or selective" not in hints["selective"]
    assert "activation_checkpointing" not in hints["full"]


def test_a_base_recipe_must_agree_with_the_checkpointing_pin() -> None:
    p = resolved(SELECTIVE_WINS, activation_checkpointing="selective")
    best = plan(p).best
    text, _ = emit_recipe(p, best.layout, best.estimate, base="distributed:\n  activation_checkpointing: Selective\n")
    assert "activation_checkpointing: selective" in text
    with pytest.raises(InputError, match="activation_checkpointing: True, but the intent pins"):
        emit_recipe(p, best.layout, best.estimate, base="distributed:\n  activation_checkpointing: true\n")


def test_megatron_bridge_writes_the_layouts_mode_as_its_recompute_granularity() -> None:
    from automodel_dist.targets.megatron_bridge.compile import compile_megatron

    spec = {"model": "meta-llama/Llama-3.1-8B", "hardware": {"gpu": "h100-80gb", "nodes": 1},
            "training": {"seq_length": 8192, "global_batch_size": 64}}
    for pin, granularity in (("selective", "selective"), ("full", "full"), ("off", None)):
        result = compile_megatron({**spec, "parallelism": {"activation_checkpointing": pin}})
        assert result.layout.activation_checkpointing == pin
        assert result.override is not None and result.override.settings.recompute_granularity == granularity
        assert (result.override.settings.recompute_method is None) == (pin != "full")


# -- AutoModel's verdict -------------------------------------------------------------------------------------
def test_automodel_builds_the_emitted_selective_recipes_and_refuses_selective_megatron_fsdp(oracle: Oracle) -> None:
    """AutoModel 0.7.0's own parser (parse_distributed_section: R4, R5) and mesh builder."""
    result = compile_intent(SELECTIVE_PINNED)
    assert result.layout.activation_checkpointing == "selective"
    answer = oracle.ask(result.recipe["distributed"], 8, [0])
    assert answer["ok"], answer.get("error")
    p = result.problem
    ddp = make_layout(p, strategy="ddp", tp=1, pp=1, cp=1, ep=1, dp_replicate=1, vpp=1,
                      activation_checkpointing="selective", local_batch_size=8)
    _, recipe = emit_recipe(p, ddp, result.estimate)
    answer = oracle.ask(recipe["distributed"], 8, [0])
    assert answer["ok"], answer.get("error")
    refused = oracle.ask({"strategy": "megatron_fsdp", "activation_checkpointing": "selective"}, 8, [0])
    assert not refused["ok"] and "supported only for FSDP2 and DDP" in refused["error"]
    assert check_layout(ddp.with_(strategy="megatron_fsdp"))[0].rule == "am-r5-selective-ac"

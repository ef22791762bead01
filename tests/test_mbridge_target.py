"""The Megatron-Bridge target: parse(emit(x)) == x (YAML and Hydra forms), compiled output passes the
target's own rules, determinism, and the pieces the emitter decides (pipeline layouts, HCP sizes,
dispatcher and precision by GPU)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from automodel_dist.findings import ERROR
from automodel_dist.targets.megatron_bridge.choose import hcp_sizes, pipeline_layout
from automodel_dist.targets.megatron_bridge.compile import compile_megatron, validate_overrides
from automodel_dist.targets.megatron_bridge.emit import hydra_overrides, override_yaml
from automodel_dist.targets.megatron_bridge.overrides import (
    CP_COMM_TYPES,
    CUDA_GRAPH_SCOPES,
    DIST_OPTIMIZER,
    PRECISIONS,
    PRETRAINED_FROM_ENV,
    RECOMPUTE_MODULES,
    MegatronSettings,
    OverrideSet,
)
from automodel_dist.targets.megatron_bridge.parse import megatron_layout, parse_overrides
from automodel_dist.targets.megatron_bridge.plan import MegatronSpace
from automodel_dist.targets.megatron_bridge.rules import check_overrides, expand_layout
from automodel_dist.yamlio import load_document

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "intents"
COMPILED_INTENTS = ["qwen3-30b-a3b-16xh100.yaml", "deepseek-v3-256xgb200.yaml", "qwen3-235b-a22b-128xgb200.yaml",
               "llama-3.1-8b-lora-8xh100.yaml"]

sizes = st.sampled_from([1, 2, 4, 8])
settings_strategy = st.builds(
    MegatronSettings,
    cp_comm_type=st.sampled_from(CP_COMM_TYPES),
    hierarchical_cp_sizes=st.none() | st.tuples(sizes, sizes),
    pipeline_layout=st.none() | st.sampled_from(["Et*3|(tt|)*29m|L", "Et|tt|tt|tL"]),
    dispatcher_type=st.sampled_from(["alltoall", "flex"]),
    flex_backend=st.none() | st.sampled_from(["deepep", "hybridep"]),
    shared_expert_overlap=st.booleans(), ep_overlap=st.booleans(), delay_wgrad=st.booleans(),
    recompute_granularity=st.none() | st.sampled_from(["full", "selective"]),
    recompute_method=st.none() | st.sampled_from(["uniform", "block"]),
    recompute_num_layers=st.none() | st.integers(1, 4),
    recompute_modules=st.none() | st.lists(st.sampled_from(RECOMPUTE_MODULES), max_size=3).map(tuple),
    cuda_graph_impl=st.sampled_from(["none", "local", "transformer_engine"]),
    cuda_graph_scope=st.lists(st.sampled_from(CUDA_GRAPH_SCOPES), max_size=3).map(tuple),
    precision=st.sampled_from(PRECISIONS), tp_comm_overlap=st.booleans(), te_rng_tracker=st.booleans(),
    check_for_nan_in_loss=st.booleans(), mtp_num_layers=st.none() | st.integers(1, 2),
    seq_length=st.sampled_from([2048, 4096, 32768]), comm_overlap=st.booleans(),
    comm_overlap_target=st.none() | st.just("megatron.bridge.training.comm_overlap.CommOverlapConfig"),
    account_for_embedding=st.booleans(), account_for_loss=st.booleans(),
    packed_sequence_size=st.none() | st.sampled_from([4096, 8192]),
    pad_seq_to_mult=st.none() | st.sampled_from([1, 4, 16]), per_token_loss=st.none() | st.booleans(),
    average_in_collective=st.none() | st.booleans(),
    pretrained_checkpoint=st.none() | st.sampled_from([PRETRAINED_FROM_ENV, "/ckpt/llama 8b", "it's"]),
    peft_dim=st.none() | st.integers(1, 256), peft_alpha=st.none() | st.integers(1, 512),
)


@st.composite
def override_sets(draw: st.DrawFn) -> OverrideSet:
    tp, pp, cp, ep = draw(sizes), draw(sizes), draw(sizes), draw(sizes)
    vpp = draw(st.sampled_from([1, 2, 4])) if pp > 1 else 1
    world = tp * pp * cp * draw(st.sampled_from([1, 2, 4]))
    s = draw(settings_strategy)
    moe = draw(st.booleans())
    if s.recompute_granularity is None:
        s = s.with_(recompute_modules=None)
    if not s.comm_overlap:  # a recipe without a CommOverlapConfig takes no comm_overlap keys
        s = s.with_(ep_overlap=False, delay_wgrad=False, tp_comm_overlap=False, comm_overlap_target=None)
    if not moe:  # a dense model's override set leaves the MoE keys to the recipe
        s = s.with_(dispatcher_type="alltoall", flex_backend=None, shared_expert_overlap=False, ep_overlap=False,
                    delay_wgrad=False)
    dispatcher = (s.flex_backend if s.dispatcher_type == "flex" and s.flex_backend else s.dispatcher_type) \
        if moe else None
    layout = megatron_layout(world, tp=tp, pp=pp, vpp=vpp, cp=cp, ep=ep, etp=draw(st.sampled_from([1, 2])),
                             sequence_parallel=draw(st.booleans()), global_batch_size=draw(st.sampled_from([64, 1024])),
                             micro_batch_size=draw(st.sampled_from([1, 2])),
                             activation_checkpointing=s.recompute_granularity or "off", dispatcher=dispatcher)
    return OverrideSet(layout, s)


@given(override_sets())
def test_yaml_and_hydra_round_trip(x: OverrideSet) -> None:
    text = override_yaml(x, {})
    assert parse_overrides(load_document(text), world_size=x.layout.world_size) == x
    assert parse_overrides(hydra_overrides(x), world_size=x.layout.world_size) == x


@pytest.mark.parametrize(("vpp", "set_to_one"), [("null", False), ("1", True), ("2", False)])
def test_a_vpp_of_one_is_kept_apart_from_none(vpp: str, set_to_one: bool) -> None:
    """MCore holds a set VPP (1 too) against a pipeline layout and EP overlap, where None takes the layout's."""
    text = f"model:\n  pipeline_model_parallel_size: 2\n  virtual_pipeline_model_parallel_size: {vpp}\n"
    x = parse_overrides(load_document(text), world_size=16)
    assert x.settings.vpp_set_to_one is set_to_one and x.layout.vpp == (2 if vpp == "2" else 1)
    assert parse_overrides(load_document(override_yaml(x, {})), world_size=16) == x
    assert parse_overrides(hydra_overrides(x), world_size=16) == x


@pytest.mark.parametrize("name", COMPILED_INTENTS)
def test_compiled_override_set_round_trips_and_passes_its_rules(name: str) -> None:
    result = compile_megatron(EXAMPLES / name)
    again = parse_overrides(load_document(result.yaml), world_size=result.layout.world_size)
    assert again == result.override
    assert parse_overrides(list(result.hydra), world_size=result.layout.world_size) == result.override
    problem = result.problem
    errors = [f for f in check_overrides(result.override, model=problem.model, cluster=problem.cluster)
              if f.severity == ERROR]
    assert errors == []
    report = validate_overrides(result.yaml, recipe=result.recipe_function, world_size=problem.cluster.world_size,
                                gpus_per_node=problem.cluster.gpus_per_node, gpu=problem.cluster.gpu.name)
    assert report.ok, report.errors
    assert compile_megatron(EXAMPLES / name).yaml == result.yaml  # determinism


def test_every_value_has_a_why_comment() -> None:
    result = compile_megatron(EXAMPLES / "qwen3-30b-a3b-16xh100.yaml")
    body = [line for line in result.yaml.splitlines() if not line.startswith("#") and ":" in line]
    leaves = [line for line in body if not line.rstrip().endswith(":") and not line.strip().startswith("- ")]
    assert leaves and all("#" in line for line in leaves), [line for line in leaves if "#" not in line]


def test_deepseek_layout_string_matches_the_card() -> None:
    assert pipeline_layout(61, 8, 4, 1) == "Et*3|(tt|)*29m|L"
    assert pipeline_layout(48, 4, 2, None) is None  # even split: no layout
    assert pipeline_layout(48, 4, 2, 1) is None  # nor with MTP (Qwen3-Next): it runs on the last stage
    text = pipeline_layout(61, 4, 4, 1)
    assert text is not None
    stages = expand_layout(text)
    assert len(stages) == 16 and "".join(stages).count("t") == 61 and stages[-2] == "m"


def test_multi_token_prediction_follows_the_recipes_provider(tmp_path: Path) -> None:
    """The bridges read the MTP depth from the checkpoint's config: DeepSeek-V3's recipe trains one MTP layer, so the
    set writes it (and its layout string places it); Moonlight is a DeepSeek-V3 architecture without one, so its set
    writes none and its estimate counts none."""
    dsv3 = compile_megatron(EXAMPLES / "deepseek-v3-256xgb200.yaml")
    assert dsv3.override.settings.mtp_num_layers == 1
    assert "mtp_num_layers: 1" in dsv3.yaml
    intent = tmp_path / "moonlight.yaml"
    intent.write_text("model: moonshotai/Moonlight-16B-A3B\nhardware:\n  gpu: h100-80gb\n  nodes: 2\n"
                      "training:\n  task: pretrain\n  seq_length: 4096\n  global_batch_size: 512\n")
    moonlight = compile_megatron(intent)
    assert moonlight.recipe_function == "moonlight_16b_pretrain_config"
    assert moonlight.override.settings.mtp_num_layers is None and "mtp_num_layers" not in moonlight.yaml
    assert moonlight.cost_options().mtp_layers == 0 and dsv3.cost_options().mtp_layers == 1
    problem = moonlight.problem
    report = validate_overrides(moonlight.yaml, recipe=moonlight.recipe_function, world_size=16,
                                gpus_per_node=8, gpu=problem.cluster.gpu.name)
    assert report.ok, report.errors


def test_hcp_sizes_keep_the_a2a_group_in_the_domain() -> None:
    assert hcp_sizes(16, 1, 8) == (8, 2)
    assert hcp_sizes(16, 2, 8) == (4, 4)


def test_gpu_generation_picks_dispatcher_and_precision() -> None:
    gb200 = compile_megatron(EXAMPLES / "deepseek-v3-256xgb200.yaml", ["training.precision=fp8"])
    s = gb200.override.settings
    assert (s.dispatcher_type, s.flex_backend, s.precision) == ("flex", "hybridep", "bf16_with_mxfp8_mixed")
    assert ("NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN", "72") in [(n, v) for n, v, _ in gb200.env] or any(
        n == "NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN" for n, _, _ in gb200.env)
    h100 = compile_megatron(EXAMPLES / "deepseek-v3-1024xh100.yaml", ["training.precision=fp8"])
    assert h100.override.settings.precision == "bf16_with_fp8_subchannel_scaling_mixed"
    assert gb200.override.settings.precision_aware_optimizer is None  # FP8: left to the recipe


def test_bf16_runs_get_the_precision_aware_optimizer_the_performance_scripts_use() -> None:
    """Megatron-Bridge's performance scripts turn it on for every BF16 job: the compiler writes it, with its why,
    and the cost model prices the 16-bit main-weight remainders it keeps."""
    result = compile_megatron(EXAMPLES / "qwen3-30b-a3b-16xh100.yaml")
    assert result.override.settings.precision_aware_optimizer is True
    assert "optimizer.use_precision_aware_optimizer=true" in result.hydra
    assert "use_precision_aware_optimizer: true  # BF16 with Adam" in result.yaml


def test_bf16_keeps_a_recipes_own_bf16_gradient_buffer() -> None:
    """Qwen3-30B-A3B's pretrain recipe builds a MixedPrecisionConfig that reduces gradients in bf16: the compiled set
    keeps that object (no `mixed_precision` name, which would reset the buffer to fp32) and says so; the cost model
    prices the bf16 buffer. DeepSeek-V3's recipe names no precision either (an object); with FP8 the target names
    MXFP8, which replaces it."""
    from automodel_dist.targets.megatron_bridge.choose import cost_options

    result = compile_megatron(EXAMPLES / "qwen3-30b-a3b-16xh100.yaml", ["training.task=pretrain"])
    s = result.override.settings
    assert (s.precision, s.grad_reduce_in_fp32) == (None, False)
    assert "mixed_precision.grad_reduce_in_fp32=false" in result.hydra
    assert not any(pair.startswith("mixed_precision=") for pair in result.hydra)
    assert "grad_reduce_in_fp32: false  # bf16 with the recipe's own MixedPrecisionConfig" in result.yaml
    assert cost_options(result.problem, result.layout, s).reduce_dtype == "bfloat16"
    fp8 = compile_megatron(EXAMPLES / "deepseek-v3-256xgb200.yaml", ["training.precision=fp8"]).override.settings
    assert (fp8.precision, fp8.grad_reduce_in_fp32) == ("bf16_with_mxfp8_mixed", None)


def test_bf16_names_bf16_mixed_where_the_recipe_reduces_in_fp32(tmp_path: Path) -> None:
    """The neighbour: a recipe whose own precision reduces gradients in fp32 (Llama-3.1-8B names bf16_mixed) is
    written bf16_mixed, and priced with the fp32 buffer."""
    from automodel_dist.targets.megatron_bridge.choose import cost_options

    intent = tmp_path / "llama.yaml"
    intent.write_text("model: llama-3.1-8b\nhardware: {gpu: h100-80gb, nodes: 1, gpus_per_node: 8}\n"
                      "training: {task: pretrain, seq_length: 4096, global_batch_size: 64}\n", encoding="utf-8")
    result = compile_megatron(intent)
    s = result.override.settings
    assert (s.precision, s.grad_reduce_in_fp32) == ("bf16_mixed", None)
    assert "mixed_precision=bf16_mixed" in result.hydra
    assert cost_options(result.problem, result.layout, s).reduce_dtype == "float32"


def test_the_loss_is_priced_at_the_bytes_the_recipes_kernel_keeps() -> None:
    """Qwen3-8B's pretrain recipe fuses the loss with TE's kernel (2 bytes per logit); its sft recipe with
    Megatron-Core's native one (6: an fp32 copy beside the bf16 logits). The estimate's logits are those bytes over
    the micro batch's tokens and the TP rank's share of the vocabulary."""
    from automodel_dist.cost.memory import micro_batch_tokens
    from automodel_dist.targets.megatron_bridge.choose import (
        MCORE_LOSS_LOGIT_BYTES,
        TE_LOSS_LOGIT_BYTES,
        cost_options,
        loss_logit_bytes,
    )

    pretrain = compile_megatron(EXAMPLES / "qwen3-8b-8xh200.yaml", ["training.task=pretrain"])
    sft = compile_megatron(EXAMPLES / "qwen3-8b-8xh200.yaml", ["training.task=sft"])
    assert loss_logit_bytes(pretrain.problem) == TE_LOSS_LOGIT_BYTES == 2.0
    assert loss_logit_bytes(sft.problem) == MCORE_LOSS_LOGIT_BYTES == 6.0
    for result, per_logit in ((pretrain, 2.0), (sft, 6.0)):
        lay = result.layout
        assert cost_options(result.problem, lay, result.override.settings).logit_bytes == per_logit
        tokens = micro_batch_tokens(lay, result.problem.training.seq_length)
        logits = tokens * result.problem.model.vocab_size / lay.tp * per_logit / 2**30
        assert result.estimate.memory["logits"] == pytest.approx(logits, rel=1e-9)


def test_the_recompute_ladder_prices_the_optimizer_the_set_writes() -> None:
    """The ladder that picks the recompute modules costs the layout with the precision-aware optimizer the written set
    turns on (it used to price plain fp32 main weights, 2 bytes more per sharded weight, and call a set that fits
    '2 GiB over'): Qwen3-235B-A22B on 64 GB200, the card's batch."""
    from automodel_dist.targets.megatron_bridge.choose import precision

    text = ("model: qwen3-235b-a22b\nhardware: {gpu: gb200-nvl72, nodes: 16, gpus_per_node: 4}\n"
            "training: {task: pretrain, seq_length: 4096, global_batch_size: 1024}\n")
    result = compile_megatron(text)
    assert precision(result.problem)[0]["precision_aware_optimizer"] is True
    assert result.override.settings.recompute_modules and result.estimate.fits
    assert result.why["recompute_modules"].startswith("the narrowest set that fits")


def test_a_micro_batch_pin_holds_without_pipeline_parallelism() -> None:
    """Megatron's `train.micro_batch_size` is the forward batch at any PP size, so the pin holds on a PP1 layout (it
    was dropped there, as AutoModel's pipeline-only micro batch is, and the planner wrote its own)."""
    text = ("model: qwen3-235b-a22b\nhardware: {gpu: gb200-nvl72, nodes: 32, gpus_per_node: 4}\n"
            "training: {task: pretrain, seq_length: 4096, global_batch_size: 1024}\n")
    free = compile_megatron(text)
    assert free.layout.pp == 1 and free.layout.local_batch_size == 2
    pinned = compile_megatron(text + "parallelism: {pp: 1, micro_batch_size: 4}\n")
    assert pinned.layout.pp == 1 and pinned.layout.local_batch_size == 4
    assert "micro_batch_size: 4 " in pinned.yaml


def _space(world: int) -> MegatronSpace:
    from automodel_dist.intent import load_intent, resolve_intent
    from automodel_dist.targets.megatron_bridge.plan import check_planned, estimate_planned

    gpus_per_node = 8 if world % 8 == 0 else 4 if world % 4 == 0 else world
    text = (f"model: qwen3-30b-a3b\nhardware: {{gpu: h100-80gb, nodes: {world // gpus_per_node}, "
            f"gpus_per_node: {gpus_per_node}}}\ntraining: {{task: pretrain, seq_length: 4096, "
            "global_batch_size: 240}\n")
    problem = resolve_intent(load_intent(text))
    return MegatronSpace(problem, check_planned, estimate_planned, False)


def test_pp_candidates_follow_the_minimum_gpu_formula() -> None:
    """A TP that does not divide the world leaves no PP (it used to offer divisors of the floored W // TP: on 16
    GPUs, TP3 gave PP5, a 15-GPU layout); one that does gives the PP sizes with PP·TP dividing the world."""
    space = _space(16)
    assert space.pps(DIST_OPTIMIZER, 3) == []
    assert space.pps(DIST_OPTIMIZER, 2) == [1, 2, 4, 8]
    assert all(16 % (pp * tp) == 0 for tp in (1, 2, 4, 8) for pp in space.pps(DIST_OPTIMIZER, tp))
    wide = _space(24)  # 24 = 2^3·3: TP2 leaves PP 1, 2, 3, 4, 6, 12; layers bound none of them (48)
    assert wide.pps(DIST_OPTIMIZER, 2) == [1, 2, 3, 4, 6, 12]
    assert wide.pps(DIST_OPTIMIZER, 5) == []


def test_ep_overlap_clears_the_recipes_recompute_modules() -> None:
    """Qwen3-Next's recipe sets recompute_modules [layernorm, moe, moe_act]; Megatron-Bridge refuses EP overlap with
    moe in that list even when recompute is off ("disable moe in recompute_modules when enabling
    overlap_moe_expert_parallel_comm"), so the override set always writes the list (null with recompute off).
    tests/test_mbridge_oracle.py runs the card's Qwen3-Next row through Megatron-Bridge itself."""
    intent = {"model": "qwen3-next-80b-a3b", "hardware": {"gpu": "gb200-nvl72", "nodes": 16},
              "training": {"task": "pretrain", "seq_length": 4096, "global_batch_size": 1024}}
    result = compile_megatron(intent)
    assert result.override is not None and result.override.settings.ep_overlap
    assert "model.recompute_modules=null" in result.hydra
    assert "model.recompute_granularity=null" in result.hydra


def test_blackwell_graphs_attention_with_the_router_and_hopper_only_the_router() -> None:
    """Megatron-Bridge's B200/B300/GB200/GB300 MoE presets graph attention with the router (the fitted host time
    says the router graphs alone leave it); its H100 presets run without graphs, the card's narrowest dropless
    scope stays there; attention stays out of the graphs only where it is recomputed (full recompute, or
    core_attn among the selective modules; the Blackwell DeepSeek-V3 presets graph it beside mla_up_proj)."""
    b200 = compile_megatron(EXAMPLES / "gpt-oss-20b-8xb200.yaml", ["training.task=pretrain",
                                                                   "parallelism.activation_checkpointing=false"])
    assert b200.override.settings.cuda_graph_scope == ("attn", "moe_router", "moe_preprocess")
    assert "plus attn on Blackwell" in b200.yaml
    h100 = compile_megatron(EXAMPLES / "qwen3-30b-a3b-16xh100.yaml", ["training.task=pretrain"])
    assert h100.override.settings.cuda_graph_scope == ("moe_router", "moe_preprocess")
    selective = compile_megatron(EXAMPLES / "gpt-oss-20b-8xb200.yaml", [
        "training.task=pretrain", "parallelism.activation_checkpointing=selective"]).override.settings
    assert selective.recompute_modules == ("moe_act",)  # attention is not recomputed: it is graphed
    assert selective.cuda_graph_scope == ("attn", "moe_router", "moe_preprocess")


def test_the_target_reports_tflops_in_megatron_bridges_own_count() -> None:
    """Megatron-Bridge's log prints TFLOP/s in its FLOP count (MTP depths, the padded vocabulary, its attention
    count), so the override file's header and explain's table use that count, not the cost model's own."""
    from automodel_dist.cost.model import estimate_layout
    from automodel_dist.targets.megatron_bridge.plan import megatron_flops

    result = compile_megatron(EXAMPLES / "deepseek-v3-256xgb200.yaml")
    est, lay = result.estimate, result.layout
    megatron = est.tokens_per_s_per_gpu * megatron_flops(result.problem, lay) / 1e12
    assert est.tflops_per_gpu == pytest.approx(megatron, rel=1e-9)
    own = estimate_layout(result.problem, lay, options=result.cost_options())
    assert own.tokens_per_s_per_gpu == est.tokens_per_s_per_gpu and own.tflops_per_gpu != pytest.approx(megatron)
    assert est.mfu == pytest.approx(own.mfu * megatron / own.tflops_per_gpu)
    assert f"{megatron:.0f} TFLOP/s/GPU" in result.yaml
    assert all(a.estimate.tflops_per_gpu == pytest.approx(
        a.estimate.tokens_per_s_per_gpu * megatron_flops(result.problem, a.layout) / 1e12, rel=1e-9)
        for a in result.alternatives[:3])

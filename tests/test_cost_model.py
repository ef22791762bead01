"""Properties of the cost model: monotonic where physics says so, breakdowns that add up, determinism."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from automodel_dist.catalog.hardware import get_gpu
from automodel_dist.catalog.models import resolve_model
from automodel_dist.catalog.params import param_counts
from automodel_dist.catalog.specs import ClusterSpec
from automodel_dist.cost import memory, throughput
from automodel_dist.cost.memory import RecipeOptions
from automodel_dist.cost.model import estimate_layout
from automodel_dist.cost.profiles import parameters
from automodel_dist.cost.shape import model_shape
from automodel_dist.layout import Layout
from automodel_dist.problem import Problem, TrainingSpec

GIB = 2**30


def problem(model: str = "meta-llama/Llama-3.1-70B", gpu: str = "h100", nodes: int = 8, **training) -> Problem:
    spec = {"task": "pretrain", "seq_length": 4096, "global_batch_size": 512, **training}
    return Problem(resolve_model(model), ClusterSpec(get_gpu(gpu), nodes, 8), TrainingSpec(**spec))


def layout(world: int = 64, **fields) -> Layout:
    base = {"global_batch_size": 512, "local_batch_size": 2, "micro_batch_size": 2}
    return Layout(world_size=world, **{**base, **fields})


def model_states(estimate) -> float:
    return estimate.memory["parameters"] + estimate.memory["gradients"] + estimate.memory["optimizer"]


def test_more_tensor_parallelism_means_less_parameter_memory():
    p = problem()
    states = [model_states(estimate_layout(p, layout(tp=tp, dp_replicate=64 // tp))) for tp in (1, 2, 4, 8)]
    # with HSDP replicating over every data-parallel rank only TP divides the weights
    assert states == sorted(states, reverse=True)
    assert states[0] / states[-1] == pytest.approx(8, rel=0.05)


def test_activation_checkpointing_means_less_activation_memory():
    p = problem()
    off = estimate_layout(p, layout(activation_checkpointing=False))
    on = estimate_layout(p, layout(activation_checkpointing=True))
    assert on.memory["activations"] < off.memory["activations"] / 4
    assert on.time["recompute"] > 0 == off.time["recompute"]
    assert on.step_time_s > off.step_time_s


def test_megatron_fsdp_skips_activation_checkpointing_on_more_than_one_gpu():
    p = problem()
    with_ac = estimate_layout(p, layout(strategy="megatron_fsdp", activation_checkpointing=True))
    without = estimate_layout(p, layout(strategy="megatron_fsdp", activation_checkpointing=False))
    assert with_ac.memory == without.memory and with_ac.time == without.time
    single = problem("meta-llama/Llama-3.1-8B", nodes=1)
    one_gpu = [estimate_layout(single, layout(world=1, strategy="megatron_fsdp", global_batch_size=8,
                                              activation_checkpointing=ac)) for ac in (True, False)]
    assert one_gpu[0].memory["activations"] < one_gpu[1].memory["activations"]


def test_larger_local_batch_means_more_activation_memory():
    p = problem()
    acts = [estimate_layout(p, layout(local_batch_size=b, micro_batch_size=b)).memory["activations"]
            for b in (1, 2, 4, 8)]
    assert acts == sorted(acts) and acts[0] < acts[-1]


def test_peft_means_less_optimizer_and_gradient_memory():
    full = estimate_layout(problem(), layout())
    lora = estimate_layout(problem(task="peft", peft_rank=16), layout())
    assert lora.memory["optimizer"] < full.memory["optimizer"] / 50
    assert lora.memory["gradients"] < full.memory["gradients"] / 50
    # LoRA's backward skips the frozen weights' gradients: 4 FLOPs per weight instead of 6, run at the
    # profile's fitted LoRA efficiency (its thin adapter GEMMs cost time but no counted FLOPs); the
    # memory-bound elementwise work stays (unscaled, so the lower bound is the smaller of the two scalings)
    peft = parameters().profile("automodel").peft_efficiency
    assert full.time["compute"] * min(4 / 6 / peft, 1.0) < lora.time["compute"] < full.time["compute"] / peft


def test_fp8_is_faster_but_not_on_gpus_without_fp8_tensor_cores():
    bf16 = estimate_layout(problem(), layout())
    fp8 = estimate_layout(problem(precision="fp8"), layout())
    assert fp8.step_time_s < bf16.step_time_s
    a100 = [estimate_layout(problem(gpu="a100-80gb", precision=p), layout()).step_time_s for p in ("bf16", "fp8")]
    assert a100[0] == a100[1]


def test_pipeline_bubble_shrinks_with_more_micro_batches_and_virtual_stages():
    p = problem()

    def bubble(micro: int, vpp: int = 1) -> float:
        schedule = "interleaved1f1b" if vpp > 1 else "1f1b"
        lay = layout(pp=4, vpp=vpp, pp_schedule=schedule, local_batch_size=16, micro_batch_size=16 // micro,
                     activation_checkpointing=True)
        est = estimate_layout(p, lay)
        return est.time["pipeline_bubble"] / est.time["compute"]

    fractions = [bubble(m) for m in (2, 4, 8, 16)]
    assert fractions == sorted(fractions, reverse=True)
    # torch's replayed schedule: (pp-1)/n_micro idle on compute+recompute when the stages weigh alike; the
    # LM head (about 1.2 layers of Llama-3.1-70B's 80) makes the last rank busier and the others wait for it
    assert 0.9 < bubble(4) < 1.0  # (pp-1)/n_micro = 3/4 of compute+recompute = 4/3 of compute
    assert bubble(4) / 2 * 0.9 < bubble(4, vpp=2) < bubble(4) / 2 * 1.1  # interleaving halves it


def test_megatron_pipeline_keeps_the_full_interleaving_gain():
    lay = layout(pp=4, vpp=2, pp_schedule="interleaved1f1b", local_batch_size=16, micro_batch_size=4,
                 activation_checkpointing=True)
    flat = layout(pp=4, pp_schedule="1f1b", local_batch_size=16, micro_batch_size=4, activation_checkpointing=True)
    megatron = RecipeOptions(framework="megatron")
    bubbles = [estimate_layout(problem(), x, options=megatron).time["pipeline_bubble"] for x in (lay, flat)]
    assert bubbles[0] == pytest.approx(bubbles[1] / 2, rel=1e-9)


def test_zero_bubble_schedules_have_smaller_bubbles():
    p = problem()
    common = {"pp": 4, "vpp": 2, "local_batch_size": 8, "micro_batch_size": 1, "activation_checkpointing": True}
    interleaved = estimate_layout(p, layout(pp_schedule="interleaved1f1b", **common))
    zero = estimate_layout(p, layout(pp_schedule="interleavedzerobubble", **common))
    assert zero.time["pipeline_bubble"] < interleaved.time["pipeline_bubble"]


def test_breakdowns_sum_to_totals_and_throughput_follows_from_step_time():
    p = problem()
    est = estimate_layout(p, layout(tp=2, pp=2, pp_schedule="1f1b", cp=2, local_batch_size=4, micro_batch_size=1,
                                    activation_checkpointing=True))
    assert set(est.memory) == set(memory.PARTS) and set(est.time) == set(throughput.PARTS)
    assert est.memory_gib == pytest.approx(sum(est.memory.values()), rel=1e-12)
    assert est.step_time_s == pytest.approx(sum(est.time.values()), rel=1e-12)
    tokens = 512 * 4096 / 64 / est.step_time_s
    assert est.tokens_per_s_per_gpu == pytest.approx(tokens, rel=1e-12)
    flops = throughput.model_flops_per_token(model_shape(p.model, p.training))
    assert est.tflops_per_gpu == pytest.approx(tokens * flops / 1e12, rel=1e-12)
    assert est.mfu == pytest.approx(est.tflops_per_gpu / 989, rel=1e-12)


def test_deterministic():
    p, lay = problem(), layout(tp=2, ep=1, activation_checkpointing=True)
    assert estimate_layout(p, lay) == estimate_layout(p, lay)
    again = estimate_layout(problem(), layout(tp=2, activation_checkpointing=True))
    assert estimate_layout(p, lay).to_json() == again.to_json()


def test_parameter_memory_matches_the_catalogs_parameter_count():
    """Pure FSDP over all ranks: bf16 weights take 2 B of every parameter, split evenly."""
    p = problem()
    est = estimate_layout(p, layout())
    assert est.memory["parameters"] * GIB == pytest.approx(param_counts(p.model).total * 2 / 64, rel=1e-3)
    fp32 = memory.memory_breakdown(model_shape(p.model, p.training), layout(), p.training,
                                   options=RecipeOptions(master_weights="fp32"))
    assert fp32["parameters"] == pytest.approx(2 * est.memory["parameters"], rel=1e-9)
    assert fp32["optimizer"] == pytest.approx(4 * fp32["parameters"] / 2, rel=1e-9)


def test_experts_are_split_over_expert_parallel_ranks():
    p = problem("Qwen/Qwen3-30B-A3B", nodes=1, global_batch_size=64)
    pc = param_counts(p.model)
    for ep in (2, 4, 8):
        est = estimate_layout(p, layout(world=8, ep=ep, global_batch_size=64, dispatcher="deepep"))
        # experts over ep x ep_shard = 8 ranks, the rest over the 8 FSDP ranks: all weights / 8
        assert est.memory["parameters"] * GIB == pytest.approx(pc.total * 2 / 8, rel=1e-3)
    # unsharded expert copies: all local experts stay gathered when ep_shard > 1, none when it is 1
    gathered = [estimate_layout(p, layout(world=8, ep=ep, global_batch_size=64)).memory["fsdp_gather"]
                for ep in (2, 8)]
    assert gathered[0] > 5 * gathered[1]


def test_hsdp_replication_costs_memory_and_context_parallelism_saves_activations():
    p = problem()
    assert model_states(estimate_layout(p, layout(dp_replicate=8))) > model_states(estimate_layout(p, layout()))
    cp1 = estimate_layout(p, layout(activation_checkpointing=True))
    cp2 = estimate_layout(p, layout(cp=2, activation_checkpointing=True))
    assert cp2.memory["activations"] == pytest.approx(cp1.memory["activations"] / 2, rel=1e-9)
    assert cp2.memory["logits"] == pytest.approx(cp1.memory["logits"] / 2, rel=1e-9)


def test_deferred_gradient_sync_keeps_unsharded_gradients_over_micro_batches():
    p = problem()
    lay = layout(local_batch_size=1, micro_batch_size=1, activation_checkpointing=True)  # GA = 8
    shape = model_shape(p.model, p.training)
    deferred = memory.memory_breakdown(shape, lay, p.training)
    synced = memory.memory_breakdown(shape, lay, p.training, options=RecipeOptions(defer_grad_sync=False))
    # 70B of bf16 weights kept gathered and fp32 gradients kept unsharded: far beyond an 80 GB GPU
    assert deferred["gradients"] + deferred["fsdp_gather"] > 100 > synced["gradients"] + synced["fsdp_gather"]
    # mp_policy.reduce_dtype bf16 halves the unsharded gradients (the 8 B/param shards stay)
    bf16 = memory.memory_breakdown(shape, lay, p.training, options=RecipeOptions(reduce_dtype="bfloat16"))
    unsharded = deferred["gradients"] - deferred["parameters"]
    assert bf16["gradients"] - bf16["parameters"] == pytest.approx(unsharded / 2, rel=1e-9)


def test_fits_uses_the_headroom_and_the_wall_is_reported():
    p = problem()
    est = estimate_layout(p, layout(activation_checkpointing=True))
    assert est.fits == (est.memory_gib <= est.hbm_gib * 0.9)
    tight = replace(p, memory_headroom=1 - est.memory_gib / est.hbm_gib + 1e-6)
    loose = replace(p, memory_headroom=1 - est.memory_gib / est.hbm_gib - 1e-6)
    assert not estimate_layout(tight, layout(activation_checkpointing=True)).fits
    assert estimate_layout(loose, layout(activation_checkpointing=True)).fits
    huge = estimate_layout(problem("meta-llama/Llama-3.1-405B", nodes=1), layout(world=8, global_batch_size=512))
    assert not huge.fits and huge.bound == "memory"


def test_expert_parallel_across_nodes_with_the_torch_dispatcher_is_communication_bound():
    p = problem("Qwen/Qwen3-30B-A3B", nodes=4, global_batch_size=256)
    across = estimate_layout(p, layout(world=32, ep=32, global_batch_size=256, local_batch_size=1,
                                       micro_batch_size=1, activation_checkpointing=True))
    inside = estimate_layout(p, layout(world=32, ep=8, global_batch_size=256, local_batch_size=1,
                                       micro_batch_size=1, activation_checkpointing=True))
    assert across.bound == "communication"
    assert across.time["ep_comm"] > 3 * inside.time["ep_comm"]
    flex = estimate_layout(p, layout(world=32, ep=32, global_batch_size=256, local_batch_size=1,
                                     micro_batch_size=1, activation_checkpointing=True, dispatcher="deepep"))
    assert flex.time["ep_comm"] < across.time["ep_comm"] / 4


def test_ddp_pays_a_gradient_all_reduce_and_replicates_model_states():
    p = problem("meta-llama/Llama-3.1-8B")
    ddp = estimate_layout(p, layout(strategy="ddp"))
    fsdp = estimate_layout(p, layout())
    assert ddp.time["fsdp_comm"] > 0
    for part in ("parameters", "optimizer"):  # replicated on every rank instead of split over 64
        assert ddp.memory[part] == pytest.approx(64 * fsdp.memory[part], rel=1e-9)
    assert ddp.memory["fsdp_gather"] == 0


def test_tensor_parallel_across_nodes_pays_the_network():
    p = problem(nodes=2)
    inside = estimate_layout(p, layout(world=16, tp=8, global_batch_size=512))
    across = estimate_layout(p, layout(world=16, tp=16, global_batch_size=512))
    assert across.time["tp_comm"] > 5 * inside.time["tp_comm"]


def test_context_parallelism_costs_time_at_short_sequences_and_little_at_long_ones():
    """Same tokens per rank (cp2 with twice the local batch): CP must cost more than the planner's 1% tie
    at 4K tokens (its ring, correction and short attention blocks do not hide), and only a few percent of
    the step at 128K, where Megatron-Bridge adds it (megatron-bridge.md §4)."""
    short = problem("Qwen/Qwen3-30B-A3B", nodes=2, global_batch_size=512)
    flat = estimate_layout(short, layout(world=16, ep=16, global_batch_size=512, local_batch_size=1,
                                         micro_batch_size=1, dispatcher="deepep"))
    ring = estimate_layout(short, layout(world=16, ep=16, cp=2, global_batch_size=512, local_batch_size=2,
                                         micro_batch_size=2, dispatcher="deepep"))
    assert ring.memory["activations"] == pytest.approx(flat.memory["activations"], rel=1e-9)
    assert ring.tokens_per_s_per_gpu < 0.97 * flat.tokens_per_s_per_gpu
    assert ring.time["cp_comm"] > 0.02 * ring.step_time_s  # twice the tie
    long = problem("meta-llama/Llama-3.1-8B", nodes=1, seq_length=131072, global_batch_size=8)
    lay = layout(world=8, cp=4, global_batch_size=8, local_batch_size=4, micro_batch_size=4,
                 activation_checkpointing=True)
    est = estimate_layout(long, lay)
    assert est.time["cp_comm"] < 0.05 * est.step_time_s


def test_async_tensor_parallelism_hides_most_tp_collectives():
    p = problem()
    lay = layout(tp=4, sequence_parallel=True, activation_checkpointing=True)
    exposed = estimate_layout(p, lay).time["tp_comm"]
    hidden = estimate_layout(p, lay, options=RecipeOptions(async_tp=True)).time["tp_comm"]
    assert hidden == pytest.approx(exposed * parameters().profile("automodel").tp_exposed, rel=1e-9)


def test_tp_collectives_run_at_nvlinks_one_way_rate():
    """The preset stores NVLink one way (H100: 450 of the 900 GB/s quoted for both directions); a ring
    collective cannot beat it, and NCCL's all-gather/reduce-scatter reach about 360 GB/s on 8xH100."""
    gpu = get_gpu("h100")
    assert gpu.nvlink_gbps == 450
    assert 340e9 <= throughput._bandwidth(gpu, 8, 8, 8) <= gpu.nvlink_gbps * 1e9


def test_a_deferred_gradient_sync_hides_only_behind_the_last_micro_batch():
    """Under PP (or DDP/FSDP deferral) the one gradient reduce-scatter per step overlaps only the last
    micro batch's backward, so many micro batches leave more of it exposed than a per-micro-batch sync."""
    p = problem("deepseek-ai/DeepSeek-V3", nodes=128, global_batch_size=8192)
    lay = Layout(world_size=1024, pp=8, vpp=2, pp_schedule="interleaved1f1b", ep=16, global_batch_size=8192,
                 local_batch_size=64, micro_batch_size=1, activation_checkpointing=True, dispatcher="deepep")
    few = lay.with_(local_batch_size=64, micro_batch_size=8)
    many = estimate_layout(p, lay).time["fsdp_comm"]
    assert many > estimate_layout(p, few).time["fsdp_comm"] > 0


def test_pipeline_hops_cross_the_network_once_stages_span_nodes():
    p = problem(nodes=4)
    inside = estimate_layout(problem(nodes=1), layout(world=8, pp=8, pp_schedule="1f1b", local_batch_size=512,
                                                      micro_batch_size=1, activation_checkpointing=True))
    across = estimate_layout(p, layout(world=32, tp=4, pp=8, pp_schedule="1f1b", sequence_parallel=True,
                                       local_batch_size=512, micro_batch_size=1, activation_checkpointing=True))
    # tp4 with SP sends a quarter of the activations per rank, but over a NIC instead of NVLink
    assert across.time["pp_comm"] > inside.time["pp_comm"]


def test_interleaved_schedule_holds_more_micro_batches_on_the_first_rank():
    lay1 = layout(pp=4, pp_schedule="1f1b", local_batch_size=16, micro_batch_size=1)
    lay2 = layout(pp=4, vpp=2, pp_schedule="interleaved1f1b", local_batch_size=16, micro_batch_size=1)
    assert memory.chunks_in_flight(lay1, 0) == 4 and memory.chunks_in_flight(lay1, 3) == 1
    # Megatron's count: pp·vpp·(1 + (pp-1)/(pp·vpp)) chunks of half a stage on rank 0
    assert memory.chunks_in_flight(lay2, 0) == 4 * 2 * (1 + 3 / 8)
    gpipe = layout(pp=4, pp_schedule="gpipe", local_batch_size=16, micro_batch_size=1)
    assert memory.chunks_in_flight(gpipe, 0) == 16


@settings(max_examples=40, deadline=None)
@given(
    tp=st.sampled_from([1, 2, 4, 8]), pp=st.sampled_from([1, 2, 4]), cp=st.sampled_from([1, 2]),
    ep=st.sampled_from([1, 2, 4, 8]), ac=st.booleans(), lbs=st.sampled_from([1, 2, 4]),
    model=st.sampled_from(["meta-llama/Llama-3.1-8B", "Qwen/Qwen3-30B-A3B", "deepseek-v3", "openai/gpt-oss-20b"]),
    task=st.sampled_from(["pretrain", "peft"]), precision=st.sampled_from(["bf16", "fp8"]),
)
def test_every_estimate_is_finite_positive_and_consistent(tp, pp, cp, ep, ac, lbs, model, task, precision):
    p = problem(model, nodes=8, task=task, precision=precision, peft_rank=16 if task == "peft" else None)
    lay = layout(tp=tp, pp=pp, cp=cp, ep=ep if p.model.is_moe else 1, activation_checkpointing=ac,
                 local_batch_size=lbs, micro_batch_size=1, pp_schedule="1f1b" if pp > 1 else None)
    est = estimate_layout(p, lay)
    for value in (*est.memory.values(), *est.time.values()):
        assert math.isfinite(value) and value >= 0
    assert est.memory_gib > 0 and est.step_time_s > 0 and 0 < est.mfu < 1
    assert est.fits == (est.memory_gib <= est.hbm_gib * (1 - p.memory_headroom))
    assert est.bound in ("memory", "communication", "compute")
    assert est.not_modeled


@settings(max_examples=60, deadline=None)
@given(
    strategy=st.sampled_from(["fsdp2", "megatron_fsdp", "ddp"]), tp=st.sampled_from([1, 3, 16]),
    pp=st.sampled_from([1, 2, 64]), vpp=st.sampled_from([1, 2, 5]), cp=st.sampled_from([1, 8]),
    ep=st.sampled_from([1, 4, 512]), dp_size=st.sampled_from([None, 0, 3]),
    schedule=st.sampled_from([None, "1f1b", "gpipe", "interleaved1f1b", "zbvzerobubble", "dualpipev"]),
    batches=st.tuples(st.sampled_from([0, 1, 1024]), st.sampled_from([0, 1, 4]), st.sampled_from([0, 1, 8])),
    seq=st.sampled_from([1, 4096, 131072]),
)
def test_broken_layouts_still_get_a_finite_estimate(strategy, tp, pp, vpp, cp, ep, dp_size, schedule, batches,
                                                     seq):
    """validate estimates recipes the rules reject too: no exception, nothing negative or infinite."""
    p = problem("deepseek-v3", nodes=2, seq_length=seq)
    gbs, lbs, mbs = batches
    lay = Layout(world_size=16, strategy=strategy, tp=tp, pp=pp, vpp=vpp, cp=cp, ep=ep, dp_size=dp_size,
                 pp_schedule=schedule, global_batch_size=gbs, local_batch_size=lbs, micro_batch_size=mbs)
    est = estimate_layout(p, lay)
    for value in (est.memory_gib, est.step_time_s, est.tokens_per_s_per_gpu, *est.memory.values(),
                  *est.time.values()):
        assert math.isfinite(value) and value >= 0


def test_deferred_sync_is_turned_off_where_it_does_not_fit_and_kept_where_it_is_faster():
    """AutoModel's 70B recipes set defer_fsdp_grad_sync false ("True → delayed resharding → OOM"): the
    planner judges each FSDP2 layout under both settings, keeps the default where it fits (one
    reduce-scatter per step is faster) and writes false where only that fits, in its estimates and in the
    emitted recipe; a layout is unfit only when both settings are."""
    from automodel_dist.cost.model import option_choices, planned_options
    from automodel_dist.targets.automodel.emit import build_recipe

    SYNC_EVERY_MICRO_BATCH = memory.RecipeOptions(defer_grad_sync=False)

    big = problem(nodes=4, global_batch_size=256)
    fsdp32 = layout(world=32, global_batch_size=256, local_batch_size=1, micro_batch_size=1,
                    activation_checkpointing=True)  # GA 8
    assert option_choices(big, fsdp32) == (memory.AUTOMODEL_DEFAULTS, SYNC_EVERY_MICRO_BATCH)
    assert planned_options(big, fsdp32) == SYNC_EVERY_MICRO_BATCH
    assert estimate_layout(big, fsdp32).fits
    assert not estimate_layout(big, fsdp32, options=memory.AUTOMODEL_DEFAULTS).fits
    assert build_recipe(big, fsdp32)["distributed"]["defer_fsdp_grad_sync"] is False

    # Llama-3.1-8B on 8 GPUs without recompute at 4K, two sequences per micro batch: deferring does not fit
    # (32 GiB of unsharded fp32 gradients beside the activations), syncing every micro batch does
    small = problem("meta-llama/Llama-3.1-8B", nodes=1, global_batch_size=64)
    fsdp8 = layout(world=8, global_batch_size=64, local_batch_size=2, micro_batch_size=2)
    assert not estimate_layout(small, fsdp8, options=memory.AUTOMODEL_DEFAULTS).fits
    assert planned_options(small, fsdp8) == SYNC_EVERY_MICRO_BATCH and estimate_layout(small, fsdp8).fits
    # with recompute both fit, and the deferred sync (the default, nothing written) is faster
    fsdp8_ac = fsdp8.with_(activation_checkpointing=True)
    both = [estimate_layout(small, fsdp8_ac, options=o) for o in option_choices(small, fsdp8_ac)]
    assert all(e.fits for e in both) and both[0].step_time_s < both[1].step_time_s
    assert planned_options(small, fsdp8_ac) == memory.AUTOMODEL_DEFAULTS
    assert "defer_fsdp_grad_sync" not in build_recipe(small, fsdp8_ac)["distributed"]
    # nothing to choose under PP or with one micro batch per step
    assert option_choices(small, fsdp8.with_(local_batch_size=8, micro_batch_size=8)) == (memory.AUTOMODEL_DEFAULTS,)


def test_with_its_recipe_settings_automodels_70b_pretraining_prefers_fsdp_to_tp_and_pp():
    """AutoModel's engineers train Llama 3 70B on 64 H100 with FSDP (+CP), deferred sync off
    (calibration row "AM Llama-3-70B pretrain 64xH100 CP2"): under those settings the model must rank
    plain FSDP above every TP/PP layout that fits (DTensor TP exposed, torch PP's bubble and hops)."""
    p = problem("meta-llama/Meta-Llama-3-70B", nodes=8, seq_length=8192, global_batch_size=128)
    sync = RecipeOptions(defer_grad_sync=False)
    fsdp = estimate_layout(p, layout(global_batch_size=128, local_batch_size=1, micro_batch_size=1,
                                     activation_checkpointing=True), options=sync)
    assert fsdp.fits
    rivals = [layout(tp=4, pp=8, pp_schedule="1f1b", sequence_parallel=True, global_batch_size=128,
                     local_batch_size=64, micro_batch_size=1),
              layout(tp=4, pp=8, vpp=5, pp_schedule="interleaved1f1b", sequence_parallel=True,
                     global_batch_size=128, local_batch_size=64, micro_batch_size=1),
              layout(tp=8, pp=2, pp_schedule="1f1b", sequence_parallel=True, global_batch_size=128,
                     local_batch_size=32, micro_batch_size=1)]
    for rival in rivals:
        est = estimate_layout(p, rival, options=sync)
        assert not est.fits or est.tokens_per_s_per_gpu < fsdp.tokens_per_s_per_gpu, rival.short()


def test_the_pipeline_runs_at_the_pace_of_its_busiest_stage():
    """AutoModel's layers_per_stage split gives the last stage the LM head on top of its layers: with
    Llama 3.1 70B (80 layers, a 1B-parameter head) on PP8 that stage does ~11% more work than the average,
    and compute grows by that factor; without PP there is nothing to balance."""
    p = problem()
    shape = model_shape(p.model, p.training)
    pp8 = layout(pp=8, pp_schedule="1f1b", local_batch_size=64, micro_batch_size=1)
    factor = throughput.stage_imbalance(shape, pp8)
    head_share = shape.lm_head_flops / (shape.lm_head_flops + 80 * (shape.dense_layer_flops
                                                                    + shape.attention_flops / 80))
    assert factor == pytest.approx(1 + 7 * head_share, rel=1e-6)  # 10 layers + head vs (80 layers + head)/8
    assert 1.05 < factor < 1.2
    assert throughput.stage_imbalance(shape, layout()) == 1.0
    flat = estimate_layout(p, layout(local_batch_size=1, micro_batch_size=1)).time["compute"]  # same micro batch
    assert estimate_layout(p, pp8).time["compute"] == pytest.approx(flat * factor, rel=1e-6)

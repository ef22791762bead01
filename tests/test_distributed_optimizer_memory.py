"""Megatron-Core's distributed optimizer as it allocates memory (MCore 0.19 `_ParamAndGradBuffer`,
`DistributedOptimizer`): bf16 weights and one gradient buffer per rank, fp32 main weights and Adam states sharded."""

from __future__ import annotations

from dataclasses import replace

import pytest

from automodel_dist.catalog.models import resolve_model
from automodel_dist.cost import memory
from automodel_dist.cost.memory import FRAGMENTATION, RecipeOptions
from automodel_dist.cost.shape import model_shape
from automodel_dist.layout import Layout
from automodel_dist.problem import TrainingSpec

TRAINING = TrainingSpec(task="pretrain", seq_length=4096, global_batch_size=256)
SHAPE = model_shape(resolve_model("meta-llama/Llama-3.1-70B"), TRAINING)
MEGATRON = RecipeOptions(framework="megatron", master_weights="fp32", defer_grad_sync=True)


def layout(strategy: str) -> Layout:
    """64 GPUs, TP2 PP4 VPP5: DP 8 shards the optimizer."""
    return Layout(world_size=64, strategy=strategy, tp=2, pp=4, vpp=5, pp_schedule="interleaved1f1b",
                  sequence_parallel=True, global_batch_size=256, local_batch_size=32, micro_batch_size=1)


def states_per_weight(strategy: str, options: RecipeOptions) -> float:
    """Bytes of model states (weights, gradients, optimizer) per weight on the first pp rank."""
    lay = layout(strategy)
    load = memory.every_rank_load(SHAPE, lay)[0]
    states = memory.model_states(SHAPE, lay, TRAINING, load, options)
    weights = states.dense_w + states.experts_w
    parts = memory.memory_by_pp_rank(SHAPE, lay, TRAINING, options=options)[0][1]
    return (parts["parameters"] + parts["gradients"] + parts["optimizer"] + parts["fsdp_gather"]) * 2**30 / weights


def test_distributed_optimizer_holds_6_plus_12_over_dp_bytes_per_weight_with_fp32_gradients():
    """Megatron-Bridge's own estimator says 6 + 12/shard (megatron-bridge-oracle.md §7): bf16 weights (2), the fp32
    gradient buffer (4), fp32 main weights and Adam's two states sharded over DP (12/8); no fp32 gradient shard of
    its own (the optimizer views the fp32 buffer)."""
    assert states_per_weight("distributed_optimizer", MEGATRON) == pytest.approx(6 + 12 / 8, rel=1e-3)


def test_a_bf16_gradient_buffer_halves_it_as_the_performance_presets_run():
    """`grad_reduce_in_fp32=False` (every performance preset): the buffer is bf16, 2 B per weight."""
    bf16 = RecipeOptions(framework="megatron", master_weights="fp32", defer_grad_sync=True, reduce_dtype="bfloat16")
    assert states_per_weight("distributed_optimizer", bf16) == pytest.approx(4 + 12 / 8, rel=1e-3)



def test_the_precision_aware_optimizer_keeps_bf16_moments_beside_fp32_main_weights():
    """`use_precision_aware_optimizer` with exp_avg/exp_avg_sq bf16 (Moonlight's and DeepSeek-V3's H100 recipes):
    fp32 main weights (4/dp) and two bf16 moments (4/dp) instead of 12/dp."""
    bf16 = RecipeOptions(framework="megatron", master_weights="fp32", defer_grad_sync=True, reduce_dtype="bfloat16",
                         moment_dtype="bfloat16")
    assert states_per_weight("distributed_optimizer", bf16) == pytest.approx(4 + 8 / 8, rel=1e-3)
    fp32 = RecipeOptions(framework="megatron", master_weights="fp32", defer_grad_sync=True, reduce_dtype="bfloat16",
                         moment_dtype="float32")
    assert states_per_weight("distributed_optimizer", fp32) == pytest.approx(4 + 12 / 8, rel=1e-3)

def test_the_precision_aware_optimizer_keeps_the_main_weights_as_16_bit_remainders():
    """Megatron-Core's `store_param_remainders` (default true; TE's FusedAdam >= 2.1): the fp32 main weight is the bf16
    weight plus 16 remainder bits, 2/dp bytes instead of 4/dp; the moments keep their own dtype (fp32 here)."""
    aware = RecipeOptions(framework="megatron", master_weights="fp32", reduce_dtype="bfloat16", precision_aware=True)
    assert states_per_weight("distributed_optimizer", aware) == pytest.approx(4 + (2 + 8) / 8, rel=1e-3)
    bf16_moments = RecipeOptions(framework="megatron", master_weights="fp32", reduce_dtype="bfloat16",
                                 precision_aware=True, moment_dtype="bfloat16")
    assert states_per_weight("distributed_optimizer", bf16_moments) == pytest.approx(4 + (2 + 4) / 8, rel=1e-3)


def test_the_precision_aware_switch_leaves_fsdp_as_it_is():
    """Neighbour: the remainders are the distributed optimizer's; FSDP2's states do not change with the switch."""
    aware = RecipeOptions(framework="megatron", master_weights="fp32", defer_grad_sync=True, precision_aware=True)
    assert states_per_weight("fsdp2", aware) == pytest.approx(states_per_weight("fsdp2", MEGATRON), rel=1e-9)


def test_the_precision_aware_optimizer_reads_the_bf16_gradients_without_an_fp32_copy():
    """`decoupled_grad` is a view of the bf16 buffer's shard (DistributedOptimizer._copy_model_grads_to_main_grads):
    the step adds nothing to the peak, where the plain optimizer's `.float()` copy may."""
    lay = layout("distributed_optimizer")
    load = memory.every_rank_load(SHAPE, lay)[0]
    plain = RecipeOptions(framework="megatron", master_weights="fp32", reduce_dtype="bfloat16")
    aware = RecipeOptions(framework="megatron", master_weights="fp32", reduce_dtype="bfloat16", precision_aware=True)
    assert memory.step_grad_copy(memory.model_states(SHAPE, lay, TRAINING, load, plain), lay, plain, 0.0) > 0
    assert memory.step_grad_copy(memory.model_states(SHAPE, lay, TRAINING, load, aware), lay, aware, 0.0) == 0.0


def test_megatron_holds_a_share_of_the_shared_activation_count_by_precision():
    """The shared activation count as each stack holds it: AutoModel in full at any precision, Megatron at the share
    its runs bound for the precision (memory.MEGATRON_ACTIVATION_SHARE): less under FP8."""
    assert memory.activation_share(MEGATRON, "bf16") == memory.MEGATRON_ACTIVATION_SHARE["bf16"] == 0.85
    assert memory.activation_share(MEGATRON, "fp8") == memory.MEGATRON_ACTIVATION_SHARE["fp8"] == 0.5
    assert memory.activation_share(RecipeOptions(), "bf16") == memory.activation_share(RecipeOptions(), "fp8") == 1.0
    lay = layout("fsdp2")
    for precision, share in memory.MEGATRON_ACTIVATION_SHARE.items():
        training = replace(TRAINING, precision=precision)
        full = memory.memory_breakdown(SHAPE, lay, training, options=RecipeOptions(master_weights="fp32"))
        held = memory.memory_breakdown(SHAPE, lay, training, options=MEGATRON)
        assert held["activations"] == pytest.approx(full["activations"] * share, rel=1e-9)


def test_fsdp_with_deferred_sync_keeps_its_sharded_fp32_gradients_beside_the_unsharded_ones():
    """Neighbour: FSDP2 with fp32 masters shards fp32 gradients (4/dp) beside the unsharded ones it accumulates."""
    assert states_per_weight("fsdp2", MEGATRON) == pytest.approx(6 + 16 / 8, rel=1e-3)


def test_the_distributed_optimizers_weight_buffer_takes_no_fragmentation():
    """Its bf16 weights live in one buffer allocated at build; FSDP's gathered weights churn the allocator."""
    for strategy, counted in (("distributed_optimizer", False), ("fsdp2", True)):
        parts = memory.memory_breakdown(SHAPE, layout(strategy), TRAINING, options=MEGATRON)
        transient = parts["activations"] + parts["logits"] + (parts["fsdp_gather"] if counted else 0.0)
        assert parts["fragmentation"] == pytest.approx(FRAGMENTATION * transient, rel=1e-9)


def test_the_steps_fp32_gradient_copy_counts_only_beyond_the_freed_activations():
    """With a bf16 buffer the step copies its gradient shard to fp32 after the backward has freed the activations:
    it raises the peak only when it outweighs them; an fp32 buffer is viewed in place."""
    lay = layout("distributed_optimizer")
    load = memory.every_rank_load(SHAPE, lay)[0]
    bf16 = RecipeOptions(framework="megatron", master_weights="fp32", reduce_dtype="bfloat16")
    states = memory.model_states(SHAPE, lay, TRAINING, load, bf16)
    shard = states.dense_w / 8 * 4
    assert memory.step_grad_copy(states, lay, bf16, 0.0) == pytest.approx(shard)
    assert memory.step_grad_copy(states, lay, bf16, shard / 2) == pytest.approx(shard / 2)
    assert memory.step_grad_copy(states, lay, bf16, 2 * shard) == 0.0
    assert memory.step_grad_copy(states, lay, MEGATRON, 0.0) == 0.0


def test_fp8_primary_weights_add_a_bf16_copy_of_every_cast_master_shard_to_the_step():
    """Transformer Engine's cast_master_weights_to_fp8 lists a bf16 copy of every master shard before it casts any,
    beside the fp32 gradient copy: 2 more bytes per sharded GEMM weight (not the norms, embedding or head, which stay
    bf16). MXFP8 stages its weights in the gradient buffer instead: nothing more."""
    lay = layout("distributed_optimizer")
    load = memory.every_rank_load(SHAPE, lay)[0]
    bf16 = RecipeOptions(framework="megatron", master_weights="fp32", reduce_dtype="bfloat16")
    fp8 = replace(bf16, fp8_primary_weights=True)
    states = memory.model_states(SHAPE, lay, TRAINING, load, fp8)
    assert 0 < states.dense_gemm_w < states.dense_w
    cast = states.dense_gemm_w / 8 * 2
    assert memory.step_grad_copy(states, lay, fp8, 0.0) == pytest.approx(memory.step_grad_copy(states, lay, bf16, 0.0)
                                                                          + cast)
    fp32_buffer = replace(fp8, reduce_dtype="float32")
    assert memory.step_grad_copy(states, lay, fp32_buffer, 0.0) == pytest.approx(cast)
    assert memory.step_grad_copy(states, lay, fp32_buffer, 2 * cast) == 0.0


def test_a_dp1_fp8_run_peaks_at_the_step_with_its_cast_copies():
    """With DP 1 the rank holds every master weight: the step's copies (4 + 2 bytes per GEMM weight) outweigh the
    freed activations, so the FP8 run's peak is higher than the same run's without FP8 primary weights."""
    lay = Layout(world_size=32, strategy="distributed_optimizer", tp=8, pp=4, vpp=5, pp_schedule="interleaved1f1b",
                 sequence_parallel=True, global_batch_size=32, local_batch_size=32, micro_batch_size=1)
    fp8_training = replace(TRAINING, precision="fp8", global_batch_size=32)
    bf16 = RecipeOptions(framework="megatron", master_weights="fp32", reduce_dtype="bfloat16",
                         checkpointing="selective", recompute_modules=("core_attn",))
    peaks = [sum(memory.memory_breakdown(SHAPE, lay, fp8_training, options=o).values())
             for o in (bf16, replace(bf16, fp8_primary_weights=True))]
    assert peaks[1] > peaks[0] + 3.0  # GiB: ~2.2e9 GEMM weights on the rank, 2 bytes each

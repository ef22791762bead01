"""Qwen3-Next's Gated DeltaNet and multi-token prediction in the time model, and Megatron-Bridge's FLOP count.

The delta rule runs flash-linear-attention's Triton kernels at their measured rate (not the fused softmax
attention's); Megatron's Qwen3-Next and DeepSeek-V3 recipes train an MTP layer, which costs time; and the card's
TFLOP/s are Megatron-Bridge's own count, which the card table converts to (targets/megatron_bridge/flops.py).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from automodel_dist.catalog.hardware import get_gpu
from automodel_dist.catalog.models import resolve_model
from automodel_dist.cost import throughput
from automodel_dist.cost.memory import RecipeOptions
from automodel_dist.cost.shape import model_shape
from automodel_dist.intent import load_intent, resolve_intent
from automodel_dist.layout import Layout
from automodel_dist.problem import TrainingSpec
from automodel_dist.targets.megatron_bridge.flops import megatron_flops_per_token, padded_vocab, vocab_divisible_by
from automodel_dist.targets.megatron_bridge.parse import megatron_layout
from automodel_dist.targets.megatron_bridge.plan import megatron_flops, megatron_options

QWEN3_NEXT = "Qwen/Qwen3-Next-80B-A3B-Instruct"
TRAINING = TrainingSpec(task="pretrain", seq_length=4096, global_batch_size=1024, precision="bf16")

# flash-linear-attention README.md@bc3b101dcb71, "Benchmarks": chunk_gdn forward+backward on one GB200
# (batch, sequence, heads, head dim, ms)
FLA_GB200 = ((1, 8192, 96, 128, 4.738), (2, 16384, 16, 128, 3.616), (4, 2048, 16, 128, 2.085),
             (4, 4096, 64, 128, 5.964), (8, 1024, 8, 64, 1.974), (8, 2048, 32, 256, 8.644))


@pytest.mark.parametrize(("batch", "seq", "heads", "dim", "ms"), FLA_GB200)
def test_the_delta_rule_kernel_takes_the_time_flash_linear_attention_measured_on_gb200(batch, seq, heads, dim, ms):
    flops = 24.0 * batch * seq * heads * dim * dim  # 4 state products per head and token, x2 multiply-add, x3
    predicted = throughput.delta_rule_seconds(flops, 1, get_gpu("gb200-nvl72"))
    assert predicted == pytest.approx(ms * 1e-3, rel=0.15)


def test_gated_deltanet_runs_far_below_the_fused_attention_rate():
    """Qwen3-Next's 36 linear-attention layers cost their kernel's time, once per layer and micro batch: an order
    of magnitude more than the same FLOPs at the softmax attention kernel's rate, and more with more micro batches."""
    shape, gpu = model_shape(resolve_model(QWEN3_NEXT), TRAINING), get_gpu("gb200-nvl72")
    assert shape.linear_attention_layers == 36 and shape.attention_flops > 0
    assert shape.linear_attention_flops == 6.0 * 4 * 36 * 32 * 128 * 128

    def lay(mbs: int) -> Layout:
        return megatron_layout(64, tp=1, pp=1, ep=64, global_batch_size=1024, micro_batch_size=mbs)

    tokens = 1024 * 4096 / 64
    kernel = throughput.linear_attention_seconds(shape, lay(4), gpu, tokens)
    at_attention_rate = tokens * shape.linear_attention_flops / (gpu.tflops_bf16 * 1e12 * 0.7)
    assert kernel > 10 * at_attention_rate
    assert throughput.linear_attention_seconds(shape, lay(1), gpu, tokens) > kernel  # four times the calls
    # a model without linear attention pays nothing
    dense = model_shape(resolve_model("Qwen/Qwen3-30B-A3B"), TRAINING)
    assert throughput.linear_attention_seconds(dense, lay(4), gpu, tokens) == 0.0


def test_an_mtp_layer_costs_a_layer_and_an_output_head():
    """Megatron trains Qwen3-Next's and DeepSeek-V3's MTP depth; it costs about one decoder layer and one more pass
    through the output head (Qwen3-Next: the head is 8% of its FLOPs), and nothing where none is trained."""
    shape, gpu = model_shape(resolve_model(QWEN3_NEXT), TRAINING), get_gpu("gb200-nvl72")
    lay = megatron_layout(64, tp=1, pp=1, ep=64, global_batch_size=1024, micro_batch_size=4)
    base = RecipeOptions(framework="megatron")
    without = throughput.compute_seconds(shape, lay, TRAINING, gpu, options=base)[0]
    with_mtp = throughput.compute_seconds(shape, lay, TRAINING, gpu, options=replace(base, mtp_layers=1))[0]
    assert 1.04 < with_mtp / without < 1.15


def test_the_megatron_target_charges_the_mtp_depth_its_recipe_trains():
    """Qwen3-Next's pretrain recipe keeps `mtp_num_layers: 1` (the override set does not write it); its SFT recipe
    trains none; DeepSeek-V3's overrides write 1."""
    def mtp(model: str, task: str) -> int:
        problem = resolve_intent(load_intent({"model": model, "hardware": {"gpu": "gb200-nvl72", "nodes": 16},
                                              "training": {"task": task, "seq_length": 4096,
                                                           "global_batch_size": 1024}}))
        lay = megatron_layout(64, tp=1, pp=1, ep=64, global_batch_size=1024, micro_batch_size=1)
        return megatron_options(problem, lay).mtp_layers

    assert mtp(QWEN3_NEXT, "pretrain") == 1
    assert mtp(QWEN3_NEXT, "sft") == 0
    assert mtp("deepseek-ai/DeepSeek-V3", "pretrain") == 1
    assert mtp("Qwen/Qwen3-30B-A3B", "pretrain") == 0


def test_megatrons_flop_count_of_qwen3_next():
    """Megatron-Bridge 0.6.2's `num_floating_point_operations` for Qwen3-Next-80B-A3B at 4,096 tokens (its own
    function on Qwen3-Next's model config, batch 1; the oracle test checks it on the recipe itself):
    93,141,734,522,880 FLOPs without MTP and 102,927,968,501,760 with the recipe's one MTP depth."""
    spec = resolve_model(QWEN3_NEXT)
    pad = vocab_divisible_by("qwen3_next_80b_a3b_pretrain_config")
    assert megatron_flops_per_token(spec, 4096, vocab_divisible_by=pad) * 4096 == pytest.approx(93_141_734_522_880,
                                                                                                rel=1e-12)
    assert megatron_flops_per_token(spec, 4096, vocab_divisible_by=pad, mtp_layers=1) * 4096 == pytest.approx(
        102_927_968_501_760, rel=1e-12)


def _dsv3_problem(tp: int):
    problem = resolve_intent(load_intent({"model": "deepseek-ai/DeepSeek-V3", "hardware": {"gpu": "b200", "nodes": 32},
                                          "training": {"task": "pretrain", "seq_length": 4096,
                                                       "global_batch_size": 4096}}))
    layout = megatron_layout(256, tp=tp, pp=8, ep=32, sequence_parallel=tp > 1, global_batch_size=4096,
                             micro_batch_size=1)
    return problem, layout


def test_deepseek_v3s_recipe_pads_the_vocabulary_to_1280_times_tp():
    """Megatron-Bridge's DeepSeek-V3 bridge sets make_vocab_size_divisible_by = 1280 (the fields data records the
    recipe's value): its 129,280 tokens at TP2 are padded to the next multiple of 2,560, not left at 129,280 as
    Megatron's default 128 x TP would; the card's FLOP count carries the 1,280 extra rows through both heads."""
    assert vocab_divisible_by("deepseek_v3_pretrain_config") == 1280
    assert padded_vocab(129280, 1, 1280) == 129280
    assert padded_vocab(129280, 2, 1280) == 130560
    assert padded_vocab(129280, 2, 128) == 129280
    problem, tp2 = _dsv3_problem(2)
    mtp = megatron_options(problem, tp2).mtp_layers
    default = megatron_flops_per_token(problem.model, 4096, vocab_divisible_by=128, mtp_layers=mtp, tp=2)
    assert mtp == 1
    assert megatron_flops(problem, tp2) - default == pytest.approx(6 * 7168 * 1280 * (mtp + 1), rel=1e-9)
    problem, tp1 = _dsv3_problem(1)
    assert megatron_flops(problem, tp1) == megatron_flops_per_token(problem.model, 4096, vocab_divisible_by=128,
                                                                    mtp_layers=mtp, tp=1)


def test_a_recipe_without_its_own_padding_keeps_128_times_tp():
    """Qwen3's bridge leaves Megatron's 128 (the largest power of two up to 128 dividing 151,936), as does a recipe
    the fields data does not know."""
    assert vocab_divisible_by("qwen3_30b_a3b_pretrain_config") == 128
    assert vocab_divisible_by(None) == 128
    assert vocab_divisible_by("no_such_recipe_config") == 128
    assert padded_vocab(151936, 1, 128) == 151936
    assert padded_vocab(151936, 8, 128) == 152576


def test_gated_deltanet_layers_keep_more_activations_than_softmax_attention():
    """A Gated DeltaNet layer keeps the convolution's input, q and k twice (normalized, then repeated to the 32
    value heads), the delta rule's 64-wide solve matrix and the gated norm's tensors: 43,072 TP-split elements per
    token against 13,312 for Qwen3-Next's softmax attention layer, so its layers keep more than if all were softmax."""
    spec = resolve_model(QWEN3_NEXT)
    hybrid = model_shape(spec, TRAINING)
    as_softmax = model_shape(replace(spec, linear_attention_layers=0), TRAINING)
    assert hybrid.moe_act_tp - as_softmax.moe_act_tp == pytest.approx((43_072 - 13_312) * 36 / 48)
    assert hybrid.moe_act_rep == as_softmax.moe_act_rep  # the norm's input and output, as in softmax layers

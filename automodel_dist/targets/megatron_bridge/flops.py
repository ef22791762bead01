"""Megatron-Bridge's model FLOPs per token: the convention its logged (and published) TFLOP/s/GPU use.

Megatron-Bridge divides `num_floating_point_operations` (src/megatron/bridge/training/utils/flop_utils.py, 0.6.2
and main@067f987df03b) by step time and GPU count. It differs from the cost model's own count
(`cost/throughput.model_flops_per_token`, AutoModel's convention), so a measured Megatron figure is compared with a
prediction only after converting one into the other (the card table: benchmarks/mbridge_tuned.py):

- each multi-token-prediction depth counts as one more decoder layer (the last layer's kind) plus its eh
  projection, norms and a second pass through the output head;
- the output head runs over the vocabulary padded to a multiple of the recipe's `make_vocab_size_divisible_by` x TP
  (its bridge's value, recorded in the fields data: 1280 for DeepSeek-V3 and Kimi-K2, 128 for the others);
- Gated DeltaNet layers count their projections, the depthwise convolution and the delta rule's four state
  products per value head; routers and norms (but MTP's) are not counted.

Every term is 3 (forward and backward) x 2 (multiply-add) x the forward multiply-accumulates per token.
"""

from __future__ import annotations

import math

from automodel_dist.catalog.specs import ModelSpec
from automodel_dist.targets.megatron_bridge.fields import recipe_values

# GPTModelProvider.make_vocab_size_divisible_by: the padding where the fields data records no recipe value
DEFAULT_VOCAB_DIVISIBLE_BY = 128


def vocab_divisible_by(recipe_function: str | None) -> int:
    """The recipe function's `make_vocab_size_divisible_by` as its bridge sets it (DeepSeek-V3's bridge: 1280), or
    GPTModelProvider's 128 for a recipe the data does not know."""
    value = recipe_values(recipe_function).get("model.make_vocab_size_divisible_by")
    return DEFAULT_VOCAB_DIVISIBLE_BY if value is None else int(value)


def padded_vocab(vocab: int, tp: int, divisible_by: int) -> int:
    """`calculate_padded_vocab_size`: the vocabulary rounded up to a multiple of `divisible_by` x TP."""
    multiple = divisible_by * tp
    return math.ceil(vocab / multiple) * multiple


def _softmax_attention(spec: ModelSpec, seq: int) -> float:
    """Multiply-accumulates per token of one softmax-attention layer: projections and causal core attention."""
    h, heads = spec.hidden_size, spec.num_attention_heads
    if spec.uses_mla:
        nope, rope = spec.qk_nope_head_dim or 0, spec.qk_rope_head_dim or 0
        v, kv_rank = spec.v_head_dim or spec.head_dim, spec.kv_lora_rank or 0
        q = (spec.q_lora_rank * (h + heads * (nope + rope) + 1) if spec.q_lora_rank else h * heads * (nope + rope))
        return (q + kv_rank * (h + heads * (nope + v) + 1) + h * rope + heads * v * h
                + seq * heads * (nope + rope) / 2 + seq * heads * v / 2)
    q = spec.head_dim * heads
    kv = spec.head_dim * spec.num_key_value_heads
    gate = q if spec.attention_output_gate else 0
    return h * (q + 2 * kv + gate) + q * h + q * seq / 2 * 2


def _gated_delta_net(spec: ModelSpec) -> float:
    """Multiply-accumulates per token of one Gated DeltaNet layer (Megatron's `gdn_layer_flops`)."""
    h, value_heads = spec.hidden_size, spec.linear_num_value_heads
    qk = spec.linear_key_head_dim * spec.linear_num_key_heads
    v = spec.linear_value_head_dim * value_heads
    return (h * (2 * qk + 2 * v + 2 * value_heads) + spec.linear_conv_kernel_dim * (2 * qk + v)
            + value_heads * spec.linear_value_head_dim ** 2 * 4 + h * v)


def megatron_flops_per_token(spec: ModelSpec, seq_length: int, *, vocab_divisible_by: int, mtp_layers: int = 0,
                             tp: int = 1) -> float:
    """Training FLOPs per token as Megatron-Bridge counts them (`num_floating_point_operations` / tokens) for a
    model trained at `seq_length` with `mtp_layers` MTP depths and tensor parallelism `tp`, its vocabulary padded
    to a multiple of `vocab_divisible_by` x TP (the recipe's: `vocab_divisible_by`)."""
    h = spec.hidden_size
    layers = spec.num_layers + mtp_layers
    # MTP repeats the last decoder layer: an MoE layer in every MoE model here, with softmax attention
    moe_layers = spec.moe_layers + (mtp_layers if spec.is_moe else 0)
    dense_layers = layers - moe_layers
    shared = spec.shared_expert_intermediate_size * max(spec.num_shared_experts, 0)
    mlp = 3 * h * (spec.intermediate_size * dense_layers
                   + (spec.moe_intermediate_size * spec.experts_per_token + shared) * moe_layers)
    linear_layers = spec.linear_attention_layers  # MTP copies the last layer, softmax attention in Qwen3-Next
    attention = (linear_layers * _gated_delta_net(spec)
                 + (layers - linear_layers) * _softmax_attention(spec, seq_length))
    mtp = mtp_layers * (3 * h + 2 * h * h)
    logits = h * padded_vocab(spec.vocab_size, tp, vocab_divisible_by) * (mtp_layers + 1)
    return 6.0 * (mlp + attention + mtp + logits)

"""Parameter counts of a ModelSpec, by component, as the cost model needs them.

Counted the way the Hugging Face modules hold them (weights, biases, norms, sinks), so totals match
the published figures. `active` is what one token touches: every non-expert parameter (embedding and
LM head included) plus its top-k routed experts; `active_non_embedding` drops the input embedding,
a lookup that costs no FLOPs.
"""

from __future__ import annotations

from dataclasses import dataclass

from automodel_dist.catalog.specs import ModelSpec


@dataclass(frozen=True)
class ParamCounts:
    """Parameters by component. Per-layer figures are for one layer; totals are whole-model."""

    embedding: int
    lm_head: int                     # 0 when tied to the embedding
    attention_per_layer: float       # average over layers (MLA, linear and full attention mixed)
    full_attention_per_layer: int    # one softmax-attention layer (MLA or GQA)
    linear_attention_per_layer: int  # one linear-attention layer (0 if the model has none)
    dense_mlp_per_layer: int         # one dense MLP (0 if no layer is dense)
    expert_per_expert: int           # one routed expert
    shared_per_moe_layer: int        # all shared experts of one MoE layer, with their gate
    router_per_moe_layer: int
    norms_per_layer: int             # the two RMSNorms around attention and MLP
    final_norm: int
    total: int
    active: int
    expert_total: int                # all routed-expert parameters
    non_expert_total: int

    @property
    def active_non_embedding(self) -> int:
        return self.active - self.embedding


def _gqa_attention(spec: ModelSpec) -> int:
    q_out = spec.num_attention_heads * spec.head_dim
    kv_out = spec.num_key_value_heads * spec.head_dim
    q_proj_out = q_out * (2 if spec.attention_output_gate else 1)
    weights = spec.hidden_size * (q_proj_out + 2 * kv_out) + q_out * spec.hidden_size
    biases = (q_proj_out + 2 * kv_out if spec.attention_bias else 0) + (
        spec.hidden_size if spec.attention_out_bias else 0)
    qk_norm = 2 * spec.head_dim if spec.qk_norm else 0
    sinks = spec.num_attention_heads if spec.attention_sinks else 0
    return weights + biases + qk_norm + sinks


def _mla_attention(spec: ModelSpec) -> int:
    """DeepSeek MLA: low-rank q (optional) and joint kv compression, each with its RMSNorm."""
    heads, hidden = spec.num_attention_heads, spec.hidden_size
    nope, rope, v_dim = spec.qk_nope_head_dim or 0, spec.qk_rope_head_dim or 0, spec.v_head_dim or 0
    kv_rank = spec.kv_lora_rank or 0
    qk_dim = nope + rope
    if spec.q_lora_rank:
        q = hidden * spec.q_lora_rank + spec.q_lora_rank + spec.q_lora_rank * heads * qk_dim
    else:
        q = hidden * heads * qk_dim
    kv = hidden * (kv_rank + rope) + kv_rank + kv_rank * heads * (nope + v_dim)
    out = heads * v_dim * hidden
    biases = (heads * qk_dim if spec.attention_bias else 0) + (hidden if spec.attention_out_bias else 0)
    return q + kv + out + biases


def _linear_attention(spec: ModelSpec) -> int:
    """Qwen3-Next Gated DeltaNet: qkvz and ba projections, depthwise conv, decay terms, gated norm, out."""
    if not spec.linear_attention_layers:
        return 0
    key_dim = spec.linear_num_key_heads * spec.linear_key_head_dim
    value_dim = spec.linear_num_value_heads * spec.linear_value_head_dim
    in_proj = spec.hidden_size * (2 * key_dim + 2 * value_dim + 2 * spec.linear_num_value_heads)
    conv = (2 * key_dim + value_dim) * spec.linear_conv_kernel_dim
    decay = 2 * spec.linear_num_value_heads          # dt_bias and A_log
    norm = spec.linear_value_head_dim
    out = value_dim * spec.hidden_size
    return in_proj + conv + decay + norm + out


def _gated_mlp(hidden: int, width: int, bias: bool) -> int:
    """SwiGLU MLP: gate, up and down projections."""
    return 3 * hidden * width + ((2 * width + hidden) if bias else 0)


def param_counts(spec: ModelSpec) -> ParamCounts:
    """Split the model's parameters by component and sum total and per-token active counts."""
    hidden = spec.hidden_size
    embedding = spec.vocab_size * hidden
    lm_head = 0 if spec.tie_word_embeddings else embedding
    full_attention = _mla_attention(spec) if spec.uses_mla else _gqa_attention(spec)
    linear_attention = _linear_attention(spec)
    attention_sum = (spec.full_attention_layers * full_attention
                     + spec.linear_attention_layers * linear_attention)
    dense_mlp = _gated_mlp(hidden, spec.intermediate_size, spec.mlp_bias) if spec.dense_layers else 0
    expert = _gated_mlp(hidden, spec.moe_intermediate_size, spec.mlp_bias) if spec.is_moe else 0
    shared = spec.num_shared_experts * _gated_mlp(hidden, spec.shared_expert_intermediate_size, spec.mlp_bias)
    shared += hidden if spec.shared_expert_gate and spec.num_shared_experts else 0
    router = (hidden * spec.num_routed_experts + (spec.num_routed_experts if spec.router_bias else 0)
              if spec.is_moe else 0)
    norms = 2 * hidden
    final_norm = hidden

    expert_total = spec.moe_layers * spec.num_routed_experts * expert
    non_expert = (embedding + lm_head + final_norm + spec.num_layers * norms + attention_sum
                  + spec.dense_layers * dense_mlp + spec.moe_layers * (shared + router))
    total = non_expert + expert_total
    active = non_expert + spec.moe_layers * spec.experts_per_token * expert
    return ParamCounts(
        embedding=embedding,
        lm_head=lm_head,
        attention_per_layer=attention_sum / spec.num_layers,
        full_attention_per_layer=full_attention,
        linear_attention_per_layer=linear_attention,
        dense_mlp_per_layer=dense_mlp,
        expert_per_expert=expert,
        shared_per_moe_layer=shared,
        router_per_moe_layer=router,
        norms_per_layer=norms,
        final_norm=final_norm,
        total=total,
        active=active,
        expert_total=expert_total,
        non_expert_total=non_expert,
    )

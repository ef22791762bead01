"""ModelShape: the per-layer sizes the memory and throughput models need, computed once per model.

Everything here depends only on (ModelSpec, TrainingSpec), so the cost model builds it once per problem
(`model_shape` is cached) and the per-layout formulas stay plain arithmetic. Sizes are element counts
(parameters, activation elements per token); bytes are applied by the memory model.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from automodel_dist.catalog.params import param_counts
from automodel_dist.catalog.specs import ModelSpec
from automodel_dist.problem import TrainingSpec
from automodel_dist.targets.automodel.model_classes import automodel_moe, model_class


@dataclass(frozen=True, eq=False)
class ModelShape:
    """Per-layer parameter counts, activation elements per token and FLOPs per token of one model.

    Compared and hashed by identity: `model_shape` builds one per model and training job, and the cost model's
    caches, keyed by it, then hash a pointer (a planner search looks them up thousands of times).

    Activation elements are per token of one micro batch, split by how they shard:
    `*_rep` are hidden-size tensors (norm inputs/outputs) that tensor parallelism splits only with
    sequence parallelism; `*_tp` are head- or FFN-sized tensors that TP always splits; `moe_expert`
    are the dispatched top-k token copies and the expert intermediates (not split by TP).
    """

    num_layers: int
    dense_layers: int  # layers with a dense MLP (all layers of a dense model; leading layers of an MoE)
    moe_layers: int
    hidden: int
    vocab: int
    # parameters
    dense_layer_params: int  # attention + norms + dense MLP
    moe_layer_params: int  # attention + norms + router + shared experts (what FSDP shards like dense)
    expert_params: int  # one routed expert
    expert_width: int  # a routed expert's FFN width (the narrow side of its grouped GEMMs)
    num_experts: int
    top_k: int
    embedding_params: int
    lm_head_params: int  # separate output projection (0 when tied); the last PP stage holds a copy if tied
    final_norm_params: int  # the norm before the head, on the last PP stage
    dense_layer_adapter: int  # LoRA adapter parameters (0 unless peft)
    moe_layer_adapter: int
    # activation elements per token per layer (no checkpointing)
    dense_act_rep: float
    dense_act_tp: float
    moe_act_rep: float
    moe_act_tp: float
    moe_act_expert: float
    moe_act_router: float  # the part of moe_act_rep only a learned router keeps (not AutoModel's fake gate)
    moe_act_output: float  # expert outputs a stack weighting them after the down projection keeps (Megatron)
    # FLOPs per token, forward+backward of a full training step (6 per linear weight)
    dense_layer_flops: float  # linear layers of one dense layer
    moe_layer_flops: float  # non-expert linear layers of one MoE layer (attention, router, shared)
    moe_expert_flops: float  # top-k routed experts of one MoE layer
    attention_flops: float  # softmax attention scores of all layers at seq_length (causal; windows)
    lm_head_flops: float
    # LoRA trains only adapters: no weight gradient for the frozen base, about 4/6 of the FLOPs
    flops_scale: float
    kv_dim: int  # key+value width per token of one layer (CP ring exchange)
    # parameters of one layer that AutoModel's tensor-parallel plans leave whole on every TP rank: the
    # norms (and Qwen3's per-head q/k norms), and in an MoE layer the router
    dense_layer_tp_whole: int = 0
    moe_layer_tp_whole: int = 0
    # parameters per layer (averaged over the layers) that AutoModel keeps in fp32: Qwen3-Next's Gated
    # DeltaNet decay terms A_log and dt_bias, one per value head each
    fp32_layer_params: float = 0.0
    # AutoModel builds its own implementation of the model (not Hugging Face's): it carries a BackendConfig,
    # whose attention backend defaults to Transformer Engine's (`backend.attn: te`)
    automodel_class: bool = False
    # AutoModel's own MoE class with biased experts (GPT-OSS's gate_up_proj_bias and down_proj_bias), whose bf16
    # expert MLP it may checkpoint in chunks (cost/memory.expert_mlp_checkpointed)
    expert_bias: bool = False
    # the linear layers outside the routed experts as (FLOPs per token over the whole model, the width tensor
    # parallelism splits): attention projections (query width), dense MLPs and shared experts (their FFN width),
    # routers, the LM head (vocabulary); each runs at the efficiency its own split width allows
    dense_gemms: tuple[tuple[float, int], ...] = ()
    # Named parts of the activations above (elements per token of one layer) and the FLOPs of the linear layers
    # around them: what each of Megatron-Core's `recompute_modules` frees and replays (cost/recompute.py).
    uses_mla: bool = False
    norm_out: int = 0  # one RMSNorm's output (the hidden size): the input norm's, and the pre-MLP norm's
    mla_latent: int = 0  # MLA's normed q/kv latents (replicated; the up-projections' inputs)
    attn_qkv: float = 0.0  # (TP-split) q twice (projected and rotated), k and v: MLA's expanded q/k/v
    mlp_inner: int = 0  # (TP-split) a dense MLP's fc1 output and activation output
    shared_inner: int = 0  # (TP-split) the shared experts' fc1 output and activation output
    expert_act: int = 0  # the routed experts' activation outputs over the top-k copies (the down GEMM's input)
    mla_up_flops: float = 0.0  # MLA's q and kv up-projections (6 per weight)
    mlp_flops: float = 0.0  # one dense MLP's linear layers
    shared_flops: float = 0.0  # one MoE layer's shared experts
    # Gated DeltaNet (Qwen3-Next): the chunked delta rule's state products of all its layers per token, which
    # flash-linear-attention's kernels run (`throughput.linear_attention_seconds`), and how many layers call them
    linear_attention_flops: float = 0.0
    linear_attention_layers: int = 0
    # One multi-token-prediction depth as Megatron-Core builds it (a copy of the last decoder layer, an MoE layer
    # with softmax attention here, after the eh projection of [h; h] to h, with an output head of its own): its
    # linear layers as (FLOPs per token, TP-split width) and its attention scores. Only stacks that train MTP
    # (`RecipeOptions.mtp_layers`) run it.
    mtp_gemms: tuple[tuple[float, int], ...] = ()
    mtp_attention_flops: float = 0.0


def _attention_dims(spec: ModelSpec) -> tuple[int, int, int]:
    """(query width, key+value width, value/output width) of one attention layer."""
    if spec.uses_mla:
        qk = (spec.qk_nope_head_dim or 0) + (spec.qk_rope_head_dim or 0)
        v = spec.v_head_dim or spec.head_dim
        return spec.num_attention_heads * qk, spec.num_attention_heads * (qk + v), spec.num_attention_heads * v
    q = spec.num_attention_heads * spec.head_dim
    return q, 2 * spec.num_key_value_heads * spec.head_dim, q


def _linear_shapes(spec: ModelSpec) -> tuple[list[tuple[int, int]], list[tuple[int, int]], list[tuple[int, int]]]:
    """(attention, dense MLP, one expert) linear layers as (in, out): what LoRA adapts."""
    h = spec.hidden_size
    if spec.uses_mla:
        heads = spec.num_attention_heads
        qk = (spec.qk_nope_head_dim or 0) + (spec.qk_rope_head_dim or 0)
        v = spec.v_head_dim or spec.head_dim
        kv_lora, rope = spec.kv_lora_rank or 0, spec.qk_rope_head_dim or 0
        attn = [(h, kv_lora + rope), (kv_lora, heads * ((spec.qk_nope_head_dim or 0) + v)), (heads * v, h)]
        attn += [(h, spec.q_lora_rank), (spec.q_lora_rank, heads * qk)] if spec.q_lora_rank else [(h, heads * qk)]
    else:
        q, kv = spec.num_attention_heads * spec.head_dim, spec.num_key_value_heads * spec.head_dim
        attn = [(h, q), (h, kv), (h, kv), (q, h)]
    mlp = [(h, spec.intermediate_size)] * 2 + [(spec.intermediate_size, h)]
    expert = [(h, spec.moe_intermediate_size)] * 2 + [(spec.moe_intermediate_size, h)]
    return attn, mlp, expert


def _adapter(shapes: list[tuple[int, int]], rank: int) -> int:
    return sum(rank * (i + o) for i, o in shapes)


def _attention_activation(spec: ModelSpec) -> tuple[float, float]:
    """(replicated, TP-split) activation elements per token of one attention block.

    Saved for backward with flash/TE attention (no seq² scores): norm input and output (2h);
    rotated q, k and v, the attention output and its contiguous copy fed to o_proj.
    MLA adds the low-rank latents (not TP-split) and the expanded K/V.
    """
    h = spec.hidden_size
    q, kv, v_out = _attention_dims(spec)
    if spec.uses_mla:
        latent = (spec.q_lora_rank or 0) + (spec.kv_lora_rank or 0) + (spec.qk_rope_head_dim or 0)
        return 2 * h + 2 * latent, 2 * q + kv + 2 * v_out
    return 2 * h, 2 * q + kv + v_out


# flash-linear-attention's chunked delta rule works in chunks of 64 tokens (`chunk_gated_delta_rule`, chunk_size=64)
DELTA_RULE_CHUNK = 64


def _linear_attention_activation(spec: ModelSpec) -> tuple[float, float]:
    """(replicated, TP-split) activation elements per token one Gated DeltaNet layer keeps for backward.

    Megatron-Core 0.19.2's GatedDeltaNet (ssm/gated_delta_net/gdn.py) with flash-linear-attention's kernels: the
    fused norm and in-projection keep the norm's input and output (2h); the depthwise convolution keeps its input
    (q, k, v), the L2 norm its normalized q and k; `chunk_gated_delta_rule` keeps q and k repeated to the value
    heads, v, its triangular-solve matrix (one chunk-wide row per value head and token), the decay and beta; the
    gated norm keeps the output gate z and the rule's output, the out-projection the gated norm's output and its
    transposed copy. Hugging Face's Qwen3-Next layer keeps about the same (the same kernels).
    """
    qk = spec.linear_num_key_heads * spec.linear_key_head_dim
    v = spec.linear_num_value_heads * spec.linear_value_head_dim
    heads = spec.linear_num_value_heads
    expanded_qk = 2 * heads * spec.linear_key_head_dim
    return 2 * spec.hidden_size, ((2 * qk + v) + 2 * qk + expanded_qk + v + heads * DELTA_RULE_CHUNK + 2 * heads
                                  + 4 * v)


def _mla_up_flops(spec: ModelSpec) -> float:
    """MLA's up-projections, the GEMMs `mla_up_proj` recompute replays (Megatron-Core's `qkv_up_proj_and_rope_apply`:
    the q projection from the q latent, or from the hidden state without one, and the kv up-projection)."""
    if not spec.uses_mla:
        return 0.0
    heads = spec.num_attention_heads
    qk = (spec.qk_nope_head_dim or 0) + (spec.qk_rope_head_dim or 0)
    kv_up = (spec.kv_lora_rank or 0) * heads * ((spec.qk_nope_head_dim or 0) + (spec.v_head_dim or spec.head_dim))
    return 6.0 * ((spec.q_lora_rank or spec.hidden_size) * heads * qk + kv_up)


@lru_cache(maxsize=64)
def model_shape(spec: ModelSpec, training: TrainingSpec) -> ModelShape:
    """Build the ModelShape of `spec` for `training` (sequence length, PEFT rank)."""
    pc = param_counts(spec)
    h, seq = spec.hidden_size, training.seq_length
    moe_layers = spec.moe_layers
    dense_layers = spec.dense_layers
    attn_params = pc.attention_per_layer + pc.norms_per_layer
    qk_norm = 2 * spec.head_dim if spec.qk_norm and not spec.uses_mla else 0
    dense_layer_params = attn_params + pc.dense_mlp_per_layer
    moe_layer_params = attn_params + pc.router_per_moe_layer + pc.shared_per_moe_layer

    rank = training.lora_rank if training.is_peft else 0
    attn_lin, mlp_lin, expert_lin = _linear_shapes(spec)
    attn_adapter = _adapter(attn_lin, rank)
    shared_adapter = _adapter(
        [(h, spec.shared_expert_intermediate_size)] * 2 + [(spec.shared_expert_intermediate_size, h)], rank
    ) if spec.num_shared_experts else 0
    dense_adapter = attn_adapter + _adapter(mlp_lin, rank)
    moe_adapter = attn_adapter + shared_adapter + spec.num_routed_experts * _adapter(expert_lin, rank)
    q, kv, v_out = _attention_dims(spec)

    att_rep, att_tp = _attention_activation(spec)
    if spec.linear_attention_layers:  # the layers' average: Gated DeltaNet keeps several times softmax attention's
        lin_rep, lin_tp = _linear_attention_activation(spec)
        linear, layers = spec.linear_attention_layers, spec.num_layers
        att_rep = (att_rep * (layers - linear) + lin_rep * linear) / layers
        att_tp = (att_tp * (layers - linear) + lin_tp * linear) / layers
    dense_act_rep, dense_act_tp = att_rep + 2 * h, att_tp + 3 * spec.intermediate_size
    k, moe_i = spec.experts_per_token, spec.moe_intermediate_size
    shared_i = spec.shared_expert_intermediate_size * max(spec.num_shared_experts, 0)
    # router logits and probabilities in fp32 (2 elements each), then per top-k copy: the dispatched input
    # (kept by the gate/up grouped GEMM) and the gate/up output and activation output (kept by the activation
    # and the down GEMM). AutoModel's own MoE classes apply the routing weight inside the activation
    # (`apply_router_weight_after_down` is False for all of them: GroupedExperts*.forward passes the
    # probabilities to `expert_activation`), so the down projection's output goes straight to the combine
    # and is not kept; Hugging Face's expert loop (Mixtral) multiplies that output by the weight and keeps it.
    moe_act_rep = att_rep + 2 * h + 4 * spec.num_routed_experts
    # AutoModel's `fake_balanced_gate` (FakeBalancedGate.forward) reads only the token count: no logits, and
    # the normed input is kept only when shared experts' first linear layer keeps it (the dispatch keeps none)
    moe_act_router = 4 * spec.num_routed_experts + (0 if shared_i else h)
    moe_act_tp = att_tp + 3 * shared_i
    own_moe = automodel_moe(spec)
    moe_act_expert = k * ((1 if own_moe else 2) * h + 3 * moe_i)

    # QK^T and AV, 6 = forward 2 + backward 4, over the keys a token attends to on average: half the
    # sequence (causal), or the window for sliding-window layers; linear-attention layers have none.
    window = min(spec.sliding_window or seq, seq / 2)
    full_layers = spec.full_attention_layers - spec.sliding_window_layers
    attention_flops = 6.0 * (q + v_out) * (full_layers * seq / 2 + spec.sliding_window_layers * window)
    # Gated DeltaNet's chunked delta rule: per value head four (key x value) state products per token
    # (K K^T, V K^T, the state update and S q; Megatron-Core's FLOPs formula counts the same, `gdn_layer_flops`
    # in Megatron-Bridge's training/utils/flop_utils.py), run by flash-linear-attention's kernels, not the GEMMs
    linear_attention_flops = 6.0 * 4 * spec.linear_attention_layers * spec.linear_num_value_heads * (
        spec.linear_key_head_dim * spec.linear_value_head_dim)
    linear = 6.0 * pc.attention_per_layer
    dense_layer_flops = linear + 6.0 * pc.dense_mlp_per_layer
    moe_layer_flops = linear + 6.0 * (pc.shared_per_moe_layer + pc.router_per_moe_layer)
    moe_expert_flops = 6.0 * k * pc.expert_per_expert
    lm_head_weights = pc.lm_head if pc.lm_head else pc.embedding
    return ModelShape(
        num_layers=spec.num_layers,
        dense_layers=dense_layers,
        moe_layers=moe_layers,
        hidden=h,
        vocab=spec.vocab_size,
        dense_layer_params=dense_layer_params,
        moe_layer_params=moe_layer_params,
        expert_params=pc.expert_per_expert,
        expert_width=spec.moe_intermediate_size or 0,
        num_experts=spec.num_routed_experts,
        top_k=k,
        embedding_params=pc.embedding,
        lm_head_params=pc.lm_head,
        final_norm_params=pc.final_norm,
        dense_layer_adapter=dense_adapter,
        moe_layer_adapter=moe_adapter,
        dense_act_rep=dense_act_rep,
        dense_act_tp=dense_act_tp,
        moe_act_rep=moe_act_rep,
        moe_act_tp=moe_act_tp,
        moe_act_expert=moe_act_expert,
        moe_act_router=moe_act_router,
        # Megatron-Core multiplies the routing probabilities in at the unpermute (moe_apply_probs_on_input
        # is off by default), after the down projection: it keeps each expert output as AutoModel does not
        moe_act_output=k * h if own_moe else 0,
        dense_layer_flops=dense_layer_flops,
        moe_layer_flops=moe_layer_flops,
        moe_expert_flops=moe_expert_flops,
        attention_flops=attention_flops,
        lm_head_flops=6.0 * lm_head_weights,
        flops_scale=4.0 / 6.0 if training.is_peft else 1.0,
        kv_dim=kv,
        dense_layer_tp_whole=pc.norms_per_layer + qk_norm,
        moe_layer_tp_whole=pc.norms_per_layer + qk_norm + pc.router_per_moe_layer,
        fp32_layer_params=spec.linear_attention_layers * 2 * spec.linear_num_value_heads / spec.num_layers,
        automodel_class=bool((cls := model_class(spec.family)) and cls.custom),
        expert_bias=own_moe and spec.is_moe and spec.mlp_bias,
        dense_gemms=tuple((flops, width) for flops, width in (
            (spec.num_layers * linear, q),
            (dense_layers * 6.0 * pc.dense_mlp_per_layer, spec.intermediate_size),
            (moe_layers * 6.0 * pc.shared_per_moe_layer, max(shared_i, 1)),
            (moe_layers * 6.0 * pc.router_per_moe_layer, max(spec.num_routed_experts, 1)),
            (6.0 * lm_head_weights, spec.vocab_size),
        ) if flops),
        uses_mla=spec.uses_mla,
        norm_out=h,
        mla_latent=att_rep - 2 * h,
        attn_qkv=2 * q + kv,
        mlp_inner=3 * spec.intermediate_size,
        shared_inner=3 * shared_i,
        expert_act=k * moe_i,
        mla_up_flops=_mla_up_flops(spec),
        mlp_flops=6.0 * pc.dense_mlp_per_layer,
        shared_flops=6.0 * pc.shared_per_moe_layer,
        linear_attention_flops=linear_attention_flops,
        linear_attention_layers=spec.linear_attention_layers,
        mtp_gemms=tuple((flops, width) for flops, width in (
            (6.0 * (pc.full_attention_per_layer + 2 * h * h), q),  # attention projections and the eh projection
            (6.0 * (0 if spec.is_moe else pc.dense_mlp_per_layer), spec.intermediate_size),
            (6.0 * pc.shared_per_moe_layer, max(shared_i, 1)),
            (6.0 * pc.router_per_moe_layer, max(spec.num_routed_experts, 1)),
            (6.0 * lm_head_weights, spec.vocab_size),
        ) if flops),
        mtp_attention_flops=6.0 * (q + v_out) * seq / 2,
    )

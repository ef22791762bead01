"""ModelSpec -> a Hugging Face config.json mapping: the inverse of `hf_config`, for the model-level dry-run.

A catalog preset names no local folder, so the dry-run writes its architecture out as the config.json
transformers would read for that family (every key `hf_config` reads, plus the architecture AutoModel
picks its class by). Keys that change no parameter shape (rope, norms' epsilon) keep their families'
defaults. `model_from_hf_config(hf_config_dict(spec)) == spec` (up to name and source) is a test.
"""

from __future__ import annotations

from typing import Any

from automodel_dist.catalog.specs import ModelSpec
from automodel_dist.errors import InputError
from automodel_dist.targets.automodel.model_classes import HF_MODEL_TYPES, model_class

MAX_POSITIONS = 131072


def hf_config_dict(spec: ModelSpec) -> dict[str, Any]:
    """The config.json of `spec`'s architecture (all layers, real widths and expert counts)."""
    cls = model_class(spec.family)
    if cls is None:
        raise InputError(f"the model's family {spec.family!r} has no Hugging Face config to write",
                         hint="pass the model's own config.json folder as model.pretrained_model_name_or_path")
    out: dict[str, Any] = {
        "architectures": [cls.name], "model_type": HF_MODEL_TYPES[spec.family],
        "hidden_size": spec.hidden_size, "intermediate_size": spec.intermediate_size,
        "num_hidden_layers": spec.num_layers, "num_attention_heads": spec.num_attention_heads,
        "num_key_value_heads": spec.num_key_value_heads, "head_dim": spec.head_dim, "vocab_size": spec.vocab_size,
        "tie_word_embeddings": spec.tie_word_embeddings, "max_position_embeddings": MAX_POSITIONS,
        "torch_dtype": "bfloat16",
    }
    if spec.uses_mla:  # transformers derives it from the MLA dims (hf_config reads nope + rope)
        del out["head_dim"]
    out.update(_FAMILY_KEYS[spec.family](spec))
    return out


def _layer_types(spec: ModelSpec, kind: str, count: int, other: str) -> list[str]:
    """`count` layers of `kind` spread as the families do: the first of each group of layers is `kind`."""
    if count == 0:
        return [other] * spec.num_layers
    step = spec.num_layers / count
    marked = {int(i * step) for i in range(count)}
    return [kind if i in marked else other for i in range(spec.num_layers)]


def _llama(spec: ModelSpec) -> dict[str, Any]:
    return {"attention_bias": spec.attention_bias, "mlp_bias": spec.mlp_bias, "rope_theta": 500000.0}


def _sliding(spec: ModelSpec) -> dict[str, Any]:
    if not spec.sliding_window:
        return {"sliding_window": None}
    return {"sliding_window": spec.sliding_window,
            "layer_types": _layer_types(spec, "sliding_attention", spec.sliding_window_layers, "full_attention")}


def _qwen_sliding(spec: ModelSpec) -> dict[str, Any]:
    if not spec.sliding_window:
        return {"use_sliding_window": False}
    return {"use_sliding_window": True, "sliding_window": spec.sliding_window,
            "max_window_layers": spec.num_layers - spec.sliding_window_layers}


def _qwen2(spec: ModelSpec) -> dict[str, Any]:
    return _qwen_sliding(spec)


def _qwen3(spec: ModelSpec) -> dict[str, Any]:
    return {"attention_bias": spec.attention_bias, **_qwen_sliding(spec)}


def _qwen3_moe(spec: ModelSpec) -> dict[str, Any]:
    return {**_qwen3(spec), "num_experts": spec.num_routed_experts, "num_experts_per_tok": spec.experts_per_token,
            "moe_intermediate_size": spec.moe_intermediate_size, "decoder_sparse_step": 1,
            "mlp_only_layers": list(range(spec.first_dense_layers)), "norm_topk_prob": True}


def _qwen3_next(spec: ModelSpec) -> dict[str, Any]:
    full = spec.num_layers - spec.linear_attention_layers
    types = _layer_types(spec, "full_attention", full, "linear_attention")
    types = types[::-1]  # Qwen3-Next puts full attention last in each group (layers 4, 8, ...)
    return {**_qwen3_moe(spec), "shared_expert_intermediate_size": spec.shared_expert_intermediate_size,
            "layer_types": types, "linear_num_key_heads": spec.linear_num_key_heads,
            "linear_num_value_heads": spec.linear_num_value_heads, "linear_key_head_dim": spec.linear_key_head_dim,
            "linear_value_head_dim": spec.linear_value_head_dim,
            "linear_conv_kernel_dim": spec.linear_conv_kernel_dim}


def _mixtral(spec: ModelSpec) -> dict[str, Any]:
    return {"num_local_experts": spec.num_routed_experts, "num_experts_per_tok": spec.experts_per_token,
            **_sliding(spec)}


def _deepseek_v3(spec: ModelSpec) -> dict[str, Any]:
    return {"n_routed_experts": spec.num_routed_experts, "n_shared_experts": spec.num_shared_experts,
            "num_experts_per_tok": spec.experts_per_token, "moe_intermediate_size": spec.moe_intermediate_size,
            "first_k_dense_replace": spec.first_dense_layers, "moe_layer_freq": 1,
            "topk_method": "noaux_tc" if spec.router_bias else "greedy", "n_group": 8, "topk_group": 4,
            "scoring_func": "sigmoid", "norm_topk_prob": True, "routed_scaling_factor": 2.5,
            "q_lora_rank": spec.q_lora_rank, "kv_lora_rank": spec.kv_lora_rank,
            "qk_nope_head_dim": spec.qk_nope_head_dim, "qk_rope_head_dim": spec.qk_rope_head_dim,
            "v_head_dim": spec.v_head_dim, "attention_bias": spec.attention_bias, "num_nextn_predict_layers": 0}


def _gpt_oss(spec: ModelSpec) -> dict[str, Any]:
    types = _layer_types(spec, "sliding_attention", spec.sliding_window_layers, "full_attention")
    return {"num_local_experts": spec.num_routed_experts, "num_experts_per_tok": spec.experts_per_token,
            "experts_per_token": spec.experts_per_token, "attention_bias": spec.attention_bias,
            "sliding_window": spec.sliding_window, "layer_types": types}


_FAMILY_KEYS = {
    "llama": _llama, "mistral": _sliding, "qwen2": _qwen2, "qwen3": _qwen3, "qwen3_moe": _qwen3_moe,
    "qwen3_next": _qwen3_next, "mixtral": _mixtral, "deepseek_v3": _deepseek_v3, "kimi_k2": _deepseek_v3,
    "gpt_oss": _gpt_oss,
}

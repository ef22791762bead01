"""Hugging Face `config.json` -> ModelSpec, offline, for the families AutoModel trains.

Each family reads the keys its transformers config class defines, with that class's defaults, so a
local model folder gives the same spec as the matching preset.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from automodel_dist.catalog.fields import HF_KEY_TO_FIELD, check_spec
from automodel_dist.catalog.specs import ModelSpec
from automodel_dist.errors import InputError
from automodel_dist.limits import MAX_INT_DIGITS, MAX_NESTING, check_model_size, check_tree, read_text_file

_REQUIRED = object()


class _Reader:
    """Typed access to config keys; a missing or mistyped key is an InputError naming it."""

    def __init__(self, cfg: Mapping[str, Any], where: str) -> None:
        self.cfg = cfg
        self.where = where

    def _error(self, key: str, message: str) -> InputError:
        return InputError(f"config.json key {key!r} {message}", where=f"{self.where}.{key}",
                          hint="use the config.json published with the model")

    def int(self, key: str, default: Any = _REQUIRED) -> Any:
        value = self.cfg.get(key, default)
        if value is _REQUIRED:
            raise self._error(key, "is missing")
        if value is None and default is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise self._error(key, f"must be a non-negative integer, got {value!r}")
        # checked as read: a family reader loops over the layers before the spec is complete
        check_model_size(HF_KEY_TO_FIELD.get(key, key), value, f"{self.where}.{key}", name=key)
        return value

    def bool(self, key: str, default: bool) -> bool:
        value = self.cfg.get(key, default)
        if not isinstance(value, bool):
            raise self._error(key, f"must be true or false, got {value!r}")
        return value

    def list(self, key: str) -> list[Any] | None:
        value = self.cfg.get(key)
        if value is not None and not isinstance(value, list):
            raise self._error(key, f"must be a list, got {value!r}")
        return value


def _common(r: _Reader) -> dict[str, Any]:
    """Keys every decoder family shares; head_dim defaults to hidden_size / heads as in transformers."""
    heads = r.int("num_attention_heads")
    hidden = r.int("hidden_size")
    if heads == 0:
        raise r._error("num_attention_heads", "must be at least 1")
    return {
        "num_layers": r.int("num_hidden_layers"),
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_key_value_heads": r.int("num_key_value_heads", heads),
        "head_dim": r.int("head_dim", None) or hidden // heads,
        "intermediate_size": r.int("intermediate_size"),
        "vocab_size": r.int("vocab_size"),
        "tie_word_embeddings": r.bool("tie_word_embeddings", False),
    }


def _count_layer_types(r: _Reader, kind: str, num_layers: int) -> int | None:
    """How many entries of `layer_types` are `kind`; None when the config has no layer_types."""
    types = r.list("layer_types")
    if types is None:
        return None
    if len(types) != num_layers:
        raise r._error("layer_types", f"has {len(types)} entries for {num_layers} layers")
    return sum(1 for t in types if t == kind)


def _sliding(r: _Reader, num_layers: int, default_layers: int) -> dict[str, Any]:
    """Sliding-window attention: the window and how many layers use it (`layer_types` says, else the
    family's default, `default_layers`)."""
    window = r.int("sliding_window", None)
    if not window:
        return {}
    counted = _count_layer_types(r, "sliding_attention", num_layers)
    layers = counted if counted is not None else default_layers
    return {"sliding_window": window, "sliding_window_layers": layers} if layers else {}


def _qwen_sliding(r: _Reader, num_layers: int) -> dict[str, Any]:
    """Qwen2/3 use the window only with use_sliding_window, on layers from max_window_layers on."""
    if not r.bool("use_sliding_window", False):
        return {}
    window = r.int("sliding_window", None)
    counted = _count_layer_types(r, "sliding_attention", num_layers)
    if counted is None:
        counted = max(0, num_layers - r.int("max_window_layers", num_layers))
    return {"sliding_window": window, "sliding_window_layers": counted} if window and counted else {}


def _leading_dense_layers(r: _Reader, num_layers: int) -> int:
    """Qwen MoE: layer i is dense if listed in mlp_only_layers or (i+1) % decoder_sparse_step != 0.

    ModelSpec models dense layers at the front only; any other pattern is refused, not approximated.
    """
    step = r.int("decoder_sparse_step", 1) or 1
    only = r.list("mlp_only_layers") or []
    dense = [i for i in range(num_layers) if i in only or (i + 1) % step != 0]
    if dense != list(range(len(dense))):
        raise InputError(
            f"dense MLP layers at positions {dense} are not supported: only leading dense layers are modelled",
            where=f"{r.where}.mlp_only_layers", hint="use decoder_sparse_step 1 and leading mlp_only_layers",
        )
    return len(dense)


def _llama(r: _Reader) -> dict[str, Any]:
    spec = _common(r)
    bias = r.bool("attention_bias", False)
    return spec | {"attention_bias": bias, "attention_out_bias": bias, "mlp_bias": r.bool("mlp_bias", False)}


def _mistral(r: _Reader) -> dict[str, Any]:
    spec = _common(r)
    return spec | _sliding(r, spec["num_layers"], default_layers=spec["num_layers"])


def _qwen2(r: _Reader) -> dict[str, Any]:
    spec = _common(r)
    return spec | {"attention_bias": True} | _qwen_sliding(r, spec["num_layers"])


def _qwen3(r: _Reader) -> dict[str, Any]:
    spec = _common(r)
    bias = r.bool("attention_bias", False)
    return spec | {"attention_bias": bias, "attention_out_bias": bias, "qk_norm": True} | _qwen_sliding(
        r, spec["num_layers"])


def _qwen3_moe(r: _Reader) -> dict[str, Any]:
    spec = _qwen3(r)
    return spec | {
        "num_routed_experts": r.int("num_experts"),
        "experts_per_token": r.int("num_experts_per_tok"),
        "moe_intermediate_size": r.int("moe_intermediate_size"),
        "first_dense_layers": _leading_dense_layers(r, spec["num_layers"]),
    }


def _qwen3_next(r: _Reader) -> dict[str, Any]:
    spec = _qwen3_moe(r)
    layers = spec["num_layers"]
    linear = _count_layer_types(r, "linear_attention", layers)
    if linear is None:
        interval = r.int("full_attention_interval", 4) or 1
        linear = layers - layers // interval
    shared = r.int("shared_expert_intermediate_size")
    return spec | {
        "attention_output_gate": True,
        "num_shared_experts": 1 if shared else 0,
        "shared_expert_intermediate_size": shared,
        "shared_expert_gate": bool(shared),
        "linear_attention_layers": linear,
        "linear_num_key_heads": r.int("linear_num_key_heads"),
        "linear_num_value_heads": r.int("linear_num_value_heads"),
        "linear_key_head_dim": r.int("linear_key_head_dim"),
        "linear_value_head_dim": r.int("linear_value_head_dim"),
        "linear_conv_kernel_dim": r.int("linear_conv_kernel_dim"),
    }


def _mixtral(r: _Reader) -> dict[str, Any]:
    spec = _common(r)
    return spec | {
        "num_routed_experts": r.int("num_local_experts"),
        "experts_per_token": r.int("num_experts_per_tok"),
        "moe_intermediate_size": spec["intermediate_size"],
    } | _sliding(r, spec["num_layers"], default_layers=spec["num_layers"])


def _deepseek_v3(r: _Reader) -> dict[str, Any]:
    spec = _common(r)
    if r.int("moe_layer_freq", 1) != 1:
        raise InputError("moe_layer_freq other than 1 is not supported: only leading dense layers are modelled",
                         where=f"{r.where}.moe_layer_freq", hint="use a config with moe_layer_freq 1")
    nope, rope = r.int("qk_nope_head_dim"), r.int("qk_rope_head_dim")
    moe_width = r.int("moe_intermediate_size")
    shared = r.int("n_shared_experts", 0) or 0
    bias = r.bool("attention_bias", False)
    return spec | {
        "head_dim": nope + rope,
        "num_routed_experts": r.int("n_routed_experts"),
        "num_shared_experts": shared,
        "experts_per_token": r.int("num_experts_per_tok"),
        "moe_intermediate_size": moe_width,
        "shared_expert_intermediate_size": moe_width if shared else 0,
        "first_dense_layers": r.int("first_k_dense_replace", 0),
        "router_bias": r.cfg.get("topk_method", "noaux_tc") == "noaux_tc",
        "q_lora_rank": r.int("q_lora_rank", None),
        "kv_lora_rank": r.int("kv_lora_rank"),
        "qk_nope_head_dim": nope,
        "qk_rope_head_dim": rope,
        "v_head_dim": r.int("v_head_dim"),
        "attention_bias": bias,
        "attention_out_bias": bias,
    }


def _gpt_oss(r: _Reader) -> dict[str, Any]:
    spec = _common(r)
    layers = spec["num_layers"]
    bias = r.bool("attention_bias", True)
    sliding = _sliding(r, layers, default_layers=(layers + 1) // 2)  # GptOssConfig: even layers slide
    return spec | {
        "num_routed_experts": r.int("num_local_experts"),
        "experts_per_token": r.int("num_experts_per_tok", None) or r.int("experts_per_token"),
        "moe_intermediate_size": spec["intermediate_size"],
        "attention_bias": bias,
        "attention_out_bias": bias,
        "attention_sinks": True,
        "mlp_bias": True,
        "router_bias": True,
    } | sliding


FAMILIES: dict[str, Callable[[_Reader], dict[str, Any]]] = {
    "llama": _llama,
    "mistral": _mistral,
    "qwen2": _qwen2,
    "qwen3": _qwen3,
    "qwen3_moe": _qwen3_moe,
    "qwen3_next": _qwen3_next,
    "mixtral": _mixtral,
    "deepseek_v3": _deepseek_v3,
    "kimi_k2": _deepseek_v3,
    "gpt_oss": _gpt_oss,
}


def model_from_hf_config(cfg: Mapping[str, Any], name: str, *, where: str = "config.json",
                         source: str = "") -> ModelSpec:
    """A parsed Hugging Face config.json mapping -> ModelSpec (family = its model_type)."""
    if not isinstance(cfg, Mapping):
        raise InputError(f"a Hugging Face config must be a JSON object, found {type(cfg).__name__}", where=where,
                         hint="pass the model's config.json")
    model_type = cfg.get("model_type")
    if not isinstance(model_type, str):
        raise InputError("config.json has no model_type", where=where,
                         hint="pass the config.json of a supported model: " + ", ".join(sorted(FAMILIES)))
    if model_type not in FAMILIES:
        raise InputError(f"unsupported model_type {model_type!r}", where=f"{where}.model_type",
                         hint="supported model_type values: " + ", ".join(sorted(FAMILIES))
                         + "; or describe the architecture as a mapping of ModelSpec fields")
    values = FAMILIES[model_type](_Reader(cfg, where))
    return check_spec(ModelSpec(name=name, family=model_type, source=source, **values), where)


def _json_int(digits: str, where: str) -> int:
    """json's integer hook: Python refuses past 4300 digits with a ValueError; refuse far earlier, named."""
    if len(digits.lstrip("-")) > MAX_INT_DIGITS:
        raise InputError(f"an integer of {len(digits):,} digits (the limit is {MAX_INT_DIGITS})", where=where,
                         hint="pass the config.json published with the model")
    return int(digits)


def load_hf_config(path: Path) -> ModelSpec:
    """A local config.json (or a folder holding one) -> ModelSpec named after its folder."""
    file = path / "config.json" if path.is_dir() else path
    where = str(file)
    text = read_text_file(file, what="model config", expected="a config.json or a model folder that holds one")
    try:
        cfg = json.loads(text, parse_int=lambda digits: _json_int(digits, where))
    except json.JSONDecodeError as exc:
        raise InputError(f"malformed JSON: {exc.msg}", where=f"{where}:{exc.lineno}:{exc.colno}",
                         hint="fix the JSON at that position (a trailing comma or a missing quote?)") from None
    except RecursionError:
        raise InputError(f"nested more than {MAX_NESTING} levels deep (the limit)", where=where,
                         hint="pass the config.json published with the model") from None
    check_tree(cfg, where=where)
    name = file.parent.name if file.name == "config.json" and file.parent.name else file.stem
    return model_from_hf_config(cfg, name, where=where, source=where)

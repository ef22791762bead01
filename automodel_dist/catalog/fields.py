"""Building a ModelSpec from a mapping of its fields: type checks, did-you-mean, consistency.

Presets, `{preset: ID, <overrides>}` mappings and full architecture mappings all go through here,
so a typo or an impossible architecture is reported the same way wherever it comes from.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import MISSING, fields, replace
from typing import Any

from automodel_dist.catalog.specs import ModelSpec
from automodel_dist.errors import InputError
from automodel_dist.limits import check_model_size

SPEC_FIELDS: dict[str, str] = {f.name: str(f.type) for f in fields(ModelSpec)}
REQUIRED_FIELDS: tuple[str, ...] = tuple(
    f.name for f in fields(ModelSpec) if f.default is MISSING and f.default_factory is MISSING
)

# Hugging Face config keys people type where a ModelSpec field is meant.
HF_KEY_TO_FIELD: dict[str, str] = {
    "num_hidden_layers": "num_layers",
    "num_experts": "num_routed_experts",
    "num_local_experts": "num_routed_experts",
    "n_routed_experts": "num_routed_experts",
    "n_shared_experts": "num_shared_experts",
    "num_experts_per_tok": "experts_per_token",
    "first_k_dense_replace": "first_dense_layers",
    "model_type": "family",
}

_BOOL_FIELDS = {name for name, kind in SPEC_FIELDS.items() if kind == "bool"}
_INT_FIELDS = {name for name, kind in SPEC_FIELDS.items() if kind == "int"}
_OPTIONAL_INT_FIELDS = {name for name, kind in SPEC_FIELDS.items() if kind == "int | None"}
_POSITIVE_FIELDS = ("num_layers", "hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim",
                    "vocab_size")


def did_you_mean(word: str, choices: Iterable[str], *, n: int = 1, cutoff: float = 0.6) -> str:
    """' (did you mean X?)' for the closest choices (case-insensitive), or '' when none is close."""
    by_lower = {choice.lower(): choice for choice in sorted(choices)}
    close = difflib.get_close_matches(word.lower(), list(by_lower), n=n, cutoff=cutoff)
    return " (did you mean " + " or ".join(repr(by_lower[c]) for c in close) + "?)" if close else ""


def _field_hint(key: str) -> str:
    if key in HF_KEY_TO_FIELD:
        return f" (the architecture field is {HF_KEY_TO_FIELD[key]!r})"
    return did_you_mean(key, SPEC_FIELDS)


def _coerce(name: str, value: Any, where: str) -> Any:
    """Check one field's type; YAML gives int/bool/str already, so nothing is converted silently."""
    def bad(expected: str) -> InputError:
        return InputError(f"{name} must be {expected}, got {value!r}", where=f"{where}.{name}",
                          hint=f"write {name} as {expected}")

    if name in _BOOL_FIELDS:
        if not isinstance(value, bool):
            raise bad("true or false")
        return value
    if name in _INT_FIELDS or name in _OPTIONAL_INT_FIELDS:
        if value is None and name in _OPTIONAL_INT_FIELDS:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad("an integer" + (" or null" if name in _OPTIONAL_INT_FIELDS else ""))
        if value < 0:
            raise bad("a non-negative integer")
        return value
    if not isinstance(value, str):
        raise bad("a string")
    return value


def check_fields(values: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Unknown keys (with did-you-mean) and wrong types become InputErrors; returns checked values."""
    checked: dict[str, Any] = {}
    for key, value in values.items():
        if not isinstance(key, str) or key not in SPEC_FIELDS:
            raise InputError(
                f"unknown model architecture field {key!r}{_field_hint(str(key))}",
                where=f"{where}.{key}",
                hint="architecture fields are: " + ", ".join(SPEC_FIELDS),
            )
        checked[key] = _coerce(key, value, where)
    return checked


def spec_from_fields(values: Mapping[str, Any], where: str) -> ModelSpec:
    """A full architecture mapping -> ModelSpec; a missing required field is named."""
    checked = check_fields(values, where)
    missing = [name for name in REQUIRED_FIELDS if name not in checked]
    if missing:
        raise InputError(
            f"model architecture is missing required field{'s' if len(missing) > 1 else ''}: "
            + ", ".join(missing),
            where=where,
            hint="give every one of: " + ", ".join(n for n in REQUIRED_FIELDS if n not in ("name", "family"))
            + "; or start from a preset with {preset: ID, <field>: <value>}",
        )
    if checked.get("sliding_window") and "sliding_window_layers" not in checked:  # as Mistral: every layer
        checked["sliding_window_layers"] = checked["num_layers"]
    return check_spec(ModelSpec(**checked), where)


def apply_overrides(spec: ModelSpec, overrides: Mapping[str, Any], where: str) -> ModelSpec:
    """`{preset: ID, num_layers: 40}`: the preset's spec with the given fields replaced."""
    changed = check_fields(overrides, where)
    return check_spec(replace(spec, **changed), where, given=frozenset(changed))


def check_spec(spec: ModelSpec, where: str, given: Iterable[str] | None = None) -> ModelSpec:
    """Reject architectures that cannot exist, naming the field; returns the spec unchanged.

    A rule between fields (heads and KV heads, layers and the layers of a kind) is located at the first of them
    the user wrote (`given`: the fields a `{preset: ID, ...}` mapping sets; None: every field was written),
    not at a preset value the user never saw."""
    written = None if given is None else frozenset(given)

    def fail(field: str | tuple[str, ...], message: str, hint: str) -> InputError:
        involved = (field,) if isinstance(field, str) else field
        at = next((f for f in involved if written is None or f in written), involved[0])
        return InputError(message, where=f"{where}.{at}", hint=hint)

    for item in fields(spec):
        check_model_size(item.name, getattr(spec, item.name), f"{where}.{item.name}")
    for name in _POSITIVE_FIELDS:
        if getattr(spec, name) < 1:
            raise fail(name, f"must be at least 1, got {getattr(spec, name)}", f"set {name} to a positive integer")
    heads, kv = spec.num_attention_heads, spec.num_key_value_heads
    if heads % kv:
        raise fail(("num_key_value_heads", "num_attention_heads"),
                   f"num_key_value_heads {kv} must divide num_attention_heads {heads}",
                   f"grouped-query attention needs num_attention_heads to be a multiple of num_key_value_heads: "
                   f"set num_attention_heads to a multiple of {kv}, or num_key_value_heads to a divisor of {heads}")
    if spec.dense_layers and spec.intermediate_size < 1:
        raise fail("intermediate_size", "must be at least 1: the model has dense MLP layers",
                   "set intermediate_size to the dense MLP width")
    _check_moe(spec, fail)
    mla = {"kv_lora_rank": spec.kv_lora_rank, "qk_nope_head_dim": spec.qk_nope_head_dim,
           "qk_rope_head_dim": spec.qk_rope_head_dim, "v_head_dim": spec.v_head_dim}
    given = [k for k, v in mla.items() if v is not None]
    if given and len(given) < len(mla):
        missing = [k for k in mla if k not in given]
        raise fail(missing[0], "multi-head latent attention needs all of " + ", ".join(mla),
                   "give every MLA dimension, or none for ordinary attention")
    if spec.q_lora_rank is not None and not given:
        raise fail("q_lora_rank", "is an MLA dimension but kv_lora_rank is not set",
                   "give the MLA dimensions (kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim)")
    if spec.linear_attention_layers >= spec.num_layers:
        raise fail(("linear_attention_layers", "num_layers"), f"linear_attention_layers "
                   f"{spec.linear_attention_layers} leaves no full-attention layer among num_layers {spec.num_layers}",
                   "linear_attention_layers must be below num_layers")
    if spec.linear_attention_layers:
        for name in ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
                     "linear_value_head_dim", "linear_conv_kernel_dim"):
            if getattr(spec, name) < 1:
                raise fail(name, "must be at least 1 when linear_attention_layers > 0",
                           "give the linear-attention dimensions")
    if spec.sliding_window_layers > spec.num_layers:
        raise fail(("sliding_window_layers", "num_layers"), f"sliding_window_layers {spec.sliding_window_layers} "
                   f"exceeds num_layers {spec.num_layers}", "count the layers that use the sliding window")
    if spec.sliding_window_layers and not spec.sliding_window:
        raise fail("sliding_window", "is not set but sliding_window_layers is",
                   "give the window size in tokens, or set sliding_window_layers to 0")
    return spec


def _check_moe(spec: ModelSpec, fail: Any) -> None:
    if not spec.is_moe:
        for name in ("experts_per_token", "num_shared_experts", "first_dense_layers"):
            if getattr(spec, name):
                raise fail((name, "num_routed_experts"), f"{name} is set but num_routed_experts is 0",
                           "set num_routed_experts for an MoE model, or remove the MoE fields")
        return
    if not 1 <= spec.experts_per_token <= spec.num_routed_experts:
        raise fail(("experts_per_token", "num_routed_experts"),
                   f"experts_per_token {spec.experts_per_token} must be between 1 and num_routed_experts "
                   f"{spec.num_routed_experts}", "set experts_per_token to the router's top-k")
    if spec.moe_intermediate_size < 1:
        raise fail("moe_intermediate_size", "must be at least 1 for an MoE model", "set the width of one expert")
    if spec.num_shared_experts and spec.shared_expert_intermediate_size < 1:
        raise fail("shared_expert_intermediate_size", "must be at least 1 when num_shared_experts > 0",
                   "set the width of one shared expert")
    if spec.first_dense_layers >= spec.num_layers:
        raise fail(("first_dense_layers", "num_layers"), f"first_dense_layers {spec.first_dense_layers} leaves no "
                   f"MoE layer among num_layers {spec.num_layers}", "first_dense_layers must be below num_layers")

"""The model a recipe really trains, as AutoModel builds it from the recipe's `model:` section.

A recipe names its model by id (`model.pretrained_model_name_or_path`, or `model.config.
pretrained_model_name_or_path` for `from_config`), and may reshape it: Hugging Face config fields given
as `from_pretrained` keyword arguments, next to the id under `model.config`, or under `model.text_config`
override the loaded config (e.g. `num_hidden_layers: 2` for a proxy); and a `from_config` recipe may spell
out a whole config (`config: {_target_: ...Qwen3MoeConfig, num_hidden_layers: 2, ...}`). Model-aware rules
must judge that model, not the full-size preset.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from automodel_dist.catalog.fields import HF_KEY_TO_FIELD, check_spec
from automodel_dist.catalog.hf_config import FAMILIES, model_from_hf_config
from automodel_dist.catalog.models import resolve_model
from automodel_dist.catalog.specs import ModelSpec
from automodel_dist.errors import InputError
from automodel_dist.limits import path_exists
from automodel_dist.yamlio import as_mapping

MODEL_KEY = "model.pretrained_model_name_or_path"
MODEL_CONFIG_KEY = "model.config.pretrained_model_name_or_path"  # from_config recipes

# Hugging Face config fields that reshape the model -> ModelSpec fields: those spelled alike, and the
# renames the catalog knows (several families name the routed-expert count differently: qwen3_moe
# num_experts, mixtral num_local_experts, deepseek n_routed_experts).
HF_OVERRIDES = {
    **{name: name for name in ("hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim",
                               "intermediate_size", "vocab_size", "tie_word_embeddings", "moe_intermediate_size")},
    **{key: name for key, name in HF_KEY_TO_FIELD.items() if name != "family"},
}
_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


@dataclass(frozen=True)
class RecipeModel:
    """The resolved model (None when it cannot be judged), and why not, at which key."""

    spec: ModelSpec | None
    reason: str = ""
    path: str = "model"
    hint: str = ""


def recipe_model(config: Mapping[str, Any]) -> RecipeModel:
    """The model the recipe's `model:` section builds; never raises for a model we do not know."""
    section = as_mapping(config.get("model"))
    hf_config = as_mapping(section.get("config"))
    candidates = ((MODEL_KEY, section.get("pretrained_model_name_or_path")),
                  (MODEL_CONFIG_KEY, hf_config.get("pretrained_model_name_or_path")))
    key, name = next(((k, v) for k, v in candidates if isinstance(v, str) and v.strip()), (MODEL_KEY, None))
    if name is None:
        return _inline_config(hf_config)
    try:
        spec = resolve_model(name, where=key)
    except InputError as exc:
        if path_exists(name):  # a file here that cannot be read (a FIFO, too large, absurd sizes): bad input
            raise InputError(f"{key} names {name!r}, which cannot be used: {exc.message}", where=exc.where or key,
                             hint=exc.hint) from None
        return RecipeModel(None, f"model {name!r} is not in the catalog", key,
                           "pass --model with a preset id, or a path to the model's config.json")
    overrides = {**_overrides(section), **_overrides(as_mapping(section.get("text_config"))),
                 **_overrides(hf_config)}
    if not overrides:
        return RecipeModel(spec)
    try:
        return RecipeModel(_reshaped(spec, overrides))
    except InputError as exc:
        return RecipeModel(None, f"the recipe reshapes {name!r} into an architecture that cannot be read "
                           f"({exc.message})", "model", exc.hint)


def _inline_config(hf_config: Mapping[str, Any]) -> RecipeModel:
    """`from_config` with the whole architecture written out (its model_type, or its config class's name)."""
    model_type = hf_config.get("model_type")
    target = hf_config.get("_target_")
    if not isinstance(model_type, str) and isinstance(target, str) and target.endswith("Config"):
        model_type = _CAMEL_BOUNDARY.sub("_", target.rsplit(".", 1)[-1][: -len("Config")]).lower()
    if not isinstance(model_type, str):
        return RecipeModel(None, "no model id in the recipe", "model", "pass --model with a preset or Hugging Face id")
    if model_type not in FAMILIES:
        return RecipeModel(None, f"the recipe's inline model config ({model_type}) is not a family read here",
                           "model.config", "pass --model with a preset id, or a path to the model's config.json")
    try:
        spec = model_from_hf_config({**hf_config, "model_type": model_type}, f"inline {model_type}",
                                    where="model.config")
    except InputError as exc:
        return RecipeModel(None, f"the recipe's inline model config cannot be read ({exc.message})",
                           exc.where or "model.config", exc.hint)
    return RecipeModel(spec)


def _overrides(section: Mapping[str, Any]) -> dict[str, Any]:
    """The section's architecture fields (an int each; tie_word_embeddings a bool)."""
    return {HF_OVERRIDES[k]: v for k, v in section.items()
            if k in HF_OVERRIDES and isinstance(v, bool) == (k == "tie_word_embeddings") and isinstance(v, int)}


def _reshaped(spec: ModelSpec, overrides: dict[str, Any]) -> ModelSpec:
    """The preset with the recipe's config overrides. A shrunk layer count keeps the preset's mix: linear-
    attention and sliding-window layers scale with it, and at least one MoE layer stays (a proxy keeps its
    experts; ModelSpec models leading dense layers only)."""
    reshaped = replace(spec, **overrides)
    layers = reshaped.num_layers
    if "num_layers" in overrides and layers != spec.num_layers:
        reshaped = replace(reshaped,
                           linear_attention_layers=spec.linear_attention_layers * layers // spec.num_layers,
                           sliding_window_layers=spec.sliding_window_layers * layers // spec.num_layers)
        if reshaped.is_moe and "first_dense_layers" not in overrides:
            reshaped = replace(reshaped, first_dense_layers=min(reshaped.first_dense_layers, layers - 1))
    return check_spec(replace(reshaped, name=f"{spec.name} (reshaped by the recipe)"), "model")

"""Megatron-Bridge 0.6.2's pretrain recipe functions (megatron.bridge.recipes), by model preset.

`comm_overlap` says whether the function builds a `CommOverlapConfig`: one that leaves
`cfg.comm_overlap = None` cannot take `comm_overlap.*` overrides (Hydra: "Could not override
'comm_overlap.overlap_moe_expert_parallel_comm'"), so the override set then leaves those keys out.
Read from the installed package's recipe sources (tests/test_mbridge_oracle.py checks it on the recipes
the oracle can build offline).
"""

from __future__ import annotations

from dataclasses import dataclass

from automodel_dist.catalog.models import get_preset
from automodel_dist.catalog.specs import ModelSpec
from automodel_dist.errors import InputError


@dataclass(frozen=True)
class Recipe:
    function: str
    comm_overlap: bool


RECIPES = {
    "deepseek-v3": Recipe("deepseek_v3_pretrain_config", True),
    "kimi-k2": Recipe("kimi_k2_pretrain_config", True),
    "gpt-oss-20b": Recipe("gpt_oss_20b_pretrain_config", False),
    "gpt-oss-120b": Recipe("gpt_oss_120b_pretrain_config", False),
    "llama-3.1-8b": Recipe("llama31_8b_pretrain_config", False),
    "llama-3.1-70b": Recipe("llama31_70b_pretrain_config", True),
    "llama-3.1-405b": Recipe("llama31_405b_pretrain_config", True),
    "llama-3.2-1b": Recipe("llama32_1b_pretrain_config", False),
    "llama-3.2-3b": Recipe("llama32_3b_pretrain_config", False),
    "qwen2.5-7b": Recipe("qwen25_7b_pretrain_config", False),
    "qwen2.5-32b": Recipe("qwen25_32b_pretrain_config", False),
    "qwen2.5-72b": Recipe("qwen25_72b_pretrain_config", False),
    "qwen3-8b": Recipe("qwen3_8b_pretrain_config", False),
    "qwen3-32b": Recipe("qwen3_32b_pretrain_config", False),
    "qwen3-30b-a3b": Recipe("qwen3_30b_a3b_pretrain_config", True),
    "qwen3-235b-a22b": Recipe("qwen3_235b_a22b_pretrain_config", False),
    "qwen3-next-80b-a3b": Recipe("qwen3_next_80b_a3b_pretrain_config", False),
}


def recipe_for(model: ModelSpec) -> Recipe | None:
    """The model's recipe function (None when Megatron-Bridge ships none for it)."""
    try:
        preset = get_preset(model.name).id
    except InputError:
        preset = model.name
    return RECIPES.get(preset)


def recipe_function(model: ModelSpec) -> str:
    """The recipe function's name; InputError when Megatron-Bridge ships none for the model."""
    recipe = recipe_for(model)
    if recipe is None:
        raise InputError(f"Megatron-Bridge 0.6.2 ships no pretrain recipe for {model.name}", where="model",
                         hint=f"models with a recipe: {', '.join(sorted(RECIPES))}")
    return recipe.function


def preset_for_recipe(function: str) -> str | None:
    return next((preset for preset, recipe in RECIPES.items() if recipe.function == function), None)

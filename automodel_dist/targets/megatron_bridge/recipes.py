"""Megatron-Bridge 0.6.2's recipe functions (megatron.bridge.recipes), by model preset and task.

`comm_overlap` says whether the function builds a `CommOverlapConfig` (read from its ConfigContainer's fields,
`fields.py`): one that leaves `cfg.comm_overlap = None` takes `comm_overlap.*` overrides only when the override
set builds the object itself (`comm_overlap._target_`). Qwen3-Next has no peft recipe: the function raises
"PEFT is not currently supported for Qwen3-Next models", and its sft recipe packs no sequences (`packs`: it leaves
`dataset.offline_packing_specs` None, "Packed sequence is NOT supported for Qwen3-Next").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from automodel_dist.catalog.models import get_preset, list_models
from automodel_dist.catalog.specs import ModelSpec, architecture_changes
from automodel_dist.errors import InputError
from automodel_dist.targets.megatron_bridge.fields import builds
from automodel_dist.textsafe import one_line


@dataclass(frozen=True)
class Recipe:
    """One recipe function."""

    function: str

    @property
    def comm_overlap(self) -> bool:
        """The function builds a CommOverlapConfig."""
        return builds(self.function, "comm_overlap")

    @property
    def packs(self) -> bool:
        """The function packs sequences offline (it builds `dataset.offline_packing_specs`)."""
        return builds(self.function, PACKING)


PACKING = "dataset.offline_packing_specs"  # the section a recipe that packs sequences offline builds
_ALL = ("pretrain", "sft", "peft")
# preset -> (function prefix, tasks); the function is <prefix>_<task>_config.
_FAMILY: dict[str, tuple[str, tuple[str, ...]]] = {
    "deepseek-v3": ("deepseek_v3", ("pretrain",)),
    "kimi-k2": ("kimi_k2", ("pretrain",)),
    "moonlight-16b-a3b": ("moonlight_16b", _ALL),
    "gpt-oss-20b": ("gpt_oss_20b", _ALL),
    "gpt-oss-120b": ("gpt_oss_120b", _ALL),
    "llama-3.1-8b": ("llama31_8b", _ALL),
    "llama-3.1-70b": ("llama31_70b", _ALL),
    "llama-3.1-405b": ("llama31_405b", _ALL),
    "llama-3.2-1b": ("llama32_1b", _ALL),
    "llama-3.2-3b": ("llama32_3b", _ALL),
    "qwen2.5-7b": ("qwen25_7b", _ALL),
    "qwen2.5-32b": ("qwen25_32b", _ALL),
    "qwen2.5-72b": ("qwen25_72b", _ALL),
    "qwen3-8b": ("qwen3_8b", _ALL),
    "qwen3-32b": ("qwen3_32b", _ALL),
    "qwen3-30b-a3b": ("qwen3_30b_a3b", _ALL),
    "qwen3-235b-a22b": ("qwen3_235b_a22b", _ALL),
    "qwen3-next-80b-a3b": ("qwen3_next_80b_a3b", ("pretrain", "sft")),
}
RECIPES: dict[tuple[str, str], Recipe] = {
    (preset, task): Recipe(f"{prefix}_{task}_config") for preset, (prefix, tasks) in _FAMILY.items() for task in tasks
}


@lru_cache(maxsize=64)
def _preset(model: ModelSpec) -> str:
    """The catalog preset the model is: the one its name names when the architecture agrees, else the one preset
    with a recipe whose architecture it has (a model's own config.json in a folder of any name), else the preset
    its name names (a reshaped preset, which the target then refuses), else its own name, which keys no recipe."""
    try:
        named = get_preset(model.name)
    except InputError:
        named = None
    if named is not None and not architecture_changes(model, named.spec):
        return named.id
    with_recipes = {preset for preset, _ in RECIPES}
    same = [p.id for p in list_models() if p.id in with_recipes and not architecture_changes(model, p.spec)]
    return same[0] if len(same) == 1 else (named.id if named else model.name)


def recipe_for(model: ModelSpec, task: str = "pretrain") -> Recipe | None:
    """The model's recipe function for the task (None when Megatron-Bridge ships none)."""
    return RECIPES.get((_preset(model), task))


def recipe_function(model: ModelSpec, task: str = "pretrain", *, where: str = "model") -> str:
    """The recipe function's name; InputError at `where` (the model's key) when Megatron-Bridge ships none for the
    model and task."""
    recipe = recipe_for(model, task)
    if recipe is None:
        known = sorted(f"{preset} ({task})" for preset, task in RECIPES if preset == _preset(model)) or sorted(
            {preset for preset, _ in RECIPES})
        raise InputError(f"Megatron-Bridge 0.6.2 ships no {task} recipe for {one_line(model.name)}", where=where,
                         hint=f"recipes this target knows: {', '.join(known)}")
    return recipe.function


def preset_for_recipe(function: str) -> str | None:
    return next((preset for (preset, _), recipe in RECIPES.items() if recipe.function == function), None)


_TASK = re.compile(r"_(pretrain|sft|peft)_config$")
# A Python identifier: a recipe function's name (megatron.bridge.recipes.<name>), an environment variable's.
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def recipe_task(function: str) -> str | None:
    """The task a recipe function is for, from Megatron-Bridge's naming (`<model>_<task>_config`)."""
    match = _TASK.search(function)
    return match[1] if match else None

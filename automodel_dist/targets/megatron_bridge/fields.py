"""The keys a Megatron-Bridge recipe function's ConfigContainer has, so a typo'd override key is caught.

Megatron-Bridge 0.6.2 applies an override set in two ways, and neither says no to a key it lacks in a way that
stops a run (megatron.bridge.training.utils.omegaconf_utils, checked with the test oracle):
- the Hydra list: `Could not override 'model.tensor_model_paralel_size'. To append to your config use
  +model.tensor_model_paralel_size=2` (an OverridesError), and with the `+` it appends the key, then skips it;
- the YAML file: OmegaConf merges it, then `Key 'tensor_model_paralel_size' in overrides not found in config
  object GPTModelProvider. Skipping.` is logged and training runs without the override.
A section the recipe leaves None (most recipes' `comm_overlap`, a non-PEFT recipe's `peft`) takes no keys either:
Hydra refuses them, and the YAML merge turns the section into a plain dict that fails later (`'dict' object has
no attribute 'data_parallel_size'`), unless the override builds the object with `_target_`.

The field names, each recipe's values at the keys the target models (what a key the override set leaves out
runs with) and at the model facts it reads (its bridge's vocabulary padding), and the name of every recipe function
Megatron-Bridge exports (a name close to one but not one is a typo), are data
(`data/megatron_bridge/config_fields.json`, written by scripts/mbridge_config_fields.py from the installed
package's recipes; tests/test_mbridge_fields_oracle.py checks it).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cache
from typing import TYPE_CHECKING, Any

from automodel_dist.catalog.fields import did_you_mean
from automodel_dist.resources import DATA_DIR

if TYPE_CHECKING:
    from automodel_dist.targets.megatron_bridge.overrides import MegatronSettings

FIELDS_FILE = DATA_DIR / "megatron_bridge" / "config_fields.json"
SOURCE = ("dataclasses.fields of each recipe function's ConfigContainer and of every dataclass it holds, "
          "megatron-bridge 0.6.2 / megatron-core 0.19.2")
TARGET = "_target_"  # a mapping with it is instantiated (megatron.bridge.utils.instantiate_utils.instantiate)
ANY = "*"  # a field that holds a mapping: any key
ALL_RECIPES = "*"  # hydra.unset's entry for the None leaves every recipe has
# The MixedPrecisionConfig fields the target reads (the cost model's FP8 recipe and gradient-buffer dtype), recorded
# for every named precision recipe (megatron.bridge.training.mixed_precision.MIXED_PRECISION_RECIPES)
PRECISION_FIELDS = ("fp8", "fp8_recipe", "grad_reduce_in_fp32", "fp8_param_gather", "reuse_grad_buf_for_mxfp8_param_ag")


@dataclass(frozen=True)
class ConfigFields:
    """Each recipe function's ConfigContainer fields and the dataclasses they hold: a field maps to the name of
    the class it holds, to ANY (a mapping), or to None (a value)."""

    recipes: Mapping[str, Mapping[str, str | None]]
    classes: Mapping[str, Mapping[str, Any]]
    values: Mapping[str, Mapping[str, Any]]  # each recipe's values at the keys the target models and its model facts
    # what Megatron-Bridge lets Hydra override: {"excluded": {recipe: [fields left out]}, "unset": {recipe or
    # ALL_RECIPES: [None leaves]}}
    hydra: Mapping[str, Mapping[str, Sequence[str]]]
    precisions: Mapping[str, Mapping[str, Any]]  # {precision recipe name: {PRECISION_FIELDS field: value}}
    functions: frozenset[str]  # every recipe function Megatron-Bridge exports, those not in `recipes` too

    def usual_class(self, section: str) -> str | None:
        """The class the recipes that build `section` hold there (CommOverlapConfig, LoRA)."""
        return next((root[section] for root in self.recipes.values() if root.get(section) not in (None, ANY)), None)

    def target(self, cls: str) -> str:
        return self.classes[cls]["target"]

    def unset(self, recipe: str) -> frozenset[str]:
        """The leaves of the recipe's config that are None (where Hydra's `+key` appends)."""
        return frozenset((*self.hydra["unset"][ALL_RECIPES], *self.hydra["unset"][recipe]))


@cache
def config_fields() -> ConfigFields:
    data = json.loads(FIELDS_FILE.read_text(encoding="utf-8"))
    return ConfigFields(recipes=data["recipes"], classes=data["classes"], values=data["values"], hydra=data["hydra"],
                        precisions=data["precisions"], functions=frozenset(data["functions"]))


def known_recipe(recipe: str) -> str | None:
    """`recipe` when the data holds its ConfigContainer's fields (its keys can be judged exactly), else None."""
    return recipe if recipe in config_fields().recipes else None


def precision_recipe(name: str) -> Mapping[str, Any] | None:
    """The PRECISION_FIELDS of a named mixed-precision recipe (Megatron-Bridge takes `-` for `_`), None for a name
    it does not register."""
    return config_fields().precisions.get(name.replace("-", "_"))


def recipe_values(recipe: str | None) -> Mapping[str, Any]:
    """{dotted key: value} the recipe function's ConfigContainer holds at the keys the target models (empty for a
    recipe not known here): what an override set that leaves a key out runs with; and at the model facts the
    target reads from the recipe (`model.make_vocab_size_divisible_by`)."""
    return config_fields().values.get(recipe or "", {})


def builds(recipe: str, section: str) -> bool:
    """Whether the recipe function's ConfigContainer holds an object at `section`, a dotted path (comm_overlap, peft,
    dataset.offline_packing_specs: Qwen3-Next's sft recipe leaves it None, it packs no sequences)."""
    fields = config_fields()
    head = section.split(".", 1)[0]
    return fields.recipes[recipe].get(head) is not None and section not in fields.unset(recipe)


@dataclass(frozen=True)
class KeyProblem:
    """A key the recipe's ConfigContainer cannot take: the dotted key, the class that lacks it, a fix."""

    path: str
    field: str  # the part of the key the owner lacks (or the section it leaves None)
    owner: str
    hint: str
    prefix: str  # the key up to that part
    missing_section: bool = False  # the recipe leaves this section None
    section_value: bool = False  # a value given for a section every recipe holds an object in (`model: 5`)
    missing_required: tuple[str, ...] = ()  # the fields a `_target_` class cannot be built without


def _built(fields: ConfigFields, flat: Mapping[str, Any]) -> dict[str, str | None]:
    """{section: class (None: one not known here)} of every section the override builds with `_target_`."""
    by_target = {kind["target"]: name for name, kind in fields.classes.items()}
    return {path.rsplit(".", 1)[0]: by_target.get(str(value)) for path, value in flat.items()
            if path.endswith("." + TARGET)}


def key_problems(flat: Mapping[str, Any], recipe: str | None) -> list[KeyProblem]:
    """Every dotted key of `flat` ({dotted key: value}) the recipe's ConfigContainer has no field for, in order.
    A section the override builds (`<section>._target_: <class>`) takes that class's fields; a section every recipe
    holds an object in takes no value. For a recipe not known here, the keys no known recipe takes (the recipes hold
    different classes in a section: a pretrain recipe's dataset has no packing, an sft recipe's has)."""
    fields = config_fields()
    if recipe not in fields.recipes:
        each = [_key_problems(fields, flat, known) for known in sorted(fields.recipes)]
        everywhere = set.intersection(*({problem.path for problem in problems} for problems in each))
        return [problem for problem in each[0] if problem.path in everywhere]
    return _key_problems(fields, flat, recipe)


def _key_problems(fields: ConfigFields, flat: Mapping[str, Any], recipe: str) -> list[KeyProblem]:
    built = _built(fields, flat)
    root = fields.recipes[recipe]
    unset = fields.unset(recipe)
    out, seen = [], set()
    for path, value in flat.items():
        problem = _walk(fields, root, path, built, unset) or _section_value(fields, root, path, value)
        if problem is not None and problem.prefix not in seen:  # one finding per unknown section
            seen.add(problem.prefix)
            out.append(problem)
    for section, cls in built.items():
        missing = tuple(name for name in fields.classes[cls]["required"] if f"{section}.{name}" not in flat) \
            if cls else ()
        if missing:
            out.append(KeyProblem(f"{section}.{TARGET}", TARGET, cls or "", "add " + ", ".join(
                f"{section}.{name}" for name in missing), f"{section}.{TARGET}", missing_required=missing))
    return out


def _section_value(fields: ConfigFields, root: Mapping[str, str | None], path: str, value: Any) -> KeyProblem | None:
    """A top-level key every recipe holds a config object in (model, train, ddp ...) given a value: the merge puts the
    value in the object's place (`'int' object has no attribute 'tensor_model_parallel_size'`). Sections some recipe
    holds a value in (a precision recipe's name, a None comm_overlap) take values."""
    classes = {root.get(path) for root in fields.recipes.values()}
    if "." in path or isinstance(value, Mapping) or None in classes or ANY in classes:
        return None
    return KeyProblem(path, path, str(root[path]), f"set fields under it ({path}.<field>: <value>), or remove {path}",
                      path, section_value=True)


def _walk(fields: ConfigFields, root: Mapping[str, str | None], path: str, built: Mapping[str, str | None],
          unset: frozenset[str]) -> KeyProblem | None:
    """The first part of `path` the recipe cannot take: a field no class has, a value taken for a section, or a
    section the recipe leaves None (at the top, `kind is None`; deeper, in `unset`: Qwen3-Next's sft recipe builds no
    `dataset.offline_packing_specs`)."""
    parts = path.split(".")
    level: Mapping[str, Any] = root
    owner = "ConfigContainer"
    for i, part in enumerate(parts):
        here = ".".join(parts[: i + 1])
        if part == TARGET and ".".join(parts[:i]) in built:
            return None
        if part not in level:
            return KeyProblem(path, part, owner, f"correct the key{did_you_mean(part, level)}, or remove it", here)
        kind = level[part]
        if i == len(parts) - 1 or kind == ANY:
            return None
        if here in built:  # the override builds this object: its class's fields (any, for a class not known here)
            kind = built[here]
            if kind is None:
                return None
        elif kind is None:
            usual = fields.usual_class(part) if i == 0 else None
            if usual is None:
                return KeyProblem(path, part, owner, f"{here} is a value, not a section: write {here}: <value>", here)
            return KeyProblem(path, part, owner, f"build one: add {here}.{TARGET}: {fields.target(usual)} (in a Hydra "
                              f"list: +{here}.{TARGET}=..., and + before each {here} key), or drop the {here} keys",
                              here, missing_section=True)
        elif here in unset:
            return KeyProblem(path, part, owner, f"drop the {here} keys: the recipe leaves {here} None", here,
                              missing_section=True)
        level, owner = fields.classes[kind]["fields"], kind
    return None


@dataclass(frozen=True)
class AppendProblem:
    """A Hydra item whose prefix Hydra refuses: `missing` (a field of the config that is not in what Hydra sees, so
    it needs `+`), else `present` (`+` on a key that already holds a value). `why`: what keeps a missing key out."""

    index: int  # the item's place in the list
    path: str
    missing: bool
    why: str = ""


def append_problems(items: Sequence[tuple[str, str, Any]], recipe: str | None) -> list[AppendProblem]:
    """Hydra's verdict on the `+` of each (prefix, dotted key, value) of an override list, applied in order as
    Hydra applies them (hydra._internal.config_loader_impl._apply_overrides_to_config, struct mode):
    - no prefix: the key must be in the config Megatron-Bridge hands Hydra (its ConfigContainer without the fields
      OmegaConf cannot hold, e.g. a LoRA `peft`), or be put there by an earlier item;
    - `+`: the key must hold None (absent, or a None value) unless the value is a list or a mapping;
    - `++`: always accepted.
    Keys no field takes, and sections the recipe leaves None, are key_problems' (not judged here); so is every key
    of a recipe not known here, and a key inside a mapping field (its keys are not recorded)."""
    fields = config_fields()
    if recipe not in fields.recipes:
        return []
    root, excluded, unset = fields.recipes[recipe], fields.hydra["excluded"][recipe], fields.unset(recipe)
    built = _built(fields, {path: value for _, path, value in items})
    placed: dict[str, Any] = {}  # what earlier items put into the config
    out = []
    for index, (prefix, path, value) in enumerate(items):
        seen = True if path in placed else _seen_by_hydra(fields, root, path, excluded, unset)
        if prefix == "" and seen is False and _walk(fields, root, path, built, unset) is None:
            out.append(AppendProblem(index, path, True, _kept_out(path, excluded)))
        elif prefix == "+" and seen is True and not isinstance(value, (list, dict)):
            holds_none = placed[path] is None if path in placed else path in unset
            if not holds_none:
                out.append(AppendProblem(index, path, False))
        placed[path] = value
    return out


def _seen_by_hydra(fields: ConfigFields, root: Mapping[str, str | None], path: str, excluded: Sequence[str],
                   unset: frozenset[str]) -> bool | None:
    """Whether `path` is in the config Hydra overrides (None: not known, a key inside a mapping field)."""
    parts = path.split(".")
    level: Mapping[str, Any] = root
    for i, part in enumerate(parts):
        here = ".".join(parts[: i + 1])
        if here in excluded or part not in level:
            return False
        kind = level[part]
        if i == len(parts) - 1:
            return True
        if kind == ANY:
            return None
        if kind is None or here in unset:  # a value, or a section this recipe leaves None
            return False
        level = fields.classes[kind]["fields"]
    return True


def _kept_out(path: str, excluded: Sequence[str]) -> str:
    """Why a field of the config is not in what Hydra sees."""
    left = next((field for field in excluded if path == field or path.startswith(field + ".")), None)
    if left is not None:
        return (f"Megatron-Bridge leaves {left} out of the config it hands Hydra (an object OmegaConf cannot hold) "
                "and sets the appended keys on it afterwards")
    section = path.rsplit(".", 1)[0]
    return f"the recipe's {section} is None, so every key of the {section} the list builds is appended"


@dataclass(frozen=True)
class MixedPrecision:
    """The MixedPrecisionConfig fields an override set runs with that the rules and the cost model read: FP8 on
    (its format) or off, the FP8 scaling recipe, the DDP gradient buffer's dtype (mixed_precision.setup copies
    grad_reduce_in_fp32 into the DDP config), and whether the weights are kept in FP8 and how the optimizer step
    writes them (`fp8_primary_weights`)."""

    fp8: str | None = None
    fp8_recipe: str = "tensorwise"
    grad_reduce_in_fp32: bool = True  # MixedPrecisionConfig's default
    fp8_param_gather: bool = False
    reuse_grad_buf_for_mxfp8_param_ag: bool = False

    @property
    def fp8_primary_weights(self) -> bool:
        """FP8 weights the distributed optimizer casts from its fp32 masters through Transformer Engine
        (cost/memory.RecipeOptions.fp8_primary_weights); MXFP8's gradient-buffer reuse stages them instead."""
        return self.fp8 is not None and self.fp8_param_gather and not self.reuse_grad_buf_for_mxfp8_param_ag


def mixed_precision(s: MegatronSettings) -> MixedPrecision:
    """The mixed precision the settings run with: the named recipe's fields (or the recipe's own
    MixedPrecisionConfig object's, precision None), each field the set gives replacing it."""
    named = precision_recipe(s.precision) if s.precision is not None else None
    given = {name: getattr(s, name) for name in PRECISION_FIELDS if getattr(s, name) is not None}
    return replace(MixedPrecision(**(named or {})), **given)

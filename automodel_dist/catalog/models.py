"""The model catalog: preset ids, Hugging Face ids, local config.json files and mappings -> ModelSpec.

`resolve_model` is the one entry point; everything a user may write after `model:` lands here.
Presets are parsed once per process (by presetfile's flat reader, not the slower YAML loader) so `compile` starts fast.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from automodel_dist.catalog.fields import apply_overrides, did_you_mean, spec_from_fields
from automodel_dist.catalog.hf_config import load_hf_config, model_from_hf_config
from automodel_dist.catalog.presetfile import load_preset_file
from automodel_dist.catalog.specs import ModelSpec
from automodel_dist.errors import InputError
from automodel_dist.limits import check_tree, path_exists
from automodel_dist.resources import PRESETS_DIR
from automodel_dist.yamlio import load_document, to_plain

MODELS_DIR = PRESETS_DIR / "models"
# A Hugging Face id with one of these suffixes resolves like the id without it.
VARIANT_SUFFIXES = ("-instruct", "-base")
_PATH_PREFIXES = ("/", "./", "../", "~")


@dataclass(frozen=True)
class ModelAlias:
    """A Hugging Face id that resolves to a preset, with the fields where its config differs."""

    id: str
    overrides: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class ModelPreset:
    """One file in presets/models: its id, the Hugging Face ids that resolve to it, and the spec."""

    id: str
    aliases: tuple[ModelAlias, ...]
    spec: ModelSpec
    path: Path


@dataclass(frozen=True)
class _Catalog:
    presets: dict[str, ModelPreset]
    # lowercase lookup key -> (preset id, alias or None)
    index: dict[str, tuple[str, ModelAlias | None]]


def _parse_alias(entry: Any, where: str) -> ModelAlias:
    if isinstance(entry, str):
        return ModelAlias(entry)
    if isinstance(entry, Mapping) and isinstance(entry.get("id"), str):
        overrides = {k: v for k, v in entry.items() if k != "id"}
        return ModelAlias(entry["id"], tuple(sorted(overrides.items())))
    raise InputError(f"alias must be a Hugging Face id or {{id: ..., <field>: ...}}, got {entry!r}",
                     where=where, hint="fix the preset's aliases list")


def _load_preset(path: Path) -> ModelPreset:
    data = load_preset_file(path)
    where = str(path)
    if not isinstance(data, Mapping) or not isinstance(data.get("id"), str):
        raise InputError("model preset must be a mapping with an `id`", where=where, hint="fix the preset file")
    values = dict(data)
    preset_id = values.pop("id")
    aliases = tuple(_parse_alias(a, where) for a in values.pop("aliases", None) or ())
    spec = spec_from_fields({"name": preset_id, **values}, where)
    for alias in aliases:
        apply_overrides(spec, dict(alias.overrides), f"{where}.aliases")
    return ModelPreset(preset_id, aliases, spec, path)


def _lookup_keys(name: str) -> list[str]:
    """The keys a name is found under: itself, without a variant suffix, and without its org."""
    key = name.strip().lower()
    keys = [key]
    for suffix in VARIANT_SUFFIXES:
        if key.endswith(suffix):
            keys.append(key[: -len(suffix)])
    keys += [k.split("/", 1)[1] for k in list(keys) if "/" in k]
    return keys


@lru_cache(maxsize=1)
def _catalog() -> _Catalog:
    presets = {p.id: p for p in (_load_preset(path) for path in sorted(MODELS_DIR.glob("*.yaml")))}
    index: dict[str, tuple[str, ModelAlias | None]] = {}

    def add(key: str, target: tuple[str, ModelAlias | None]) -> None:
        previous = index.setdefault(key, target)
        if previous[0] != target[0]:
            raise InputError(f"model presets {previous[0]!r} and {target[0]!r} both claim {key!r}",
                             where=str(MODELS_DIR), hint="make the aliases unique")

    for preset in presets.values():
        add(preset.id.lower(), (preset.id, None))
    for preset in presets.values():
        for alias in preset.aliases:
            for key in _lookup_keys(alias.id):
                add(key, (preset.id, alias))
    return _Catalog(presets, index)


def list_models() -> list[ModelPreset]:
    """Every model preset, ordered by id."""
    return sorted(_catalog().presets.values(), key=lambda p: p.id)


def get_preset(preset_id: str) -> ModelPreset:
    """The preset with this exact id (case-insensitive); InputError with a suggestion otherwise."""
    found = _find(preset_id)
    if found is None:
        raise _unknown_model(preset_id, "model")
    return _catalog().presets[found[0]]


def _find(name: str) -> tuple[str, ModelAlias | None] | None:
    index = _catalog().index
    for key in _lookup_keys(name):
        if key in index:
            return index[key]
    return None


def _spec_for(name: str, where: str) -> ModelSpec | None:
    found = _find(name)
    if found is None:
        return None
    preset_id, alias = found
    spec = _catalog().presets[preset_id].spec
    if alias is not None and alias.overrides:
        spec = replace(apply_overrides(spec, dict(alias.overrides), where), name=alias.id)
    return spec


@lru_cache(maxsize=1024)
def _model_suggestion(name: str) -> str:
    """The catalog's closest ids to an unknown model name (validating a folder meets the same names often)."""
    catalog = _catalog()
    names = {p.id for p in catalog.presets.values()} | {a.id for p in catalog.presets.values() for a in p.aliases}
    return did_you_mean(name, names, n=3)


def _unknown_model(name: str, where: str) -> InputError:
    return InputError(
        f"unknown model {name!r}{_model_suggestion(name)}",
        where=where,
        hint="use a preset id or Hugging Face id from `automodel-dist presets models`, or pass the path "
        "of the model's config.json (or its folder) to read the architecture offline",
    )


def _attention_defaults(values: dict[str, Any]) -> dict[str, Any]:
    """As in transformers: KV heads default to the query heads, head_dim to hidden_size / heads."""
    heads, hidden = values.get("num_attention_heads"), values.get("hidden_size")
    if isinstance(heads, int) and not isinstance(heads, bool) and heads > 0:
        values.setdefault("num_key_value_heads", heads)
        if isinstance(hidden, int) and not isinstance(hidden, bool) and hidden % heads == 0:
            values.setdefault("head_dim", hidden // heads)
    return values


def _looks_like_path(text: str) -> bool:
    return text.startswith(_PATH_PREFIXES) or text.endswith(".json") or "\\" in text


def _resolve_name(ref: str, where: str) -> ModelSpec:
    text = ref.strip()
    if not text:
        raise InputError("model is empty", where=where, hint="name a preset, a Hugging Face id or a config.json")
    path = Path(text).expanduser()
    if path_exists(path) and path.suffix in (".yaml", ".yml") and not path.is_dir():
        return _load_model_yaml(path)
    if path_exists(path):
        if path.is_dir() and not path_exists(path / "config.json"):
            raise _missing_config(str(path / "config.json"), where)
        return load_hf_config(path)
    spec = _spec_for(text, where)
    if spec is not None:
        return spec
    if _looks_like_path(text):
        raise _missing_config(text, where)
    raise _unknown_model(text, where)


def _missing_config(path: str, where: str) -> InputError:
    """Located at the key that names the path (`where`), not at the file that is not there."""
    return InputError(f"model config not found: {path}", where=where,
                      hint="pass an existing config.json or model folder, or a preset id")


def _load_model_yaml(path: Path) -> ModelSpec:
    """A model file in the preset format (id and aliases optional), or any mapping `model:` accepts."""
    doc = load_document(path, what="model file")
    values = doc.plain()
    values.pop("aliases", None)
    if "id" in values:
        values.setdefault("name", values.pop("id"))
    try:
        return resolve_model(values, where=str(path))
    except InputError as exc:
        prefix = f"{path}."
        if exc.where and exc.where.startswith(prefix):  # a field of the file: point at its line
            raise InputError(exc.message, where=doc.where(exc.where[len(prefix):]), hint=exc.hint) from None
        raise


def resolve_model(ref: Any, *, where: str = "model") -> ModelSpec:
    """Whatever `model:` holds -> ModelSpec.

    `ref` is a ModelSpec, a preset id, a Hugging Face id (an -Instruct/-Base variant too), the path of a
    config.json or a model folder, the path of a YAML model file (preset format), a mapping
    `{preset: ID, <field>: <value>...}`, a parsed config.json mapping (it has `model_type`), or a full
    architecture mapping of ModelSpec fields.
    `where` is the dotted key the value came from, used in error messages.
    """
    if isinstance(ref, ModelSpec):
        return ref
    if isinstance(ref, (str, Path)):
        return _resolve_name(str(ref), where)
    if isinstance(ref, Mapping):
        check_tree(ref, where=where)  # an API caller's mapping: no cycle, no absurd depth
        values = to_plain(ref)
        if "preset" in values:
            base = values.pop("preset")
            if not isinstance(base, str):
                raise InputError(f"preset must be a model id string, got {base!r}", where=f"{where}.preset",
                                 hint="e.g. preset: qwen3-30b-a3b")
            return apply_overrides(_resolve_name(base, f"{where}.preset"), values, where)
        if "model_type" in values:
            name = values.get("_name_or_path") or values["model_type"]
            return model_from_hf_config(values, str(name), where=where)
        return spec_from_fields(_attention_defaults({"name": "custom", "family": "custom", **values}), where)
    raise InputError(
        f"model must be a name, a path or a mapping, not {type(ref).__name__}", where=where,
        hint="e.g. model: Qwen/Qwen3-30B-A3B, or model: {preset: qwen3-30b-a3b, num_layers: 24}",
    )

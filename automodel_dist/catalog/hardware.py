"""The GPU catalog: presets/hardware/*.yaml -> GpuSpec, looked up by id or alias (case-insensitive)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from functools import lru_cache
from pathlib import Path
from typing import Any

from automodel_dist.catalog.fields import did_you_mean
from automodel_dist.catalog.presetfile import load_preset_file
from automodel_dist.catalog.specs import GpuSpec
from automodel_dist.errors import InputError
from automodel_dist.resources import PRESETS_DIR

HARDWARE_DIR = PRESETS_DIR / "hardware"
_GPU_FIELDS = {f.name: str(f.type) for f in fields(GpuSpec)}


@dataclass(frozen=True)
class GpuPreset:
    """One file in presets/hardware: the spec and the other names it answers to."""

    spec: GpuSpec
    aliases: tuple[str, ...]
    path: Path


def _load_preset(path: Path) -> GpuPreset:
    where = str(path)
    data = load_preset_file(path)
    if not isinstance(data, Mapping):
        raise InputError("GPU preset must be a mapping", where=where, hint="fix the preset file")
    values: dict[str, Any] = dict(data)
    aliases = tuple(values.pop("aliases", None) or ())
    unknown = sorted(set(values) - set(_GPU_FIELDS))
    if unknown:
        raise InputError(f"unknown GPU preset field {unknown[0]!r}{did_you_mean(unknown[0], _GPU_FIELDS)}",
                         where=f"{where}.{unknown[0]}", hint="fields are: " + ", ".join(_GPU_FIELDS))
    for name, kind in _GPU_FIELDS.items():
        value = values.get(name)
        if kind == "float" and isinstance(value, int) and not isinstance(value, bool):
            values[name] = float(value)
    try:
        spec = GpuSpec(**values)
    except TypeError as exc:
        raise InputError(f"GPU preset is incomplete: {exc}", where=where, hint="fix the preset file") from None
    return GpuPreset(spec, aliases, path)


@lru_cache(maxsize=1)
def _catalog() -> tuple[dict[str, GpuPreset], dict[str, str]]:
    presets = {p.spec.name: p for p in (_load_preset(f) for f in sorted(HARDWARE_DIR.glob("*.yaml")))}
    index: dict[str, str] = {}
    for preset in presets.values():
        for key in (preset.spec.name, *preset.aliases):
            owner = index.setdefault(key.lower(), preset.spec.name)
            if owner != preset.spec.name:
                raise InputError(f"GPU presets {owner!r} and {preset.spec.name!r} both claim {key!r}",
                                 where=str(HARDWARE_DIR), hint="make the aliases unique")
    return presets, index


def gpu_presets() -> list[GpuPreset]:
    """Every GPU preset with its aliases and file, ordered by id."""
    return [preset for _, preset in sorted(_catalog()[0].items())]


def list_gpus() -> list[GpuSpec]:
    """Every GPU spec, ordered by id."""
    return [preset.spec for preset in gpu_presets()]


def get_gpu(name: str, *, where: str = "hardware.gpu") -> GpuSpec:
    """A GPU preset by id or alias; an unknown name is an InputError with the closest ids."""
    presets, index = _catalog()
    if not isinstance(name, str):
        raise InputError(f"GPU must be a preset id string, got {name!r}", where=where,
                         hint="e.g. gpu: h100-80gb")
    key = name.strip().lower()
    if key in index:
        return presets[index[key]].spec
    raise InputError(
        f"unknown GPU {name!r}{did_you_mean(key, list(presets) + list(index), n=3)}",
        where=where,
        hint="GPU presets: " + ", ".join(sorted(presets)) + " (automodel-dist presets hardware)",
    )


def resolve_gpu(gpu: GpuSpec | str | None, *, where: str = "gpu") -> GpuSpec | None:
    """What the API's `gpu=` takes (validate_recipe and build_meshes alike): a GpuSpec, a preset name or None."""
    if gpu is None or isinstance(gpu, GpuSpec):
        return gpu
    return get_gpu(gpu, where=where)

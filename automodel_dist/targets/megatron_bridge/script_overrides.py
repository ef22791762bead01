"""The override list a Megatron-Bridge launch script passes (`OVERRIDES=( ... )`, as `--launcher slurm` writes
it), judged as the job will run it: Hydra's own refusals of its items, and every key where it differs from the
override set validated beside it (the job runs the script's list, not the file)."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from automodel_dist.errors import InputError
from automodel_dist.findings import Finding
from automodel_dist.targets.megatron_bridge.parse import hydra_mapping, read_hydra
from automodel_dist.targets.megatron_bridge.rules import SLURM_OVERRIDES, check_appends
from automodel_dist.textsafe import one_line

_SHOWN = 5  # differing keys named one by one; the rest are counted
_MISSING = object()


def script_items(text: str) -> list[tuple[int, str]] | None:
    """(line, item) of each word of the script's `OVERRIDES=(` ... `)` array, or None without one."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip() == "OVERRIDES=("), None)
    if start is None:
        return None
    items: list[tuple[int, str]] = []
    for number, line in enumerate(lines[start + 1:], start=start + 2):
        if line.strip() == ")":
            return items
        try:
            items += [(number, word) for word in shlex.split(line, comments=True)]
        except ValueError:  # an unclosed quote: bash -n reports the script
            return items
    return items


def check_script_overrides(text: str, flat: Mapping[str, Any], recipe: str | None,
                           sbatch_file: str | None) -> list[Finding]:
    """Findings (at the script's lines) for the script's override list against the file's `flat` key -> value."""
    found = script_items(text)
    if found is None:
        return []
    lines, items = [line for line, _ in found], [item for _, item in found]
    first = lines[0] if lines else 1

    def at(finding: Finding, line: int) -> Finding:
        return replace(finding, line=line, col=1, file=sbatch_file)

    try:
        hydra = read_hydra(items, where="OVERRIDES")
    except InputError as err:
        return [at(SLURM_OVERRIDES.finding(f"the launch script's override list: {err}", hint=err.hint or ""), first)]
    out = [at(f, f.line or first) for f in check_appends(hydra, recipe, lines)]
    script = hydra_mapping(items)
    line_of = {item.key: line for line, item in zip(lines, hydra, strict=True)}
    differ = sorted(key for key in script.keys() | flat.keys() if script.get(key, _MISSING) != flat.get(key, _MISSING))
    for key in differ[:_SHOWN]:
        said = "leaves out" if key not in script else f"sets {one_line(repr(script[key]))} for"
        has = "has no value" if key not in flat else f"has {one_line(repr(flat[key]))}"
        finding = SLURM_OVERRIDES.finding(
            f"the launch script {said} {key}, where the override file validated with it {has}: the job runs the "
            "script's list", path=key,
            hint="recompile both together (compile --launcher slurm), or make the script's item the file's")
        out.append(at(finding, line_of.get(key, first)))
    if len(differ) > _SHOWN:
        out.append(at(SLURM_OVERRIDES.finding(f"... and {len(differ) - _SHOWN} more keys differ",
                                              hint="recompile both together"), first))
    return out

"""Compilation targets: each writes a recipe from a Layout and reads a Layout back (they round-trip)."""

from __future__ import annotations

from typing import Any

from automodel_dist.errors import InputError

AUTOMODEL = "automodel"
MEGATRON_BRIDGE = "megatron-bridge"
TARGETS = (AUTOMODEL, MEGATRON_BRIDGE)


def check_target(target: Any) -> str:
    """The target a public API call names; anything else is an InputError listing the targets."""
    if not isinstance(target, str) or target not in TARGETS:
        raise InputError(f"unknown target {target!r}", where="target",
                         hint=f"one of: {', '.join(TARGETS)}")
    return target

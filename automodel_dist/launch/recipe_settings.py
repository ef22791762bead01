"""Recipe settings that belong with the launcher, and how they are written into the emitted recipe.

A value the recipe already has is kept when it already does the job (a longer timeout, a signal list
that includes SIGUSR1), so a base recipe's own choices survive; otherwise the launcher's value goes in
with a comment saying why.
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

from ruamel.yaml.comments import CommentedMap, CommentedSeq

from automodel_dist.layout import Layout
from automodel_dist.problem import Problem
from automodel_dist.targets.automodel.emit import timeout_minutes
from automodel_dist.textsafe import one_line


@dataclass(frozen=True)
class RecipeSetting:
    """One dotted recipe key the launcher needs, its value, why, and which existing values already do."""

    path: str
    value: Any
    why: str
    satisfied_by: Callable[[Any], bool]


def timeout_settings(problem: Problem, layout: Layout) -> list[RecipeSetting]:
    """`dist_env.timeout_minutes` for the job's scale: the emitter's choice, kept if the recipe lost it."""
    minutes, why = timeout_minutes(problem, layout)
    return [RecipeSetting("dist_env.timeout_minutes", minutes, why,
                          lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and v >= minutes)]


def apply_recipe_settings(recipe: MutableMapping[str, Any], settings: list[RecipeSetting]) -> None:
    """Write `settings` into the recipe mapping in place (values that already do the job stay)."""
    for setting in settings:
        *parents, leaf = setting.path.split(".")
        node = recipe
        for key in parents:
            if not isinstance(node.get(key), MutableMapping):
                node[key] = CommentedMap()
            node = node[key]
        if leaf in node and setting.satisfied_by(node[leaf]):
            continue
        value = setting.value
        if isinstance(value, list):
            value = CommentedSeq(value)
            value.fa.set_flow_style()
        node[leaf] = value
        if isinstance(node, CommentedMap):
            node.yaml_add_eol_comment(one_line(setting.why), leaf)

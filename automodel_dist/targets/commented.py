"""A YAML mapping being filled with values and the reason for each (both targets' why-comments)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ruamel.yaml.comments import CommentedMap

from automodel_dist.textsafe import one_line

COMMENT_COLUMN_MAX = 48


class Section:
    """A CommentedMap being filled: `put(key, value, why)` writes the value and remembers its reason.

    `finish()` attaches the reasons as end-of-line comments aligned in one column per block.
    """

    def __init__(self) -> None:
        self.data = CommentedMap()
        self.why: dict[str, str] = {}
        self.children: dict[str, Section] = {}

    def put(self, key: str, value: Any, why: str | None = None) -> Section:
        if isinstance(value, Section):
            self.children[key] = value
            value = value.data
        self.data[key] = value
        if why:
            self.why[key] = why
        return self

    def finish(self, depth: int = 0) -> CommentedMap:
        indent = 2 * depth
        widths = [indent + len(key) + 2 + len(rendered(self.data[key])) for key in self.why
                  if not isinstance(self.data[key], (Mapping, list))]
        column = min(max(widths, default=0) + 2, COMMENT_COLUMN_MAX)
        for key, why in self.why.items():
            nested = isinstance(self.data[key], (Mapping, list))
            own = indent + len(key) + (1 if nested else 2 + len(rendered(self.data[key])))
            self.data.yaml_add_eol_comment(one_line(why), key, column=own + 2 if nested else max(own + 2, column))
        for child in self.children.values():
            child.finish(depth + 1)
        return self.data


def rendered(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    return str(value)

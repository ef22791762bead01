"""YAML in with positions, YAML out with comments kept.

Every loader in the tool goes through `load_document`, so every error can name file:line:col.
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.composer import ReusedAnchorWarning
from ruamel.yaml.constructor import RoundTripConstructor
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.nodes import MappingNode, ScalarNode
from ruamel.yaml.representer import RoundTripRepresenter
from ruamel.yaml.scalarstring import DoubleQuotedScalarString

from automodel_dist.errors import InputError
from automodel_dist.textsafe import UNSAFE_CHARS

PathKey = tuple[str | int, ...]


def _round_trip_yaml() -> YAML:
    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    yaml.width = 4096
    yaml.indent(mapping=2, sequence=4, offset=2)
    return yaml


@dataclass(frozen=True)
class DuplicateKey:
    """A key written twice in one mapping: the value at `line` (1-based) was replaced by a later one."""

    key: str
    line: int
    col: int


class _LastKeyWinsConstructor(RoundTripConstructor):
    """A key repeated in one mapping keeps its last value, as PyYAML (which AutoModel loads recipes with)
    does; ruamel would refuse the file. The shadowed occurrences are recorded in `duplicates`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.duplicates: list[DuplicateKey] = []

    def construct_mapping(self, node: Any, maptyp: Any, deep: bool = False) -> Any:
        if isinstance(node, MappingNode):
            node.value = self._last_occurrences(node.value)
        return super().construct_mapping(node, maptyp, deep)

    def _last_occurrences(self, pairs: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
        last = {(k.tag, k.value): i for i, (k, _) in enumerate(pairs)
                if isinstance(k, ScalarNode) and k.value != "<<"}
        kept = []
        for i, (key, value) in enumerate(pairs):
            if isinstance(key, ScalarNode) and key.value != "<<" and last[(key.tag, key.value)] != i:
                self.duplicates.append(DuplicateKey(str(key.value), key.start_mark.line + 1,
                                                    key.start_mark.column + 1))
                continue
            kept.append((key, value))
        return kept


@dataclass
class Document:
    """A loaded YAML mapping plus where it came from, so findings can point into it.

    `duplicate_keys` lists keys written twice in one mapping (the later value is the one loaded).
    """

    data: Any
    filename: str
    duplicate_keys: tuple[DuplicateKey, ...] = ()

    def locate(self, path: str | PathKey) -> tuple[int, int] | None:
        """1-based (line, col) of the deepest existing node on `path` (a dotted key or a tuple)."""
        keys = split_path(path) if isinstance(path, str) else path
        node = self.data
        found: tuple[int, int] | None = None
        for key in keys:
            try:  # a key added after loading (an override) is in the map but has no position
                if isinstance(node, CommentedMap) and key in node:
                    line, col = node.lc.key(key)
                elif isinstance(node, CommentedSeq) and isinstance(key, int) and 0 <= key < len(node):
                    line, col = node.lc.item(key)
                else:
                    break
            except (KeyError, TypeError):
                break
            found = (line + 1, col + 1)
            node = node[key]
        if found is None and isinstance(self.data, CommentedMap) and keys == ():
            return (1, 1)
        return found

    def where(self, path: str | PathKey) -> str:
        """"file:line:col" for a key, or "file" when the key is absent."""
        pos = self.locate(path)
        return f"{self.filename}:{pos[0]}:{pos[1]}" if pos else self.filename

    def plain(self) -> Any:
        return to_plain(self.data)


def split_path(dotted: str) -> PathKey:
    """'a.b.0.c' -> ('a', 'b', 0, 'c'); an all-digit part indexes a list."""
    if not dotted:
        return ()
    return tuple(int(part) if part.isdigit() else part for part in dotted.split("."))


def join_path(keys: Sequence[str | int]) -> str:
    return ".".join(str(k) for k in keys)


def as_mapping(value: Any) -> Mapping[str, Any]:
    """`value` if it is a mapping, else an empty one: optional recipe sections read without None checks."""
    return value if isinstance(value, Mapping) else {}


def lookup(data: Any, dotted: str) -> tuple[bool, Any]:
    """(found, value) of a dotted key in nested mappings; (False, None) when a step is missing."""
    node = data
    for key in dotted.split("."):
        if not isinstance(node, Mapping) or key not in node:
            return False, None
        node = node[key]
    return True, node


def _looks_like_path(text: str) -> bool:
    if not text.strip() or "\n" in text:
        return False
    return text.endswith((".yaml", ".yml", ".json")) or Path(text).exists()


def _parse(text: str, filename: str) -> tuple[Any, tuple[DuplicateKey, ...]]:
    """YAML text with positions and its shadowed duplicate keys; a syntax error is an InputError at line:col."""
    yaml = _round_trip_yaml()
    yaml.Constructor = _LastKeyWinsConstructor
    try:
        with warnings.catch_warnings():  # PyYAML, which AutoModel loads with, refuses a reused anchor
            warnings.simplefilter("error", ReusedAnchorWarning)
            data = yaml.load(text)
    except ReusedAnchorWarning as exc:
        raise InputError(f"YAML error: {str(exc).strip().splitlines()[0]} (AutoModel's YAML loader refuses it)",
                         where=filename, hint="give each anchor (&name) a name of its own") from None
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{filename}:{mark.line + 1}:{mark.column + 1}" if mark else filename
        problem = exc.problem or exc.context or "invalid YAML"
        raise InputError(
            f"YAML syntax error: {problem}",
            where=where,
            hint="fix the YAML syntax at that position (indentation, a missing ':' or an unclosed quote)",
        ) from None
    except YAMLError as exc:
        raise InputError(f"YAML syntax error: {exc}", where=filename, hint="fix the YAML syntax") from None
    return data, tuple(yaml.constructor.duplicates)


def read_text_file(path: str | Path, *, what: str, expected: str) -> str:
    """The UTF-8 text of a file the user named; a missing, unreadable or directory path is an InputError
    saying `what` it was meant to be and what to pass instead (`expected`, e.g. "a .yaml file")."""
    filename = str(path)
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{what} path is a directory", where=filename, hint=f"pass {expected}")
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{what} not found", where=filename,
                         hint=f"pass {expected}; a relative path is read from the current directory") from None
    except (PermissionError, IsADirectoryError, UnicodeDecodeError, OSError) as exc:
        raise InputError(f"cannot read {what}: {exc.__class__.__name__}: {exc}", where=filename,
                         hint="make the file readable UTF-8 text") from None


def load_document(source: str | Path | Mapping[str, Any], *, what: str = "file") -> Document:
    """Load a path, YAML text, or an in-memory mapping into a Document whose top level is a mapping."""
    if isinstance(source, Mapping):
        return Document(data=source, filename=f"<{what}>")
    if isinstance(source, Path) or (isinstance(source, str) and _looks_like_path(source)):
        filename = str(source)
        text = read_text_file(source, what=f"{what} file", expected="the path of a .yaml file")
    elif isinstance(source, str):
        text, filename = source, f"<{what}>"
    else:
        raise InputError(f"{what} must be a path, YAML text or a mapping, not {type(source).__name__}",
                         hint=f"pass the {what}'s .yaml path (str or Path), its YAML text, or a dict")
    data, duplicates = _parse(text, filename)
    if data is None:
        raise InputError(f"{what} is empty", where=filename, hint=f"write a YAML mapping describing the {what}")
    if not isinstance(data, Mapping):
        raise InputError(
            f"{what} must be a YAML mapping at the top level, found a {type(to_plain(data)).__name__}",
            where=f"{filename}:1:1",
            hint="the top level needs `key: value` lines, not a list or a scalar",
        )
    return Document(data=data, filename=filename, duplicate_keys=duplicates)


def to_plain(value: Any) -> Any:
    """ruamel's commented containers and scalar subclasses -> plain dict/list/str/int/float/bool."""
    if isinstance(value, Mapping):
        return {to_plain(k): to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    return value


class _ExplicitNullRepresenter(RoundTripRepresenter):
    """Writes None as `null` (the default round-trip representer leaves the value empty)."""


_ExplicitNullRepresenter.add_representer(
    type(None), lambda rep, _data: rep.represent_scalar("tag:yaml.org,2002:null", "null"))


def dump_yaml(data: Any, *, explicit_null: bool = False) -> str:
    """Round-trip dump: comments and key order of a loaded document are kept.

    `explicit_null` writes None as `null` (not an empty value), as generated recipes want it said.
    """
    stream = io.StringIO()
    yaml = _round_trip_yaml()
    if explicit_null:
        yaml.Representer = _ExplicitNullRepresenter
    yaml.dump(_escaped_strings(data), stream)
    return stream.getvalue()


def _escaped_strings(data: Any) -> Any:
    """Strings holding control characters or line separators become double-quoted scalars, in place, so the
    emitter writes them as escapes (\\n, \\L, \\x1b): a plain or single-quoted scalar would carry them raw."""
    if isinstance(data, str):
        return DoubleQuotedScalarString(data) if UNSAFE_CHARS.search(data) else data
    if isinstance(data, dict):
        for key, value in data.items():
            escaped = _escaped_strings(value)
            if escaped is not value:
                data[key] = escaped
    elif isinstance(data, list):
        for i, value in enumerate(data):
            escaped = _escaped_strings(value)
            if escaped is not value:
                data[i] = escaped
    return data

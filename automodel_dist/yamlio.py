"""YAML in with positions, YAML out with comments kept.

Every loader in the tool goes through `load_document`, so every error can name file:line:col.
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.composer import Composer, ReusedAnchorWarning
from ruamel.yaml.constructor import RoundTripConstructor
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.events import AliasEvent
from ruamel.yaml.nodes import MappingNode, ScalarNode
from ruamel.yaml.representer import RoundTripRepresenter
from ruamel.yaml.scalarstring import DoubleQuotedScalarString

from automodel_dist import libyaml_reader
from automodel_dist.errors import InputError
from automodel_dist.limits import (
    MAX_DOCUMENT_NODES,
    MAX_INT_DIGITS,
    MAX_NESTING,
    check_text_size,
    check_tree,
    path_exists,
    read_text_file,
)
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


class InputLimitError(YAMLError):
    """A document passes an input limit (limits.py) while it is composed: message, hint and position."""

    def __init__(self, message: str, mark: Any, hint: str) -> None:
        super().__init__(message)
        self.message, self.mark, self.hint = message, mark, hint

    def located(self, where: str) -> InputError:
        """The InputError at `where` ("file", "override ...") plus the line:col when it is a file."""
        if self.mark is not None and not where.startswith("override "):
            where = f"{where}:{self.mark.line + 1}:{self.mark.column + 1}"
        return InputError(self.message, where=where, hint=self.hint)


_INT_TAG = "tag:yaml.org,2002:int"


class _LimitedComposer(Composer):
    """ruamel's composer, counting as it goes: nesting depth, values with every alias expanded (an alias
    adds the size of what it names, known once that node is complete), so an alias bomb is refused at the
    first alias that passes the limit, before anything is expanded; also an alias inside the collection it
    names (a cycle), a list or mapping used as a mapping key, and an integer literal too long to convert."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._depth = 0
        self._total = 0
        self._sizes: dict[int, int] = {}  # id(anchored node) -> its size, aliases expanded

    # ruamel looks the loader's parser and resolver up through two properties on every event; one load uses
    # one of each, so the lookups are kept (a third of composing a recipe).
    @cached_property
    def parser(self) -> Any:
        return super().parser

    @cached_property
    def resolver(self) -> Any:
        return super().resolver

    def _count(self, size: int, mark: Any) -> None:
        self._total += size
        if self._total > MAX_DOCUMENT_NODES:
            raise InputLimitError(
                f"the document has more than {MAX_DOCUMENT_NODES:,} values with its aliases expanded (the limit; "
                "a full recipe has a few hundred)", mark,
                "write the values out; an alias (*name) that repeats a large block many times is refused")

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.parser.check_event(AliasEvent):
            event = self.parser.peek_event()
            target = self.anchors.get(event.anchor)
            if target is not None and id(target) not in self._sizes:
                raise InputLimitError(f"alias *{event.anchor} is inside the collection &{event.anchor} it names "
                                      "(a recursive alias)", event.start_mark,
                                      "an alias may only repeat a value that is complete before it")
            if target is not None:
                self._count(self._sizes[id(target)], event.start_mark)
            node = super().compose_node(parent, index)
        else:
            self._depth += 1
            if self._depth > MAX_NESTING:
                raise InputLimitError(f"nested more than {MAX_NESTING} levels deep (the limit; recipes nest about "
                                      "6)", self.parser.peek_event().start_mark, "flatten the structure")
            before = self._total
            node = super().compose_node(parent, index)
            self._depth -= 1
            self._count(1, node.start_mark)
            self._sizes[id(node)] = self._total - before
            if str(node.tag) == _INT_TAG and len(str(node.value)) > MAX_INT_DIGITS:
                raise InputLimitError(f"an integer of {len(str(node.value)):,} digits (the limit is "
                                      f"{MAX_INT_DIGITS})", node.start_mark, "no setting needs an integer that large")
        if isinstance(parent, MappingNode) and index is None and not isinstance(node, ScalarNode):
            kind = "mapping" if isinstance(node, MappingNode) else "list"
            raise InputLimitError(f"a {kind} is used as a mapping key", node.start_mark,
                                  "a key must be a plain value (a name or a number); did you mean `key: value`?")
        return node


# What ruamel's value constructors raise on a value its tag cannot hold (`!!int ''`, `!!float x`).
_CONSTRUCTION_ERRORS = (ValueError, TypeError, IndexError, KeyError, OverflowError, AttributeError)


def _construction_error(exc: Exception, mark: Any) -> InputLimitError:
    return InputLimitError(f"a value that its YAML tag cannot hold ({exc.__class__.__name__})", mark,
                           "remove the explicit tag (!!int, !!float, ...) or write a value of that kind")


class _LastKeyWinsConstructor(RoundTripConstructor):
    """A key repeated in one mapping keeps its last value, as PyYAML (which AutoModel loads recipes with)
    does; ruamel would refuse the file. The shadowed occurrences are recorded in `duplicates`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.duplicates: list[DuplicateKey] = []

    def construct_non_recursive_object(self, node: Any, tag: str | None = None) -> Any:
        try:
            return super().construct_non_recursive_object(node, tag)
        except _CONSTRUCTION_ERRORS as exc:
            raise _construction_error(exc, node.start_mark) from None

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
    # a NUL: a broken path, refused when it is read
    return text.endswith((".yaml", ".yml", ".json")) or "\0" in text or path_exists(text)


def _round_trip_loader() -> YAML:
    """ruamel's round-trip loader with the input limits (composer) and last-key-wins duplicates (constructor)."""
    yaml = _round_trip_yaml()
    yaml.Constructor = _LastKeyWinsConstructor
    yaml.Composer = _LimitedComposer
    return yaml


@dataclass
class _ReadVolume:
    """How much YAML this process has read: importing libyaml's binding costs about 14 ms, what ruamel takes to
    read ~5,000 characters, so a process reads with ruamel until it has read `after_chars` (a compile
    reads one short intent; validating a folder reads hundreds of recipes)."""

    after_chars: int = 6_000
    chars: int = 0

    def turn_to_libyaml(self, text: str) -> bool:
        self.chars += len(text)
        return self.chars >= self.after_chars


_READ = _ReadVolume()


def parse_with_libyaml(text: str) -> tuple[Any, tuple[DuplicateKey, ...]] | None:
    """What `_parse` gives, composed by libyaml (libyaml_reader) and constructed by the same constructor; None
    when the text is beyond the plain subset both parsers agree on, passes a limit or is in any way in error
    (ruamel alone then reads it, so every error message is its own)."""
    if not libyaml_reader.available(text):
        return None
    yaml = _round_trip_loader()
    try:
        data = yaml.constructor.construct_document(libyaml_reader.compose(text, yaml.resolver))
    except (libyaml_reader.NotPlain, YAMLError, *_CONSTRUCTION_ERRORS):
        return None
    return data, tuple(yaml.constructor.duplicates)


def _parse(text: str, filename: str, *, comments: bool) -> tuple[Any, tuple[DuplicateKey, ...]]:
    """YAML text with positions and its shadowed duplicate keys; a syntax error is an InputError at line:col.

    libyaml reads what it can (the same data and positions, several times faster, but no comments); ruamel
    reads the rest, every error, and every document whose comments are wanted."""
    fast = None if comments or not _READ.turn_to_libyaml(text) else parse_with_libyaml(text)
    if fast is not None:
        return fast
    yaml = _round_trip_loader()
    try:
        with warnings.catch_warnings():  # PyYAML, which AutoModel loads with, refuses a reused anchor
            warnings.simplefilter("error", ReusedAnchorWarning)
            data = yaml.load(text)
    except InputLimitError as exc:
        raise exc.located(filename) from None
    except _CONSTRUCTION_ERRORS as exc:  # raised while a mapping's items are filled in, after its node
        raise _construction_error(exc, None).located(filename) from None
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


def load_value(text: str) -> Any:
    """One YAML value (an override's right-hand side) with plain types, under the same input limits as a
    document; a syntax error is a YAMLError, a passed limit an InputLimitError (the caller locates both)."""
    yaml = YAML(typ="safe", pure=True)
    yaml.Composer = _LimitedComposer
    try:
        return yaml.load(text)
    except _CONSTRUCTION_ERRORS as exc:
        raise _construction_error(exc, None) from None


def load_document(source: str | Path | Mapping[str, Any], *, what: str = "file", comments: bool = False) -> Document:
    """Load a path, YAML text, or an in-memory mapping into a Document whose top level is a mapping.

    `comments` keeps the text's comments in the data, for a document that is written out again (a base recipe
    merged into); reading them takes ruamel's pure-Python parser, several times slower.
    """
    if isinstance(source, Mapping):
        check_tree(source, where=f"<{what}>")
        return Document(data=source, filename=f"<{what}>")
    text, filename = source_text(source, what=what)
    return parse_document(text, filename, what=what, comments=comments)


def source_text(source: Any, *, what: str = "file") -> tuple[str, str]:
    """(text, file name) of a path or of text given in memory (named `<what>`), within the input limits."""
    if isinstance(source, Path) or (isinstance(source, str) and _looks_like_path(source)):
        return read_text_file(source, what=f"{what} file", expected="the path of a .yaml file"), str(source)
    if isinstance(source, str):
        check_text_size(source, what=f"{what} text", where=f"<{what}>")
        return source, f"<{what}>"
    raise InputError(f"{what} must be a path, YAML text or a mapping, not {type(source).__name__}",
                     hint=f"pass the {what}'s .yaml path (str or Path), its YAML text, or a dict")


def parse_document(text: str, filename: str, *, what: str = "file", comments: bool = False) -> Document:
    """YAML text read from `filename` as a Document whose top level is a mapping (`comments`: as load_document)."""
    data, duplicates = _parse(text, filename, comments=comments)
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
    """ruamel's commented containers and scalar subclasses -> plain dict/list/str/int/float/bool.

    Scalars are tested first: they are most of a document, and the Mapping test is an abstract-class check."""
    if isinstance(value, str):
        return str(value)
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, Mapping):
        return {to_plain(k): to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
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

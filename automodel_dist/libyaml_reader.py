"""libyaml composes what ruamel constructs: the same documents, read several times faster.

ruamel.yaml scans and parses in pure Python, ~85% of loading a recipe (~10 ms each). libyaml, the C parser that
PyYAML binds (PyYAML comes with omegaconf), yields the same events. `compose` builds from them the node tree
ruamel's composer would build (same tags, values, styles and line:col marks), and ruamel's constructor (yamlio's,
with its duplicate-key rule) turns it into the same CommentedMap. It reads only the plain subset of YAML on which
the two parsers agree event for event (tests compare them), within the input limits; anything else raises
`NotPlain` and the caller lets ruamel read the document, so every error, every limit message and every document
using more of YAML is ruamel's alone.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from ruamel.yaml.nodes import MappingNode, ScalarNode, SequenceNode

from automodel_dist.limits import MAX_DOCUMENT_NODES, MAX_INT_DIGITS, MAX_NESTING


@cache
def _binding() -> Any:
    """PyYAML's libyaml binding, imported on first use (~14 ms); None when PyYAML was built without libyaml."""
    try:
        from yaml import _yaml
    except ImportError:  # pragma: no cover - PyYAML's wheels include libyaml
        return None
    return _yaml


# Characters on which the two parsers may count lines or columns apart, or where one is stricter than the
# other: tabs, carriage returns, Unicode line breaks, a byte-order mark.
_OUTSIDE_PLAIN = ("\t", "\r", "\x85", "\u2028", "\u2029", "\ufeff")
_INT_TAG = "tag:yaml.org,2002:int"


class NotPlain(Exception):
    """The document needs more of YAML than the plain subset, passes a limit, or libyaml refused it."""


def available(text: str) -> bool:
    """Whether libyaml may read `text` at all: no character from _OUTSIDE_PLAIN, and the C parser exists."""
    return not any(ch in text for ch in _OUTSIDE_PLAIN) and _binding() is not None


def compose(text: str, resolver: Any) -> Any:
    """The root node of a one-document stream, as ruamel's composer builds it with `resolver`'s implicit tags.

    Raises NotPlain on a tag, anchor, alias or directive (ruamel gives them meanings this does not reproduce:
    merge keys, reused anchors, YAML 1.1), on a block scalar (ruamel keeps a folded one's fold positions, and
    the two read a literal one's header apart: libyaml takes `|#`, ruamel refuses it), on a collection
    used as a mapping key, past MAX_NESTING levels or MAX_DOCUMENT_NODES values, at an integer of more than
    MAX_INT_DIGITS digits, on an empty or a second document, on anything but comments after an explicit
    document end (libyaml skips a repeated `...` that ruamel refuses: "expected a single document in the
    stream"), and on any libyaml error (its wording is not ruamel's).
    """
    from yaml import events
    from yaml.error import YAMLError

    try:
        return _compose(text, _binding().CParser(text), resolver, events)
    except (YAMLError, UnicodeError) as exc:
        raise NotPlain(str(exc)) from None


def _compose(text: str, parser: Any, resolver: Any, events: Any) -> Any:
    get_event = parser.get_event
    get_event()  # stream start
    start = get_event()
    if type(start) is not events.DocumentStartEvent or start.version is not None or start.tags:
        raise NotPlain("an empty stream or a %YAML / %TAG directive")
    resolved: dict[tuple[str, tuple[bool, bool]], Any] = {}  # plain values repeat (keys above all)
    mapping_tag = resolver.resolve(MappingNode, None, True)
    sequence_tag = resolver.resolve(SequenceNode, None, True)
    open_nodes: list[Any] = []  # collections being filled, innermost last
    keys: list[Any] = []  # per open mapping: its key waiting for a value, else None
    count = 0
    root = None
    while root is None:
        event = get_event()
        kind = type(event)
        if kind is events.MappingEndEvent or kind is events.SequenceEndEvent:
            node = open_nodes.pop()
            keys.pop()
            node.end_mark = event.end_mark
            if not open_nodes:
                root = node
            continue
        if event.anchor is not None or getattr(event, "tag", None) is not None:
            raise NotPlain("an anchor, an alias or a tag")
        count += 1
        if count > MAX_DOCUMENT_NODES or len(open_nodes) >= MAX_NESTING:
            raise NotPlain("past an input limit")
        if kind is events.ScalarEvent:
            if event.style in ("|", ">"):
                raise NotPlain("a block scalar")
            value, implicit = event.value, event.implicit
            tag = resolved.get((value, implicit))
            if tag is None:
                tag = resolved[value, implicit] = resolver.resolve(ScalarNode, value, implicit)
            if len(value) > MAX_INT_DIGITS and str(tag) == _INT_TAG:
                raise NotPlain("past an input limit")
            # libyaml's plain style is '', ruamel's None
            node = ScalarNode(tag, value, event.start_mark, event.end_mark, style=event.style or None)
        elif kind is events.MappingStartEvent:
            node = MappingNode(mapping_tag, [], event.start_mark, None, flow_style=event.flow_style)
        elif kind is events.SequenceStartEvent:
            node = SequenceNode(sequence_tag, [], event.start_mark, None, flow_style=event.flow_style)
        else:
            raise NotPlain(kind.__name__)
        if open_nodes:
            parent = open_nodes[-1]
            if type(parent) is SequenceNode:
                parent.value.append(node)
            elif keys[-1] is None:
                if type(node) is not ScalarNode:
                    raise NotPlain("a collection used as a mapping key")
                keys[-1] = node
            else:
                parent.value.append((keys[-1], node))
                keys[-1] = None
        if type(node) is ScalarNode:
            if not open_nodes:
                root = node
        else:
            open_nodes.append(node)
            keys.append(None)
    end = get_event()
    if type(end) is not events.DocumentEndEvent or type(get_event()) is not events.StreamEndEvent:
        raise NotPlain("a second document")
    if end.explicit and any(line.strip() and not line.lstrip().startswith("#")
                            for line in text.splitlines()[end.end_mark.line + 1:]):
        raise NotPlain("more than comments after an explicit document end")
    return root

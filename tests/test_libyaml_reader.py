"""libyaml's reading of a document equals ruamel's: data, types, key and item positions, duplicate keys, and
every validate report; what it does not read plainly, and every error, is left to ruamel.

The corpus: the recipe fixtures, the shipped example recipes and intents, the YAML shapes below, and
hypothesis-made documents (with one-character mutations, so parser edge cases and errors are reached).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from io import StringIO
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from recipe_fixtures import INVALID, VALID, fixture_world
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq

from automodel_dist import yamlio
from automodel_dist.errors import AutomodelDistError
from automodel_dist.limits import MAX_DOCUMENT_NODES, MAX_INT_DIGITS, MAX_NESTING
from automodel_dist.validate import validate_recipe

EXAMPLES = Path(__file__).parents[1] / "examples"
CORPUS = [*VALID, *INVALID, *sorted((EXAMPLES / "recipes").glob("*.yaml")),
          *sorted((EXAMPLES / "intents").glob("*.yaml"))]
FUZZ = settings(max_examples=int(os.environ.get("AMD_FUZZ_EXAMPLES", "300")), deadline=None,
                suppress_health_check=[HealthCheck.too_slow])

# YAML a recipe may be written in: each must be read by libyaml (no fallback) and equal ruamel's reading.
SHAPES = [
    "a: 1\nb: -2\nc: +3\nd: 0x1F\ne: 0o17\nf: 0b101\ng: 1_000\nh: 007\n",
    "a: 1.5\nb: 1e-5\nc: -2.5E+3\nd: .inf\ne: -.Inf\nf: .nan\ng: 1.\nh: .5\ni: 6.02e23\nj: 1_0.5\n",
    "a: true\nb: False\nc: TRUE\nd: yes\ne: no\nf: on\ng: Off\nh: y\ni: n\n",
    "a: null\nb: ~\nc:\nd: Null\ne: NULL\nf: ''\ng: \"\"\n",
    "a: 'single ''quoted'''\nb: \"double \\\"quoted\\\" \\t \\u00e9 \\x41 \\/\"\nc: plain with spaces\n",
    "a: [1, 2, 'x', \"y\", {b: c}, [d, e]]\nf: {g: 1, h: [2, 3], 'i': null}\nj: []\nk: {}\n",
    "a:\n- 1\n- b: 2\n  c: 3\n- - nested\n  - list\n-\n- last\n",
    "'quoted key': 1\n\"double key\": 2\n3: int key\n2.5: float key\ntrue: bool key\nnull: null key\n",
    "a: ${VAR}\nb: ${VAR,default}\nc: ${oc.env:HOME}\nd: $PLAIN\ne: x${A}y\n",
    "# comment\n\na: 1 # trailing\n\n# between\nb:\n  # inside\n  c: 2\n# end\n",
    "---\na: 1\n...\n",
    "---\na: 1\n",
    "a: multi\n  line\n  plain\nb: 'multi\n  line quoted'\nc: \"folded\n\n  paragraph\"\n",
    "a: é€ unicode ü\nb: \"\U0001F600\"\nc: {d: 日本}\nkey é: 1\n",
    "a: 2001-12-14\nb: 12:30:45\nc: 1:20\nd: 0.1.2\ne: v1.2\nf: 1e\ng: 0x\nh: -.5\n",
    "a: 1\nb: 2\na: 3\nc:\n  d: 1\n  d: 2\n",
    "a:\n  b:\n    c:\n      d:\n        e: [1, {f: [2, {g: 3}]}]\n",
    "a: x:y\nb: x #y\nc: 'x #y'\nd: x# y\ne: -x\nf: ?x\ng: x?\nh: '@x'\ni: '`x'\nj: x,y\nk: '[x]'\n",
    "? a\n: 1\n? b\nc: 2\n",
    "a: {b: , c: }\nd: [e, ]\n",
    "a:\n  -\n  - x\n  -\nb:\n\n\nc: 1\n",
    "{a: 1, b: [2, 3]}\n",
    "a: 'x' # not an anchor &x\n",
    "   a: 1\n   b:\n      c: 2\n",
    "a: \"\\\n  continued\"\nb: 'it''s'\n",
    "a: " + "x" * 2000 + "\n",
    "a: 12345678901234567890123456789012345678901234567890\n",
    "a: 1\n...\n", "a: 1\n... # end\n\n# trailing\n",
]
# Documents libyaml leaves to ruamel: tags, anchors, aliases, merge keys, directives, block scalars, tabs,
# CR line ends, several documents, a repeated document end, empty streams, and every error.
LEFT_TO_RUAMEL = [
    "a: !!int 3\n", "a: !custom x\n", "a: &x 1\nb: *x\n", "base: &b {x: 1}\nc:\n  <<: *b\n",
    "%YAML 1.1\n---\na: yes\n", "%TAG !e! tag:example.com:\n---\na: 1\n", "a: >\n  folded\n  text\n",
    "a: |\n  line one\n  line two\nb: |-\n  strip\n", "a: |#\n  x\n",
    "a:\t1\n", "a: 1\r\nb: 2\r\n", "a: 1\n---\nb: 2\n", "", "# only\n", "a: [1, 2\n", "a:\n  b: 1\n c: 2\n",
    "[a, b]: 1\n", "{a: 1}: 2\n", "a: 'x\n", "a: \"\\q\"\n", "a: @x\n",
    "\ufeffa: 1\n", "a: 1\u2028b: 2\n", "a: \x07\n", "r\n...\n...\n", "a: 1\n...\n\n# c\n...\n",
]


@pytest.fixture(autouse=True)
def _libyaml_from_the_first_document(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process reads its first few KiB with ruamel (yamlio._ReadVolume); here libyaml reads everything it can."""
    monkeypatch.setattr(yamlio, "_READ", yamlio._ReadVolume(after_chars=0))


def test_a_process_turns_to_libyaml_once_it_has_read_enough() -> None:
    volume = yamlio._ReadVolume()
    assert not volume.turn_to_libyaml("model: x\n")  # a compile's intent: importing libyaml would cost more
    assert volume.turn_to_libyaml("a: 1\n" * 2000)


def same_reading(fast: tuple[Any, tuple], slow: tuple[Any, tuple]) -> str | None:
    """None when two readings agree on data, types, scalar attributes, key and item positions and duplicate
    keys; else where they first differ. (Comments are ruamel's alone; a value's own position is not compared:
    nothing reads it, and for an empty value ruamel marks the token after it.)"""
    if fast[1] != slow[1]:
        return f"duplicate keys {fast[1]} != {slow[1]}"
    return _difference(fast[0], slow[0], ())


def _difference(a: Any, b: Any, path: tuple) -> str | None:
    if type(a) is not type(b):
        return f"{path}: {type(a).__name__} != {type(b).__name__}"
    if isinstance(a, (CommentedMap, CommentedSeq)) and (a.lc.line, a.lc.col) != (b.lc.line, b.lc.col):
        return f"{path}: at {a.lc.line}:{a.lc.col} != {b.lc.line}:{b.lc.col}"
    if isinstance(a, dict):
        if list(a) != list(b):
            return f"{path}: keys {list(a)} != {list(b)}"
        for key in a:
            if isinstance(a, CommentedMap) and a.lc.key(key) != b.lc.key(key):
                return f"{(*path, key)}: key at {a.lc.key(key)} != {b.lc.key(key)}"
            found = _difference(a[key], b[key], (*path, key))
            if found:
                return found
        return None
    if isinstance(a, list):
        if len(a) != len(b):
            return f"{path}: {len(a)} items != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            if isinstance(a, CommentedSeq) and a.lc.item(i) != b.lc.item(i):
                return f"{(*path, i)}: item at {a.lc.item(i)} != {b.lc.item(i)}"
            found = _difference(x, y, (*path, i))
            if found:
                return found
        return None
    if a != b and not (a != a and b != b):  # NaN equals NaN here
        return f"{path}: {a!r} != {b!r}"
    attributes = [name for cls in type(a).__mro__ for name in getattr(cls, "__slots__", ())
                  if name not in ("comment", "_yaml_anchor")]
    if {n: getattr(a, n, None) for n in attributes} != {n: getattr(b, n, None) for n in attributes}:
        return f"{path}: attributes differ"
    return None


def ruamel_reading(text: str) -> tuple[Any, tuple]:
    """The document as ruamel alone reads it (or its InputError)."""
    with ruamel_only():
        return yamlio._parse(text, "<t>", comments=False)


@contextmanager
def ruamel_only() -> Iterator[None]:
    with mock.patch.object(yamlio, "parse_with_libyaml", lambda text: None):
        yield


def agrees(text: str) -> bool:
    """Whether libyaml read `text`; if it did, ruamel reads the same (fails the test otherwise)."""
    fast = yamlio.parse_with_libyaml(text)
    if fast is None:
        return False
    try:
        slow = ruamel_reading(text)
    except AutomodelDistError as exc:
        pytest.fail(f"libyaml read what ruamel refuses ({exc}):\n{text!r}")
    difference = same_reading(fast, slow)
    assert difference is None, f"{difference}\n{text!r}"
    return True


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_corpus_files_read_alike(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert agrees(text) or "&" in text, f"{path.name} was left to ruamel"


@pytest.mark.parametrize("text", SHAPES)
def test_yaml_shapes_read_alike(text: str) -> None:
    assert agrees(text), "left to ruamel"


@pytest.mark.parametrize("text", LEFT_TO_RUAMEL)
def test_beyond_the_plain_subset_is_left_to_ruamel(text: str) -> None:
    assert yamlio.parse_with_libyaml(text) is None


def _nested(depth: int) -> str:
    return "a: " + "[" * (depth - 1) + "1" + "]" * (depth - 1) + "\n"


@pytest.mark.parametrize("text", [
    _nested(MAX_NESTING - 1), _nested(MAX_NESTING), _nested(MAX_NESTING + 1),
    "a: [" + ", ".join(["1"] * (MAX_DOCUMENT_NODES - 3)) + "]\n",
    "a: [" + ", ".join(["1"] * (MAX_DOCUMENT_NODES - 2)) + "]\n",
    "a: [" + ", ".join(["1"] * (MAX_DOCUMENT_NODES - 1)) + "]\n",
    f"a: {'9' * MAX_INT_DIGITS}\n", f"a: {'9' * (MAX_INT_DIGITS + 1)}\n", f"a: '{'9' * (MAX_INT_DIGITS + 1)}'\n",
], ids=["nest-1", "nest", "nest+1", "values-1", "values", "values+1", "digits", "digits+1", "digits-quoted"])
def test_input_limits_hold_on_both_paths(text: str) -> None:
    """At each limit and one past it: libyaml reads exactly what ruamel accepts; past it ruamel's error stands."""
    try:
        ruamel_reading(text)
        accepted = True
    except AutomodelDistError:
        accepted = False
    assert agrees(text) == accepted
    if not accepted:
        with pytest.raises(AutomodelDistError, match="limit"):
            yamlio.load_document(text)


@pytest.mark.parametrize("path", [*VALID, *INVALID, *sorted((EXAMPLES / "recipes").glob("*.yaml"))],
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_validate_reports_are_identical(path: Path) -> None:
    nodes, gpus_per_node = fixture_world(path) if path.parent.parent.name == "recipes" else (1, 8)
    world = {"world_size": nodes * gpus_per_node, "gpus_per_node": gpus_per_node}
    fast = _outcome(path, world)
    with ruamel_only():
        slow = _outcome(path, world)
    assert fast == slow


def _outcome(path: Path, world: dict[str, int]) -> Any:
    try:
        return validate_recipe(path, **world).to_json()
    except AutomodelDistError as exc:
        return str(exc)


SCALARS = st.one_of(
    st.integers(-10**6, 10**6), st.floats(allow_nan=False, width=32), st.booleans(), st.none(),
    st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), max_size=12),
    st.sampled_from(["yes", "off", "~", "1e3", "0x10", "0o7", "1_0", ".inf", "-", "?", ":", "#x", "a: b", "- x",
                     "${X}", "'", '"', "\\", "[", "{", "&a", "*a", "!x", "%x", "@", "`", "2001-01-01", "1:20"]))
DATA = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.one_of(st.text(max_size=6), st.integers(0, 9)), inner,
                                                 max_size=4)), max_leaves=20)
NOISE = st.sampled_from([" ", "\n", "#", ":", "-", "'", '"', "[", "]", "{", "}", ",", "?", "|", ">", "&", "*", "!",
                         "%", "@", "\t", "\\", "\r", "é", "  ", "\n  ", "\n- ", ": ", "---\n", "...\n"])


def _dumped(data: Any, flow: bool | None, indent: int) -> str:
    yaml = YAML(typ="rt")
    yaml.default_flow_style = flow
    yaml.indent(mapping=indent, sequence=indent + 2, offset=indent)
    stream = StringIO()
    yaml.dump({"root": data}, stream)
    return stream.getvalue()


@FUZZ
@given(data=DATA, flow=st.sampled_from([None, False, True]), indent=st.integers(2, 4),
       edits=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 2), NOISE), max_size=3))
def test_generated_documents_read_alike(data: Any, flow: bool | None, indent: int,
                                        edits: list[tuple[int, int, str]]) -> None:
    """Any document libyaml reads, ruamel reads the same; mutated ones reach errors and edge cases."""
    text = _dumped(data, flow, indent)
    for at, cut, piece in edits:
        at %= len(text) + 1
        text = text[:at] + piece + text[at + cut:]
    agrees(text)


PIECES = st.sampled_from(["a", "b1", "x y", "1", "-1.5", "true", "~", ":", ": ", "- ", "-", "\n", "  ", " ", "'",
                          '"', "''", "[", "]", "{", "}", ", ", ",", "#", " #c", "?", "? ", "|", "|-", ">", "\\",
                          "é", "${V}", "!", "&", "*", "%", "@", "---", "...", "\n  ", "\n- ", "\n? ", "\n: "])


@FUZZ
@given(pieces=st.lists(PIECES, min_size=1, max_size=30))
def test_token_soup_reads_alike(pieces: list[str]) -> None:
    """Text made of YAML's tokens in any order: whatever libyaml accepts, ruamel reads the same."""
    agrees("".join(pieces))

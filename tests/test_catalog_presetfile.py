"""The fast preset reader agrees with YAML: on every shipped preset, on hand-picked traps, and on
generated flat-looking documents (where it either returns what ruamel returns or defers to it)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ruamel.yaml.error import YAMLError

from automodel_dist.catalog.presetfile import load_preset_file, parse_flat, ruamel_load
from automodel_dist.errors import InputError
from automodel_dist.resources import PRESETS_DIR


def test_every_shipped_preset_is_read_flat_and_equals_yaml() -> None:
    files = sorted(PRESETS_DIR.glob("*/*.yaml"))
    assert len(files) >= 26
    for path in files:
        text = path.read_text(encoding="utf-8")
        flat = parse_flat(text)
        assert flat is not None, f"{path.name} needs the slow YAML path"
        assert repr(flat) == repr(ruamel_load(text)), path.name  # repr: True and 1 differ


@pytest.mark.parametrize("text", [
    "a: 2024-04-17\n",          # a date in YAML
    "a: 0x1F\n",                # an int in YAML 1.2
    "a: True\n",                # a bool
    "a: 1e5\n",                 # a float
    "a: 'x'\n",                 # single quotes
    "a: \"x\\ty\"\n",           # escapes
    "a:\n",                     # null, not an empty list
    "a:\n  - b: 1\n",           # nested mapping
    "a: [x, [y, z]]\n",         # nested flow
    "a: {\"k\": 1}\n",          # quoted flow key
    "a: &anchor 1\nb: *anchor\n",
    "a: x\n  y\n",              # a folded plain scalar
    "a: 1\na: 2\n",             # duplicate key
    "---\na: 1\n",
    "a: 012\n",
])
def test_traps_are_left_to_yaml(text: str) -> None:
    assert parse_flat(text) is None


def test_flat_shapes_match_yaml() -> None:
    text = ("# header 'quoted' comment\nid: x-1.5b  # trailing, with an apostrophe's\nn: 42\nf: 79.65\n"
            "neg: -3\nflag: false\nnothing: null\ncc: \"10.0\"\nurl: https://example.org/a#frag\n"
            "aliases:\n  - org/Name-7B\n  - {id: org/Other, vocab_size: 32768}\nflow: [a, b-c, 3]\n")
    flat = parse_flat(text)
    assert repr(flat) == repr(ruamel_load(text))
    assert flat is not None and flat["url"] == "https://example.org/a#frag"


_tokens = st.sampled_from(["1", "0", "-7", "2.5", "true", "false", "null", "x", "a-b", "Qwen/Q3-8B", "8.0",
                           "\"q\"", "'s'", "yes", "~", "a b", "a: b", "#c", " # c", "[a, b]", "{k: v}",
                           "[", "}", "1e3", "x's", "https://h/p", ".5", "0o7", "a,b", "-", "*", "&a",
                           "[x, 'y']", "{a: 1, b: [2]}", "[1, 2.5, c]", "k:v", "a #b", "a#b", "\"a # b\"",
                           "/abs", "Null", "1_000", "+1", "-0", "00", "[]", "{}", "a:", "1.", "-.5"])
_lines = st.lists(st.tuples(st.sampled_from(["k1", "k2", "k3", "k4", "  - ", "", "# "]), _tokens),
                  min_size=1, max_size=6)


@settings(max_examples=300, deadline=None)
@given(_lines)
def test_generated_documents_agree_or_defer(lines: list[tuple[str, str]]) -> None:
    text = "".join(f"{key}{'' if key.startswith((' ', '#')) or not key else ': '}{value}\n" for key, value in lines)
    flat = parse_flat(text)
    if flat is None:
        return
    try:
        expected = ruamel_load(text)
    except YAMLError:
        pytest.fail(f"flat reader accepted text YAML rejects: {text!r} -> {flat!r}")
    assert repr(flat) == repr(expected), text


def test_broken_preset_file_is_an_input_error(tmp_path: Path) -> None:
    bad = tmp_path / "x.yaml"
    bad.write_text("a: [unclosed\n")
    with pytest.raises(InputError, match="cannot parse preset"):
        load_preset_file(bad)
    with pytest.raises(InputError, match="cannot read preset"):
        load_preset_file(tmp_path / "absent.yaml")

"""YAML loading keeps positions and reports every kind of bad input as an InputError."""

from __future__ import annotations

import pytest

from automodel_dist.errors import InputError
from automodel_dist.yamlio import dump_yaml, join_path, load_document, split_path

RECIPE = """\
# a comment kept on round trip
distributed:
  strategy: fsdp2
  tp_size: 2   # why
  pipeline:
    pp_schedule: 1f1b
step_scheduler:
  global_batch_size: 32
layers:
  - a
  - b
"""


def test_locate_points_at_keys_and_list_items() -> None:
    doc = load_document(RECIPE, what="recipe")
    assert doc.locate("distributed.tp_size") == (4, 3)
    assert doc.locate("distributed.pipeline.pp_schedule") == (6, 5)
    assert doc.locate(("layers", 1)) == (11, 5)
    assert doc.where("step_scheduler.global_batch_size") == "<recipe>:8:3"


def test_locate_falls_back_to_deepest_existing_parent() -> None:
    doc = load_document(RECIPE)
    assert doc.locate("distributed.ep_size") == (2, 1)
    assert doc.locate("nothing.here") is None
    assert doc.where("nothing") == "<file>"


def test_round_trip_keeps_comments_and_order() -> None:
    doc = load_document(RECIPE, comments=True)
    doc.data["distributed"]["tp_size"] = 4
    out = dump_yaml(doc.data)
    assert out.startswith("# a comment kept on round trip\ndistributed:")
    assert "tp_size: 4   # why" in out
    assert out.index("distributed") < out.index("step_scheduler") < out.index("layers")


def test_plain_converts_to_builtin_types() -> None:
    plain = load_document(RECIPE).plain()
    assert type(plain) is dict and type(plain["distributed"]) is dict
    assert plain["layers"] == ["a", "b"] and type(plain["layers"]) is list


def test_paths_split_and_join() -> None:
    assert split_path("a.b.0.c") == ("a", "b", 0, "c")
    assert join_path(("a", 3, "b")) == "a.3.b"
    assert split_path("") == ()


def test_file_path_is_loaded_and_named(tmp_path) -> None:
    path = tmp_path / "r.yaml"
    path.write_text(RECIPE)
    doc = load_document(str(path))
    assert doc.filename == str(path)
    assert doc.where("distributed.strategy") == f"{path}:3:3"


@pytest.mark.parametrize(
    ("text", "fragment", "where"),
    [
        ("", "is empty", "<file>"),
        ("# only a comment\n", "is empty", "<file>"),
        ("- a\n- b\n", "must be a YAML mapping", "<file>:1:1"),
        ("just a string", "must be a YAML mapping", "<file>:1:1"),
        ("a: [1, 2\nb: 3\n", "YAML syntax error", "<file>:"),
        ("a:\n  b: 1\n c: 2\n", "YAML syntax error", "<file>:3:"),
    ],
)
def test_bad_text_is_an_input_error(text: str, fragment: str, where: str) -> None:
    with pytest.raises(InputError) as info:
        load_document(text)
    assert fragment in info.value.message
    assert info.value.where.startswith(where)
    assert info.value.hint


def test_missing_file_and_directory(tmp_path) -> None:
    with pytest.raises(InputError, match="not found"):
        load_document(str(tmp_path / "missing.yaml"))
    with pytest.raises(InputError, match="directory"):
        load_document(tmp_path)


def test_unreadable_bytes(tmp_path) -> None:
    path = tmp_path / "bin.yaml"
    path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(InputError, match="cannot read"):
        load_document(str(path))


def test_wrong_source_type() -> None:
    with pytest.raises(InputError, match="must be a path"):
        load_document(42)  # type: ignore[arg-type]

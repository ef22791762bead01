"""The quick schema verdict never contradicts jsonschema: a sure answer is jsonschema's answer.

Held to jsonschema over the shipped example intents and recipes and over random edits of them (a key set
to a random JSON value, nested anywhere, including keys no schema knows)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from automodel_dist.resources import INTENT_SCHEMA, RECIPE_SCHEMA
from automodel_dist.schema_check import _validator, load_schema, schema_issues
from automodel_dist.schema_fast import verdict
from automodel_dist.yamlio import Document, load_document

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
INTENTS = sorted((EXAMPLES / "intents").glob("*.yaml"))
RECIPES = sorted((EXAMPLES / "recipes").glob("*.yaml"))


def jsonschema_valid(value: Any, schema_filename: str) -> bool:
    return next(iter(_validator(schema_filename).iter_errors(value)), None) is None


def assert_agrees(value: Any, schema_filename: str) -> None:
    root = load_schema(schema_filename)
    quick = verdict(value, root, root)
    if quick is not None:
        assert quick == jsonschema_valid(value, schema_filename), value


@pytest.mark.parametrize("path", INTENTS, ids=lambda p: p.name)
def test_every_example_intent_is_surely_valid(path: Path) -> None:
    plain = load_document(path, what="intent").plain()
    root = load_schema(INTENT_SCHEMA)
    assert verdict(plain, root, root) is True and jsonschema_valid(plain, INTENT_SCHEMA)


scalars = st.one_of(st.none(), st.booleans(), st.integers(-3, 70000), st.floats(-2.0, 5e5, allow_nan=False),
                    st.sampled_from([2.0, float("nan"), float("inf")]),
                    st.sampled_from(["auto", "fsdp2", "ddp", "h100-80gb", "b200", "sft", "peft", "pretrain",
                                     "memory", "throughput", "deepep", "torch", "acct\n", "", "Qwen/Qwen3-8B",
                                     "not a value", "bfloat16", "fp8", "1f1b"]))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                      st.dictionaries(st.sampled_from(["a", "tp", "gpu", "rank"]),
                                                                      inner, max_size=2)), max_leaves=6)


def edit(document: Any, draw: Any) -> Any:
    """`document` with one key somewhere (existing or new) set to a random value, or removed."""
    doc = copy.deepcopy(document)
    node = doc
    while isinstance(node, dict) and node and draw(st.booleans()):
        key = draw(st.sampled_from(sorted(node, key=str)))
        if not isinstance(node[key], dict):
            break
        node = node[key]
    if isinstance(node, dict):
        keys = sorted(node, key=str)
        key = draw(st.sampled_from([*keys, "unknown_key", "tp", "nodes", "seq_length"])) if keys else "x"
        if key in node and draw(st.integers(0, 4)) == 0:
            del node[key]
        else:
            node[key] = draw(values)
    return doc


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_random_intent_edits_get_jsonschemas_answer(data: Any) -> None:
    path = data.draw(st.sampled_from(INTENTS))
    document = load_document(path, what="intent").plain()
    for _ in range(data.draw(st.integers(1, 3))):
        document = edit(document, data.draw)
    assert_agrees(document, INTENT_SCHEMA)


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_random_recipe_edits_get_jsonschemas_answer(data: Any) -> None:
    path = data.draw(st.sampled_from(RECIPES))
    document = edit(load_document(path, what="recipe").plain(), data.draw)
    assert_agrees(document, RECIPE_SCHEMA)


def test_a_surely_valid_document_has_no_issues_and_an_invalid_one_is_explained() -> None:
    plain = load_document(INTENTS[0], what="intent").plain()
    assert schema_issues(Document(data=plain, filename="<intent>"), INTENT_SCHEMA) == []
    broken = {**plain, "training": {**plain["training"], "seq_length": "long"}}
    issues = schema_issues(Document(data=broken, filename="<intent>"), INTENT_SCHEMA)
    assert [".".join(map(str, i.path)) for i in issues] == ["training.seq_length"]

"""The input limits (automodel_dist/limits.py) at their boundaries: what passes, what is refused, and where
the message points."""

from __future__ import annotations

import datetime
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from automodel_dist.catalog.models import resolve_model
from automodel_dist.errors import InputError
from automodel_dist.intent import load_intent
from automodel_dist.limits import (
    LAYERS,
    MAX_DOCUMENT_NODES,
    MAX_FILE_BYTES,
    MAX_INT_DIGITS,
    MAX_NESTING,
    WORLD_SIZE,
    check_tree,
    read_text_file,
)
from automodel_dist.rules.recipe import MAX_TIMEOUT_MINUTES
from automodel_dist.targets.automodel.config import EnvSecrets, resolve_config
from automodel_dist.validate import validate_recipe
from automodel_dist.yamlio import load_document

INTENT = "model: Qwen/Qwen3-8B\nhardware: {gpu: h100-80gb}\ntraining: {seq_length: 4096, global_batch_size: 64}\n"


def _refused(source: object, match: str) -> InputError:
    with pytest.raises(InputError, match=match) as caught:
        load_document(source)  # type: ignore[arg-type]
    return caught.value


# -- files ------------------------------------------------------------------------------------------------

def test_a_fifo_is_refused_at_once_without_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "intent.yaml"
    os.mkfifo(fifo)
    start = time.perf_counter()
    with pytest.raises(InputError, match=r"not a regular file \(it is a named pipe") as caught:
        read_text_file(fifo, what="intent", expected="a .yaml file")
    assert time.perf_counter() - start < 5
    assert caught.value.where == str(fifo)


def test_a_device_is_refused() -> None:
    with pytest.raises(InputError, match="character device"):
        read_text_file("/dev/zero", what="recipe", expected="a .yaml file")


def test_the_size_cap_is_inclusive_and_its_message_says_both_sizes(tmp_path: Path) -> None:
    at_cap = tmp_path / "at.yaml"
    at_cap.write_bytes(b"#" * MAX_FILE_BYTES)
    assert len(read_text_file(at_cap, what="recipe", expected="x")) == MAX_FILE_BYTES
    over = tmp_path / "over.yaml"
    over.write_bytes(b"#" * (MAX_FILE_BYTES + 1))
    with pytest.raises(InputError, match=f"{MAX_FILE_BYTES + 1:,} bytes, above the limit of {MAX_FILE_BYTES:,}"):
        read_text_file(over, what="recipe", expected="x")


def test_text_that_is_not_utf8_is_located_by_line(tmp_path: Path) -> None:
    path = tmp_path / "r.yaml"
    path.write_bytes(b"a: 1\nb: \xff\n")
    with pytest.raises(InputError, match="not UTF-8") as caught:
        read_text_file(path, what="recipe", expected="x")
    assert caught.value.where == f"{path}:2"


def test_in_memory_yaml_text_is_held_to_the_file_limit() -> None:
    _refused("a: '" + "x" * MAX_FILE_BYTES + "'\n", "above the limit")


# -- documents --------------------------------------------------------------------------------------------

def _nested(levels: int) -> str:
    """A top-level mapping whose value is `levels - 1` nested lists around a scalar: `levels` + 1 deep."""
    return "x: " + "[" * (levels - 1) + "1" + "]" * (levels - 1) + "\n"


def test_nesting_up_to_the_limit_loads_and_one_more_is_refused_at_its_place() -> None:
    load_document(_nested(MAX_NESTING - 1))
    error = _refused(_nested(MAX_NESTING), f"nested more than {MAX_NESTING} levels")
    assert error.where == f"<file>:1:{MAX_NESTING + 3}"


def test_an_alias_bomb_is_refused_at_the_alias_that_passes_the_limit_before_expanding() -> None:
    lines = ["a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 12)]
    start = time.perf_counter()
    error = _refused("\n".join(lines) + "\n", f"more than {MAX_DOCUMENT_NODES:,} values with its aliases expanded")
    assert time.perf_counter() - start < 2
    assert error.where is not None and error.where.startswith("<file>:4:")  # 10**4 values first pass 10,000


def test_an_alias_used_a_few_times_is_fine() -> None:
    doc = load_document("a: &x [1, 2]\nb: *x\nc: {d: *x}\n")
    assert doc.plain() == {"a": [1, 2], "b": [1, 2], "c": {"d": [1, 2]}}


def test_a_recursive_alias_a_complex_key_and_a_long_integer_are_located() -> None:
    assert _refused("a: &x [1, *x]\n", "recursive alias").where == "<file>:1:11"
    assert _refused("? [1, 2]\n: 3\n", "a list is used as a mapping key").where == "<file>:1:3"
    assert _refused("? {a: 1}\n: 3\n", "a mapping is used as a mapping key").where == "<file>:1:3"
    assert load_document("a: " + "9" * MAX_INT_DIGITS + "\n").data["a"] == int("9" * MAX_INT_DIGITS)
    assert _refused("a: " + "9" * (MAX_INT_DIGITS + 1) + "\n", "integer of 101 digits").where == "<file>:1:4"


def test_a_value_its_tag_cannot_hold_is_an_input_error() -> None:
    _refused("a: !!int ''\n", "YAML tag cannot hold")
    _refused("a: !!float x\n", "YAML tag cannot hold")


def test_api_mappings_are_checked_for_cycles_depth_keys_and_integers() -> None:
    cyclic: dict = {"a": 1}
    cyclic["self"] = cyclic
    with pytest.raises(InputError, match="contains itself"):
        check_tree(cyclic, where="<intent>")
    shared = [1, 2]
    check_tree({"a": shared, "b": shared}, where="<intent>")  # a shared subtree is no cycle
    deep: dict = {}
    node = deep
    for _ in range(MAX_NESTING + 1):
        node["x"] = {}
        node = node["x"]
    with pytest.raises(InputError, match="nested more than"):
        check_tree(deep, where="<intent>")
    with pytest.raises(InputError, match="mapping key must be a string"):
        check_tree({(1, 2): 3}, where="<intent>")
    with pytest.raises(InputError, match="more than 100 digits"):
        check_tree({"a": 10**200}, where="<intent>")


# -- sizes ------------------------------------------------------------------------------------------------

def test_model_sizes_pass_at_the_limit_and_are_refused_above_it() -> None:
    assert resolve_model({"preset": "llama-3.1-8b", "num_layers": LAYERS.maximum}).num_layers == LAYERS.maximum
    with pytest.raises(InputError, match=f"num_layers is {LAYERS.maximum + 1}, above the limit") as caught:
        resolve_model({"preset": "llama-3.1-8b", "num_layers": LAYERS.maximum + 1})
    assert caught.value.where == "model.num_layers"


def test_a_config_json_is_judged_as_read_before_any_loop_over_its_layers(tmp_path: Path) -> None:
    config = json.loads((Path(__file__).parent / "fixtures/hf_configs/qwen3-30b-a3b/config.json").read_text())
    config["num_hidden_layers"] = 10**12
    (tmp_path / "config.json").write_text(json.dumps(config))
    start = time.perf_counter()
    with pytest.raises(InputError, match="num_hidden_layers is 1000000000000,") as caught:
        resolve_model(str(tmp_path))
    assert time.perf_counter() - start < 2
    assert caught.value.where == f"{tmp_path / 'config.json'}.num_hidden_layers"
    (tmp_path / "config.json").write_text('{"model_type": "llama", "hidden_size": ' + "9" * 5000 + "}")
    with pytest.raises(InputError, match="integer of 5,000 digits"):
        resolve_model(str(tmp_path))


def test_the_world_size_limit_is_inclusive() -> None:
    load_intent(INTENT, [f"hardware.nodes={WORLD_SIZE.maximum // 8}"])
    with pytest.raises(InputError, match=f"the world size .* is {WORLD_SIZE.maximum + 8}, above the limit"):
        load_intent(INTENT, [f"hardware.nodes={WORLD_SIZE.maximum // 8 + 1}"])
    with pytest.raises(InputError, match="world size is"):
        validate_recipe("distributed: {strategy: fsdp2}\n", world_size=WORLD_SIZE.maximum + 1)


def test_whole_number_floats_are_not_integers_in_an_intent() -> None:
    with pytest.raises(InputError, match="expected 'auto' or an integer") as caught:
        load_intent(INTENT + "parallelism: {tp: 2.0}\n")
    assert caught.value.where == "<intent>:4:15"


def test_a_key_twice_in_an_intent_is_an_error_at_the_first_one() -> None:
    with pytest.raises(InputError, match="'model' is written twice") as caught:
        load_intent("model: Qwen/Qwen3-8B\n" + INTENT)
    assert caught.value.where == "<intent>:1:1"


# -- start-up failures: the timeout, judged against Python's timedelta and torch ----------------------------

TIMEOUTS_REFUSED = [math.nan, math.inf, 1e30, -5.0, 0.0, MAX_TIMEOUT_MINUTES * 1.01]
TIMEOUTS_ACCEPTED = [0.5, 30, 1e9, MAX_TIMEOUT_MINUTES * 0.99]


def _timeout_findings(value: float) -> list[str]:
    recipe = {"distributed": {"strategy": "fsdp2"}, "dist_env": {"timeout_minutes": value}}
    return [f.rule for f in validate_recipe(recipe, world_size=8).findings]


def test_the_timeout_rule_agrees_with_timedelta_and_torch() -> None:
    """Each refused value fails where AutoModel starts (timedelta or torch's gloo process group); each
    accepted one starts. torch runs in a subprocess: one process group per process."""
    script = """
import datetime, json, sys
import torch.distributed as dist
out = []
for value in json.loads(sys.argv[1]):
    try:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1,
                                timeout=datetime.timedelta(minutes=value))
        dist.barrier()
        dist.destroy_process_group()
        out.append(True)
    except Exception:
        out.append(False)
print(json.dumps(out))
"""
    values = [v for v in TIMEOUTS_REFUSED + TIMEOUTS_ACCEPTED if math.isfinite(v)]
    done = subprocess.run([sys.executable, "-c", script, json.dumps(values)], capture_output=True, text=True,
                          timeout=300, check=True)
    starts = dict(zip(values, json.loads(done.stdout.strip().splitlines()[-1]), strict=True))
    for value in TIMEOUTS_REFUSED:
        assert "dist-env-timeout-value" in _timeout_findings(value), value
        if not math.isfinite(value):
            with pytest.raises((ValueError, OverflowError)):
                datetime.timedelta(minutes=value)
        elif value != 0.0:  # zero starts, then times every collective out at once
            assert not starts[value], value
    for value in TIMEOUTS_ACCEPTED:
        assert "dist-env-timeout-value" not in _timeout_findings(value), value
        assert starts[value], value


# -- information exposure ---------------------------------------------------------------------------------

def test_environment_values_are_redacted_to_their_tokens() -> None:
    secrets = EnvSecrets()
    config, missing = resolve_config({"a": "${TOKEN}", "b": "x-$SHORT"}, {"TOKEN": "s3cr3t-value", "SHORT": "1"},
                                     secrets=secrets)
    assert config == {"a": "s3cr3t-value", "b": "x-1"} and not missing
    assert secrets.redact("unknown strategy 's3cr3t-value'") == "unknown strategy '${TOKEN}'"
    assert secrets.redact("tp 1") == "tp 1"  # a value too short to be a secret is left alone


def test_a_base_recipe_that_is_not_a_recipe_is_refused_without_echoing_it(tmp_path: Path) -> None:
    from automodel_dist.compiler import compile_intent

    (tmp_path / "keys.yaml").write_text("api_key: sk-live-0123456789\n")
    (tmp_path / "intent.yaml").write_text(INTENT + "base_recipe: keys.yaml\n")
    with pytest.raises(InputError, match="not an AutoModel recipe") as caught:
        compile_intent(tmp_path / "intent.yaml")
    assert "sk-live" not in str(caught.value) and "api_key" not in str(caught.value)


def test_a_recipe_size_from_the_environment_is_refused_by_its_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AMD_TEST_SECRET_SIZE", "987654321987")
    recipe = {"distributed": {"strategy": "fsdp2", "tp_size": "${AMD_TEST_SECRET_SIZE}"}}
    with pytest.raises(InputError, match=r"distributed.tp_size is \$\{AMD_TEST_SECRET_SIZE\}, above the limit"):
        validate_recipe(recipe, world_size=8)

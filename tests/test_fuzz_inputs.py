"""Fuzzing the ways in: intents, recipes, overrides, raw YAML, sbatch scripts and the Python API.

Whatever comes in, the CLI ends with exit 0, 1 or 2 and a message (never a traceback), within seconds;
the API returns or raises the package's own error. Runs in-process through `cli.main`. CI replays the same
examples every run (tests/conftest.py loads the derandomized profile when CI is set).
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML
from time_bound import bounded

import automodel_dist as ad
from automodel_dist.cli import main
from automodel_dist.errors import AutomodelDistError

# 40 examples per test in a normal run; AMD_FUZZ_EXAMPLES=1000 explores further by hand.
FUZZ = settings(max_examples=int(os.environ.get("AMD_FUZZ_EXAMPLES", "40")), deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

INTENT: dict[str, Any] = {"model": "Qwen/Qwen3-8B", "hardware": {"gpu": "h100-80gb", "nodes": 1},
                          "training": {"seq_length": 4096, "global_batch_size": 64}}
RECIPE: dict[str, Any] = {"recipe": "TrainFinetuneRecipeForNextTokenPrediction",
                          "model": {"pretrained_model_name_or_path": "Qwen/Qwen3-8B"},
                          "distributed": {"strategy": "fsdp2", "tp_size": 1},
                          "step_scheduler": {"global_batch_size": 64, "local_batch_size": 8},
                          "dist_env": {"timeout_minutes": 10},
                          "optimizer": {"_target_": "torch.optim.AdamW", "lr": 1.0e-5}}
MB_OVERRIDES: dict[str, Any] = {"model": {"tensor_model_parallel_size": 2, "sequence_parallel": True},
                                "train": {"micro_batch_size": 1, "global_batch_size": 64}}
INTENT_KEYS = ["model", "hardware.gpu", "hardware.nodes", "hardware.gpus_per_node", "training.seq_length",
               "training.global_batch_size", "training.task", "training.precision", "training.packed_sequences",
               "training.peft.rank", "parallelism.tp", "parallelism.pp", "parallelism.vpp", "parallelism.cp",
               "parallelism.ep", "parallelism.dp_replicate", "parallelism.strategy",
               "parallelism.activation_checkpointing", "parallelism.local_batch_size",
               "parallelism.micro_batch_size", "objective", "memory_headroom", "base_recipe", "launcher",
               "model.num_layers", "model.hidden_size", "model.preset", "extra"]
RECIPE_KEYS = ["distributed.strategy", "distributed.tp_size", "distributed.pp_size", "distributed.cp_size",
               "distributed.ep_size", "distributed.dp_size", "distributed.dp_replicate_size",
               "distributed.sequence_parallel", "distributed.activation_checkpointing",
               "distributed.pipeline.pp_schedule", "distributed.pipeline.pp_microbatch_size",
               "distributed.pipeline.layers_per_stage", "step_scheduler.global_batch_size",
               "step_scheduler.local_batch_size", "dist_env.timeout_minutes", "model.pretrained_model_name_or_path",
               "model.num_hidden_layers", "model.config.num_hidden_layers", "model.backend.dispatcher",
               "packed_sequence.packed_sequence_size", "checkpoint.checkpoint_dir", "separate_meshes",
               "teacher_distributed.dp_size", "recipe", "distributed"]

SPECIALS = st.sampled_from([0, -1, 1, 2, 3, 7, 8, 64, 10**6, 10**12, 10**30, 2**63, 2.0, 1e3, 0.5, -0.0,
                            math.nan, math.inf, -math.inf, 1e308, True, False, None, "", " ", "auto", "none",
                            "8", "2.0", "1e3", "fsdp2", "Qwen/Qwen3-8B ", " h100-80gb", "a\nb", "\x00",
                            "${AMD_FUZZ_UNSET}", "${AMD_FUZZ_SET}", "$HOME", "/dev/zero", "/etc/passwd", ".",
                            "x" * 5000, [], {}, [1, 2], [2.0], ["auto"], {"rank": 8}, {"preset": "qwen3-8b"}])
LEAVES = st.one_of(SPECIALS, st.integers(), st.floats(allow_nan=True), st.text(max_size=20), st.booleans(),
                   st.none())
VALUES = st.recursive(LEAVES, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                      max_leaves=12)


def _set(data: dict[str, Any], dotted: str, value: Any) -> None:
    node = data
    *parents, last = dotted.split(".")
    for part in parents:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node[last] = value


def _mutated(base: dict[str, Any], changes: list[tuple[str, Any]]) -> dict[str, Any]:
    data = YAML(typ="safe", pure=True).load(_dump(base))  # a deep copy
    for dotted, value in changes:
        _set(data, dotted, value)
    return data


def _dump(data: Any) -> str:
    import io

    stream = io.StringIO()
    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = False
    yaml.dump(data, stream)
    return stream.getvalue()


def _run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with bounded(argv):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse's usage errors exit 2
            code = exc.code if isinstance(exc.code, int) else 2
    out, err = capsys.readouterr()
    assert code in (0, 1, 2), (argv, out[-2000:], err[-2000:])
    assert "Traceback" not in err
    return code, err


def _write(folder: Path, name: str, text: str) -> str:
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return str(path)


@FUZZ
@given(changes=st.lists(st.tuples(st.sampled_from(INTENT_KEYS), VALUES), min_size=1, max_size=3))
def test_fuzzed_intents_exit_cleanly(changes: list[tuple[str, Any]], tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AMD_FUZZ_SET", "fsdp2")
    path = _write(tmp_path, "intent.yaml", _dump(_mutated(INTENT, changes)))
    _run_cli(["compile", path], capsys)


PINS = st.one_of(st.just("auto"), st.sampled_from([1, 2, 3, 4, 8, 16, 64]),
                 st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=3, unique=True))
PLAUSIBLE = st.fixed_dictionaries({
    "model": st.sampled_from(["Qwen/Qwen3-8B", "qwen3-30b-a3b", "llama-3.2-1b", "mixtral-8x7b", "gpt-oss-20b",
                              "deepseek-v3", {"preset": "qwen3-8b", "num_layers": 3}]),
    "hardware": st.fixed_dictionaries({"gpu": st.sampled_from(["h100-80gb", "a100-40gb", "gb200-nvl72", "b200"]),
                                       "nodes": st.sampled_from([1, 2, 3, 16, 1024])}),
    # Not the limits themselves: an intent at every limit at once that nothing fits spends ~10 s in the
    # search for what would make it fit (it reruns the planner ~20 times), past this test's time bound.
    "training": st.fixed_dictionaries({"seq_length": st.sampled_from([1, 7, 4096, 131072, 1 << 20]),
                                       "global_batch_size": st.sampled_from([1, 3, 64, 1 << 16]),
                                       "task": st.sampled_from(["pretrain", "sft", "peft"])}),
    "parallelism": st.fixed_dictionaries({}, optional={name: PINS for name in ("tp", "pp", "vpp", "cp", "ep",
                                                                               "dp_replicate", "local_batch_size",
                                                                               "micro_batch_size")}),
    "memory_headroom": st.sampled_from([0.0, 0.1, 0.99]),
})


@FUZZ
@given(intent=PLAUSIBLE)
def test_fuzzed_plausible_intents_compile_or_say_why(intent: dict[str, Any], tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """Intents that pass the schema reach the planner: whatever the pins, an answer or a reason."""
    path = _write(tmp_path, "intent.yaml", _dump(intent))
    _run_cli(["explain", path, "--format", "json"], capsys)


@FUZZ
@given(changes=st.lists(st.tuples(st.sampled_from(RECIPE_KEYS), VALUES), min_size=1, max_size=3),
       nodes=st.sampled_from(["1", "2", "16", "0", "-1", "100000000", "x"]),
       gpus=st.sampled_from(["8", "4", "1", "1000000000", "2.0"]))
def test_fuzzed_recipes_exit_cleanly(changes: list[tuple[str, Any]], nodes: str, gpus: str, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AMD_FUZZ_SET", "hunter2-fuzz-secret")
    path = _write(tmp_path, "recipe.yaml", _dump(_mutated(RECIPE, changes)))
    _, err = _run_cli(["validate", path, "--nodes", nodes, "--gpus-per-node", gpus, "--format", "json"], capsys)
    assert "hunter2-fuzz-secret" not in err


OVERRIDE_VALUES = st.one_of(
    st.sampled_from(["2.0", "1e3", ".nan", ".inf", "&a [*a]", "[1, 2, 1000000]", "{rank: 8}", "null", "'x: y'",
                     "[", "}", "*a", "!!python/object:os.system", "9" * 5000, "[" * 300, "auto", "fsdp2", "0", "-3",
                     "100000000", "Qwen/Qwen3-8B", "/dev/zero", "\x00", "a\tb"]),
    st.text(max_size=30))


@FUZZ
@given(overrides=st.lists(st.tuples(st.sampled_from([*INTENT_KEYS, "a..b", "=", "hardware", "x.y.z"]),
                                    OVERRIDE_VALUES), min_size=1, max_size=3))
def test_fuzzed_overrides_exit_cleanly(overrides: list[tuple[str, str]], tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, "intent.yaml", _dump(INTENT))
    _run_cli(["compile", path, *(f"{key}={value}" for key, value in overrides)], capsys)


YAML_PIECES = st.sampled_from(["a", "model", "distributed", ": ", ":", "\n", "  ", "- ", "[", "]", "{", "}", ",",
                               "&x ", "*x", "<<: ", "? ", "!!int ", "!!python/name:os.system ", "'", '"', "#",
                               "---\n", "...\n", "1", "2.0", ".nan", "9" * 50, "\t", "|\n", ">\n", "%YAML 1.1\n",
                               "\x00", "\ufeff", "tp_size: ", "strategy: fsdp2", "${A}"])


@FUZZ
@given(pieces=st.lists(YAML_PIECES, max_size=40), command=st.sampled_from(["validate", "compile"]))
def test_fuzzed_yaml_text_exits_cleanly(pieces: list[str], command: str, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, "input.yaml", "".join(pieces))
    _run_cli([command, path], capsys)


SBATCH_LINES = st.sampled_from(["#!/bin/bash", "#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1",
                                 "#SBATCH --ntasks-per-node=8", "#SBATCH --signal=USR1@120",
                                 "#SBATCH --gpus-per-node=8",
                                 "export HF_HOME=/tmp/hf", "export NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN=8",
                                 "srun torchrun --nproc-per-node 8 -m nemo_automodel.cli.app recipe.yaml",
                                 "srun bash -c 'torchrun $(", "if [ x ]; then", "fi", "\x00", "\t\t", "'", '"',
                                 "#SBATCH " + "x" * 3000, "exec python -c 'import os'", ""])


@FUZZ
@given(lines=st.lists(st.one_of(SBATCH_LINES, st.text(max_size=40)), max_size=12))
def test_fuzzed_sbatch_scripts_exit_cleanly(lines: list[str], tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    recipe = _write(tmp_path, "recipe.yaml", _dump(RECIPE))
    script = _write(tmp_path, "launch.sbatch", "\n".join(lines) + "\n")
    _run_cli(["validate", recipe, "--nodes", "2", "--sbatch", script], capsys)


API_ARGS = st.one_of(VALUES, st.sampled_from([Path("/dev/zero"), Path("missing.yaml"), b"bytes", object(), 1 + 2j,
                                              "a\x00b.yaml", "model: [\n", "/etc/passwd"]))


def _self_referencing() -> dict[str, Any]:
    data: dict[str, Any] = dict(INTENT)
    data["parallelism"] = data
    return data


API_CALLS: list[tuple[str, Callable[..., Any], dict[str, Any]]] = [
    ("compile_intent", ad.compile_intent, {"source": INTENT}),
    ("estimate", ad.estimate, {"source": {**INTENT, "parallelism": {"tp": 1, "pp": 1, "cp": 1, "ep": 1,
                                                                    "dp_replicate": 1, "strategy": "fsdp2"}}}),
    ("validate_recipe", ad.validate_recipe, {"source": RECIPE, "world_size": 8}),
    ("compile_intent", ad.compile_intent, {"source": INTENT, "target": "megatron-bridge"}),
    ("estimate", ad.estimate, {"source": {**INTENT, "parallelism": {"tp": 1, "pp": 1, "cp": 1, "micro_batch_size": 1,
                                                                    "activation_checkpointing": False}},
                               "target": "megatron-bridge"}),
    ("explain", ad.explain_intent, {"source": INTENT, "target": "megatron-bridge", "fmt": "json"}),
    ("validate_recipe", ad.validate_recipe, {"source": MB_OVERRIDES, "world_size": 8, "target": "megatron-bridge",
                                             "recipe_function": "qwen3_8b_pretrain_config"}),
]


@FUZZ
@given(call=st.sampled_from(API_CALLS), argument=st.sampled_from(["source", "overrides", "world_size",
                                                                  "gpus_per_node", "model", "gpu", "sbatch",
                                                                  "target", "recipe_function", "top", "fmt"]),
       value=API_ARGS)
def test_fuzzed_api_calls_raise_the_packages_errors(call: tuple[str, Callable[..., Any], dict[str, Any]],
                                                    argument: str, value: Any) -> None:
    _, function, kwargs = call
    if argument not in function.__code__.co_varnames[:function.__code__.co_argcount
                                                       + function.__code__.co_kwonlyargcount]:
        argument = "source"
    with bounded((function.__name__, argument)), contextlib.suppress(AutomodelDistError):
        function(**{**kwargs, argument: value})


@pytest.mark.parametrize(("call", "kwargs"), [
    (ad.compile_intent, {"source": INTENT, "overrides": None}),
    (ad.compile_intent, {"source": INTENT, "overrides": [1]}),
    (ad.compile_intent, {"source": INTENT, "overrides": [None]}),
    (ad.compile_intent, {"source": INTENT, "overrides": "hardware.nodes=2"}),
    (ad.compile_intent, {"source": "a\x00b.yaml"}),
    (ad.compile_intent, {"source": _self_referencing()}),
    (ad.validate_recipe, {"source": RECIPE, "world_size": 8, "gpu": "nope"}),
    (ad.validate_recipe, {"source": RECIPE, "world_size": 8, "sbatch": 5}),
    (ad.validate_recipe, {"source": RECIPE, "world_size": 8, "model": {"preset": "qwen3-8b", "x": {}}}),
    (ad.build_meshes, {"source": RECIPE, "world_size": 8, "gpu": "nope"}),
    (ad.build_meshes, {"source": RECIPE, "world_size": 8, "nvlink_domain": -1}),
    (ad.build_meshes, {"source": RECIPE, "world_size": 8, "nvlink_domain": 2.5}),
])
def test_wrong_typed_api_calls_raise_input_errors(call: Callable[..., Any], kwargs: dict[str, Any]) -> None:
    from automodel_dist.errors import InputError

    with pytest.raises(InputError):
        call(**kwargs)


def test_build_meshes_takes_a_gpu_preset_name_as_validate_does() -> None:
    report = ad.build_meshes(RECIPE, world_size=8, gpu="h100-80gb")
    assert report.ok
    assert ad.validate_recipe(RECIPE, world_size=8, gpu="h100-80gb").ok

"""Hostile and broken inputs (issue: hangs, blow-ups, tracebacks, information exposure), as CLI cases.

`build_cases(folder)` writes each case's files into `folder` and returns the command lines. The regression
test runs them in-process (tests/test_hostile_inputs.py); benchmarks/hostile_inputs.py runs them as
subprocesses and prints each exit code and wall time. Each case says the exit code it must give and a
piece of text the message must hold (the place: file:line:col, the override, or the dotted key).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

INTENT = """model: Qwen/Qwen3-8B
hardware:
  gpu: h100-80gb
  nodes: 1
training:
  seq_length: 4096
  global_batch_size: 64
"""
RECIPE = """recipe: TrainFinetuneRecipeForNextTokenPrediction
model:
  pretrained_model_name_or_path: Qwen/Qwen3-8B
distributed:
  strategy: fsdp2
  tp_size: 1
"""
SECRET = "hunter2-do-not-print"


@dataclass(frozen=True)
class HostileCase:
    """One command line, the exit code it must end with and text its error message must contain."""

    name: str
    argv: tuple[str, ...]
    exit_code: int
    where: str
    env: dict[str, str] = field(default_factory=dict)
    needs_torch: bool = False
    must_not_print: str | None = None


def _alias_bomb() -> str:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 10)]
    return INTENT + "\n".join(lines) + "\n"


def _hf_config(layers: int) -> str:
    return json.dumps({"model_type": "llama", "num_hidden_layers": layers, "hidden_size": 4096,
                       "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
                       "vocab_size": 128256})


def build_cases(folder: Path) -> list[HostileCase]:
    """Write every case's files under `folder` and return the cases (paths inside `folder`)."""
    folder.mkdir(parents=True, exist_ok=True)

    def write(name: str, text: str) -> str:
        path = folder / name
        path.write_text(text, encoding="utf-8")
        return str(path)

    intent = write("intent.yaml", INTENT)
    recipe = write("recipe.yaml", RECIPE)
    fifo = folder / "pipe.yaml"
    if not fifo.exists():
        os.mkfifo(fifo)
    big_model = folder / "huge-model"
    big_model.mkdir(exist_ok=True)
    (big_model / "config.json").write_text(_hf_config(10**12), encoding="utf-8")
    huge = write("huge.yaml", INTENT + "x: [" + ", ".join(["1"] * 100_000) + "]\n")  # ~300 KB
    cases = [
        # 4. hangs and blow-ups
        HostileCase("fifo intent", ("compile", str(fifo)), 2, str(fifo)),
        HostileCase("fifo recipe", ("validate", str(fifo)), 2, str(fifo)),
        HostileCase("/dev/zero recipe", ("validate", "/dev/zero"), 2, "/dev/zero"),
        HostileCase("fifo --sbatch", ("validate", recipe, "--sbatch", str(fifo)), 2, str(fifo)),
        HostileCase("fifo dry-run", ("dry-run", str(fifo), "--nodes", "1"), 2, str(fifo), needs_torch=True),
        HostileCase("recipe model path /dev/zero",
                    ("validate", write("zero-model.yaml", RECIPE.replace("Qwen/Qwen3-8B", "/dev/zero"))), 2,
                    "/dev/zero"),
        HostileCase("fifo model path", ("compile", intent, f"model={fifo}"), 2, str(fifo)),
        HostileCase("alias bomb intent", ("compile", write("bomb.yaml", _alias_bomb())), 2, "bomb.yaml:"),
        HostileCase("alias bomb recipe", ("validate", str(folder / "bomb.yaml")), 2, "bomb.yaml:"),
        HostileCase("an 80 KB _target_ path", ("validate", write("long-target.yaml", RECIPE + "optimizer:\n  _target_: "
                                                                "nemo_automodel." + "a." * 40_000 + "b\n")),
                    1, "optimizer._target_"),
        HostileCase("300 KB intent", ("compile", huge), 2, "huge.yaml"),
        HostileCase("15,000 keys in an intent",
                    ("compile", write("wide.yaml", INTENT + "x:\n" + "".join(f"  k{i}: 1\n" for i in range(15_000)))),
                    2, "wide.yaml:"),
        HostileCase("30,000 values in a recipe",
                    ("validate", write("long.yaml", RECIPE + "x: [" + ",".join(["1"] * 30_000) + "]\n")), 2,
                    "long.yaml:"),
        HostileCase("hardware.nodes=100000000", ("compile", intent, "hardware.nodes=100000000"), 2,
                    "override 'hardware.nodes=100000000'"),
        HostileCase("dry-run --nodes 100000", ("dry-run", recipe, "--nodes", "100000"), 2, "world size",
                    needs_torch=True),
        HostileCase("config.json with 10**12 layers", ("compile", intent, f"model={big_model}"), 2,
                    "num_hidden_layers"),
        HostileCase("recipe model with 10**12 layers",
                    ("validate", write("huge-model.yaml", RECIPE.replace("Qwen/Qwen3-8B", str(big_model)))), 2,
                    "num_hidden_layers"),
        # 5. tracebacks
        HostileCase("tp=2.0", ("compile", intent, "parallelism.tp=2.0"), 2, "override 'parallelism.tp=2.0'"),
        HostileCase("pp=1e3", ("compile", intent, "parallelism.pp=1e3"), 2, "override 'parallelism.pp=1e3'"),
        HostileCase("vpp: 2.0 in the file", ("compile", write("vpp.yaml", INTENT + "parallelism:\n  vpp: 2.0\n")), 2,
                    "vpp.yaml:9:"),
        HostileCase("nodes=2.0", ("compile", intent, "hardware.nodes=2.0"), 2, "override 'hardware.nodes=2.0'"),
        HostileCase("gpus_per_node=8.0", ("compile", intent, "hardware.gpus_per_node=8.0"), 2,
                    "override 'hardware.gpus_per_node=8.0'"),
        HostileCase("recipe tp_size: 2.0",
                    ("validate", write("tp-float.yaml", RECIPE.replace("tp_size: 1", "tp_size: 2.0"))), 2,
                    "tp-float.yaml:6:"),
        HostileCase("nesting 400 deep", ("compile", write("deep.yaml", INTENT + "x: " + "[" * 400 + "]" * 400 + "\n")),
                    2, "deep.yaml:8:"),
        HostileCase("nesting 400 deep recipe", ("validate", str(folder / "deep.yaml")), 2, "deep.yaml:8:"),
        HostileCase("list as a key", ("compile", write("listkey.yaml", INTENT + "? [1, 2]\n: 3\n")), 2,
                    "listkey.yaml:8:"),
        HostileCase("mapping as a key", ("validate", write("mapkey.yaml", RECIPE + "? {a: 1}\n: 3\n")), 2,
                    "mapkey.yaml:7:"),
        HostileCase("5000-digit integer",
                    ("compile", write("bigint.yaml", INTENT.replace("64", "9" * 5000))), 2, "bigint.yaml:7:"),
        HostileCase("recursive alias override", ("compile", intent, "parallelism.tp=&a [*a]"), 2,
                    "override 'parallelism.tp=&a [*a]'"),
        HostileCase("recursive alias in a file", ("validate", write("cycle.yaml", RECIPE + "x: &a [1, *a]\n")), 2,
                    "cycle.yaml:7:"),
        HostileCase("dry-run --gpus-per-node 1000000000",
                    ("dry-run", recipe, "--nodes", "1", "--gpus-per-node", "1000000000"), 2, "GPUs per node",
                    needs_torch=True),
        HostileCase("validate --nodes 100000000", ("validate", recipe, "--nodes", "100000000"), 2, "world size"),
        # 6. start-up failures validate must catch (the timeout; the sbatch content rules are launch's)
        *[HostileCase(f"timeout_minutes: {value}",
                      ("validate", write(f"timeout-{i}.yaml", RECIPE + f"dist_env:\n  timeout_minutes: {value}\n")),
                      1, f"timeout-{i}.yaml:8:3") for i, value in enumerate((".nan", ".inf", "1e30", "-5"))],
        # 7. information exposure
        HostileCase("base_recipe: /etc/shadow",
                    ("compile", write("shadow.yaml", INTENT + "base_recipe: /etc/shadow\n")), 2, "/etc/shadow"),
        HostileCase("base_recipe: a non-recipe mapping",
                    ("compile", write("keys.yaml", INTENT + "base_recipe: secrets.yaml\n")), 2, "secrets.yaml",
                    must_not_print=SECRET),
        HostileCase("${SECRET_TOKEN} as strategy",
                    ("validate", write("env.yaml", RECIPE.replace("fsdp2", "${SECRET_TOKEN}"))), 1,
                    "env.yaml:5:", env={"SECRET_TOKEN": SECRET}, must_not_print=SECRET),
        HostileCase("${SECRET_TOKEN} as tp_size",
                    ("validate", write("env-tp.yaml", RECIPE.replace("tp_size: 1", "tp_size: ${SECRET_TOKEN}"))), 2,
                    "env-tp.yaml:6:", env={"SECRET_TOKEN": SECRET}, must_not_print=SECRET),
        # 8. exit 0 with nonsense
        HostileCase("global_batch_size: 10**30", ("compile", intent, f"training.global_batch_size={10**30}"), 2,
                    "override 'training.global_batch_size="),
        HostileCase("recipe global_batch_size: 10**30",
                    ("validate", write("gbs.yaml", RECIPE + f"step_scheduler:\n  global_batch_size: {10**30}\n")), 2,
                    "gbs.yaml:8:3"),
        HostileCase("model with a trailing space",
                    ("compile", write("space.yaml", INTENT.replace("Qwen/Qwen3-8B", '"Qwen/Qwen3-8B "'))), 2,
                    "space.yaml:1:"),
        HostileCase("memory_headroom: .nan", ("compile", intent, "memory_headroom=.nan"), 2,
                    "override 'memory_headroom=.nan'"),
        HostileCase("a key twice in an intent", ("compile", write("twice.yaml", "model: Qwen/Qwen3-8B\n" + INTENT)), 2,
                    "twice.yaml:1:1"),
    ]
    cases += _megatron_cases(write)
    write("secrets.yaml", f"api_key: {SECRET}\npassword: {SECRET}\n")
    return cases


def _megatron_cases(write: Callable[[str, str], str]) -> list[HostileCase]:
    """Broken Megatron-Bridge override files (validate --target megatron-bridge): Hydra lists and YAML files."""
    def mb(name: str, text: str, recipe: str = "qwen3_30b_a3b_pretrain_config") -> tuple[str, ...]:
        return ("validate", write(name, text), "--target", "megatron-bridge", "--recipe", recipe, "--nodes", "2")

    return [
        HostileCase("mb: empty override file", mb("mb-empty.txt", "# nothing\n"), 2, "mb-empty.txt"),
        HostileCase("mb: key= with no value", mb("mb-novalue.txt", "model.tensor_model_parallel_size=\n"), 2,
                    "mb-novalue.txt:1:1"),
        HostileCase("mb: spaces around =",
                    mb("mb-spaces.txt", "train.micro_batch_size=1\nmodel.tensor_model_parallel_size = 2\n"), 2,
                    "mb-spaces.txt:2:1"),
        HostileCase("mb: ~key deletion", mb("mb-tilde.txt", "~model.tensor_model_parallel_size\n"), 2,
                    "mb-tilde.txt:1:1"),
        HostileCase("mb: YAML lines in a Hydra list", mb("mb-mixed.txt", "train.micro_batch_size=1\nmodel:\n  x: 1\n"),
                    2, "mb-mixed.txt:2:1"),
        HostileCase("mb: a value in a section's place", mb("mb-model.yaml", "model: 5\n"), 1, "mb-model.yaml:1:1"),
        HostileCase("mb: a dotted YAML key", mb("mb-dotted.yaml", "model.tensor_model_parallel_size: 2\n"), 2,
                    "mb-dotted.yaml:1:1"),
        HostileCase("mb: a list for a size", mb("mb-list.yaml", "model:\n  tensor_model_parallel_size: [2]\n"), 2,
                    "mb-list.yaml:2:3"),
        HostileCase("mb: peft.dim without +", mb("mb-peft.txt", "checkpoint.pretrained_checkpoint=/ckpt\npeft.dim=16\n",
                                                 "llama31_8b_peft_config"), 1, "mb-peft.txt:2:1"),
        HostileCase("mb: + on a key with a value", mb("mb-plus.txt", "+model.tensor_model_parallel_size=2\n"), 1,
                    "mb-plus.txt:1:1"),
        HostileCase("mb: a key twice in a Hydra list",
                    mb("mb-twice.txt", "train.micro_batch_size=1\ntrain.micro_batch_size=2\n"), 0, "mb-twice.txt:2:1"),
        HostileCase("mb: unknown precision recipe", mb("mb-precision.yaml", "mixed_precision: bf16_mixd\n"), 1,
                    "mb-precision.yaml:1:1"),
    ]

"""Intent loading: defaults, pins, overrides, resolution, and every kind of bad input as a located InputError."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from automodel_dist.catalog.hardware import get_gpu
from automodel_dist.cli import main
from automodel_dist.errors import InputError
from automodel_dist.intent import load_intent, parse_override, pins_from_mapping, resolve_intent
from automodel_dist.problem import Pins

MINIMAL = """\
# yaml-language-server: $schema=../../automodel_dist/data/schemas/intent.schema.json
model: Qwen/Qwen3-30B-A3B
hardware:
  gpu: h100-80gb
training:
  seq_length: 4096
  global_batch_size: 512
"""

LOCATED = re.compile(r"intent\.yaml:\d+:\d+$")


def write(tmp_path: Path, text: str, name: str = "intent.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def error_of(source: object, overrides: tuple[str, ...] = ()) -> InputError:
    with pytest.raises(InputError) as info:
        load_intent(source, overrides)
    return info.value


def located_at(exc: InputError, line: int, col: int) -> bool:
    return bool(exc.where) and exc.where.endswith(f"intent.yaml:{line}:{col}")


# --- defaults -------------------------------------------------------------------------------------

def test_defaults_are_applied(tmp_path: Path) -> None:
    intent = load_intent(write(tmp_path, MINIMAL))
    assert intent.nodes == 1
    assert intent.gpus_per_node == get_gpu("h100-80gb").gpus_per_node == 8
    training = intent.training
    assert (training.task, training.packed_sequences, training.precision, training.peft_rank) == ("sft", False, "bf16",
                                                                                                   None)
    assert (training.seq_length, training.global_batch_size) == (4096, 512)
    assert intent.objective == "throughput" and intent.memory_headroom == 0.1
    assert intent.pins == Pins()
    assert intent.base_recipe is None and intent.launcher is None


def test_gpus_per_node_defaults_to_the_preset_node(tmp_path: Path) -> None:
    intent = load_intent(write(tmp_path, MINIMAL.replace("h100-80gb", "gb200-nvl72")))
    assert intent.gpus_per_node == get_gpu("gb200-nvl72").gpus_per_node == 4


def test_pretrain_packs_by_default_and_an_explicit_choice_wins(tmp_path: Path) -> None:
    pretrain = MINIMAL.replace("training:\n", "training:\n  task: pretrain\n")
    assert load_intent(write(tmp_path, pretrain)).training.packed_sequences is True
    unpacked = pretrain.replace("task: pretrain\n", "task: pretrain\n  packed_sequences: false\n")
    assert load_intent(write(tmp_path, unpacked)).training.packed_sequences is False


def test_peft_gets_rank_16_unless_given(tmp_path: Path) -> None:
    peft = MINIMAL.replace("training:\n", "training:\n  task: peft\n")
    assert load_intent(write(tmp_path, peft)).training.peft_rank == 16
    ranked = peft + "  peft: {rank: 64}\n"
    assert load_intent(write(tmp_path, ranked)).training.peft_rank == 64


# --- pins -----------------------------------------------------------------------------------------

def test_pins_parse_auto_value_and_list(tmp_path: Path) -> None:
    text = MINIMAL + """\
parallelism:
  strategy: [megatron_fsdp, fsdp2]
  tp: 2
  pp: auto
  ep: [8, 4]
  activation_checkpointing: true
  local_batch_size: [1, 2]
"""
    pins = load_intent(write(tmp_path, text)).pins
    assert pins.strategy == ("fsdp2", "megatron_fsdp")
    assert pins.tp == (2,) and pins.pp is None and pins.ep == (4, 8)
    assert pins.activation_checkpointing == ("full",)  # true is AutoModel's spelling of full
    assert pins.local_batch_size == (1, 2)
    assert pins.allows("ep", 8) and not pins.allows("ep", 16) and pins.allows("cp", 16)


def test_pins_from_mapping_treats_missing_as_auto() -> None:
    assert pins_from_mapping({}) == Pins()
    assert pins_from_mapping({"activation_checkpointing": False}).activation_checkpointing == ("off",)


def test_checkpointing_pins_take_modes_and_the_old_booleans() -> None:
    """`off | selective | full`, a list of them, or the booleans older intents wrote (true is full)."""
    assert pins_from_mapping({"activation_checkpointing": "selective"}).activation_checkpointing == ("selective",)
    assert pins_from_mapping({"activation_checkpointing": ["off", "selective"]}).activation_checkpointing == (
        "off", "selective")
    assert pins_from_mapping({"activation_checkpointing": True}).activation_checkpointing == ("full",)
    assert Pins(activation_checkpointing=(True, "full")).activation_checkpointing == ("full",)


@pytest.mark.parametrize(("pin", "why"), [
    ("tp: []", "at least 1"),
    ("tp: 0", "≥ 1"),
    ("ep: [4, 4]", "repeated"),
    ("pp: two", "expected 'auto' or an integer ≥ 1"),
    ("strategy: fsdp", "did you mean 'fsdp2'"),
    ("activation_checkpointing: maybe", "one of 'auto', 'off', 'selective', 'full' or true (full) or false (off)"),
])
def test_bad_pins_are_located_errors(tmp_path: Path, pin: str, why: str) -> None:
    exc = error_of(write(tmp_path, MINIMAL + f"parallelism:\n  {pin}\n"))
    assert located_at(exc, 9, 3)
    assert why in f"{exc.message} {exc.hint}"


# --- overrides ------------------------------------------------------------------------------------

def test_overrides_apply_before_validation(tmp_path: Path) -> None:
    intent = load_intent(write(tmp_path, MINIMAL), ["training.seq_length=8192", "parallelism.tp=[2, 4]",
                                                   "hardware.nodes=2", "launcher={partition: batch}"])
    assert intent.training.seq_length == 8192
    assert intent.pins.tp == (2, 4)
    assert intent.nodes == 2
    assert intent.launcher == {"partition": "batch"}


def test_override_of_a_model_field_turns_an_id_into_a_preset_with_overrides(tmp_path: Path) -> None:
    intent = load_intent(write(tmp_path, MINIMAL), ["model.num_layers=12"])
    assert intent.model_ref == {"preset": "Qwen/Qwen3-30B-A3B", "num_layers": 12}
    assert resolve_intent(intent).model.num_layers == 12


def test_overrides_never_change_the_callers_mapping() -> None:
    source = {"model": "Qwen/Qwen3-8B", "hardware": {"gpu": "h100-80gb"},
              "training": {"seq_length": 4096, "global_batch_size": 64}}
    load_intent(source, ["training.seq_length=8192"])
    assert source["training"]["seq_length"] == 4096


@pytest.mark.parametrize(("override", "why"), [
    ("training.seq_length", "expected dotted.key=value"),
    ("=3", "expected dotted.key=value"),
    ("training..seq_length=3", "expected dotted.key=value"),
    ("training.seq_length=", "no value"),
    ("parallelism.tp=[1, 2", "not valid YAML"),
    ("training.seq_length.x=1", "not a mapping"),
])
def test_a_bad_override_is_named(tmp_path: Path, override: str, why: str) -> None:
    exc = error_of(write(tmp_path, MINIMAL), (override,))
    assert exc.where == f"override {override!r}"
    assert why in exc.message and exc.hint


def test_a_schema_error_from_an_override_points_at_the_override(tmp_path: Path) -> None:
    exc = error_of(write(tmp_path, MINIMAL), ("training.seq_lenght=8192",))
    assert exc.where == "override 'training.seq_lenght=8192'"
    assert "did you mean 'seq_length'" in exc.hint
    exc = error_of(write(tmp_path, MINIMAL), ("training.seq_length=-1",))
    assert exc.where == "override 'training.seq_length=-1'" and "≥ 1" in exc.message


@pytest.mark.parametrize(("overrides", "blamed", "key"), [
    (("foo.bar=1",), "foo.bar=1", "foo"),                      # the unknown key is one the override created
    (("parallelism.tp.x=2",), "parallelism.tp.x=2", "parallelism.tp"),  # `parallelism:` is not in the file
    (("training.foo.bar=1",), "training.foo.bar=1", "training.foo"),
    (("foo.a=1", "foo.b=2"), "foo.a=1", "foo"),                # the override that created the mapping
])
def test_a_schema_error_on_a_key_an_override_created_names_the_override(
        tmp_path: Path, overrides: tuple[str, ...], blamed: str, key: str) -> None:
    exc = error_of(write(tmp_path, MINIMAL), overrides)
    assert exc.where == f"override {blamed!r}" and exc.message.startswith(f"{key}: ")


def test_an_error_in_the_file_on_the_path_of_an_override_stays_the_files(tmp_path: Path) -> None:
    """`training` comes from the file: its own error is located there, whatever an override adds under it."""
    path = write(tmp_path, MINIMAL.replace("training:", "training:\n  bogus: 1"))
    exc = error_of(path, ("training.seq_length=8192",))
    assert exc.where.startswith(f"{path}:") and "bogus" in exc.message


def test_parse_override_reads_yaml_values() -> None:
    assert parse_override("a.b=8").value == 8
    assert parse_override("a=[1, 2]").value == [1, 2]
    assert parse_override("a={rank: 8}").value == {"rank": 8}
    assert parse_override("a=true").value is True
    assert parse_override("a.b_c=x:y").value == "x:y"


# --- errors: every kind is an InputError with a place and a fix ----------------------------------

@pytest.mark.parametrize(("text", "line", "col", "what"), [
    (MINIMAL.replace("nodes", "x") + "hardware2: 1\n", 8, 1, "unknown key 'hardware2'"),
    (MINIMAL.replace("  seq_length: 4096", "  seq_length: abc"), 6, 3, "expected an integer, got 'abc'"),
    (MINIMAL.replace("  gpu: h100-80gb", "  gpu: h100-80gb\n  nodes: -2"), 5, 3, "must be ≥ 1, got -2"),
    (MINIMAL.replace("hardware:\n  gpu: h100-80gb", "hardware:\n  - gpu: h100-80gb"), 3, 1, "expected a mapping"),
    (MINIMAL.replace("training:", "training:\n  task: sft\n  precision: fp16"), 7, 3, "'fp16' is not one of"),
    (MINIMAL + "memory_headroom: 1.5\n", 8, 1, "must be < 1"),
    (MINIMAL + "launcher:\n  time: 4h\n", 9, 3, "HH:MM:SS"),
    (MINIMAL.replace("  global_batch_size: 512\n", ""), 5, 1, "missing required key 'global_batch_size'"),
])
def test_schema_errors_are_located_with_a_fix(tmp_path: Path, text: str, line: int, col: int, what: str) -> None:
    exc = error_of(write(tmp_path, text))
    assert located_at(exc, line, col), exc.where
    assert what in exc.message
    assert exc.hint


@pytest.mark.parametrize("limit", ["240", "30:00", "04:00:00", "100:00:00", "1-12", "1-12:30", "1-00:00:00"])
def test_launcher_time_takes_every_form_sbatch_accepts(tmp_path: Path, limit: str) -> None:
    """sbatch reads minutes, MM:SS, HH:MM:SS and D-HH[:MM[:SS]]; a limit a cluster user writes daily must load."""
    intent = load_intent(write(tmp_path, MINIMAL + f"launcher:\n  time: '{limit}'\n"))
    assert intent.launcher["time"] == limit


@pytest.mark.parametrize("limit", ["4h", "1-", "-1", "1:60", "04:00:00:00", "1-2-3"])
def test_launcher_time_refuses_what_sbatch_would(tmp_path: Path, limit: str) -> None:
    exc = error_of(write(tmp_path, MINIMAL + f"launcher:\n  time: '{limit}'\n"))
    assert "launcher.time" in exc.message + exc.where and "D-HH:MM:SS" in exc.message


@pytest.mark.parametrize("name", ["SHARED_DIR", "RUN_DIR", "RECIPE", "CACHE_DIR", "OVERRIDES", "MASTER_ADDR"])
def test_launcher_env_cannot_replace_the_scripts_own_variables(tmp_path: Path, name: str) -> None:
    exc = error_of(write(tmp_path, MINIMAL + f"launcher:\n  env:\n    {name}: /a,/b:/c\n"))
    assert located_at(exc, 10, 5) and "sets itself" in exc.message


@pytest.mark.parametrize("name", ["SHARED_DIRS", "MY_RUN_DIR", "NCCL_DEBUG", "MASTER_PORT"])
def test_launcher_env_takes_other_names(tmp_path: Path, name: str) -> None:
    intent = load_intent(write(tmp_path, MINIMAL + f"launcher:\n  env:\n    {name}: '1'\n"))
    assert intent.launcher["env"] == {name: "1"}


def test_unknown_key_suggests_the_nearest(tmp_path: Path) -> None:
    exc = error_of(write(tmp_path, MINIMAL + "  precison: bf16\n"))
    assert located_at(exc, 8, 3)
    assert "unknown key 'precison'" in exc.message
    assert exc.hint.startswith("did you mean 'precision'?")


def test_all_schema_problems_come_in_one_message(tmp_path: Path) -> None:
    text = MINIMAL.replace("seq_length: 4096", "seq_length: -1").replace("h100-80gb", "h100-80gb\n  nodez: 2") \
        + "objective: speed\n"
    exc = error_of(write(tmp_path, text))
    assert exc.message.startswith("3 problems in the intent:")
    for key in ("hardware.nodez", "training.seq_length", "objective"):
        assert key in exc.message
    assert LOCATED.search(exc.where) and exc.where.endswith(":5:3")  # the first, in file order
    assert exc.message.count("hint:") == 3


@pytest.mark.parametrize(("text", "what"), [
    ("", "intent is empty"),
    ("   \n# only a comment\n", "intent is empty"),
    ("model: [unclosed\n", "YAML syntax error"),
    ("- model: x\n", "must be a YAML mapping"),
    ("just a string\n", "must be a YAML mapping"),
])
def test_unusable_files(tmp_path: Path, text: str, what: str) -> None:
    exc = error_of(write(tmp_path, text))
    assert what in exc.message
    assert exc.where and exc.where.startswith(str(tmp_path / "intent.yaml")) and exc.hint


def test_unreadable_paths(tmp_path: Path) -> None:
    missing = error_of(str(tmp_path / "nope.yaml"))
    assert "not found" in missing.message and missing.hint
    folder = tmp_path / "dir.yaml"
    folder.mkdir()
    assert "directory" in error_of(folder).message
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"\xff\xfe\x00model")
    assert "cannot read" in error_of(binary).message


def test_peft_block_without_peft_task(tmp_path: Path) -> None:
    exc = error_of(write(tmp_path, MINIMAL + "  peft: {rank: 8}\n"))
    assert located_at(exc, 8, 3) and "task: peft" in exc.hint


def test_more_gpus_per_node_than_the_node_has(tmp_path: Path) -> None:
    exc = error_of(write(tmp_path, MINIMAL.replace("h100-80gb", "h100-80gb\n  gpus_per_node: 16")))
    assert located_at(exc, 5, 3) and "has 8 GPUs" in exc.message


def test_contradicting_pins(tmp_path: Path) -> None:
    exc = error_of(write(tmp_path, MINIMAL + "parallelism:\n  pp: 1\n  vpp: 2\n"))
    assert located_at(exc, 10, 3) and "pp > 1" in exc.hint
    exc = error_of(write(tmp_path, MINIMAL + "parallelism:\n  local_batch_size: 2\n  micro_batch_size: [4, 8]\n"))
    assert located_at(exc, 10, 3)


def test_a_micro_batch_pin_without_a_pipeline_is_bad_input_for_automodel_only(tmp_path: Path) -> None:
    """AutoModel's micro batch is the pipeline's: with pp pinned to 1 the pin would do nothing, so compile and
    estimate say so at its line (exit 2); the Megatron-Bridge target reads it as its forward batch and compiles."""
    from automodel_dist import compile_intent, estimate

    path = write(tmp_path, MINIMAL + "parallelism:\n  pp: 1\n  micro_batch_size: 4\n")
    for call in (compile_intent, estimate):
        with pytest.raises(InputError) as info:
            call(path)
        assert located_at(info.value, 10, 3) and "local_batch_size" in info.value.hint
    assert main(["compile", str(path), "-o", str(tmp_path / "out.yaml")]) == 2
    one = write(tmp_path, MINIMAL + "parallelism:\n  pp: 1\n  micro_batch_size: 1\n", "mb.yaml")
    assert compile_intent(one, target="megatron-bridge").layout.local_batch_size == 1
    # the neighbour: with pp open the pin constrains the pipelined layouts, as documented
    assert compile_intent(write(tmp_path, MINIMAL + "parallelism:\n  micro_batch_size: 1\n")).layout is not None


def test_unknown_gpu_is_located(tmp_path: Path) -> None:
    exc = error_of(write(tmp_path, MINIMAL.replace("h100-80gb", "h100-80g")))
    assert located_at(exc, 4, 3) and "h100-80gb" in str(exc)


def test_base_recipe_is_relative_to_the_intent(tmp_path: Path) -> None:
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "base.yaml").write_text("step_scheduler: {global_batch_size: 8}\n")
    intent = load_intent(write(tmp_path, MINIMAL + "base_recipe: recipes/base.yaml\n"))
    assert intent.base_recipe == tmp_path / "recipes" / "base.yaml"
    exc = error_of(write(tmp_path, MINIMAL + "base_recipe: recipes/missing.yaml\n"))
    assert located_at(exc, 8, 1) and "not found" in exc.message


# --- resolution -----------------------------------------------------------------------------------

def test_resolve_builds_the_problem(tmp_path: Path) -> None:
    text = MINIMAL.replace("h100-80gb", "h100-80gb\n  nodes: 2") + "objective: memory\nmemory_headroom: 0.2\n" \
        + "parallelism:\n  ep: [4, 8]\n"
    problem = resolve_intent(load_intent(write(tmp_path, text)))
    assert problem.model.num_routed_experts == 128
    assert problem.cluster.world_size == 16 and problem.cluster.gpu.name == get_gpu("h100-80gb").name
    assert problem.training.global_batch_size == 512
    assert problem.pins.ep == (4, 8)
    assert (problem.objective, problem.memory_headroom) == ("memory", 0.2)


def test_model_path_is_read_relative_to_the_intent(tmp_path: Path) -> None:
    config = Path(__file__).parent / "fixtures" / "hf_configs" / "llama-3.1-8b" / "config.json"
    (tmp_path / "my-model").mkdir()
    (tmp_path / "my-model" / "config.json").write_text(config.read_text())
    problem = resolve_intent(load_intent(write(tmp_path, MINIMAL.replace("Qwen/Qwen3-30B-A3B", "my-model"))))
    assert (problem.model.num_layers, problem.model.hidden_size) == (32, 4096)


@pytest.mark.parametrize("model", ["./nonexistent/config.json", "empty-folder"])
def test_a_missing_model_config_is_located_at_the_model_key(tmp_path: Path, model: str) -> None:
    """The missing file has no line to point at: the error is the intent's `model:`, with the path it named."""
    (tmp_path / "empty-folder").mkdir()
    path = write(tmp_path, MINIMAL.replace("Qwen/Qwen3-30B-A3B", model))
    with pytest.raises(InputError) as info:
        resolve_intent(load_intent(path))
    exc = info.value
    assert located_at(exc, 2, 1) and exc.message.startswith("model: model config not found: ")
    assert model in exc.message and exc.hint


def test_a_rule_between_model_fields_is_located_at_the_field_the_intent_wrote(tmp_path: Path) -> None:
    """33 query heads against the preset's 8 KV heads: the error points at num_attention_heads (line 4), the key
    written, and says the two must divide; not at num_key_value_heads, which the intent never wrote."""
    text = MINIMAL.replace("model: Qwen/Qwen3-30B-A3B", "model:\n  preset: qwen3-8b\n  num_attention_heads: 33")
    with pytest.raises(InputError) as info:
        resolve_intent(load_intent(write(tmp_path, text)))
    assert located_at(info.value, 4, 3)
    assert info.value.message == "model.num_attention_heads: num_key_value_heads 8 must divide num_attention_heads 33"


def test_unknown_model_and_dense_ep_are_located(tmp_path: Path) -> None:
    with pytest.raises(InputError) as info:
        resolve_intent(load_intent(write(tmp_path, MINIMAL.replace("Qwen/Qwen3-30B-A3B", "Qwen/Qwen9"))))
    assert located_at(info.value, 2, 1)
    dense = MINIMAL.replace("Qwen/Qwen3-30B-A3B", "Qwen/Qwen3-8B") + "parallelism:\n  ep: 8\n"
    with pytest.raises(InputError) as info:
        resolve_intent(load_intent(write(tmp_path, dense)))
    assert located_at(info.value, 9, 3) and "dense" in info.value.message


def test_a_model_mapping_with_a_typo_names_the_key(tmp_path: Path) -> None:
    text = MINIMAL.replace("model: Qwen/Qwen3-30B-A3B", "model:\n  preset: Qwen/Qwen3-8B\n  num_layer: 12")
    exc = error_of(write(tmp_path, text))
    assert located_at(exc, 4, 3) and exc.hint.startswith("did you mean 'num_layers'?")


def test_a_mapping_without_preset_is_judged_as_a_full_architecture(tmp_path: Path) -> None:
    arch = "model: {num_layers: 2, hidden_size: 64, num_attention_heads: 4, intermediate_size: 128}"
    exc = error_of(write(tmp_path, MINIMAL.replace("model: Qwen/Qwen3-30B-A3B", arch)))
    assert exc.message == "model: missing required key 'vocab_size' in model"
    assert "{preset: ID" in exc.hint
    full = arch.replace("}", ", vocab_size: 1000}")
    assert resolve_intent(load_intent(write(tmp_path, MINIMAL.replace("model: Qwen/Qwen3-30B-A3B", full)))) \
        .model.vocab_size == 1000


# --- the CLI shows these as messages, exit 2, no traceback ---------------------------------------

@pytest.mark.parametrize("text", [
    "",                                                                        # empty
    "model: [\n",                                                              # YAML syntax
    "- model: x\n",                                                            # a list at the top
    MINIMAL.replace("hardware:\n  gpu: h100-80gb", "hardware:\n  - h100-80gb"),  # a list where a mapping belongs
    MINIMAL.replace("seq_length: 4096", "seq_length: long"),                  # wrong type
    MINIMAL.replace("seq_length: 4096", "seq_length: -4"),                    # negative size
    MINIMAL.replace("h100-80gb", "h100-80g"),                                 # unknown GPU preset
    MINIMAL.replace("Qwen/Qwen3-30B-A3B", "Qwen/Qwen9"),                      # unknown model
])
def test_cli_reports_bad_intents_without_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    text: str) -> None:
    assert main(["compile", str(write(tmp_path, text))]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "intent.yaml" in err and "hint:" in err


@pytest.mark.parametrize("command", ["compile", "explain"])
def test_cli_reports_an_unreadable_intent(tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str) -> None:
    assert main([command, str(tmp_path / "missing.yaml")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "not found" in err and "hint:" in err


# --- properties: a pin written in the file and the same pin given as an override load alike ---------

PIN_VALUES = st.one_of(st.just("auto"), st.integers(1, 64),
                       st.lists(st.integers(1, 64), min_size=1, max_size=4, unique=True))


@settings(max_examples=40, deadline=None)
@given(pins=st.fixed_dictionaries({}, optional={name: PIN_VALUES for name in ("tp", "pp", "cp", "ep", "vpp")}))
def test_pins_from_file_and_from_overrides_agree(pins: dict[str, object]) -> None:
    if pins.get("pp") == 1 or (isinstance(pins.get("pp"), list) and pins["pp"] == [1]):
        pins.pop("vpp", None)  # vpp > 1 with pp pinned to 1 is a contradiction by design
    base = {"model": "Qwen/Qwen3-30B-A3B", "hardware": {"gpu": "h100-80gb"},
            "training": {"seq_length": 4096, "global_batch_size": 512}}
    from_file = load_intent({**base, "parallelism": pins})
    from_overrides = load_intent(base, [f"parallelism.{k}={v}" for k, v in pins.items()])
    assert from_file.pins == from_overrides.pins
    for name, value in pins.items():
        expected = None if value == "auto" else tuple(sorted(value if isinstance(value, list) else [value]))
        assert getattr(from_file.pins, name) == expected

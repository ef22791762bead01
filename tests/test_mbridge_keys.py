"""Override keys against the recipe function's ConfigContainer fields: a typo'd key is a located error (exit 1)
with a did-you-mean from the real field names, in both forms (a YAML file and a Hydra list), and a section the
recipe leaves None (comm_overlap) takes keys only when the override builds it (`_target_`).

What Megatron-Bridge itself does with each case is checked in tests/test_mbridge_fields_oracle.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from automodel_dist import validate_recipe
from automodel_dist.targets.megatron_bridge.compile import compile_megatron
from automodel_dist.targets.megatron_bridge.emit import hydra_value
from automodel_dist.targets.megatron_bridge.fields import TARGET, config_fields
from automodel_dist.targets.megatron_bridge.parse import flat_overrides
from automodel_dist.targets.megatron_bridge.rules import check_keys

Q30 = "qwen3_30b_a3b_pretrain_config"    # builds a CommOverlapConfig
Q235 = "qwen3_235b_a22b_pretrain_config"  # leaves comm_overlap None
DSV3 = "deepseek_v3_pretrain_config"      # MLAModelProvider
Q3NEXT_SFT = "qwen3_next_80b_a3b_sft_config"  # leaves dataset.offline_packing_specs None: it packs no sequences
Q8_SFT = "qwen3_8b_sft_config"            # packs sequences of 2048
PACKED = "dataset.offline_packing_specs.packed_sequence_size"
COMM = "megatron.bridge.training.comm_overlap.CommOverlapConfig"
EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "intents"
# A CommOverlapConfig built by the override set (tp_comm_overlap has no default).
BUILT = {f"comm_overlap.{TARGET}": COMM, "comm_overlap.tp_comm_overlap": False}
BUCKET = 40_000_000  # a CommOverlapConfig value Megatron-Bridge's setup keeps as given

# (rule, bad {dotted key: value}, good neighbour, recipe function)
KEY_CASES: list[tuple[str, dict[str, Any], dict[str, Any], str]] = [
    ("mb-unknown-key", {"model.tensor_model_paralel_size": 2}, {"model.tensor_model_parallel_size": 2}, Q30),
    ("mb-unknown-key", {"trian.micro_batch_size": 2}, {"train.micro_batch_size": 2}, Q30),
    ("mb-unknown-key", {"rng.sed": 1234}, {"rng.seed": 1234}, Q30),
    ("mb-unknown-key", {"ddp.overlap_grad_reduce.x": True}, {"ddp.overlap_grad_reduce": True}, Q30),
    ("mb-unknown-key", {"model.kv_lora_rank": 256}, {"model.kv_lora_rank": 256}, DSV3),  # bad on Q30 (below)
    ("mb-unknown-key", {**BUILT, "comm_overlap.bucket_sise": BUCKET}, {**BUILT, "comm_overlap.bucket_size": BUCKET},
     Q235),
    ("mb-section-missing", {"comm_overlap.bucket_size": BUCKET}, {**BUILT, "comm_overlap.bucket_size": BUCKET}, Q235),
    ("mb-section-missing", {"comm_overlap.bucket_size": BUCKET}, {"comm_overlap.bucket_size": BUCKET},
     Q30),  # bad on Q235 (below)
    ("mb-target-required", {f"comm_overlap.{TARGET}": COMM, "comm_overlap.bucket_size": BUCKET},
     {**BUILT, "comm_overlap.bucket_size": BUCKET}, Q235),
    ("mb-section-missing", {PACKED: 2048}, {PACKED: 2048}, Q8_SFT),  # bad on Qwen3-Next's sft recipe (below)
]
# The recipe a bad case is judged with when it differs from its neighbour's.
BAD_RECIPE = {4: Q30, 7: Q235, 9: Q3NEXT_SFT}


def hydra_list(flat: dict[str, Any]) -> list[str]:
    """A flat override set as Hydra writes it: + before the keys of a section the set builds."""
    built = {path.rsplit(".", 1)[0] for path in flat if path.endswith("." + TARGET)}
    return [f"{'+' if path.split('.')[0] in built else ''}{path}={hydra_value(value)}" for path, value in flat.items()]


def nested(flat: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path, value in flat.items():
        *parents, leaf = path.split(".")
        node = out
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out


def _rules(source: Any, recipe: str) -> set[str]:
    report = validate_recipe(source, world_size=16, target="megatron-bridge", recipe_function=recipe)
    return {f.rule for f in report.errors}


@pytest.mark.parametrize("form", ["yaml", "hydra"])
@pytest.mark.parametrize(("i", "rule", "bad", "good", "recipe"), [(i, *c) for i, c in enumerate(KEY_CASES)],
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(KEY_CASES)])
def test_key_rule_fires_and_neighbour_passes(form: str, i: int, rule: str, bad: dict[str, Any],
                                             good: dict[str, Any], recipe: str) -> None:
    def shape(flat: dict[str, Any]) -> Any:
        return nested(flat) if form == "yaml" else hydra_list(flat)

    assert rule in _rules(shape(bad), BAD_RECIPE.get(i, recipe))
    assert not {"mb-unknown-key", "mb-section-missing", "mb-target-required"} & _rules(shape(good), recipe)


def test_did_you_mean_comes_from_the_recipes_fields() -> None:
    [finding] = check_keys({"model.tensor_model_paralel_size": 2}, Q30, hydra=False)
    assert finding.path == "model.tensor_model_paralel_size"
    assert "GPTModelProvider has no field 'tensor_model_paralel_size'" in finding.message
    assert "Key 'tensor_model_paralel_size' in overrides not found in config object GPTModelProvider" in finding.message
    assert "did you mean 'tensor_model_parallel_size'" in finding.hint
    [hydra] = check_keys({"model.tensor_model_paralel_size": 2}, Q30, hydra=True)
    assert "Could not override 'model.tensor_model_paralel_size'" in hydra.message
    [missing] = check_keys({"comm_overlap.tp_comm_overlap": True}, Q235, hydra=False)
    assert f"comm_overlap.{TARGET}: {COMM}" in missing.hint


def test_one_finding_per_unknown_section() -> None:
    findings = check_keys({"trian.micro_batch_size": 1, "trian.global_batch_size": 8}, Q30, hydra=False)
    assert [f.path for f in findings] == ["trian.micro_batch_size"]
    assert "did you mean 'train'" in findings[0].hint


def test_unknown_recipe_checks_against_every_recipes_fields() -> None:
    assert check_keys({"model.kv_lora_rank": 256}, None, hydra=False) == []  # an MLA recipe has it
    assert [f.rule for f in check_keys({"model.kv_lora_rnak": 256}, None, hydra=False)] == ["mb-unknown-key"]


def test_field_data_covers_every_recipe_function_the_target_writes_for() -> None:
    from automodel_dist.targets.megatron_bridge.recipes import RECIPES

    fields = config_fields()
    assert {r.function for r in RECIPES.values()} == set(fields.recipes)
    assert len(fields.classes["GPTModelProvider"]["fields"]) > 300


@pytest.mark.parametrize("name", ["qwen3-30b-a3b-16xh100", "qwen3-235b-a22b-256xh100", "deepseek-v3-256xgb200",
                                  "llama-3.1-70b-32xh100"])
def test_compiled_override_sets_use_only_known_keys(name: str) -> None:
    """The compiler never writes a key its validator refuses (YAML and Hydra forms)."""
    result = compile_megatron(EXAMPLES / f"{name}.yaml")
    assert check_keys(flat_overrides(result.recipe), result.recipe_function, hydra=False) == []
    assert check_keys(flat_overrides(list(result.hydra)), result.recipe_function, hydra=True) == []


def test_a_recipe_that_packs_no_sequences_gets_no_packing_keys() -> None:
    """Qwen3-Next's sft recipe leaves dataset.offline_packing_specs None: the set writes no packing, and the packing
    keys are refused in both forms, located at the key."""
    result = compile_megatron({"model": "Qwen/Qwen3-Next-80B-A3B-Instruct",
                               "hardware": {"gpu": "h100-80gb", "nodes": 4},
                               "training": {"task": "sft", "seq_length": 4096, "global_batch_size": 128}})
    assert result.recipe_function == Q3NEXT_SFT
    assert not any("offline_packing_specs" in path for path in flat_overrides(result.recipe))
    assert not any("offline_packing_specs" in item for item in result.hydra)
    assert result.override is not None and result.override.settings.packed_sequence_size is None
    for source in (result.recipe, list(result.hydra)):
        assert validate_recipe(source, world_size=32, target="megatron-bridge", recipe_function=Q3NEXT_SFT).ok
    [yaml] = check_keys({PACKED: 4096}, Q3NEXT_SFT, hydra=False)
    assert "enable_offline_packing must be True when offline_packing_specs is set." in yaml.message
    assert yaml.path == PACKED and "drop the dataset.offline_packing_specs keys" in yaml.hint
    [hydra] = check_keys({PACKED: 4096}, Q3NEXT_SFT, hydra=True)
    assert f"Could not override '{PACKED}'" in hydra.message


@pytest.mark.parametrize(("suffix", "text", "where"), [
    (".yaml", "# recipe: qwen3_30b_a3b_pretrain_config\n# world: 2 x 8\nmodel:\n  tensor_model_paralel_size: 2\n"
              "train:\n  global_batch_size: 1024\n", ":4:3:"),
    (".txt", "# recipe: qwen3_30b_a3b_pretrain_config\n# world: 2 x 8\ntrain.global_batch_size=1024\n"
             "model.tensor_model_paralel_size=2\n", ":4:1:"),
])
def test_cli_locates_a_typo_and_exits_1(tmp_path: Path, suffix: str, text: str, where: str) -> None:
    path = tmp_path / f"overrides{suffix}"
    path.write_text(text, encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "automodel_dist", "validate", str(path), "--target",
                           "megatron-bridge"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    line = next(x for x in proc.stdout.splitlines() if "[mb-unknown-key]" in x)
    assert f"{path}{where} error [mb-unknown-key] model.tensor_model_paralel_size" in line
    assert "did you mean 'tensor_model_parallel_size'" in proc.stdout
    assert "Traceback" not in proc.stderr


QNEXT = "qwen3_next_80b_a3b_pretrain_config"  # PP4 EP8, selective recompute of [layernorm, moe, moe_act]
NEXT_OVERLAP = {**BUILT, "comm_overlap.overlap_moe_expert_parallel_comm": True, "model.pipeline_model_parallel_size": 1}
# (recipe, world, override set, the error rule it breaks or None): a key the set leaves out keeps the recipe's value
# (data/megatron_bridge/config_fields.json), as it does in Megatron-Bridge (tests/test_mbridge_fields_oracle.py).
RECIPE_VALUE_CASES: list[tuple[str, int, dict[str, Any], str | None]] = [
    (Q30, 16, {"model.tensor_model_parallel_size": 2}, None),  # the recipe's GBS 1024 and EP16 fit 16 GPUs
    (Q30, 8, {"model.tensor_model_parallel_size": 2}, "mb-expert-world-divisible"),  # its EP16 does not fit 8
    (QNEXT, 8, NEXT_OVERLAP, "mb-ep-overlap-moe-recompute"),  # its recompute_modules hold moe
    (QNEXT, 8, {**NEXT_OVERLAP, "model.recompute_modules": ["moe_act"]}, None),
]


@pytest.mark.parametrize(("recipe", "world", "flat", "rule"), RECIPE_VALUE_CASES)
def test_keys_left_out_keep_the_recipes_values(recipe: str, world: int, flat: dict[str, Any], rule: str | None) -> None:
    report = validate_recipe(nested(flat), world_size=world, target="megatron-bridge", recipe_function=recipe)
    assert [f.rule for f in report.errors] == ([rule] if rule else [])


LORA8 = "llama31_8b_peft_config"  # its LoRA `peft` is left out of the config Megatron-Bridge hands Hydra
CHECKPOINT = "checkpoint.pretrained_checkpoint=${oc.env:PRETRAINED_CHECKPOINT}"
BUILD = [f"+comm_overlap.{TARGET}={COMM}", "+comm_overlap.tp_comm_overlap=false"]
# (rule, bad Hydra list, valid neighbour, recipe function, world): Hydra's `+` as Megatron-Bridge's parser takes it
# (tests/test_mbridge_fields_oracle.py runs each through it).
APPEND_CASES: list[tuple[str, list[str], list[str], str, int]] = [
    ("mb-hydra-append-missing", [CHECKPOINT, "peft.dim=16"], [CHECKPOINT, "+peft.dim=16"], LORA8, 8),
    ("mb-hydra-append-missing", [CHECKPOINT, "+peft.dim=16", "peft.alpha=32"],
     [CHECKPOINT, "+peft.dim=16", "+peft.alpha=32"], LORA8, 8),
    ("mb-hydra-append-missing", [*BUILD, f"comm_overlap.bucket_size={BUCKET}"],
     [*BUILD, f"+comm_overlap.bucket_size={BUCKET}"], Q235, 256),
    ("mb-hydra-append-missing", [f"comm_overlap.{TARGET}={COMM}", "+comm_overlap.tp_comm_overlap=false"], BUILD,
     Q235, 256),
    ("mb-hydra-append-present", ["+model.tensor_model_parallel_size=1"], ["model.tensor_model_parallel_size=1"],
     Q30, 16),
    ("mb-hydra-append-present", ["+model.tensor_model_parallel_size=1"], ["++model.tensor_model_parallel_size=1"],
     Q30, 16),
    ("mb-hydra-append-present", ["+model.recompute_granularity=selective", "+model.recompute_granularity=selective"],
     ["+model.recompute_granularity=selective", "model.recompute_granularity=selective"], Q30, 16),
    ("mb-hydra-append-present", ["+train.micro_batch_size=1"], ["+model.recompute_modules=[core_attn]"], Q30, 16),
]
# (rule, Hydra list, recipe): what Hydra accepts but is likely a mistake (warnings, exit 0)
HYDRA_WARNING_CASES: list[tuple[str, list[str], str]] = [
    ("mb-hydra-duplicate-key", ["model.tensor_model_parallel_size=2", "model.tensor_model_parallel_size=1"], Q30),
    ("mb-hydra-empty-value", ["train.train_iters="], Q30),
]


@pytest.mark.parametrize(("rule", "bad", "good", "recipe", "world"), APPEND_CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(APPEND_CASES)])
def test_hydra_append_rule_fires_and_neighbour_passes(rule: str, bad: list[str], good: list[str], recipe: str,
                                                      world: int) -> None:
    def rules(items: list[str]) -> list[str]:
        report = validate_recipe(items, world_size=world, target="megatron-bridge", recipe_function=recipe)
        return [f.rule for f in report.errors]

    assert rules(bad) == [rule]
    assert rules(good) == []


def test_compiled_hydra_lists_append_where_megatron_needs_it() -> None:
    """The compiler's own `+` (LoRA keys, a comm_overlap it builds) is what the rules ask for."""
    for name, overrides in (("qwen3-235b-a22b-256xh100", []), ("llama-3.1-8b-lora-8xh100", [])):
        result = compile_megatron(EXAMPLES / f"{name}.yaml", overrides)
        report = validate_recipe(list(result.hydra), world_size=result.layout.world_size, target="megatron-bridge",
                                 recipe_function=result.recipe_function)
        assert not {f.rule for f in report.findings if f.rule.startswith("mb-hydra-")}
        assert any(item.startswith("+") for item in result.hydra)


def test_cli_places_the_refused_item_on_its_line(tmp_path: Path) -> None:
    path = tmp_path / "overrides.txt"
    path.write_text(f"# recipe: {LORA8}\n# world: 1 x 8\n{CHECKPOINT}\n+model.recompute_granularity=selective\n"
                    "peft.dim=16\n+model.recompute_granularity=selective\n", encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "automodel_dist", "validate", str(path), "--target",
                           "megatron-bridge"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"{path}:5:1: error [mb-hydra-append-missing] peft.dim: Could not override 'peft.dim'. To append to " \
           "your config use +peft.dim=16" in proc.stdout
    assert "fix: write +peft.dim=16" in proc.stdout
    assert f"{path}:6:1: error [mb-hydra-append-present] model.recompute_granularity: Could not append to config. " \
           "An item is already at 'model.recompute_granularity'" in proc.stdout
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(("rule", "items", "recipe"), HYDRA_WARNING_CASES)
def test_hydra_warnings_fire_and_neighbours_pass(rule: str, items: list[str], recipe: str) -> None:
    def warnings(items: list[str]) -> list[str]:
        report = validate_recipe(items, world_size=16, target="megatron-bridge", recipe_function=recipe)
        assert report.ok
        return [f.rule for f in report.warnings]

    assert warnings(items) == [rule]
    assert warnings(items[-1:] if len(items) > 1 else ["train.train_iters=null"]) == []


@pytest.mark.parametrize(("name", "text", "where", "says"), [
    ("mixed.txt", "model.tensor_model_parallel_size=2\ntrain:\n  micro_batch_size: 1\n", ":2:1:", "no YAML lines"),
    ("tilde.txt", "~model.tensor_model_parallel_size\n", ":1:1:", "keeps the recipe's value"),
    ("spaces.txt", "model.tensor_model_parallel_size = 2\n", ":1:1:", "write model.tensor_model_parallel_size=2"),
    ("empty.txt", "# recipe: qwen3_30b_a3b_pretrain_config\n", "", "overrides is empty"),
    ("no-value.txt", "model.tensor_model_parallel_size=\n", ":1:1:", "expected a positive integer, got ''"),
    ("wrong-type.yaml", "model:\n  tensor_model_parallel_size: two\n", ":2:3:", "expected a positive integer"),
    ("null-seq.yaml", "model:\n  seq_length: 4096\ndataset:\n  seq_length: null\n", ":4:3:",
     "dataset.seq_length cannot be null"),
    ("list.yaml", "- model.tensor_model_parallel_size=2\n", ":1:1:", "must be a YAML mapping"),
    ("dotted.yaml", "train:\n  micro_batch_size: 1\nmodel.tensor_model_parallel_size: 2\n", ":3:1:",
     "nest it: model: {tensor_model_parallel_size: ...}"),
])
def test_malformed_override_files_are_located_input_errors(tmp_path: Path, name: str, text: str, where: str,
                                                           says: str) -> None:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "automodel_dist", "validate", str(path), "--target",
                           "megatron-bridge", "--recipe", Q30, "--nodes", "2"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"{path}{where}" in proc.stderr and says in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


# (bad {dotted key: value}, rule, valid neighbour) on Q30: values Megatron-Bridge cannot use (the oracle's verdicts:
# tests/test_mbridge_fields_oracle.py)
VALUE_CASES: list[tuple[dict[str, Any], str, dict[str, Any]]] = [
    ({"model": 5}, "mb-section-value", {"model.tensor_model_parallel_size": 1}),
    ({"train": None}, "mb-section-value", {"train.micro_batch_size": 1}),
    ({"mixed_precision": "bf16_mixd"}, "mb-precision-recipe", {"mixed_precision": "bf16-mixed"}),
]


@pytest.mark.parametrize(("bad", "rule", "good"), VALUE_CASES)
def test_a_value_megatron_cannot_use_is_a_finding(bad: dict[str, Any], rule: str, good: dict[str, Any]) -> None:
    assert _rules(bad, Q30) == {rule}
    assert _rules(good, Q30) == set()


def test_sections_some_recipe_holds_a_value_in_take_one() -> None:
    assert _rules({"mixed_precision": "bf16-mixed", "comm_overlap": None}, Q30) == set()


@pytest.mark.parametrize("form", ["yaml", "hydra"])
def test_a_file_judged_against_another_recipe_than_its_header_names_is_told_so(form: str) -> None:
    """The header names the recipe the file was written for; judged against another (a pretrain recipe for an
    sft file), its keys fail there, and the warning says why."""
    body = "train:\n  micro_batch_size: 1\n" if form == "yaml" else "train.micro_batch_size=1\n"
    text = f"# recipe: {Q30}\n{body}"

    def warned(recipe: str) -> list[str]:
        report = validate_recipe(text, world_size=16, target="megatron-bridge", recipe_function=recipe)
        return [f.message for f in report.findings if f.rule == "mb-recipe-header"]

    [message] = warned(Q235)
    assert Q30 in message and Q235 in message
    assert warned(Q30) == []


# A YAML override file with a key written twice in one mapping (lines 2 and 4), and its valid neighbour.
UNDUPLICATED = "model:\n  tensor_model_parallel_size: 2\n  pipeline_model_parallel_size: 1\n"
DUPLICATED = UNDUPLICATED + "  tensor_model_parallel_size: 1\n"


def test_a_key_written_twice_in_a_yaml_file_is_an_error(tmp_path: Path) -> None:
    """Megatron-Bridge's YAML loader refuses the file (ConstructorError: found duplicate key); AutoModel's keeps the
    later value, so the AutoModel target warns instead (tests/test_validate.py)."""
    path = tmp_path / "overrides.yaml"
    path.write_text(DUPLICATED, encoding="utf-8")
    report = validate_recipe(path, world_size=16, target="megatron-bridge", recipe_function=Q30)
    [finding] = [f for f in report.errors if f.rule == "mb-yaml-duplicate-key"]
    assert (finding.line, finding.col) == (2, 3) and "'tensor_model_parallel_size'" in finding.message
    assert "found duplicate key" in finding.message
    path.write_text(UNDUPLICATED, encoding="utf-8")
    assert validate_recipe(path, world_size=16, target="megatron-bridge", recipe_function=Q30).ok


def covered_rules() -> set[str]:
    """The rules this module's cases trigger (the registry-coverage tests count them)."""
    return ({c[0] for c in (*KEY_CASES, *APPEND_CASES, *HYDRA_WARNING_CASES)} | {c[1] for c in VALUE_CASES}
            | {"mb-recipe-header", "mb-yaml-duplicate-key", "mb-slurm-overrides-differ"})

"""The override-key check against Megatron-Bridge 0.6.2 itself (tests/mbridge_oracle.py):
1. the shipped field list (data/megatron_bridge/config_fields.json) is what the installed dataclasses hold, for
   every recipe function the target writes for;
2. every key rule case (tests/test_mbridge_keys.py), in both forms: a bad Hydra list is refused with the message we
   quote, a bad YAML file is either refused or silently loses the key (the value never reaches the config), and the
   valid neighbour is accepted with its value applied;
3. override sets that leave keys to the recipe: our verdict, on the recipe's recorded values, is Megatron's;
4. the override sets compiled for recipes that leave `comm_overlap` None build a CommOverlapConfig that
   Megatron-Bridge's own setup and validation accept with EP overlap on (both forms);
5. Hydra's `+` (tests/test_mbridge_keys.py's append cases): a list our rules refuse, Megatron-Bridge's parser refuses
   in the words we quote, and the valid neighbour passes its whole validation;
6. the mixed precision an override set runs with (tests/test_mbridge_precision.py's cases: the recipe's own where the
   set leaves it out) is the MixedPrecisionConfig Megatron-Bridge resolves and copies into its DDP config;
7. values Megatron-Bridge cannot use (a value in a section's place, an unknown precision recipe): refused in both
   forms, in the words we quote for the Hydra form, and the valid neighbour accepted; a dotted key in a YAML file
   (refused by validate as input) is one key to Megatron-Bridge's merge, which trains without its value.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from mbridge_oracle import Oracle, available
from test_mbridge_keys import (
    APPEND_CASES,
    BAD_RECIPE,
    DUPLICATED,
    KEY_CASES,
    Q30,
    RECIPE_VALUE_CASES,
    UNDUPLICATED,
    VALUE_CASES,
    hydra_list,
    nested,
)
from test_mbridge_oracle import DEVICES
from test_mbridge_precision import PRECISION_CASES

from automodel_dist import validate_recipe
from automodel_dist.targets.megatron_bridge.compile import compile_megatron
from automodel_dist.targets.megatron_bridge.fields import FIELDS_FILE, mixed_precision, recipe_values
from automodel_dist.targets.megatron_bridge.parse import parse_overrides
from automodel_dist.targets.megatron_bridge.rules import NONE_SECTION_REFUSALS, check_keys
from automodel_dist.yamlio import dump_yaml

pytestmark = [
    pytest.mark.mbridge_oracle,
    pytest.mark.skipif(not available(), reason="the Megatron-Bridge oracle venv (.venv-mb) is not installed: "
                                                "run scripts/setup-mbridge-oracle.sh"),
]
ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "intents"
H100 = list(DEVICES["h100-80gb"])
WORLD = {"qwen3_30b_a3b_pretrain_config": 16, "qwen3_235b_a22b_pretrain_config": 256,
         "deepseek_v3_pretrain_config": 1024, "qwen3_8b_sft_config": 16, "qwen3_next_80b_a3b_sft_config": 16}


@pytest.fixture(scope="module")
def oracle() -> Any:
    worker = Oracle()
    yield worker
    worker.close()


def test_field_list_is_the_installed_dataclasses() -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    import json

    from mbridge_config_fields import read_installed

    shipped = json.loads(FIELDS_FILE.read_text(encoding="utf-8"))
    installed = read_installed()
    assert shipped == installed, "run scripts/mbridge_config_fields.py"
    keys = sum(len(c["fields"]) for c in installed["classes"].values())
    print(f"\nfield list: {len(installed['recipes'])} recipe functions, {len(installed['classes'])} classes, "
          f"{keys} fields")


def _value_path(flat: dict[str, Any]) -> tuple[str, Any]:
    """The key a case sets (its last) and its value."""
    return next(reversed(flat.items()))


def test_key_rule_cases_agree_with_megatron(oracle: Oracle, tmp_path: Path) -> None:
    cases, expect = [], []
    for i, (rule, bad, good, recipe) in enumerate(KEY_CASES):
        for kind, flat, fn in (("bad", bad, BAD_RECIPE.get(i, recipe)), ("good", good, recipe)):
            path, value = _value_path(flat)
            base = {"recipe": fn, "world_size": WORLD[fn], "gpu": H100, "read": [path]}
            yaml_file = tmp_path / f"case{i}-{kind}.yaml"
            yaml_file.write_text(dump_yaml(nested(flat)), encoding="utf-8")
            cases += [{**base, "overrides": hydra_list(flat)}, {**base, "overrides": [], "config_file": str(yaml_file)}]
            expect += [(rule, kind, flat, fn, True), (rule, kind, flat, fn, False)]
    verdicts = oracle.judge(cases)
    wrong = []
    for (rule, kind, flat, fn, hydra), theirs in zip(expect, verdicts, strict=True):
        ours = check_keys(flat, fn, hydra=hydra)
        path, value = _value_path(flat)
        applied = theirs["ok"] and theirs["values"].get(path) == value
        if kind == "good":
            ok = not ours and applied
        else:  # Megatron refuses the set in words we quote, or runs without the value
            said = [f"Could not override '{f.path}'" for f in ours] + ["'dict' object has no attribute",
                                                                       *NONE_SECTION_REFUSALS.values()]
            quoted = theirs["ok"] or any(x in theirs["error"] and any(x in f.message for f in ours) for x in said)
            ok = bool(ours) and not applied and quoted
        if not ok:
            wrong.append((rule, kind, "hydra" if hydra else "yaml", flat, [f.message for f in ours], theirs))
    print(f"\nkey rule cases: {len(expect)} override sets (YAML and Hydra), {len(expect) - len(wrong)} agree")
    assert wrong == [], "\n".join(str(w)[:400] for w in wrong)


def test_megatron_refuses_a_yaml_file_with_a_key_written_twice(oracle: Oracle, tmp_path: Path) -> None:
    """mb-yaml-duplicate-key: Megatron-Bridge's loader refuses the file, and takes its neighbour."""
    cases = []
    for name, text in (("dup", DUPLICATED), ("neighbour", UNDUPLICATED)):
        path = tmp_path / f"{name}.yaml"
        path.write_text(text, encoding="utf-8")
        cases.append({"recipe": Q30, "world_size": 16, "gpu": H100, "overrides": [], "config_file": str(path)})
    refused, taken = oracle.judge(cases)
    assert not refused["ok"] and "found duplicate key tensor_model_parallel_size" in refused["error"]
    assert taken["ok"], taken["error"]


@pytest.mark.parametrize("name", ["qwen3-235b-a22b-256xh100", "qwen3-235b-a22b-128xgb200"])
def test_recipe_without_comm_overlap_gets_one_megatron_accepts(oracle: Oracle, tmp_path: Path, name: str) -> None:
    result = compile_megatron(EXAMPLES / f"{name}.yaml")
    assert result.override is not None and result.override.settings.ep_overlap
    assert result.override.settings.comm_overlap_target is not None
    yaml_file = tmp_path / "overrides.yaml"
    yaml_file.write_text(result.yaml, encoding="utf-8")
    read = ["comm_overlap", "comm_overlap.overlap_moe_expert_parallel_comm", "comm_overlap.delay_wgrad_compute"]
    base = {"recipe": result.recipe_function, "world_size": result.layout.world_size, "read": read,
            "gpu": list(DEVICES[result.problem.cluster.gpu.name])}
    verdicts = oracle.judge([{**base, "overrides": list(result.hydra)},
                             {**base, "overrides": [], "config_file": str(yaml_file)}])
    for theirs in verdicts:  # runtime_config_update ran CommOverlapConfig.setup and ConfigContainer.validate
        assert theirs["ok"], theirs["error"]
        assert theirs["values"]["comm_overlap"].startswith("CommOverlapConfig(")
        assert theirs["values"]["comm_overlap.overlap_moe_expert_parallel_comm"] is True
        assert theirs["values"]["comm_overlap.delay_wgrad_compute"] is False


def test_keys_left_out_are_judged_at_the_recipes_values(oracle: Oracle, tmp_path: Path) -> None:
    cases, ours = [], []
    for i, (recipe, world, flat, _) in enumerate(RECIPE_VALUE_CASES):
        path = tmp_path / f"partial{i}.yaml"
        path.write_text(dump_yaml(nested(flat)), encoding="utf-8")
        cases.append({"recipe": recipe, "world_size": world, "overrides": [], "config_file": str(path), "gpu": H100})
        report = validate_recipe(nested(flat), world_size=world, target="megatron-bridge", recipe_function=recipe)
        ours.append([f.message for f in report.errors])
    verdicts = oracle.judge(cases)
    for mine, theirs in zip(ours, verdicts, strict=True):
        assert bool(mine) != theirs["ok"], (mine, theirs)
        assert not mine or any(" ".join(m.split())[:50] in theirs["error"] for m in mine), (mine, theirs)


def test_hydra_append_cases_agree_with_megatron(oracle: Oracle) -> None:
    cases, ours = [], []
    for _, bad, good, recipe, world in APPEND_CASES:
        for items in (bad, good):
            cases.append({"recipe": recipe, "world_size": world, "overrides": items, "gpu": H100})
            report = validate_recipe(items, world_size=world, target="megatron-bridge", recipe_function=recipe)
            ours.append([f.message for f in report.errors])
    verdicts = oracle.judge(cases)
    wrong = []
    for mine, theirs in zip(ours, verdicts, strict=True):
        hydra_words = [m.split(" (", 1)[0] if m.endswith(")") else m for m in mine]  # ours adds why in ( )
        agree = (theirs["ok"] and not mine) or (not theirs["ok"] and bool(mine) and all(
            theirs["error"] == f"OverridesError: Failed to parse Hydra overrides: {words}" for words in hydra_words))
        if not agree:
            wrong.append((mine, theirs))
    print(f"\nHydra append cases: {len(cases)} lists, {len(cases) - len(wrong)} agree")
    assert wrong == [], wrong


def test_mixed_precision_left_out_is_megatrons(oracle: Oracle, tmp_path: Path) -> None:
    read = ["mixed_precision.fp8", "mixed_precision.fp8_recipe", "mixed_precision.grad_reduce_in_fp32",
            "mixed_precision.fp8_param_gather", "mixed_precision.reuse_grad_buf_for_mxfp8_param_ag",
            "ddp.grad_reduce_in_fp32"]
    cases, ours = [], []
    for i, (recipe, world, flat, _) in enumerate(PRECISION_CASES):
        yaml_file = tmp_path / f"precision{i}.yaml"
        yaml_file.write_text(dump_yaml(nested(flat)), encoding="utf-8")
        base = {"recipe": recipe, "world_size": world, "gpu": list(DEVICES["b200"]), "read": read}
        cases += [{**base, "overrides": hydra_list(flat)}, {**base, "overrides": [], "config_file": str(yaml_file)}]
        mine = mixed_precision(parse_overrides(flat, world_size=world, base=recipe_values(recipe)).settings)
        ours += [mine, mine]
    verdicts = oracle.judge(cases)
    for case, mine, theirs in zip(cases, ours, verdicts, strict=True):
        assert theirs["ok"], (case, theirs["error"])
        values = theirs["values"]
        assert (values["mixed_precision.fp8"], values["mixed_precision.fp8_recipe"],
                values["mixed_precision.grad_reduce_in_fp32"], values["mixed_precision.fp8_param_gather"],
                values["mixed_precision.reuse_grad_buf_for_mxfp8_param_ag"]) == (
            mine.fp8, mine.fp8_recipe, mine.grad_reduce_in_fp32, mine.fp8_param_gather,
            mine.reuse_grad_buf_for_mxfp8_param_ag)
        assert values["ddp.grad_reduce_in_fp32"] == mine.grad_reduce_in_fp32, case
    print(f"\nmixed precision: {len(cases)} override sets (YAML and Hydra) resolve as we read them")


def test_values_megatron_cannot_use_agree(oracle: Oracle, tmp_path: Path) -> None:
    cases, expect = [], []
    for i, (bad, _, good) in enumerate(VALUE_CASES):
        for kind, flat in (("bad", bad), ("good", good)):
            yaml_file = tmp_path / f"value{i}-{kind}.yaml"
            yaml_file.write_text(dump_yaml(nested(flat)), encoding="utf-8")
            base = {"recipe": Q30, "world_size": 16, "gpu": H100}
            cases += [{**base, "overrides": hydra_list(flat)}, {**base, "overrides": [], "config_file": str(yaml_file)}]
            report = validate_recipe(nested(flat), world_size=16, target="megatron-bridge", recipe_function=Q30)
            expect += [(kind, hydra, [f.message for f in report.errors]) for hydra in (True, False)]
    for (kind, hydra, ours), theirs in zip(expect, oracle.judge(cases), strict=True):
        assert bool(ours) == (kind == "bad") != theirs["ok"], (ours, theirs)
        if ours and hydra:  # the YAML form fails on the emulation's own model.* knobs first
            quoted = [part for m in ours for part in ("'int' object has no attribute", "'NoneType' object has no "
                      "attribute", m) if part in m]
            assert any(part in theirs["error"] for part in quoted), (ours, theirs)


def test_a_dotted_yaml_key_never_reaches_megatrons_config(oracle: Oracle, tmp_path: Path) -> None:
    dotted, nested_file = tmp_path / "dotted.yaml", tmp_path / "nested.yaml"
    dotted.write_text("model.tensor_model_parallel_size: 2\n", encoding="utf-8")
    nested_file.write_text("model:\n  tensor_model_parallel_size: 2\n", encoding="utf-8")
    base = {"recipe": Q30, "world_size": 16, "gpu": H100, "overrides": [], "read": ["model.tensor_model_parallel_size"]}
    skipped, applied = oracle.judge([{**base, "config_file": str(dotted)}, {**base, "config_file": str(nested_file)}])
    assert skipped["ok"] and skipped["values"]["model.tensor_model_parallel_size"] == 1  # the recipe's TP
    assert applied["ok"] and applied["values"]["model.tensor_model_parallel_size"] == 2

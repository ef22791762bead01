"""The shipped JSON Schemas: valid draft 2020-12, documented for editors, and right about real recipes.

The recipe schema is judged three ways: against recipe fixtures that reproduce the shapes of NVIDIA-NeMo/
Automodel's public examples (each states the world size it runs at), against invalid neighbours, and against
AutoModel 0.7.0 itself: its own section parsers and its dataclass field sets.
"""

from __future__ import annotations

import ast
import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from recipe_fixtures import INVALID, VALID, fixture_expect, fixture_world
from recipe_section_oracle import automodel_section_verdicts

from automodel_dist.resources import SCHEMAS_DIR
from automodel_dist.schema_check import ERROR, WARNING, SchemaIssue, load_schema, schema_issues
from automodel_dist.yamlio import load_document

RECIPE_SCHEMA = "automodel-recipe.schema.json"


def recipe_issues(source: Any) -> list[SchemaIssue]:
    return schema_issues(load_document(source, what="recipe"), RECIPE_SCHEMA)


def errors(source: Any) -> list[SchemaIssue]:
    return [i for i in recipe_issues(source) if i.severity == ERROR]


@pytest.mark.parametrize("name", ["intent.schema.json", RECIPE_SCHEMA])
def test_schemas_are_valid_draft_2020_12(name: str) -> None:
    schema = json.loads((SCHEMAS_DIR / name).read_text(encoding="utf-8"))
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    Draft202012Validator.check_schema(schema)


def intent_fields(schema: dict[str, Any], where: str = "") -> Iterator[tuple[str, dict[str, Any], bool]]:
    """Every property of every object in the intent schema: (dotted name, its schema, required?)."""
    required = set(schema.get("required", ()))
    for name, prop in schema.get("properties", {}).items():
        if set(prop) == {"$ref"}:  # a reuse of a documented definition (the model's override fields)
            continue
        yield f"{where}{name}", prop, name in required
        yield from intent_fields(prop, f"{where}{name}.")
    for branch in (*schema.get("anyOf", ()), *(schema[k] for k in ("then", "else") if k in schema)):
        yield from intent_fields(branch, where)


def test_every_intent_field_is_documented_for_editors() -> None:
    schema = load_schema("intent.schema.json")
    fields = list(intent_fields(schema)) + list(intent_fields(schema["$defs"]["architecture"], "model."))
    assert len(fields) > 50 and "model.preset" in {name for name, _, _ in fields}
    for name, prop, required in fields:
        assert prop.get("title") and prop.get("description"), name
        assert "default" in prop or required, f"{name}: needs a default or to be required"
        assert prop.get("examples"), name


def test_intent_objects_are_closed() -> None:
    def objects(node: Any) -> Iterator[dict[str, Any]]:
        if isinstance(node, dict):
            if "properties" in node:
                yield node
            for value in node.values():
                yield from objects(value)
        elif isinstance(node, list):
            for value in node:
                yield from objects(value)

    for obj in objects(load_schema("intent.schema.json")):
        assert obj.get("additionalProperties") is False, sorted(obj["properties"])


# --- the recipe schema against recipes ------------------------------------------------------------

def test_there_are_enough_realistic_fixtures_each_with_its_world_size() -> None:
    assert len(VALID) >= 30 and len(INVALID) >= 15
    for path in VALID + INVALID:
        fixture_world(path)


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.stem)
def test_valid_recipes_have_no_schema_errors(path: Path) -> None:
    assert errors(path) == []


@pytest.mark.parametrize("path", INVALID, ids=lambda p: p.stem)
def test_invalid_neighbours_are_rejected_for_the_expected_reason(path: Path) -> None:
    dotted, why = fixture_expect(path)
    found = errors(path)
    assert found, path.name
    hit = [i for i in found if i.dotted == dotted]
    assert hit, [i.dotted for i in found]
    assert any(why in f"{i.message} {i.hint}" for i in hit), [(i.message, i.hint) for i in hit]
    assert all(i.line is not None and i.hint for i in hit)


def test_the_schema_agrees_with_automodels_own_parsers() -> None:
    """AutoModel 0.7.0 parses each fixture's distributed and packed_sequence sections; we must agree.

    The one deliberate difference: a size AutoModel cannot read as an integer (`tp_size: two`) it silently
    treats as 1, a silent wrong answer; we reject it.
    """
    deliberate = {("tp_size_word", "distributed")}
    recipes = {p.stem: load_document(p).plain() for p in VALID + INVALID}
    verdicts = automodel_section_verdicts(recipes)
    checked = 0
    for path in VALID + INVALID:
        ours = errors(path)
        for section, theirs in verdicts[path.stem].items():
            we_reject = any(i.path[0] == section for i in ours)
            if (path.stem, section) in deliberate:
                assert we_reject and theirs is None
                continue
            assert we_reject == (theirs is not None), (path.name, section, theirs, ours)
            checked += 1
    assert checked >= 60


# --- what AutoModel checks loosely is a warning, not an error -------------------------------------

BASE = {"step_scheduler": {"global_batch_size": 8, "local_batch_size": 1}}


@pytest.mark.parametrize(("recipe", "dotted"), [
    ({**BASE, "dist_env": {"backend": "nccl", "timeout": 10}}, "dist_env.timeout"),
    ({**BASE, "model": {"backend": {"attn": "my_kernel"}}}, "model.backend.attn"),
    ({**BASE, "model": {"backend": {"dispatcher_num_qps": 4}}}, "model.backend.dispatcher_num_qps"),
    ({**BASE, "distributed": {"pp_size": 1, "pipeline": {"microbatch": 1}}}, "distributed.pipeline.microbatch"),
    ({**BASE, "distributed": {"moe": {"wrap_outer": True}}}, "distributed.moe.wrap_outer"),
])
def test_loosely_checked_values_are_warnings(recipe: dict[str, Any], dotted: str) -> None:
    issues = recipe_issues(recipe)
    assert [(i.severity, i.dotted) for i in issues] == [(WARNING, dotted)]


def test_packing_fields_are_closed_only_when_llm_packing_is_on() -> None:
    on = {"packed_sequence": {"packed_sequence_size": 1024, "pack_size": 1024}}
    assert [(i.severity, i.dotted) for i in recipe_issues(on)] == [(ERROR, "packed_sequence.pack_size")]
    vlm = {"packed_sequence": {"pack_size": 1024, "max_length": 1024, "packing_ratio": 0.9}}
    assert recipe_issues(vlm) == []


def test_a_kd_teacher_distributed_section_is_checked_like_distributed() -> None:
    found = errors({"teacher_distributed": {"strategy": "ddp", "tp_plan": "x"}})
    assert [i.dotted for i in found] == ["teacher_distributed.tp_plan"]


def test_pipeline_keys_are_errors_once_pipelining_is_on() -> None:
    recipe = {**BASE, "distributed": {"pp_size": 2, "pipeline": {"microbatch": 1}}}
    assert [(i.severity, i.dotted) for i in recipe_issues(recipe)] == [(ERROR, "distributed.pipeline.microbatch")]


@pytest.mark.parametrize("value", ["${TP}", "${TP,2}", "${oc.env:TP,2}", "$TP", "2", 2, None, "none"])
def test_sizes_accept_numbers_nulls_and_env_placeholders(value: Any) -> None:
    assert errors({"distributed": {"tp_size": value}}) == []


@pytest.mark.parametrize(("key", "value"), [
    ("strategy", "FSDP2"), ("strategy", "Megatron-FSDP"), ("activation_checkpointing", "Selective"),
    ("autocast_dtype", "torch.BFloat16"),
])
def test_values_automodel_lower_cases_are_accepted_in_any_case(key: str, value: str) -> None:
    assert errors({"distributed": {key: value}}) == []


@pytest.mark.parametrize(("bad", "good", "dotted", "severity"), [
    # moe/layers.py compares dispatcher and experts as written: a capital falls back to other experts
    ({"dispatcher": "HybridEP"}, {"dispatcher": "hybridep"}, "model.backend.dispatcher", WARNING),
    ({"dispatcher": "DeepEP"}, {"dispatcher": "deepep"}, "model.backend.dispatcher", WARNING),
    ({"experts": "Torch_MM"}, {"experts": "torch_mm"}, "model.backend.experts", WARNING),
    ({"attn": "SDPA"}, {"attn": "sdpa"}, "model.backend.attn", WARNING),
    # BackendConfig / MoKBackendConfig / CudaGraphConfig raise on a name they do not know
    ({"sparse_attn": "Generic"}, {"sparse_attn": "generic"}, "model.backend.sparse_attn", ERROR),
    ({"mok": {"precision": "BF16"}}, {"mok": {"precision": "bf16"}}, "model.backend.mok.precision", ERROR),
    ({"cuda_graph": {"modules": ["Attn"]}}, {"cuda_graph": {"modules": ["attn"]}},
     "model.backend.cuda_graph.modules.0", ERROR),
])
def test_backend_names_automodel_compares_as_written_are_lower_case(bad: dict[str, Any], good: dict[str, Any],
                                                                   dotted: str, severity: str) -> None:
    def issues(backend: dict[str, Any]) -> list[tuple[str, str]]:
        model = {"_target_": "nemo_automodel.NeMoAutoModelForCausalLM.from_pretrained", "backend": backend}
        return [(i.severity, i.dotted) for i in recipe_issues({**BASE, "model": model})]

    assert issues(bad) == [(severity, dotted)]
    assert issues(good) == []


def test_schedule_names_follow_torch_not_the_docstring() -> None:
    for good in ("1f1b", "Interleaved1F1B", "gpipe", "ZBVZeroBubble", "dualpipev"):
        assert errors({"distributed": {"pp_size": 2, "pipeline": {"pp_schedule": good}}}) == []
    for bad in ("interleaved_1f1b", "looped_bfs", "dfs", "v_schedule", "zero_bubble"):
        assert errors({"distributed": {"pp_size": 2, "pipeline": {"pp_schedule": bad}}}), bad


def test_strategy_key_sets_are_closed_per_strategy() -> None:
    assert errors({"distributed": {"strategy": "ddp", "sequence_parallel": False}})
    assert errors({"distributed": {"strategy": "megatron_fsdp", "enable_compile": True}})
    assert errors({"distributed": {"strategy": "fsdp2", "zero_dp_strategy": 3}})
    assert not errors({"distributed": {"strategy": "megatron_fsdp", "zero_dp_strategy": 3}})
    assert not errors({"distributed": {"strategy": "ddp", "static_graph": True}})


# --- the closed key sets are AutoModel 0.7.0's own field sets -------------------------------------

def automodel_fields(module: str, cls: str) -> set[str]:
    import importlib

    return {f.name for f in dataclasses.fields(getattr(importlib.import_module(module), cls))}


def test_distributed_key_sets_match_automodels_configs() -> None:
    config = "nemo_automodel.components.distributed.config"
    common = {"strategy", "tp_size", "pp_size", "cp_size", "ep_size", "dp_size", "dp_replicate_size", "pipeline",
              "moe", "activation_checkpointing", "_target_", "_recursive_", "_convert_"}
    sets = {}
    for branch in load_schema(RECIPE_SCHEMA)["$defs"]["distributed"]["allOf"][:3]:
        keys = set(branch["then"]["propertyNames"]["enum"])
        sets[branch["if"].get("properties", {}).get("strategy", {}).get("pattern", "fsdp2")] = keys
    by_strategy = dict(zip(("ddp", "megatron_fsdp", "fsdp2"), sets.values(), strict=True))
    for strategy, cls in (("fsdp2", "FSDP2Config"), ("megatron_fsdp", "MegatronFSDPConfig"), ("ddp", "DDPConfig")):
        assert by_strategy[strategy] == automodel_fields(config, cls) | common, strategy


def test_section_key_sets_match_automodels_dataclasses() -> None:
    defs = load_schema(RECIPE_SCHEMA)["$defs"]
    pipeline = automodel_fields("nemo_automodel.components.distributed.pipelining.config", "PipelineConfig")
    assert set(defs["pipeline"]["properties"]) == pipeline
    moe = automodel_fields("nemo_automodel.components.distributed.config", "MoEParallelizerConfig")
    assert set(defs["moe"]["properties"]) == moe
    scheduler = automodel_fields("nemo_automodel.components.training.step_scheduler", "StepSchedulerConfig")
    runtime = {"local_batch_size", "dp_size", "dataloader", "_target_"}  # read or stripped by the recipe
    assert set(defs["step_scheduler"]["properties"]) == scheduler | runtime


def test_packing_fields_match_automodels_packing_configs() -> None:
    """make_packing_config accepts the union of the THD and NEAT fields plus the legacy ones."""
    import nemo_automodel

    source = Path(nemo_automodel.__file__).parent / "components" / "datasets" / "loader.py"
    tree = ast.parse(source.read_text(encoding="utf-8"))
    packing = {"PackingConfig", "ThdPackingConfig", "NeatPackingConfig"}
    fields = {stmt.target.id for cls in tree.body if isinstance(cls, ast.ClassDef) and cls.name in packing
              for stmt in cls.body if isinstance(stmt, ast.AnnAssign) and "ClassVar" not in ast.unparse(stmt)}
    legacy = {"split_across_pack"}
    closed = load_schema(RECIPE_SCHEMA)["$defs"]["packed_sequence"]["then"]["propertyNames"]["enum"]
    assert set(closed) == fields | legacy | {"packing_strategy"}


def test_backend_fields_match_automodels_backend_config() -> None:
    """BackendConfig imports transformers (absent here), so its fields are read from the source."""
    import nemo_automodel

    source = Path(nemo_automodel.__file__).parent / "components" / "models" / "common" / "utils.py"
    tree = ast.parse(source.read_text(encoding="utf-8"))
    fields = {cls.name: {stmt.target.id for stmt in cls.body if isinstance(stmt, ast.AnnAssign)}
              for cls in tree.body if isinstance(cls, ast.ClassDef)}
    backend = load_schema(RECIPE_SCHEMA)["$defs"]["backend"]["properties"]
    assert set(backend) == fields["BackendConfig"] | {"_target_"}
    assert set(backend["mok"]["properties"]) == fields["MoKBackendConfig"] | {"_target_"}


@pytest.mark.parametrize("path", VALID + INVALID, ids=lambda p: f"{p.parent.name}-{p.stem}")
def test_the_schema_and_validate_give_the_same_verdict(path: Path) -> None:
    """An editor or schema checker must never reject what `validate` accepts, nor accept a shape it rejects.

    benchmarks/recipe_corpus.py makes the same comparison over any folder of real recipes.
    """
    from automodel_dist.errors import InputError
    from automodel_dist.validate import validate_recipe

    nodes, gpus_per_node = fixture_world(path)
    try:
        report = validate_recipe(path, world_size=nodes * gpus_per_node, gpus_per_node=gpus_per_node)
        validate_rejects, why = not report.ok, [(f.rule, f.path, f.message) for f in report.errors]
    except InputError as exc:  # a value validate cannot read at all (exit 2) is a rejection too
        validate_rejects, why = True, [str(exc)]
    schema_rejects = bool(errors(path))
    assert schema_rejects == (path in INVALID)
    assert validate_rejects == schema_rejects, why


# --- the schemas as editors see them --------------------------------------------------------------

@pytest.mark.parametrize("name", ["intent.schema.json", RECIPE_SCHEMA])
def test_schema_ids_are_stable_urls_versioned_with_the_package(name: str) -> None:
    from importlib.metadata import version

    assert load_schema(name)["$id"] == ("https://raw.githubusercontent.com/automodel-dist/automodel-dist/"
                                        f"v{version('automodel-dist')}/automodel_dist/data/schemas/{name}")


def test_the_intent_schema_lists_exactly_the_gpu_presets_and_their_aliases() -> None:
    import re

    from automodel_dist.catalog.hardware import gpu_presets

    gpu = load_schema("intent.schema.json")["properties"]["hardware"]["properties"]["gpu"]
    ids = sorted(p.spec.name for p in gpu_presets())
    offered, spelled = gpu["anyOf"]
    assert sorted(offered["enum"]) == ids
    names = [n for p in gpu_presets() for n in (p.spec.name, *p.aliases)]
    assert all(re.fullmatch(spelled["pattern"], case) for n in names for case in (n, n.upper()))
    assert not re.fullmatch(spelled["pattern"], "h100x")


def test_the_intent_schema_completes_every_model_id() -> None:
    from automodel_dist.catalog.models import list_models

    model = load_schema("intent.schema.json")["properties"]["model"]
    ids = [i for m in list_models() for i in (m.id, *(a.id for a in m.aliases))]
    assert [s["body"] for s in model["defaultSnippets"]] == ids
    assert all(isinstance(e, str) for e in model["examples"])

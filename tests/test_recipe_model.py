"""The model validate judges is the one the recipe builds: its id reshaped by config overrides, or its
inline config; an id we do not know is only a note."""

from __future__ import annotations

from pathlib import Path

from recipe_fixtures import RECIPES

from automodel_dist.catalog.models import resolve_model
from automodel_dist.targets.automodel.recipe_model import recipe_model
from automodel_dist.validate import validate_recipe
from automodel_dist.yamlio import load_document

PROXY = RECIPES / "valid" / "deepseek_v3_proxy_8_layers_pp4_vpp2.yaml"
INLINE = RECIPES / "valid" / "qwen3_moe_inline_config_2_layers_ep2.yaml"


def _config(path: Path) -> dict:
    return load_document(path, what="recipe").plain()


def test_config_overrides_reshape_the_named_model() -> None:
    spec = recipe_model(_config(PROXY)).spec
    full = resolve_model("deepseek-ai/DeepSeek-V3")
    assert spec is not None and spec.num_layers == 8 and full.num_layers == 61
    assert spec.num_routed_experts == full.num_routed_experts


def test_the_preset_layer_count_would_reject_the_proxy() -> None:
    """Why the override matters: with DeepSeek-V3's 61 layers, one layer per stage is not a multiple of pp 4."""
    report = validate_recipe(PROXY, world_size=32, model="deepseek-ai/DeepSeek-V3")
    assert "am-r33-virtual-stages" in {f.rule for f in report.errors}
    assert validate_recipe(PROXY, world_size=32).ok


def test_from_pretrained_keyword_overrides_apply() -> None:
    config = {"model": {"pretrained_model_name_or_path": "Qwen/Qwen3-30B-A3B", "num_hidden_layers": 4,
                        "num_experts": 8}}
    spec = recipe_model(config).spec
    assert spec is not None and (spec.num_layers, spec.num_routed_experts) == (4, 8)


def test_a_shrunk_layer_count_keeps_the_layer_mix() -> None:
    """DeepSeek-V3 cut to 2 layers keeps one MoE layer; Qwen3-Next cut to 8 keeps 3 linear-attention per 4."""
    config = {"model": {"config": {"pretrained_model_name_or_path": "deepseek-ai/DeepSeek-V3",
                                   "num_hidden_layers": 2}}}
    spec = recipe_model(config).spec
    assert spec is not None and (spec.num_layers, spec.first_dense_layers) == (2, 1) and spec.is_moe
    full = resolve_model("Qwen/Qwen3-Next-80B-A3B-Instruct")
    spec = recipe_model({"model": {"pretrained_model_name_or_path": "Qwen/Qwen3-Next-80B-A3B-Instruct",
                                   "num_hidden_layers": 8}}).spec
    assert spec is not None and spec.linear_attention_layers == full.linear_attention_layers * 8 // full.num_layers


def test_inline_config_is_read_from_its_config_class() -> None:
    spec = recipe_model(_config(INLINE)).spec
    assert spec is not None and spec.family == "qwen3_moe"
    assert (spec.num_layers, spec.num_routed_experts, spec.num_attention_heads) == (2, 4, 8)


def test_inline_config_binds_the_expert_rules() -> None:
    """The inline model has 4 experts, so ep 8 is a true rejection (a full-size preset would hide it)."""
    text = INLINE.read_text(encoding="utf-8").replace("ep_size: 2", "ep_size: 8").replace(
        "global_batch_size: 8", "global_batch_size: 32")
    report = validate_recipe(text, world_size=8)
    assert "am-r26-ep-divides-experts" in {f.rule for f in report.errors}


def test_unknown_model_and_unread_inline_families_are_notes_only() -> None:
    for config in ({"model": {"pretrained_model_name_or_path": "acme/NotAModel-7B"}},
                   {"model": {"config": {"_target_": "acme.models.TitansConfig", "num_hidden_layers": 12}}},
                   {"model": {"_target_": "acme.build_model", "n_layer": 12}}):
        resolved = recipe_model(config)
        assert resolved.spec is None and resolved.reason
        report = validate_recipe({**config, "distributed": {"strategy": "fsdp2"}}, world_size=8)
        assert report.ok
        assert any(f.rule == "skipped" and "model-aware rules" in f.message for f in report.notes)


def test_unreadable_inline_config_is_a_note_naming_the_field() -> None:
    config = {"model": {"config": {"_target_": "transformers.LlamaConfig", "hidden_size": 1024}}}
    resolved = recipe_model(config)
    assert resolved.spec is None and "cannot be read" in resolved.reason


def test_a_vlm_text_config_override_reshapes_the_language_model() -> None:
    config = {"model": {"pretrained_model_name_or_path": "Qwen/Qwen3-30B-A3B", "text_config": {"num_hidden_layers": 6}}}
    spec = recipe_model(config).spec
    assert spec is not None and spec.num_layers == 6

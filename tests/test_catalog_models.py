"""Model catalog: every required Hugging Face id resolves, local config.json files load to the same
spec as the presets, overrides and full mappings work, bad input is a clear InputError, and the
derived parameter counts match the published figures."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from automodel_dist.catalog.models import MODELS_DIR, list_models, resolve_model
from automodel_dist.catalog.params import param_counts
from automodel_dist.catalog.specs import ModelSpec
from automodel_dist.errors import InputError

FIXTURES = Path(__file__).parent / "fixtures" / "hf_configs"

# The ids the catalog must resolve (issue 2, part 4) and the preset each belongs to.
REQUIRED_IDS = {
    "meta-llama/Llama-3.2-1B": "llama-3.2-1b",
    "meta-llama/Llama-3.2-3B": "llama-3.2-3b",
    "meta-llama/Llama-3.1-8B": "llama-3.1-8b",
    "meta-llama/Llama-3.1-70B": "llama-3.1-70b",
    "meta-llama/Llama-3.3-70B-Instruct": "llama-3.1-70b",
    "meta-llama/Llama-3.1-405B": "llama-3.1-405b",
    "Qwen/Qwen2.5-7B": "qwen2.5-7b",
    "Qwen/Qwen2.5-32B": "qwen2.5-32b",
    "Qwen/Qwen2.5-72B": "qwen2.5-72b",
    "Qwen/Qwen3-8B": "qwen3-8b",
    "Qwen/Qwen3-32B": "qwen3-32b",
    "Qwen/Qwen3-30B-A3B": "qwen3-30b-a3b",
    "Qwen/Qwen3-235B-A22B": "qwen3-235b-a22b",
    "Qwen/Qwen3-Next-80B-A3B-Instruct": "qwen3-next-80b-a3b",
    "deepseek-ai/DeepSeek-V3": "deepseek-v3",
    "moonshotai/Kimi-K2-Instruct": "kimi-k2",
    "moonshotai/Moonlight-16B-A3B-Instruct": "moonlight-16b-a3b",
    "openai/gpt-oss-20b": "gpt-oss-20b",
    "openai/gpt-oss-120b": "gpt-oss-120b",
    "mistralai/Mixtral-8x7B-v0.1": "mixtral-8x7b",
    "mistralai/Mixtral-8x22B-v0.1": "mixtral-8x22b",
}

PRESETS = {p.id: p for p in list_models()}


def _strip_variant(hf_id: str) -> str:
    for suffix in ("-Instruct", "-Base"):
        if hf_id.endswith(suffix):
            return hf_id[: -len(suffix)]
    return hf_id


@pytest.mark.parametrize("hf_id", sorted(REQUIRED_IDS))
def test_required_hf_id_resolves_with_its_variants(hf_id: str) -> None:
    expected = PRESETS[REQUIRED_IDS[hf_id]].spec
    base = _strip_variant(hf_id)
    for ref in (hf_id, base + "-Instruct", base + "-Base", hf_id.upper(), hf_id.lower(), f"  {hf_id} "):
        assert resolve_model(ref) == expected, ref


def test_preset_ids_and_org_less_names_resolve() -> None:
    for preset_id, preset in PRESETS.items():
        assert resolve_model(preset_id) is preset.spec
        assert resolve_model(preset_id.upper()) is preset.spec
    assert resolve_model("Qwen3-30B-A3B").name == "qwen3-30b-a3b"
    assert resolve_model("Llama-3.1-8B-Instruct").name == "llama-3.1-8b"


def test_alias_with_overrides_changes_only_those_fields() -> None:
    # Mixtral-8x22B-Instruct-v0.1 ships the v3 tokenizer (vocab 32768); the base model has 32000.
    base = resolve_model("mistralai/Mixtral-8x22B-v0.1")
    instruct = resolve_model("mistralai/Mixtral-8x22B-Instruct-v0.1")
    assert (base.vocab_size, instruct.vocab_size) == (32000, 32768)
    assert replace(instruct, vocab_size=32000, name=base.name) == base


def test_no_two_presets_claim_the_same_name() -> None:
    seen: dict[str, str] = {}
    for preset in PRESETS.values():
        for name in [preset.id, *(a.id for a in preset.aliases)]:
            assert seen.setdefault(name.lower(), preset.id) == preset.id, name


def test_every_preset_file_names_its_source() -> None:
    files = sorted(MODELS_DIR.glob("*.yaml"))
    assert len(files) == len(PRESETS) >= 19
    for path in files:
        head = path.read_text(encoding="utf-8").splitlines()[:8]
        assert any(line.startswith("# Source: https://huggingface.co/") for line in head), path.name
        assert PRESETS[path.stem].spec.source.startswith("https://huggingface.co/"), path.name


# --- local config.json files ------------------------------------------------------------------------

FIXTURE_NAMES = sorted(p.name for p in FIXTURES.iterdir() if (p / "config.json").is_file())


def test_a_fixture_exists_for_every_preset_and_family() -> None:
    assert sorted(PRESETS) == FIXTURE_NAMES
    families = {json.loads((FIXTURES / n / "config.json").read_text())["model_type"] for n in FIXTURE_NAMES}
    assert families == {"llama", "qwen2", "qwen3", "qwen3_moe", "qwen3_next", "mixtral", "deepseek_v3",
                        "kimi_k2", "gpt_oss"}


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_local_config_loads_to_the_preset_spec(name: str) -> None:
    preset = PRESETS[name].spec
    folder = FIXTURES / name
    from_folder = resolve_model(str(folder))
    from_file = resolve_model(folder / "config.json")
    from_mapping = resolve_model(json.loads((folder / "config.json").read_text()))
    assert from_folder.name == name  # named after the model folder
    for spec in (from_folder, from_file, from_mapping):
        assert replace(spec, name=preset.name, source=preset.source) == preset


def test_config_json_variants_of_families(tmp_path: Path) -> None:
    base = json.loads((FIXTURES / "qwen3-30b-a3b" / "config.json").read_text())
    # Leading dense layers via mlp_only_layers become first_dense_layers.
    spec = resolve_model(base | {"mlp_only_layers": [0, 1]})
    assert spec.first_dense_layers == 2
    # A dense layer in the middle cannot be modelled: refused, not approximated.
    with pytest.raises(InputError, match="only leading dense layers"):
        resolve_model(base | {"mlp_only_layers": [5]})
    # Qwen3-Next with explicit layer_types instead of full_attention_interval.
    nxt = json.loads((FIXTURES / "qwen3-next-80b-a3b" / "config.json").read_text())
    types = ["linear_attention", "full_attention"] * 24
    assert resolve_model(nxt | {"layer_types": types}).linear_attention_layers == 24
    # gpt-oss without layer_types falls back to transformers' alternating default.
    oss = json.loads((FIXTURES / "gpt-oss-20b" / "config.json").read_text())
    oss.pop("layer_types")
    assert resolve_model(oss).sliding_window_layers == 12
    # Mistral-style config: the window applies to every layer.
    llama = json.loads((FIXTURES / "llama-3.1-8b" / "config.json").read_text())
    mistral = resolve_model(llama | {"model_type": "mistral", "sliding_window": 4096})
    assert (mistral.sliding_window, mistral.sliding_window_layers) == (4096, 32)
    # DeepSeek without q LoRA (V2-Lite style) counts a full q projection.
    ds = json.loads((FIXTURES / "deepseek-v3" / "config.json").read_text())
    no_q_lora = resolve_model(ds | {"q_lora_rank": None})
    assert no_q_lora.q_lora_rank is None
    assert param_counts(no_q_lora).full_attention_per_layer == (
        7168 * 128 * 192 + 7168 * 576 + 512 + 512 * 128 * 256 + 128 * 128 * 7168)


# --- overrides and full mappings --------------------------------------------------------------------


def test_preset_mapping_overrides_fields() -> None:
    spec = resolve_model({"preset": "Qwen/Qwen3-30B-A3B", "num_layers": 24, "num_routed_experts": 64})
    preset = PRESETS["qwen3-30b-a3b"].spec
    assert (spec.num_layers, spec.num_routed_experts) == (24, 64)
    assert replace(spec, num_layers=48, num_routed_experts=128) == preset


@pytest.mark.parametrize(
    ("mapping", "message", "where"),
    [
        ({"preset": "qwen3-8b", "num_layer": 3}, "did you mean 'num_layers'", "model.num_layer"),
        ({"preset": "qwen3-8b", "num_hidden_layers": 3}, "the architecture field is 'num_layers'",
         "model.num_hidden_layers"),
        ({"preset": "qwen3-8b", "num_layers": "36"}, "num_layers must be an integer", "model.num_layers"),
        ({"preset": "qwen3-8b", "num_layers": True}, "num_layers must be an integer", "model.num_layers"),
        ({"preset": "qwen3-8b", "tie_word_embeddings": "yes"}, "must be true or false",
         "model.tie_word_embeddings"),
        ({"preset": "qwen3-8b", "num_key_value_heads": 5}, "must divide", "model.num_key_value_heads"),
        # a rule between two fields is located at the one the mapping sets, not at the preset's other value
        ({"preset": "qwen3-8b", "num_attention_heads": 33},
         "num_key_value_heads 8 must divide num_attention_heads 33", "model.num_attention_heads"),
        ({"preset": "qwen3-30b-a3b", "num_routed_experts": 4},
         "experts_per_token 8 must be between 1 and num_routed_experts 4", "model.num_routed_experts"),
        ({"preset": "qwen3-30b-a3b", "num_routed_experts": 0}, "experts_per_token is set but num_routed_experts is 0",
         "model.num_routed_experts"),
        ({"preset": "deepseek-v3", "num_layers": 3}, "first_dense_layers 3 leaves no MoE layer among num_layers 3",
         "model.num_layers"),
        ({"preset": "qwen3-30b-a3b", "experts_per_token": 129}, "between 1 and num_routed_experts",
         "model.experts_per_token"),
        ({"preset": "qwen3-8b", "experts_per_token": 2}, "num_routed_experts is 0", "model.experts_per_token"),
        ({"preset": "deepseek-v3", "first_dense_layers": 61}, "leaves no MoE layer", "model.first_dense_layers"),
        ({"preset": "deepseek-v3", "v_head_dim": None}, "needs all of", "model.v_head_dim"),
        ({"preset": "qwen3-8b", "hidden_size": 0}, "must be at least 1", "model.hidden_size"),
        ({"preset": 7}, "preset must be a model id string", "model.preset"),
        ({"preset": "qwen3-9b"}, "unknown model 'qwen3-9b'", "model.preset"),
    ],
)
def test_bad_override_is_an_input_error(mapping: dict, message: str, where: str) -> None:
    with pytest.raises(InputError, match=message) as info:
        resolve_model(mapping)
    assert info.value.where == where
    assert info.value.hint


def test_full_architecture_mapping_builds_a_spec() -> None:
    fields = {"num_layers": 4, "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
              "head_dim": 64, "intermediate_size": 512, "vocab_size": 1000}
    spec = resolve_model(fields)
    assert isinstance(spec, ModelSpec)
    assert (spec.name, spec.family, spec.num_layers, spec.is_moe) == ("custom", "custom", 4, False)
    counts = param_counts(spec)
    per_layer = 256 * 256 + 2 * 256 * 128 + 256 * 256 + 3 * 256 * 512 + 2 * 256
    assert counts.total == 4 * per_layer + 2 * 1000 * 256 + 256
    with pytest.raises(InputError, match="missing required fields: hidden_size, vocab_size") as info:
        resolve_model({k: v for k, v in fields.items() if k not in ("hidden_size", "vocab_size")})
    assert info.value.where == "model"
    windowed = resolve_model(fields | {"sliding_window": 1024})
    assert windowed.sliding_window_layers == 4  # a window without a layer count applies to every layer


def test_yaml_model_files(tmp_path: Path) -> None:
    for preset in PRESETS.values():  # a preset file itself is a valid model file
        assert resolve_model(str(preset.path)) == preset.spec
    own = tmp_path / "small.yaml"
    own.write_text("preset: qwen3-30b-a3b  # a cut-down copy\nnum_layers: 8\n")
    assert resolve_model(str(own)).num_layers == 8
    own.write_text("preset: qwen3-30b-a3b\nnum_layerz: 8\n")
    with pytest.raises(InputError, match="did you mean 'num_layers'") as info:
        resolve_model(str(own))
    assert info.value.where == f"{own}:2:1"
    own.write_text("preset: [unclosed\n")
    with pytest.raises(InputError, match="YAML syntax error") as info:
        resolve_model(str(own))
    assert info.value.where is not None and info.value.where.startswith(f"{own}:")


def test_spec_passes_through_and_where_prefix_is_used() -> None:
    spec = PRESETS["llama-3.1-8b"].spec
    assert resolve_model(spec) is spec
    with pytest.raises(InputError) as info:
        resolve_model("nonsense-model", where="intent.model")
    assert info.value.where == "intent.model"


# --- bad input --------------------------------------------------------------------------------------


def test_unknown_id_suggests_and_hints_at_config_json() -> None:
    with pytest.raises(InputError, match=r"unknown model 'Qwen/Qwen3-31B-A3B' \(did you mean 'Qwen/Qwen3-30B-A3B'"
                       ) as info:
        resolve_model("Qwen/Qwen3-31B-A3B")
    assert "config.json" in info.value.hint
    with pytest.raises(InputError, match=r"did you mean 'llama-3\.1-8b'"):
        resolve_model("lama-3.1-8b")


@pytest.mark.parametrize("ref", [42, 3.5, ["qwen3-8b"], None, ""])
def test_non_name_non_mapping_is_an_input_error(ref: object) -> None:
    with pytest.raises(InputError):
        resolve_model(ref)


def test_malformed_config_json_names_line_and_column(tmp_path: Path) -> None:
    bad = tmp_path / "config.json"
    bad.write_text('{\n  "model_type": "llama",\n  "hidden_size": 4096,\n}\n')
    with pytest.raises(InputError, match="malformed JSON") as info:
        resolve_model(str(bad))
    assert info.value.where == f"{bad}:4:1"


def test_config_json_that_is_not_an_object(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("[1, 2, 3]\n")
    with pytest.raises(InputError, match="must be a JSON object, found list"):
        resolve_model(str(tmp_path))


def test_unsupported_model_type_lists_the_supported_ones(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert", "hidden_size": 768}))
    with pytest.raises(InputError, match="unsupported model_type 'bert'") as info:
        resolve_model(str(tmp_path / "config.json"))
    for family in ("llama", "qwen2", "qwen3", "qwen3_moe", "qwen3_next", "mixtral", "deepseek_v3", "kimi_k2",
                   "gpt_oss"):
        assert family in info.value.hint


def test_config_json_missing_or_mistyped_key_is_named(tmp_path: Path) -> None:
    cfg = json.loads((FIXTURES / "mixtral-8x7b" / "config.json").read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps({k: v for k, v in cfg.items() if k != "num_local_experts"}))
    with pytest.raises(InputError, match="'num_local_experts' is missing") as info:
        resolve_model(str(path))
    assert info.value.where == f"{path}.num_local_experts"
    path.write_text(json.dumps(cfg | {"hidden_size": "4096"}))
    with pytest.raises(InputError, match="'hidden_size' must be a non-negative integer"):
        resolve_model(str(path))
    path.write_text(json.dumps({"hidden_size": 1}))
    with pytest.raises(InputError, match="no model_type"):
        resolve_model(str(path))


def test_missing_paths_are_input_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="model config not found"):
        resolve_model(str(tmp_path / "absent" / "config.json"))
    with pytest.raises(InputError, match="model config not found"):
        resolve_model(str(tmp_path))  # a folder without config.json
    with pytest.raises(InputError, match="model config not found"):
        resolve_model("./checkpoints/my-model")


# --- parameter counts -------------------------------------------------------------------------------

B, T = 1e9, 1e12

# (preset, published total, published active, what the published active counts, source).
# "all": every parameter a token touches (embedding and LM head included), ParamCounts.active.
# "no_embedding": the input embedding left out (a lookup), ParamCounts.active_non_embedding.
# "body": the embedding and the LM head both left out, of the total and of the active figure.
PUBLISHED = [
    ("llama-3.2-1b", 1.23 * B, None, "all", "Llama 3.2 model card, Model Information table: 1B (1.23B)"),
    ("llama-3.2-3b", 3.21 * B, None, "all", "Llama 3.2 model card, Model Information table: 3B (3.21B)"),
    ("llama-3.1-8b", 8.03 * B, None, "all", "huggingface.co/meta-llama/Llama-3.1-8B, model size 8.03B params"),
    ("llama-3.1-70b", 70.6 * B, None, "all", "huggingface.co/meta-llama/Llama-3.1-70B, model size 70.6B params"),
    ("llama-3.1-405b", 405.9 * B, None, "all", "huggingface.co/meta-llama/Llama-3.1-405B, model size 406B"),
    ("qwen2.5-7b", 7.61 * B, None, "all", "Qwen2.5-7B model card: Number of Parameters 7.61B"),
    ("qwen2.5-32b", 32.5 * B, None, "all", "Qwen2.5-32B model card: Number of Parameters 32.5B"),
    ("qwen2.5-72b", 72.7 * B, None, "all", "Qwen2.5-72B model card: Number of Parameters 72.7B"),
    ("qwen3-8b", 8.2 * B, None, "all", "Qwen3-8B model card: Number of Parameters 8.2B"),
    ("qwen3-32b", 32.8 * B, None, "all", "Qwen3-32B model card: Number of Parameters 32.8B"),
    ("qwen3-30b-a3b", 30.5 * B, 3.3 * B, "all", "Qwen3-30B-A3B model card: 30.5B in total and 3.3B activated"),
    ("qwen3-235b-a22b", 235 * B, 22 * B, "all", "Qwen3-235B-A22B model card: 235B in total and 22B activated"),
    ("deepseek-v3", 671 * B, 37 * B, "all",
     "DeepSeek-V3 technical report (arXiv:2412.19437): 671B total, 37B activated; MTP module excluded"),
    ("kimi-k2", 1.04 * T, 32.6 * B, "all",
     "Kimi K2 technical report (arXiv:2507.20534): 1.04T total, 32.6B activated"),
    ("gpt-oss-20b", 20.91 * B, 3.61 * B, "no_embedding",
     "gpt-oss model card (arXiv:2508.10925) Table 1: 20.91B total, 3.61B active (embedding excluded)"),
    ("gpt-oss-120b", 116.83 * B, 5.13 * B, "no_embedding",
     "gpt-oss model card (arXiv:2508.10925) Table 1: 116.83B total, 5.13B active (embedding excluded)"),
    ("mixtral-8x7b", 46.7 * B, 12.9 * B, "all",
     "Mistral AI, Mixtral of experts (2023-12-11): 46.7B total, 12.9B per token"),
    ("mixtral-8x22b", 141 * B, 39 * B, "all",
     "Mistral AI, Cheaper, Better, Faster, Stronger (2024-04-17): 141B total, 39B active"),
    ("qwen3-next-80b-a3b", 80 * B, None, "all", "Qwen3-Next-80B-A3B model card: 80B in total"),
    ("moonlight-16b-a3b", 15.29 * B, 2.24 * B, "body",
     "Muon is Scalable for LLM Training (arXiv:2502.16982): 15.29B total, 2.24B activated, embeddings excluded"),
]


def test_published_table_covers_every_preset() -> None:
    assert sorted(row[0] for row in PUBLISHED) == sorted(PRESETS)


@pytest.mark.parametrize(("preset", "total", "active", "convention", "source"), PUBLISHED,
                         ids=[row[0] for row in PUBLISHED])
def test_param_counts_match_published_figures(preset: str, total: float, active: float | None,
                                              convention: str, source: str) -> None:
    counts = param_counts(PRESETS[preset].spec)
    outer = counts.embedding + counts.lm_head if convention == "body" else 0
    assert counts.total - outer == pytest.approx(total, rel=0.02), source
    ours = {"all": counts.active, "no_embedding": counts.active_non_embedding,
            "body": counts.active - outer}[convention]
    expected_active = active if active is not None else total  # dense: every parameter is active
    if active is None and PRESETS[preset].spec.is_moe:
        return  # only Qwen3-Next: its active figure is checked below at the precision it is published
    assert ours == pytest.approx(expected_active, rel=0.02), source


def test_qwen3_next_active_at_the_precision_it_is_published() -> None:
    """The card says "3B activated", one significant figure. The transformer body a token runs through
    (attention, 10 routed + 1 shared expert, router; embedding and LM head excluded) is 3.25B, which
    rounds to it. With embedding and LM head, as Qwen counts 3.3B for Qwen3-30B-A3B, it is 3.87B."""
    counts = param_counts(PRESETS["qwen3-next-80b-a3b"].spec)
    body = counts.active - counts.embedding - counts.lm_head
    assert round(body / B) == 3
    assert counts.active == pytest.approx(3.875 * B, rel=0.001)


def test_exact_counts_match_the_checkpoints() -> None:
    """Parameter totals of the released safetensors checkpoints (Hugging Face model pages / index files).

    DeepSeek-V3's checkpoint also holds the 14B MTP module and Qwen3-Next's a 1.65B MTP module
    (81,324,862,720 in all); the figures here are the main models, which is what ModelSpec describes.
    """
    exact = {
        "llama-3.1-8b": 8_030_261_248,
        "llama-3.2-1b": 1_235_814_400,
        "mixtral-8x7b": 46_702_792_704,
        "qwen2.5-32b": 32_763_876_352,
        "qwen3-next-80b-a3b": 79_674_391_296,
        "deepseek-v3": 671_026_419_200,
    }
    assert {name: param_counts(PRESETS[name].spec).total for name in exact} == exact


def test_gpt_oss_components_match_the_model_card_breakdown() -> None:
    """gpt-oss model card Table 1 splits the parameters: MLP, attention, embed + unembed."""
    for preset, mlp, attention in (("gpt-oss-20b", 19.12 * B, 0.64 * B), ("gpt-oss-120b", 114.71 * B, 0.96 * B)):
        spec, counts = PRESETS[preset].spec, param_counts(PRESETS[preset].spec)
        assert counts.expert_total + spec.moe_layers * counts.router_per_moe_layer == pytest.approx(mlp, rel=0.005)
        assert counts.attention_per_layer * spec.num_layers == pytest.approx(attention, rel=0.01)
        assert counts.embedding + counts.lm_head == pytest.approx(1.16 * B, rel=0.005)


def test_param_count_invariants_hold_for_every_preset() -> None:
    for preset in PRESETS.values():
        spec, c = preset.spec, param_counts(preset.spec)
        assert c.total == c.non_expert_total + c.expert_total
        assert c.lm_head == (0 if spec.tie_word_embeddings else c.embedding)
        if spec.is_moe:
            assert c.expert_total == spec.moe_layers * spec.num_routed_experts * c.expert_per_expert
            assert c.active == c.non_expert_total + spec.moe_layers * spec.experts_per_token * c.expert_per_expert
            assert c.active < c.total
        else:
            assert c.active == c.total
            assert c.expert_total == c.expert_per_expert == c.router_per_moe_layer == 0
        layers_sum = (spec.full_attention_layers * c.full_attention_per_layer
                      + spec.linear_attention_layers * c.linear_attention_per_layer)
        assert c.attention_per_layer * spec.num_layers == pytest.approx(layers_sum, rel=1e-12)


def test_component_formulas_on_hand_checked_layers() -> None:
    llama = param_counts(PRESETS["llama-3.1-8b"].spec)
    assert llama.attention_per_layer == 4096 * 4096 * 2 + 4096 * 1024 * 2
    assert llama.dense_mlp_per_layer == 3 * 4096 * 14336
    qwen2 = param_counts(PRESETS["qwen2.5-7b"].spec)  # q/k/v biases, no o_proj bias
    assert qwen2.attention_per_layer == 3584 * 3584 * 2 + 3584 * 512 * 2 + 3584 + 512 * 2
    ds = param_counts(PRESETS["deepseek-v3"].spec)
    assert ds.full_attention_per_layer == (7168 * 1536 + 1536 + 1536 * 128 * 192 + 7168 * 576 + 512
                                           + 512 * 128 * 256 + 128 * 128 * 7168)
    assert ds.router_per_moe_layer == 7168 * 256 + 256
    assert ds.shared_per_moe_layer == ds.expert_per_expert == 3 * 7168 * 2048
    nxt = param_counts(PRESETS["qwen3-next-80b-a3b"].spec)
    assert nxt.full_attention_per_layer == 2048 * (8192 + 1024) + 4096 * 2048 + 2 * 256
    assert nxt.linear_attention_per_layer == (2048 * (4096 + 8192 + 64) + 8192 * 4 + 64 + 128 + 4096 * 2048)
    assert nxt.shared_per_moe_layer == 3 * 2048 * 512 + 2048
    assert nxt.dense_mlp_per_layer == 0  # no dense layer although the config has intermediate_size

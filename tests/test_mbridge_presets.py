"""Megatron-Bridge's recipe conditions read from its performance presets (benchmarks/mbridge_presets.py), on a
small hand-written tree shaped like theirs, and the conditions the committed measurement rows carry."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import mbridge_presets as mp
from calibration_data import MEASUREMENTS, ROWS

UTILS = '''
from dataclasses import dataclass
@dataclass
class WorkloadBaseConfig:
    num_gpus: int = 1
    tensor_model_parallel_size: int = 1
    expert_model_parallel_size: int = 1
    global_batch_size: int = 1
    recompute_modules: list | None = None
    recompute_num_layers: int | None = None
    moe_flex_dispatcher_backend: str | None = None
    moe_a2a_overlap: bool = False
'''
OVERRIDES = '''
from megatron.bridge.training.flex_dispatcher_backend import apply_flex_dispatcher_backend
def _recompute(recipe, recompute_modules=None, recompute_num_layers=None):
    if recompute_num_layers is not None:
        recipe.model.recompute_granularity = "full"
        recipe.model.recompute_num_layers = recompute_num_layers
    if recompute_modules is not None:
        recipe.model.recompute_modules = recompute_modules
        recipe.model.recompute_granularity = "selective"
def _overlap(recipe, on=False):
    if on:
        recipe.comm_overlap.overlap_moe_expert_parallel_comm = True
def set_workload_base_configs(cfg, settings):
    cfg.model.expert_tensor_parallel_size = 1
    _overlap(cfg, on=settings.moe_a2a_overlap)
    _recompute(cfg, recompute_modules=settings.recompute_modules, recompute_num_layers=settings.recompute_num_layers)
    if settings.moe_flex_dispatcher_backend is not None:
        apply_flex_dispatcher_backend(cfg.model, settings.moe_flex_dispatcher_backend)
    elif hasattr(cfg.model, "moe_token_dispatcher_type"):
        cfg.model.moe_token_dispatcher_type = "alltoall"
'''
PRESETS = '''
from dataclasses import replace
from utils.utils import WorkloadBaseConfig
BASE_TOY_CONFIG = WorkloadBaseConfig(num_gpus=16, expert_model_parallel_size=8, global_batch_size=256)
TOY_PRETRAIN_CONFIG_H100_BF16_V1 = replace(BASE_TOY_CONFIG, recompute_modules=["moe_act"])
TOY_PRETRAIN_CONFIG_H100_BF16_V2 = replace(TOY_PRETRAIN_CONFIG_H100_BF16_V1, global_batch_size=512,
                                           moe_flex_dispatcher_backend="deepep", moe_a2a_overlap=True)
TOY_PRETRAIN_CONFIG_GB200_BF16_V1 = replace(TOY_PRETRAIN_CONFIG_H100_BF16_V2, recompute_modules=None)
TOY_PRETRAIN_CONFIG_GB200_FP8_MX_V1 = TOY_PRETRAIN_CONFIG_GB200_BF16_V1
'''
PERF = '''
from utils.overrides import set_workload_base_configs
from utils.utils import get_workload_base_config
from megatron.bridge.recipes.toy import toy_pretrain_config
GRAPHS = {"h100": "transformer_engine"}
def _graph_impl(gpu):
    return GRAPHS.get(gpu) or "none"
def set_toy_common_configs(cfg):
    cfg.model.cuda_graph_impl = _graph_impl("h100")
def toy_pretrain_config_h100(precision="bf16", mock=True, config_variant="v1"):
    base_cfg = get_workload_base_config(model_recipe_name="toy", gpu="h100", compute_dtype=precision.upper())
    cfg = toy_pretrain_config(mock=mock)
    set_toy_common_configs(cfg)
    set_workload_base_configs(cfg, base_cfg)
    return cfg
def toy_pretrain_config_gb200(precision="bf16", mock=True, config_variant="v1"):
    base_cfg = get_workload_base_config(model_recipe_name="toy", gpu="gb200", compute_dtype=precision.upper())
    cfg = toy_pretrain_config(mock=mock, recompute="full")
    if precision == "fp8_mx":
        cfg.model.cuda_graph_scope = ["attn"]
    if mock and some_flag():
        cfg.model.cuda_graph_impl = "local"
    set_workload_base_configs(cfg, base_cfg)
    return cfg
'''
RECIPE_INIT = "from megatron.bridge.recipes.toy.toy import toy_pretrain_config\n"
RECIPE = '''
def toy_pretrain_config(**user_kwargs):
    recommended = {"recompute": "selective", "dispatcher": "alltoall"}
    return _toy_common(**{**recommended, **user_kwargs})
def _toy_common(recompute=None, dispatcher=None, mock=False):
    cfg = ConfigContainer()
    cfg.model.recompute_granularity = recompute
    cfg.model.moe_token_dispatcher_type = dispatcher
    return cfg
'''
TREE = {
    "scripts/performance/utils/utils.py": UTILS,
    "scripts/performance/utils/overrides.py": OVERRIDES,
    "scripts/performance/configs/toy/toy_workload_base_configs.py": PRESETS,
    "scripts/performance/configs/toy/toy_llm_pretrain.py": PERF,
    "src/megatron/bridge/recipes/toy/__init__.py": RECIPE_INIT,
    "src/megatron/bridge/recipes/toy/toy.py": RECIPE,
}
PRESET_FILE = "scripts/performance/configs/toy/toy_workload_base_configs.py"
PERF_FILE = "scripts/performance/configs/toy/toy_llm_pretrain.py"


def _find_def(name: str, folder: str) -> str | None:
    return next((p for p, text in TREE.items() if p.startswith(folder) and f"def {name}(" in text), None)


@pytest.fixture()
def presets() -> dict[str, dict]:
    return mp.read_presets(PRESETS, mp.dataclass_defaults(UTILS, "WorkloadBaseConfig"))


def _conditions(name: str, presets: dict[str, dict]) -> dict:
    key = mp.preset_key(name)
    assert key is not None
    source = mp.Source(read=TREE.get, find_def=_find_def)
    tree = source.tree(PERF_FILE)
    names = mp.perf_function_names(key.model, key.task, key.gpu)
    func = next(n for n in tree.body if getattr(n, "name", "") in names)
    return mp.run_conditions(source, PERF_FILE, func, key, presets[name], presets)


def test_replace_chains_resolve_over_the_dataclass_defaults(presets):
    v1, v2 = presets["TOY_PRETRAIN_CONFIG_H100_BF16_V1"], presets["TOY_PRETRAIN_CONFIG_H100_BF16_V2"]
    assert v1["recompute_modules"] == ["moe_act"] and v1["global_batch_size"] == 256
    assert v1["tensor_model_parallel_size"] == 1 and v1["moe_flex_dispatcher_backend"] is None  # defaults
    assert v2["recompute_modules"] == ["moe_act"] and v2["global_batch_size"] == 512  # inherited, overridden
    gb200 = presets["TOY_PRETRAIN_CONFIG_GB200_BF16_V1"]
    assert gb200["recompute_modules"] is None and gb200["moe_a2a_overlap"] is True
    assert presets["TOY_PRETRAIN_CONFIG_GB200_FP8_MX_V1"] == gb200  # an alias


def test_preset_names_of_both_schemes():
    assert mp.preset_key("GPT_OSS_120B_PRETRAIN_CONFIG_H100_FP8_CS_V2") == mp.PresetKey(
        "GPT_OSS_120B", "PRETRAIN", "h100", "FP8_CS", "V2")
    assert mp.preset_key("LLAMA3_70B_GB200_FP8_MX_BASE_CONFIG") == mp.PresetKey(
        "LLAMA3_70B", "PRETRAIN", "gb200", "FP8_MX", "")
    assert mp.preset_key("BASE_LLAMA3_70B_CONFIG") is None


def test_preset_modules_make_recompute_selective_over_the_recipe_default(presets):
    state = _conditions("TOY_PRETRAIN_CONFIG_H100_BF16_V1", presets)
    assert state["recompute_granularity"] == "selective" and state["recompute_modules"] == ["moe_act"]
    assert state["moe_token_dispatcher_type"] == "alltoall"  # the override layer's fallback
    assert state["cuda_graph_impl"] == "transformer_engine"  # a helper's return value, through dict.get and `or`
    assert state["expert_tensor_parallel_size"] == 1
    assert "overlap_moe_expert_parallel_comm" not in state


def test_flex_backend_and_overlap_from_the_preset(presets):
    state = _conditions("TOY_PRETRAIN_CONFIG_H100_BF16_V2", presets)
    assert (state["moe_token_dispatcher_type"], state["moe_flex_dispatcher_backend"]) == ("flex", "deepep")
    assert state["overlap_moe_expert_parallel_comm"] is True


def test_recipe_kwargs_branches_and_gpu_gates(presets):
    bf16 = _conditions("TOY_PRETRAIN_CONFIG_GB200_BF16_V1", presets)
    assert bf16["recompute_granularity"] == "full"  # the perf function's keyword over the recipe's recommended one
    # DeepEP does not run on GB200: apply_flex_dispatcher_backend leaves the recipe's dispatcher
    assert bf16["moe_token_dispatcher_type"] == "alltoall"
    assert bf16["cuda_graph_impl"] is mp.UNKNOWN  # set under a condition the reader cannot decide
    assert "cuda_graph_scope" not in bf16  # the fp8_mx branch did not run
    assert _conditions("TOY_PRETRAIN_CONFIG_GB200_FP8_MX_V1", presets)["cuda_graph_scope"] == ["attn"]


# --- the committed measurement rows ---
def _csv_rows() -> list[dict[str, str]]:
    with (MEASUREMENTS / "megatron_bridge.csv").open(newline="") as f:
        return list(csv.DictReader(f))


def test_gpt_oss_h100_rows_carry_their_presets_recompute_modules():
    rows = [r for r in _csv_rows() if r["model"] == "GPT OSS 120B" and r["system"] == "DGX-H100"
            and r["conditions_source"]]
    assert {r["release"] for r in rows} >= {"25.11", "26.02", "26.04", "26.04.01", "26.06"}
    # 0.2.0's set_recompute_overrides set the modules but not the granularity, and the GPT-OSS recipe none:
    # MCore recomputes modules only under "selective", so the 25.11 run recomputed nothing
    assert next(r["recompute"] for r in rows if r["release"] == "25.11") == "none"
    for r in (r for r in rows if r["release"] != "25.11"):
        assert (r["recompute"], set(r["recompute_modules"].split("+"))) == ("selective", {"layernorm", "moe_act"})
        assert "GPT_OSS_120B_PRETRAIN_CONFIG_H100_BF16" in r["conditions_source"]
    row = next(r for r in ROWS if r.name.startswith("MB 26.04 pre-training GPT OSS 120B 64xH100 BF16"))
    assert row.checkpointing == "selective" and set(row.recompute_modules) == {"layernorm", "moe_act"}
    assert row.layout["dispatcher"] == "alltoall" and row.layout["etp"] == 1 and not row.ep_overlap


def test_deepseek_rows_state_mla_up_projection_recompute_and_hybridep():
    rows = [r for r in _csv_rows() if r["model"] == "DeepSeekV3" and r["release"] == "26.04"
            and r["system"] == "DGX-GB300"]
    assert rows and all(r["recompute_modules"] == "mla_up_proj" and r["flex_backend"] == "hybridep" for r in rows)


def test_every_row_has_conditions_or_says_why_not():
    rows = _csv_rows()
    with_conditions = [r for r in rows if r["conditions_source"]]
    assert len(with_conditions) >= 240
    assert all(r["conditions_note"] for r in rows if not r["conditions_source"])
    assert all("@" in r["conditions_source"] for r in with_conditions)
    by_release = {release: [r for r in rows if r["release"] == release] for release in ("25.09", "26.08")}
    assert sum(bool(r["conditions_source"]) for r in by_release["25.09"]) >= 20  # the YAML presets
    assert sum(bool(r["conditions_source"]) for r in by_release["26.08"]) >= 17  # the flat recipes


def test_25_09_yaml_preset_and_command_line():
    """25.09's run_script: DeepSeek-V3 on H100 took DeepEP, 1F1B EP overlap and recompute of the MLA up
    projection and the MLP; the Qwen3 runs dropped tokens (capacity factor 1)."""
    rows = _csv_rows()
    h100 = next(r for r in rows if r["release"] == "25.09" and r["model"] == "DeepSeekV3" and r["system"] == "DGX-H100")
    assert (h100["recompute"], h100["recompute_modules"]) == ("selective", "mla_up_proj+mlp")
    assert (h100["dispatcher"], h100["flex_backend"], h100["ep_overlap"]) == ("flex", "deepep", "true")
    qwen = [r for r in rows if r["release"] == "25.09" and r["model"].startswith("Qwen3") and r["conditions_source"]]
    assert qwen and all(r["capacity_factor"] == "expert 1.0" for r in qwen)

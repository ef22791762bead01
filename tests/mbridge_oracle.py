"""Test oracle: Megatron-Bridge 0.6.2 and Megatron-Core 0.19.2 judging override sets on a CPU.

The worker runs in the oracle's own venv (`.venv-mb`, made by scripts/setup-mbridge-oracle.sh; never a
dependency of the tool) and answers batches of cases over JSON lines, so the ~10 s import is paid once.
For each case it builds the named recipe function's ConfigContainer (offline: the recipe's Hugging Face
config comes from `HF_CONFIGS` below), applies the override list through Megatron-Bridge's own Hydra
parser, and runs its validation: `runtime_config_update` (mixed precision, DP size, CommOverlapConfig,
ConfigContainer.validate with MCore's TransformerConfig checks, the flex-dispatcher GPU check), then MCore's
`initialize_model_parallel` and `get_num_layers_to_build` under torch's fake process group.

Emulated, and said so: the GPU (`torch.cuda.get_device_properties` returns the case's GPU name and
compute capability), the container's Transformer Engine version (2.12.0), and the TE-only fused kernels
MCore refuses without TE (switched off: they are not part of any rule here). `install_shim` lets the one
unguarded `import transformer_engine.pytorch` in megatron-bridge succeed against an inert placeholder
(it copies no package code).

Protocol: one JSON request per line: {"cases": [{"recipe", "world_size", "overrides": [...], "gpu":
[name, major, minor], optionally "config_file": a YAML override file, "read": [dotted paths], "flops": true}]}; one
answer per line: {"results": [{"ok": bool, "error": "Type: message", "values": {path: the validated config's value,
"flops": Megatron-Bridge's model FLOPs of one sequence when asked}}]}.
The data script's requests: {"fields": [recipe functions], "read": [...]}, {"precisions": [fields]} and
{"functions": true} (every recipe function's name).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# A fine-tune's override set reads its checkpoint from the environment (overrides.PRETRAINED_ENV), as the
# launch script requires; config-time validation asks that the path exists (an empty folder here).
PRETRAINED_ENV = "PRETRAINED_CHECKPOINT"
ORACLE_PYTHON = ROOT / ".venv-mb" / "bin" / "python"
TE_VERSION = "2.12.0"

# Public config.json values of the models whose recipes the tests run (Hugging Face model cards).
HF_CONFIGS: dict[str, dict[str, Any]] = {
    "Qwen/Qwen3-30B-A3B": {
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 2048,
        "intermediate_size": 6144, "moe_intermediate_size": 768, "num_hidden_layers": 48,
        "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128,
        "num_experts_per_tok": 8, "vocab_size": 151936, "max_position_embeddings": 40960,
        "rope_theta": 1000000.0, "rms_norm_eps": 1e-06, "tie_word_embeddings": False, "norm_topk_prob": True,
        "torch_dtype": "bfloat16", "decoder_sparse_step": 1, "mlp_only_layers": [],
    },
    "Qwen/Qwen3-235B-A22B": {
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 4096,
        "intermediate_size": 12288, "moe_intermediate_size": 1536, "num_hidden_layers": 94,
        "num_attention_heads": 64, "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128,
        "num_experts_per_tok": 8, "vocab_size": 151936, "max_position_embeddings": 40960,
        "rope_theta": 1000000.0, "rms_norm_eps": 1e-06, "tie_word_embeddings": False, "norm_topk_prob": True,
        "torch_dtype": "bfloat16", "decoder_sparse_step": 1, "mlp_only_layers": [],
    },
    "deepseek-ai/DeepSeek-V3": {
        "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 7168,
        "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61,
        "num_attention_heads": 128, "num_key_value_heads": 128, "n_routed_experts": 256, "n_shared_experts": 1,
        "num_experts_per_tok": 8, "first_k_dense_replace": 3, "moe_layer_freq": 1, "kv_lora_rank": 512,
        "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
        "n_group": 8, "topk_group": 4, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid",
        "topk_method": "noaux_tc", "norm_topk_prob": True, "vocab_size": 129280, "max_position_embeddings": 163840,
        "rope_theta": 10000, "rms_norm_eps": 1e-06, "tie_word_embeddings": False, "num_nextn_predict_layers": 1,
        "torch_dtype": "bfloat16", "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40,
                                                    "mscale": 1.0, "mscale_all_dim": 1.0,
                                                    "original_max_position_embeddings": 4096, "type": "yarn"},
    },
    "meta-llama/Meta-Llama-3.1-8B": {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
        "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
        "vocab_size": 128256, "max_position_embeddings": 131072, "rope_theta": 500000.0, "rms_norm_eps": 1e-05,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    },
    "meta-llama/Meta-Llama-3.1-70B": {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 8192,
        "intermediate_size": 28672, "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
        "vocab_size": 128256, "max_position_embeddings": 131072, "rope_theta": 500000.0, "rms_norm_eps": 1e-05,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    },
    # Moonlight-16B-A3B: the recipes load it by this id (`AutoBridge.from_hf_pretrained`); the catalog fixture
    "moonshotai/Moonlight-16B-A3B": json.loads(
        (ROOT / "tests" / "fixtures" / "hf_configs" / "moonlight-16b-a3b" / "config.json").read_text()),
}
# The other recipes' models, by a fragment of the Hugging Face id the recipe loads: (config class, architecture).
# Their field lists (`fields` requests) need only the classes the recipe builds, which the architecture selects
# (its bridge's provider); the sizes are the config class's defaults.
ARCHITECTURES = (("Kimi-K2", "deepseek_v3", "KimiK2ForCausalLM"),
                 ("DeepSeek-V3", "deepseek_v3", "DeepseekV3ForCausalLM"),
                 ("gpt-oss", "gpt_oss", "GptOssForCausalLM"),
                 ("Qwen3-Next", "qwen3_next", "Qwen3NextForCausalLM"),
                 ("-A3B", "qwen3_moe", "Qwen3MoeForCausalLM"), ("-A22B", "qwen3_moe", "Qwen3MoeForCausalLM"),
                 ("Qwen3-", "qwen3", "Qwen3ForCausalLM"), ("Qwen2", "qwen2", "Qwen2ForCausalLM"),
                 ("Llama", "llama", "LlamaForCausalLM"))
# The Megatron-side knobs that need Transformer Engine kernels (not part of any rule here): the model's before the
# set's overrides; the optimizer's after them, since the compiler writes the precision-aware optimizer (TE's
# FusedAdam, absent on the oracle's CPU) for BF16 runs.
TE_KNOBS = ["model.apply_rope_fusion=false", "model.moe_permute_fusion=false"]
TE_OPTIMIZER_KNOBS = ["optimizer.use_precision_aware_optimizer=false", "optimizer.main_grads_dtype=torch.float32",
                      "optimizer.exp_avg_dtype=torch.float32", "optimizer.exp_avg_sq_dtype=torch.float32"]


# ---------------------------------------------------------------------------------------------------------
# Worker side (runs in the oracle venv)
# ---------------------------------------------------------------------------------------------------------
def install_shim() -> None:
    """Python 3.11's missing typing.override, and a placeholder for megatron-bridge's one unguarded TE import."""
    import importlib
    import importlib.util
    import types
    import typing

    if not hasattr(typing, "override"):
        import typing_extensions

        typing.override = typing_extensions.override  # type: ignore[attr-defined]
    if importlib.util.find_spec("transformer_engine") is not None:
        return

    def bare_package(name: str) -> None:  # registered without running its __init__
        spec = importlib.util.find_spec(name)
        module = types.ModuleType(name)
        module.__path__ = list(spec.submodule_search_locations)  # type: ignore[union-attr]
        module.__spec__ = spec
        sys.modules[name] = module

    class Placeholder(types.ModuleType):
        def __getattr__(self, attr: str) -> Any:
            if attr.startswith("__"):
                raise AttributeError(attr)
            return type(attr, (), {}) if attr[:1].isupper() else Placeholder(f"{self.__name__}.{attr}")

    te_names = ("transformer_engine", "transformer_engine.pytorch")
    bare_package("megatron.bridge")
    bare_package("megatron.bridge.peft")
    for name in ("megatron.core.transformer.moe.moe_utils", "megatron.bridge.peft.adapter_wrapper",
                 "megatron.bridge.peft.lora_merge"):
        importlib.import_module(name)
    for name in te_names:
        sys.modules[name] = Placeholder(name)
    sys.modules["transformer_engine"].pytorch = sys.modules["transformer_engine.pytorch"]  # type: ignore[attr-defined]
    try:
        importlib.import_module("megatron.bridge.peft.lora_layers")
    finally:
        for name in te_names:
            sys.modules.pop(name, None)
    sys.modules.pop("megatron.bridge.peft")
    sys.modules.pop("megatron.bridge")


class _Worker:
    def __init__(self) -> None:
        import logging
        import warnings

        logging.disable(logging.WARNING)
        warnings.simplefilter("ignore")
        install_shim()
        import packaging.version
        import transformers
        from megatron.bridge.models.conversion.auto_bridge import AutoBridge
        from megatron.core import utils as mcore_utils

        self.configs = {}
        for hub_id, values in HF_CONFIGS.items():
            kind = transformers.CONFIG_MAPPING[values["model_type"]]
            self.configs[hub_id] = kind(**{k: v for k, v in values.items() if k != "model_type"})
        original = AutoBridge.from_hf_config
        AutoBridge.from_hf_pretrained = classmethod(lambda cls, path, **kw: original(self.hf_config(str(path))))
        mcore_utils._te_version = packaging.version.Version(TE_VERSION)
        self.recipes: dict[str, Any] = {}

    def hf_config(self, hub_id: str) -> Any:
        """The recipe's Hugging Face config: the tests' own, else the architecture's defaults."""
        import transformers

        if hub_id not in self.configs:
            model_type, architecture = next((t, a) for part, t, a in ARCHITECTURES if part in hub_id)
            self.configs[hub_id] = transformers.CONFIG_MAPPING[model_type](architectures=[architecture])
        return self.configs[hub_id]

    def fields(self, recipe: str, read: list[str]) -> dict[str, Any]:
        """The recipe's ConfigContainer as field names: {"root": its fields, "classes": {class: {"target": module
        path, "fields": {field: nested class, "*" (a mapping: any key) or None (a value)}, "required": the fields
        without a default}}} for every dataclass reached from it, and "values": the recipe's value at each dotted
        path of `read` that it holds (a section it leaves None holds none) as JSON carries it; "hydra": the config
        Megatron-Bridge lets Hydra override (`create_omegaconf_dict_config`): the fields it leaves out ("excluded":
        callables and objects OmegaConf cannot hold, e.g. a LoRA `peft`) and its leaves that are None ("unset",
        where a `+key=value` appends rather than refusing "An item is already at ...")."""
        import dataclasses

        classes: dict[str, dict[str, Any]] = {}

        def walk(obj: Any) -> dict[str, Any]:
            fields: dict[str, Any] = {}
            for f in dataclasses.fields(obj):
                value = getattr(obj, f.name, None)
                if dataclasses.is_dataclass(value) and not isinstance(value, type):
                    kind = type(value)
                    required = sorted(g.name for g in dataclasses.fields(value) if g.init and g.default is
                                      dataclasses.MISSING and g.default_factory is dataclasses.MISSING)
                    classes[kind.__name__] = {"target": f"{kind.__module__}.{kind.__qualname__}", "fields": walk(value),
                                              "required": required}
                    fields[f.name] = kind.__name__
                else:
                    fields[f.name] = "*" if isinstance(value, dict) else None
            return fields

        cfg = self.base(recipe)
        from megatron.bridge.training.utils.omegaconf_utils import create_omegaconf_dict_config
        from omegaconf import OmegaConf

        tree, excluded = create_omegaconf_dict_config(cfg)  # what Hydra's overrides apply to
        unset = [path for path, value in _leaves(OmegaConf.to_container(tree)) if value is None]
        values = {}
        for path in read:
            value: Any = cfg
            for part in path.split("."):
                value = getattr(value, part, _ABSENT) if value is not None else _ABSENT
            if isinstance(value, (list, tuple)) and all(isinstance(v, (bool, int, float, str)) for v in value):
                values[path] = list(value)
            elif isinstance(value, (bool, int, float, str, type(None))):
                values[path] = value
        hydra = {"excluded": sorted(path.removeprefix("root.") for path in excluded), "unset": sorted(unset)}
        return {"root": walk(cfg), "classes": classes, "values": values, "hydra": hydra}

    def precisions(self, read: list[str]) -> dict[str, dict[str, Any]]:
        """Every mixed-precision recipe name Megatron-Bridge registers (underscore spelling) with the `read` fields
        of the MixedPrecisionConfig it returns."""
        from megatron.bridge.training.mixed_precision import MIXED_PRECISION_RECIPES

        return {name: {field: getattr(make(), field) for field in read}
                for name, make in sorted(MIXED_PRECISION_RECIPES.items()) if "-" not in name}

    def functions(self) -> list[str]:
        """The recipe functions Megatron-Bridge exports (megatron.bridge.recipes: its callables named *_config)."""
        import megatron.bridge.recipes as recipes

        return sorted(name for name in dir(recipes)
                      if name.endswith("_config") and not name.startswith("_") and callable(getattr(recipes, name)))

    def base(self, recipe: str) -> Any:
        import copy

        import megatron.bridge.recipes as recipes

        if recipe not in self.recipes:
            self.recipes[recipe] = getattr(recipes, recipe)()
        return copy.deepcopy(self.recipes[recipe])

    def judge(self, case: dict[str, Any]) -> dict[str, Any]:
        from types import SimpleNamespace
        from unittest import mock

        import torch.distributed as dist
        from megatron.bridge.training.config import runtime_config_update
        from megatron.bridge.training.utils.omegaconf_utils import process_config_with_overrides
        from megatron.core import parallel_state
        from megatron.core.transformer.transformer_block import get_num_layers_to_build
        from torch.testing._internal.distributed.fake_pg import FakeStore

        name, major, minor = case["gpu"]
        props = SimpleNamespace(name=name, major=major, minor=minor, total_memory=80 * 2**30,
                                multi_processor_count=132)
        world = case["world_size"]
        os.environ["WORLD_SIZE"] = str(world)
        try:
            cfg = self.base(case["recipe"])
            process_config_with_overrides(cfg, config_filepath=case.get("config_file"),
                                          cli_overrides=[*TE_KNOBS, *case["overrides"], *TE_OPTIMIZER_KNOBS])
            with mock.patch("torch.cuda.get_device_properties", return_value=props), \
                    mock.patch("torch.cuda.is_available", return_value=True):
                runtime_config_update(cfg)
            m = cfg.model
            dist.init_process_group("fake", rank=0, world_size=world, store=FakeStore())
            try:
                parallel_state.initialize_model_parallel(
                    tensor_model_parallel_size=m.tensor_model_parallel_size,
                    pipeline_model_parallel_size=m.pipeline_model_parallel_size,
                    virtual_pipeline_model_parallel_size=m.virtual_pipeline_model_parallel_size,
                    context_parallel_size=m.context_parallel_size,
                    hierarchical_context_parallel_sizes=m.hierarchical_context_parallel_sizes,
                    expert_model_parallel_size=m.expert_model_parallel_size,
                    expert_tensor_parallel_size=m.expert_tensor_parallel_size,
                    create_gloo_process_groups=False)
                for stage in range(m.virtual_pipeline_model_parallel_size or 1):
                    get_num_layers_to_build(m, vp_stage=stage if m.virtual_pipeline_model_parallel_size else None)
            finally:
                parallel_state.destroy_model_parallel()
                dist.destroy_process_group()
        except Exception as exc:  # the verdict: whatever Megatron raises
            return {"ok": False, "error": f"{type(exc).__name__}: {' '.join(str(exc).split())}"}
        values = {path: _read(cfg, path) for path in case.get("read", ())}
        if case.get("flops"):  # Megatron-Bridge's model FLOPs of one sequence (what its TFLOP/s/GPU divide)
            from megatron.bridge.training.utils.flop_utils import num_floating_point_operations

            values["flops"] = float(num_floating_point_operations(cfg, batch_size=1))
        return {"ok": True, "error": None, "values": values}


_ABSENT = object()  # a path the recipe's config does not reach


def _leaves(tree: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """(dotted path, value) of every leaf of a nested mapping."""
    out = []
    for key, value in tree.items():
        path = f"{prefix}{key}"
        out += _leaves(value, path + ".") if isinstance(value, dict) else [(path, value)]
    return out


def _read(cfg: Any, dotted: str) -> Any:
    """A value of the validated ConfigContainer, as JSON can carry it (what an override really set)."""
    value = cfg
    for part in dotted.split("."):
        value = getattr(value, part, None)  # None: the section is absent (an sft recipe has no peft)
    return value if isinstance(value, (bool, int, float, str, type(None))) else repr(value)


def serve() -> None:
    worker = _Worker()
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        if "precisions" in request:
            print(json.dumps({"precisions": worker.precisions(request["precisions"])}), flush=True)
            continue
        if "functions" in request:
            print(json.dumps({"functions": worker.functions()}), flush=True)
            continue
        if "fields" in request:
            print(json.dumps({"fields": {recipe: worker.fields(recipe, request.get("read", []))
                                         for recipe in request["fields"]}}), flush=True)
            continue
        print(json.dumps({"results": [worker.judge(case) for case in request["cases"]]}), flush=True)


# ---------------------------------------------------------------------------------------------------------
# Test side
# ---------------------------------------------------------------------------------------------------------
def available() -> bool:
    return ORACLE_PYTHON.exists()


class Oracle:
    """A running worker in the oracle venv; `judge` sends a batch of cases and waits for the verdicts."""

    def __init__(self) -> None:
        self.checkpoint = tempfile.mkdtemp(prefix="pretrained-megatron-")
        self.proc = subprocess.Popen([str(ORACLE_PYTHON), "-c", "from mbridge_oracle import serve; serve()"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     cwd=Path(__file__).parent, env={**os.environ, "HF_HUB_OFFLINE": "1",
                                                                     PRETRAINED_ENV: self.checkpoint})
        self._read()

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"Megatron-Bridge oracle worker died (exit {self.proc.poll()})")
        return json.loads(line)

    def judge(self, cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"cases": cases}) + "\n")
        self.proc.stdin.flush()
        return self._read()["results"]

    def fields(self, recipes: list[str], read: list[str]) -> dict[str, Any]:
        """Each recipe function's ConfigContainer field tree and its values at the `read` paths (`_Worker.fields`)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"fields": recipes, "read": read}) + "\n")
        self.proc.stdin.flush()
        return self._read()["fields"]

    def functions(self) -> list[str]:
        """Every recipe function Megatron-Bridge exports (`_Worker.functions`)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"functions": True}) + "\n")
        self.proc.stdin.flush()
        return self._read()["functions"]

    def precisions(self, read: list[str]) -> dict[str, dict[str, Any]]:
        """The `read` fields of every mixed-precision recipe Megatron-Bridge registers (`_Worker.precisions`)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"precisions": read}) + "\n")
        self.proc.stdin.flush()
        return self._read()["precisions"]

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)
        os.rmdir(self.checkpoint)

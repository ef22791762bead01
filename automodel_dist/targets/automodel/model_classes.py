"""The model class AutoModel 0.7.0 builds for each catalog family, and what that class supports.

AutoModel picks its own implementation when the config's architecture is in its `ModelRegistry`
(`_transformers/registry.py` MODEL_ARCH_MAPPING), else the Hugging Face class. Its start-up check
`capabilities.validate_for_mesh` then refuses tp > 1 on a class that is neither in `PARALLELIZE_FUNCTIONS`
(`components/distributed/optimized_tp_plans.py`) nor carries a `_tp_plan`, and ep > 1 on a class that
does not inherit `MoEFSDPSyncMixin` (AutoModel's own MoE classes). Mixtral has no AutoModel class, so it
runs on Hugging Face's, which has a TP plan but no expert parallelism. AutoModel's custom MoE classes
(Qwen3-MoE, Qwen3-Next, DeepSeek-V3 and Kimi-K2, GPT-OSS) have no TP plan.

tests/test_model_oracle.py checks every row against the installed AutoModel's registries.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from automodel_dist.catalog.specs import ModelSpec


@dataclass(frozen=True)
class ModelClass:
    """`name` is the class's __name__ (AutoModel's messages use it); `custom`: AutoModel's own implementation
    (it carries a BackendConfig: TE attention, MoE dispatchers); `tp_plan`: tp > 1 is accepted;
    `moe_mixin`: inherits MoEFSDPSyncMixin, so ep > 1 is accepted."""

    name: str
    custom: bool
    tp_plan: bool
    moe_mixin: bool


# catalog family (ModelSpec.family, the config's model_type) -> the class AutoModel 0.7.0 builds.
MODEL_CLASSES: dict[str, ModelClass] = {
    "llama": ModelClass("LlamaForCausalLM", custom=True, tp_plan=True, moe_mixin=False),
    "mistral": ModelClass("MistralForCausalLM", custom=False, tp_plan=True, moe_mixin=False),
    "qwen2": ModelClass("Qwen2ForCausalLM", custom=True, tp_plan=True, moe_mixin=False),
    "qwen3": ModelClass("Qwen3ForCausalLM", custom=True, tp_plan=True, moe_mixin=False),
    "qwen3_moe": ModelClass("Qwen3MoeForCausalLM", custom=True, tp_plan=False, moe_mixin=True),
    "qwen3_next": ModelClass("Qwen3NextForCausalLM", custom=True, tp_plan=False, moe_mixin=True),
    "mixtral": ModelClass("MixtralForCausalLM", custom=False, tp_plan=True, moe_mixin=False),
    "deepseek_v3": ModelClass("DeepseekV3ForCausalLM", custom=True, tp_plan=False, moe_mixin=True),
    "kimi_k2": ModelClass("DeepseekV3ForCausalLM", custom=True, tp_plan=False, moe_mixin=True),
    "gpt_oss": ModelClass("GptOssForCausalLM", custom=True, tp_plan=False, moe_mixin=True),
}
# The Hugging Face `architectures` entry and `model_type` of each family's config.json (Kimi-K2 ships the
# DeepSeek-V3 architecture under its own model_type, which only remote code reads).
HF_MODEL_TYPES = {family: ("deepseek_v3" if family == "kimi_k2" else family) for family in MODEL_CLASSES}


def model_class(family: str) -> ModelClass | None:
    """The class AutoModel builds for a catalog family; None for a family it is not known for."""
    return MODEL_CLASSES.get(family)


def automodel_moe(model: ModelSpec) -> bool:
    """The model runs on one of AutoModel's own MoE classes: expert parallelism, a BackendConfig (kernels,
    token dispatcher) and its pipeline patches apply. A family not in the table is judged by having experts."""
    cls = model_class(model.family)
    return cls.moe_mixin if cls is not None else model.is_moe


def tp_plan_message(tp: int, cls: str) -> str:
    """AutoModel's own wording (capabilities.validate_for_mesh), first line."""
    return (f"Tensor parallelism (tp_size={tp}) requested but {cls} has no TP plan (not in PARALLELIZE_FUNCTIONS "
            "and no `_tp_plan` attribute).")


def ep_moe_message(ep: int, cls: str) -> str:
    """AutoModel's own wording (capabilities.validate_for_mesh), first line."""
    return f"Expert parallelism (ep_size={ep}) requires a MoE model, but {cls} does not inherit from MoEFSDPSyncMixin."


def mfsdp_moe_message(cls: ModelClass | None) -> str:
    """What AutoModel 0.7.0 raises wrapping an MoE model with MegatronFSDP: its own classes define no
    `_no_split_modules` (parallelizer._derive_megatron_fsdp_unit_modules); with the unit modules given, or on
    Hugging Face's class, megatron-fsdp 0.5.0 looks up the expert data-parallel group it was never given."""
    if cls is not None and cls.custom:
        return ("distributed.megatron_fsdp_unit_modules was not provided and the model does not define a non-empty "
                "'_no_split_modules' to derive them from.")
    return "AttributeError: 'NoneType' object has no attribute 'size'"

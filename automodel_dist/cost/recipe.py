"""RecipeOptions read from an AutoModel recipe: the settings outside the Layout that move memory or time.

`validate` estimates recipes someone already has; their choices (deferred gradient sync off, bf16
reduction, a fused cross entropy, selective checkpointing, per-layer compile, fp32 weights) must reach
the cost model, or a recipe that runs would be called an OOM (AutoModel's own 70B benchmark sets
`defer_fsdp_grad_sync: false` for exactly that reason).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from automodel_dist.cost.host import graphed_modules
from automodel_dist.cost.memory import AUTOMODEL_DEFAULTS, RecipeOptions

_SIXTEEN_BIT = ("bfloat16", "bf16", "float16", "half", "fp16")
_THIRTY_TWO_BIT = ("float32", "float", "fp32")


def _section(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _dtype(value: Any) -> str | None:
    """Lower-case dtype name without a `torch.` prefix, or None when unset or not a string."""
    return value.lower().removeprefix("torch.") if isinstance(value, str) else None


def recipe_options(recipe: Mapping[str, Any]) -> RecipeOptions:
    """The RecipeOptions an AutoModel recipe mapping implies (AutoModel's defaults where it is silent)."""
    distributed = _section(recipe.get("distributed"))
    model = _section(recipe.get("model"))
    backend = _section(model.get("backend"))
    loss = _section(recipe.get("loss_fn"))

    defer = distributed.get("defer_fsdp_grad_sync", AUTOMODEL_DEFAULTS.defer_grad_sync)
    reduce = _dtype(_section(distributed.get("mp_policy")).get("reduce_dtype"))
    target = loss.get("_target_")
    logit_bytes: float | None = None
    if isinstance(target, str) and target.endswith("FusedLinearCrossEntropy"):
        logit_bytes = 0.0
    elif isinstance(target, str) and target.endswith("MaskedCrossEntropy") and loss.get("fp32_upcast") is False:
        logit_bytes = 4.0  # bf16 logits and a bf16 log-softmax
    graphed = _section(backend.get("cuda_graph")).get("modules")
    # FSDP2's per-layer torch.compile (`enable_compile`), inert on the EP path (automodel.md §3.3)
    ep_size = distributed.get("ep_size", 1)
    compiled = distributed.get("enable_compile") is True and not (isinstance(ep_size, int) and ep_size > 1)
    # activation checkpointing, selective too, is the layout's (parse reads it into Layout.activation_checkpointing)
    return RecipeOptions(
        master_weights="fp32" if _dtype(model.get("torch_dtype")) in _THIRTY_TWO_BIT else "bf16",
        logit_bytes=logit_bytes,
        defer_grad_sync=defer if isinstance(defer, bool) else AUTOMODEL_DEFAULTS.defer_grad_sync,
        reduce_dtype="bfloat16" if reduce in _SIXTEEN_BIT else "float32",
        async_tp=distributed.get("enable_async_tensor_parallel") is True,
        balanced_gate=backend.get("fake_balanced_gate") is True,
        fsdp_optimizations=backend.get("enable_fsdp_optimizations") is True,
        preserve_fp32_weights=distributed.get("preserve_fp32_weights") is True,
        grad_reduce_in_fp32=distributed.get("grad_reduce_in_fp32") is True,
        compiled=True if compiled else None,
        # AutoModel captures per-layer graphs of the listed modules (Transformer Engine's graphed callables)
        cuda_graphs=graphed_modules("transformer_engine", (m for m in graphed if isinstance(m, str)))
        if isinstance(graphed, list) else (),
    )

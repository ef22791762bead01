"""CPU stand-ins for the GPU-only calls in AutoModel 0.7.0's model build, all in one place.

AutoModel's own code builds the model on the meta device under torch's fake process group; these few
calls would touch a GPU (or sleep waiting for one) and are replaced for the duration of a dry-run, in
the worker process only. Each target is a private function of nemo-automodel 0.7.0 (the version the
`oracle` extra pins); tests/test_model_oracle.py checks that every target still exists there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module
from typing import Any


@dataclass(frozen=True)
class StandIn:
    """Replace `attribute` of `module` (a dotted path; `Class.method` for a method) with `make(original)`."""

    module: str
    attribute: str
    why: str
    make: Callable[[Any], Any]


def _nothing(_original: Any) -> Callable[..., None]:
    return lambda *args, **kwargs: None


def _meta_device(original: Any) -> Callable[..., Any]:
    """apply_model_infrastructure moves the sharded model to `device` (cuda); keep it on meta."""
    import torch

    def apply(*args: Any, **kwargs: Any) -> Any:
        kwargs["device"] = torch.device("meta")
        return original(*args, **kwargs)

    return apply


# The attention backend the recipe asks for. The worker builds with CPU kernels (TE attention does not import
# without a GPU), but AutoModel's start-up check must judge the recipe's: CP on its own models needs TE.
RECIPE_ATTN: str | None = None


def _recipe_attention(original: Any) -> Callable[..., Any]:
    def check(model: Any, mesh: Any) -> Any:
        backend = getattr(model, "backend", None)
        if RECIPE_ATTN is None or not hasattr(backend, "attn"):
            return original(model, mesh)
        built, backend.attn = backend.attn, RECIPE_ATTN
        try:
            return original(model, mesh)
        finally:
            backend.attn = built

    return check


def _cuda_device_zero(_original: Any) -> Callable[[], int]:
    return lambda: 0


STAND_INS = (
    StandIn("torch.cuda", "current_device", "from_config builds torch.device('cuda', current_device())",
            _cuda_device_zero),
    StandIn("torch.cuda", "reset_peak_memory_stats", "the recipe's first line of setup()", _nothing),
    StandIn("nemo_automodel.components.checkpoint.checkpointing", "Checkpointer.initialize_model_weights",
            "materializes the sharded weights on the GPU", _nothing),
    StandIn("nemo_automodel._transformers.infrastructure", "print_trainable_parameters",
            "calls .item() on meta tensors", _nothing),
    StandIn("nemo_automodel._transformers.infrastructure", "apply_model_infrastructure",
            "moves the model to cuda after sharding", _meta_device),
    StandIn("nemo_automodel._transformers.auto_model", "apply_model_infrastructure",
            "the same function, as auto_model imported it", _meta_device),
    StandIn("nemo_automodel._transformers.capabilities", "attach_capabilities_and_validate",
            "judges the recipe's attention backend, not the CPU kernels the model was built with", _recipe_attention),
    StandIn("nemo_automodel.components.moe.parallelizer", "apply_cp",
            "hands the CP group to Transformer Engine's attention modules (TE needs a GPU; no parameter changes)",
            _nothing),
    StandIn("nemo_automodel.components.distributed.pipelining.functional", "_warmup_pipeline_stage_neighbors",
            "sends a cuda tensor to the neighbour stages and, without a GPU, sleeps 2 s per rank", _nothing),
)


def resolve(stand_in: StandIn) -> tuple[Any, str, Any]:
    """(owner object, attribute name, current value) of a stand-in's target; AttributeError if it is gone."""
    owner: Any = import_module(stand_in.module)
    *parents, name = stand_in.attribute.split(".")
    for part in parents:
        owner = getattr(owner, part)
    return owner, name, getattr(owner, name)


def install() -> None:
    """Replace every target (once per process: the worker builds many models)."""
    for stand_in in STAND_INS:
        owner, name, original = resolve(stand_in)
        if not getattr(original, "_automodel_dist_stand_in", False):
            replacement = stand_in.make(original)
            replacement._automodel_dist_stand_in = True
            setattr(owner, name, replacement)

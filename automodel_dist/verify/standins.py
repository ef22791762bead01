"""CPU stand-ins for the GPU-only calls in AutoModel 0.7.0's model build, all in one place.

AutoModel's own code builds the model on the meta device under torch's fake process group; these few
calls would touch a GPU (or sleep waiting for one) and are replaced for the duration of a dry-run, in
the worker process only. Each target is a private function of nemo-automodel 0.7.0, megatron-fsdp 0.5.0 or
torch 2.13 (the versions the `oracle` extra pins); tests/test_model_oracle.py checks that every target still
exists there.

MegatronFSDP copies every weight into flat buffers while wrapping the model, so meta tensors will not do
(`assert not p.is_meta`): its wrapping runs under torch's FakeTensorMode instead, on fake CPU tensors that
have shapes, dtypes and a device but no storage, and the buffers it allocates are fake too.
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


# Set by the worker for a MegatronFSDP build: AutoModel then skips meta-device init (as for DDP) and builds
# every weight in host memory on each rank; the stand-in builds on meta instead and ties the LM head as the
# real construction does.
META_INIT = False


def _meta_init(original: Any) -> Callable[..., Any]:
    def init(*args: Any, **kwargs: Any) -> Any:
        if not META_INIT:
            return original(*args, **kwargs)
        from nemo_automodel.components.utils.model_utils import init_empty_weights
        from nemo_automodel.shared.tied_weights import ensure_tied_lm_head
        from transformers.initialization import no_init_weights

        with no_init_weights(), init_empty_weights():
            is_custom, model = original(*args, **kwargs)
        ensure_tied_lm_head(model)  # init_empty_weights re-registers the alias as a separate meta parameter
        return is_custom, model

    return init


def _fake_megatron_fsdp(original: Any) -> Callable[..., Any]:
    """fully_shard_model on fake CPU copies of the (meta) parameters, under FakeTensorMode."""
    import functools

    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    @functools.wraps(original)  # AutoModel reads its signature (_megatron_fsdp_compat_kwargs)
    def shard(*args: Any, **kwargs: Any) -> Any:
        module = kwargs["module"]
        mode = FakeTensorMode(allow_non_fake_inputs=True)
        with mode:
            _fake_parameters(module, torch.device("cpu"))
        # the parameters are on the device already; a fake parameter cannot be swapped by Module.to
        module.to = lambda *_a, **_k: module
        try:
            with mode:
                return original(*args, **{**kwargs, "device": torch.device("cpu")})
        finally:
            del module.to

    return shard


def _fake_parameters(module: Any, device: Any) -> None:
    """Replace every parameter with a storage-less fake one of the same shape, dtype and placements
    (shared parameters stay shared)."""
    import torch
    from torch.distributed.tensor import DTensor

    made: dict[int, Any] = {}
    for owner in module.modules():
        for name, param in list(owner._parameters.items()):
            if param is None:
                continue
            if id(param) not in made:
                if isinstance(param, DTensor):
                    data = DTensor(torch.empty_like(param._local_tensor, device=device), param._spec,
                                   requires_grad=param.requires_grad)
                else:
                    data = torch.empty_like(param, device=device)
                fake = torch.nn.Parameter(data, requires_grad=param.requires_grad)
                fake.__dict__.update(param.__dict__)
                made[id(param)] = fake
            owner._parameters[name] = made[id(param)]


class _NoStream:
    """torch.cuda.Stream without a GPU: Megatron-FSDP creates two side streams while wrapping."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass


def _no_stream(_original: Any) -> type:
    return _NoStream


def _real_values(original: Any) -> Any:
    """`original` (a function or a property) with FakeTensorMode suspended: a device mesh's rank table and the
    sizes an object all-gather exchanges are read by value, which fake tensors do not have."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    def real(function: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            with unset_fake_temporarily():
                return function(*args, **kwargs)

        return call

    return property(real(original.fget)) if isinstance(original, property) else real(original)


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
    StandIn("nemo_automodel._transformers.auto_model", "_init_model",
            "MegatronFSDP skips meta-device init and builds every weight in host memory", _meta_init),
    StandIn("nemo_automodel.components.distributed.parallelizer", "megatron_fsdp_fully_shard_model",
            "MegatronFSDP copies the weights into flat GPU buffers while wrapping", _fake_megatron_fsdp),
    StandIn("torch.cuda", "Stream", "MegatronFSDP's side streams for gradient reduction and parameter gathers",
            _no_stream),
    StandIn("torch.distributed.device_mesh", "DeviceMesh.mesh",
            "reads the rank table by value, which FakeTensorMode would fake", _real_values),
    StandIn("torch.distributed", "all_gather_object",
            "DTensor.from_local(run_check=True) in MegatronFSDP's TP path gathers the shard metadata by value",
            _real_values),
    StandIn("megatron_fsdp.param_and_grad_buffer", "validate_uneven_dtensor",
            "checks the shard offsets gathered from every rank; the fake process group's gather returns this "
            "rank's own shape in every slot, so ranks past 1 would fail a check the real run passes", _nothing),
    StandIn("megatron_fsdp.param_and_grad_buffer", "update_uneven_dtensor_chunk_metadata",
            "records the same gathered offsets for checkpointing (the dry-run saves none)", _nothing),
)


def resolve(stand_in: StandIn) -> tuple[Any, str, Any]:
    """(owner object, attribute name, current value) of a stand-in's target; AttributeError if it is gone."""
    owner: Any = import_module(stand_in.module)
    *parents, name = stand_in.attribute.split(".")
    for part in parents:
        owner = getattr(owner, part)
    return owner, name, getattr(owner, name)


_INSTALLED: dict[tuple[str, str], Any] = {}


def install() -> None:
    """Replace every target (once per process: the worker builds many models)."""
    for stand_in in STAND_INS:
        owner, name, original = resolve(stand_in)
        key = (stand_in.module, stand_in.attribute)
        if _INSTALLED.get(key) is not original:
            _INSTALLED[key] = stand_in.make(original)
            setattr(owner, name, _INSTALLED[key])

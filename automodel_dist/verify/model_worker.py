"""The model-level dry-run worker: AutoModel 0.7.0 builds the real model on meta under torch's fake process group.

Runs in its own process (`python -m automodel_dist.verify.model_worker`), so AutoModel's imports (~8 s) and
torch's process-group state never touch the caller; one worker serves many builds, re-initialising the fake
group for each rank. Protocol: one JSON request per line on stdin, one JSON answer per line on stdout.

    request: {"config": {config.json}, "distributed": {...}, "world_size": N, "ranks": [r, ...],
              "backend": {BackendConfig kwargs} | null, "attn": "te" | null, "peft": {PeftConfig} | null,
              "pipeline": {"pp_batch_size": b, "pp_microbatch_size": m, "pp_seq_len": s}}
    answer:  {"ranks": {"r": RankBuild}, "seconds": {...}}

A RankBuild is {"ok": true, "class": ..., "params": {...bytes...}, "layers": [...], "outer": [...],
"plans": {...}} or {"ok": false, "error": "ValueError: ...", "stage": "mesh" | "model"}.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import resource
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

# Kernels a CPU can run; the recipe's own attention backend is what AutoModel's start-up checks judge
# (the stand-in for capabilities.attach_capabilities_and_validate restores it for the check).
CPU_BACKEND = {"attn": "sdpa", "linear": "torch", "rms_norm": "torch", "rope": "torch", "rope_fusion": False,
               "experts": "torch_mm", "dispatcher": "torch"}
# GPU-only options of the recipe's backend, left out of the CPU build (the pure rules judge them: R38).
GPU_ONLY_BACKEND = ("te_fp8", "cuda_graph")
CPU_ATTENTION = {"gpt_oss": "flex"}  # GPT-OSS's sinks need Flex (or TE) attention: "Only Flex and TE Attention ..."


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _param_bytes(model: Any) -> dict[str, Any]:
    """Bytes this rank allocates for parameters: FSDP2's padded shard where FSDP manages the parameter
    (its param group's `padded_sharded_param_size`), else the local tensor (EP-only experts, TP-only)."""
    padded: dict[int, int] = {}
    for module in model.modules():
        state = getattr(module, "_get_fsdp_state", None)
        group = getattr(state(), "_fsdp_param_group", None) if state else None
        for fsdp_param in getattr(group, "fsdp_params", None) or ():
            param = fsdp_param.sharded_param
            padded[id(param)] = fsdp_param.padded_sharded_param_size.numel() * param.element_size()
    total = unpadded = trainable = count = 0
    even = 0.0
    for param in model.parameters():
        local = getattr(param, "_local_tensor", param)
        size = local.numel() * local.element_size()
        allocated = padded.get(id(param), size)
        total += allocated
        unpadded += size
        count += param.numel()
        even += param.numel() * local.element_size() / _shards(param)
        if param.requires_grad:
            trainable += allocated
    return {"padded": total, "unpadded": unpadded, "trainable_padded": trainable, "numel_global": count,
            "even": even}


def _megatron_bytes(model: Any) -> dict[str, int]:
    """What MegatronFSDP allocates per rank: its flat buffers' shards (padded as it pads them). Weights are
    the compute buffer (and the fp32 main-weight buffer with `preserve_fp32_weights`), gradients the
    main-gradient buffer; AdamW keeps its states on the main weights of the trained groups."""
    weights = grads = optimized = 0
    for group in model.param_and_grad_buffer.parameter_groups:
        sizes = {name: _buffer_bytes(getattr(group, name, None)) for name in
                 ("model_weight_buffer", "transpose_weight_buffer", "main_weight_buffer", "main_grad_buffer")}
        weights += sizes["model_weight_buffer"] + sizes["transpose_weight_buffer"] + sizes["main_weight_buffer"]
        grads += sizes["main_grad_buffer"]
        if group.requires_grad:
            optimized += sizes["main_weight_buffer"] or sizes["model_weight_buffer"]
    return {"padded": weights, "trainable_padded": optimized, "grads": grads}


def _buffer_bytes(buffer: Any) -> int:
    return buffer.data_size * buffer.dtype.itemsize if buffer is not None else 0


def _shards(param: Any) -> int:
    """How many ways a parameter is split (the mesh sizes of its Shard placements; 1 if not a DTensor)."""
    mesh, placements = getattr(param, "device_mesh", None), getattr(param, "placements", ())
    ways = 1
    for dim, placement in enumerate(placements):
        if placement.is_shard() or type(placement).__name__ == "_StridedShard":
            ways *= mesh.size(dim)
    return ways


def _layers_and_outer(model: Any) -> tuple[list[int], list[str]]:
    """Decoder layer indices this rank holds, and the other top-level parts (embedding, norm, head)."""
    layers: set[int] = set()
    outer: set[str] = set()
    for name, _ in model.named_parameters():
        parts = name.split(".")
        if "layers" in parts:
            index = parts.index("layers") + 1
            if index < len(parts) and parts[index].isdigit():
                layers.add(int(parts[index]))
                continue
        outer.add(next((p for p in parts if p in ("embed_tokens", "norm", "lm_head")), parts[-2] if len(parts) > 1
                       else parts[0]))
    return sorted(layers), sorted(outer)


def _plans(parts: list[Any], mesh: Any) -> dict[str, Any]:
    """Did TP and EP shard real modules? Parameters of this rank's stages sharded on the tp / ep mesh axes."""
    tp = ep = 0
    for param in (param for part in parts for param in part.parameters()):
        names = getattr(getattr(param, "device_mesh", None), "mesh_dim_names", None) or ()
        names = [str(getattr(n, "value", n)) for n in names]
        tp += "tp" in names
        ep += "ep" in names
    return {"tp_size": getattr(mesh, "tp_size", 1), "tp_sharded": tp, "ep_size": getattr(mesh, "ep_size", 1),
            "ep_sharded": ep}


def _checkpointing(parts: list[Any]) -> dict[str, int]:
    """Modules AutoModel wrapped for activation checkpointing, and of those the whole blocks under its
    selective (op-level) policy: what the recipe's activation_checkpointing became."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointWrapper

    wrapped = [m for part in parts for m in part.modules() if isinstance(m, CheckpointWrapper)]
    return {"wrapped": len(wrapped), "selective": sum(bool(getattr(m, "_nemo_selective_ac", False))
                                                      for m in wrapped)}


def _models(built: Any) -> list[Any]:
    """The model parts this rank holds: one module, or an AutoPipeline's stages."""
    parts = getattr(built, "parts", None)
    return list(parts) if parts else [built]


def _build_rank(request: dict[str, Any], rank: int, config_dir: str) -> dict[str, Any]:
    import torch.distributed as dist
    from nemo_automodel import NeMoAutoModelForCausalLM
    from nemo_automodel.components.models.common import BackendConfig
    from nemo_automodel.recipes._dist_utils import create_distributed_setup_from_config
    from torch.testing._internal.distributed.fake_pg import FakeStore
    from transformers import AutoConfig

    from automodel_dist.verify import standins

    world = request["world_size"]
    dist.init_process_group("fake", rank=rank, world_size=world, store=FakeStore())
    try:
        try:
            setup = create_distributed_setup_from_config({"distributed": dict(request["distributed"])},
                                                         world_size=world)
        except Exception as exc:  # AutoModel's verdict on the distributed section
            return {"ok": False, "stage": "mesh", "error": _error(exc)}
        if setup.pipeline_config is not None:  # what the recipe sets before building (train_ft.py)
            pipeline = request.get("pipeline") or {}
            setup.pipeline_config.loss_fn = _loss
            for key, value in pipeline.items():
                setattr(setup.pipeline_config, key, value)
        kwargs: dict[str, Any] = {"distributed_setup": setup}
        standins.RECIPE_ATTN = request.get("attn")
        standins.META_INIT = type(setup.strategy_config).__name__ == "MegatronFSDPConfig"
        try:
            if request.get("backend") is not None:
                attn = CPU_ATTENTION.get(request["config"].get("model_type"), CPU_BACKEND["attn"])
                recipe = {k: v for k, v in request["backend"].items() if k not in GPU_ONLY_BACKEND}
                kwargs["backend"] = BackendConfig(**{**recipe, **CPU_BACKEND, "attn": attn})
            if request.get("peft") is not None:
                from nemo_automodel.components._peft.lora import PeftConfig

                kwargs["peft_config"] = PeftConfig(**request["peft"])
            config = AutoConfig.from_pretrained(config_dir)
            built = NeMoAutoModelForCausalLM.from_config(config, **kwargs)
        except Exception as exc:  # AutoModel's verdict on the model build
            return {"ok": False, "stage": "model", "error": _error(exc)}
        parts = _models(built)
        params = [_param_bytes(part) | (_megatron_bytes(part) if hasattr(part, "param_and_grad_buffer") else {})
                  for part in parts]
        layers, outer = zip(*(_layers_and_outer(part) for part in parts), strict=True)
        return {"ok": True, "class": type(getattr(parts[0], "module", parts[0])).__name__.removeprefix("FSDP"),
                "params": {key: sum(p[key] for p in params) for key in params[0]},
                "layers": sorted({i for part in layers for i in part}),
                "outer": sorted({name for part in outer for name in part}),
                "stages": len(parts), "plans": _plans(parts, setup.mesh_context),
                "checkpointing": _checkpointing(parts)}
    finally:
        dist.destroy_process_group()


def _loss(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("the dry-run never runs a step")


def answer(request: dict[str, Any]) -> dict[str, Any]:
    """Build the requested ranks; AutoModel's output goes to stderr, never into the answer line."""
    from automodel_dist.verify import standins

    standins.install()
    out: dict[str, Any] = {"ranks": {}, "seconds": {}}
    with tempfile.TemporaryDirectory(prefix="automodel-dist-model-") as folder:
        (Path(folder) / "config.json").write_text(json.dumps(request["config"]), encoding="utf-8")
        for rank in request["ranks"]:
            start = time.perf_counter()
            with contextlib.redirect_stdout(io.StringIO()):
                out["ranks"][str(rank)] = _build_rank(request, rank, folder)
            out["seconds"][str(rank)] = round(time.perf_counter() - start, 3)
    out["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    return out


def serve() -> None:
    """Answer requests until stdin closes; the first line says the imports are done and how long they took."""
    logging.disable(logging.WARNING)
    warnings.simplefilter("ignore")
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        import nemo_automodel  # noqa: F401  (the ~8 s import, once)
        from nemo_automodel import NeMoAutoModelForCausalLM  # noqa: F401
    print(json.dumps({"ready": True, "import_s": round(time.perf_counter() - start, 2)}), flush=True)
    for line in sys.stdin:
        try:
            reply = answer(json.loads(line))
        except Exception as exc:  # a request the worker cannot serve at all: say so and keep serving
            reply = {"ranks": {}, "error": _error(exc)}
        print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    serve()

"""Read a Layout back from an AutoModel recipe: the single reader of recipes (validate and dry-run use it).

`parse_recipe(emit(layout)) == layout` is the target's round-trip law. A value that cannot be read as
what AutoModel expects (a size that is not a positive integer, a list where a mapping belongs) is an
InputError naming its dotted key; a readable but illegal value is left to the rules.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from automodel_dist.catalog.specs import ModelSpec
from automodel_dist.errors import InputError
from automodel_dist.layout import Layout, ac_mode, is_multi_stage
from automodel_dist.pipeline_stages import virtual_stages
from automodel_dist.problem import TrainingSpec
from automodel_dist.targets.automodel.config import (
    canonical_strategy,
    load_config,
    normalize_activation_checkpointing,
)
from automodel_dist.yamlio import Document

SIZE_KEYS = ("tp_size", "pp_size", "cp_size", "ep_size")
DEFAULT_GLOBAL_BATCH = 32  # StepSchedulerConfig default
DEFAULT_SCHEDULE = "1f1b"  # PipelineConfig default
SEQUENCE_KEYS = ("seq_length", "max_length", "seq_len", "max_seq_length")  # dataset keys naming the length


class RecipeValueError(InputError):
    """A recipe value that cannot be read; `path` is its dotted key (validate turns it into line:col)."""

    def __init__(self, path: str, message: str, hint: str) -> None:
        super().__init__(message, where=path, hint=hint)
        self.path = path

    def located(self, doc: Document, prefix: str = "") -> InputError:
        """The same error at the key's file:line:col in `doc`; `prefix` names a section read as
        `distributed` under another key (a distillation teacher's `teacher_distributed`)."""
        return InputError(self.message, where=doc.where(prefix + self.path), hint=self.hint)


def parse_recipe(recipe: Mapping[str, Any], *, world_size: int, model: ModelSpec | None = None) -> Layout:
    """The Layout a recipe (mapping, env vars not yet resolved) runs on `world_size` GPUs."""
    return layout_from_config(load_config(recipe), world_size=world_size, model=model)


def layout_from_config(config: Mapping[str, Any], *, world_size: int, model: ModelSpec | None = None) -> Layout:
    """The Layout of an already resolved and translated recipe config (see `config.resolve_config`)."""
    if not isinstance(world_size, int) or isinstance(world_size, bool) or world_size < 1:
        raise InputError(f"world size must be a positive integer, got {world_size!r}",
                         hint="pass nodes × GPUs per node")
    dist = section(config, "distributed")
    raw_strategy = dist.get("strategy", "fsdp2")
    strategy = canonical_strategy(raw_strategy)
    if strategy is None:
        raise RecipeValueError("distributed.strategy", f"unknown strategy {raw_strategy!r}",
                               "use fsdp2, megatron_fsdp or ddp")
    tp, pp, cp, ep = (_size(dist, key) for key in SIZE_KEYS)
    dp_replicate = _size(dist, "dp_replicate_size")
    dp_size = None if strategy == "ddp" else _dp_size(dist)
    try:
        ac = normalize_activation_checkpointing(dist.get("activation_checkpointing", False))
    except ValueError as exc:
        raise RecipeValueError("distributed.activation_checkpointing", str(exc),
                               "use true, false or 'selective'") from None
    sequence_parallel = False
    if strategy == "fsdp2":
        sequence_parallel = _bool(dist, "sequence_parallel", "distributed")

    steps = section(config, "step_scheduler")
    global_batch = _int(steps, "global_batch_size", DEFAULT_GLOBAL_BATCH, "step_scheduler")
    local_batch = _int(steps, "local_batch_size", 1, "step_scheduler")

    schedule, vpp, micro_batch = None, 1, local_batch
    if pp > 1:
        pipeline = dist.get("pipeline")
        if pipeline is not None and not isinstance(pipeline, Mapping):
            raise _not_mapping("distributed.pipeline", pipeline)
        pipeline = pipeline or {}
        schedule = _schedule(pipeline)
        micro_batch = _int(pipeline, "pp_microbatch_size", 1, "distributed.pipeline")
        if micro_batch < 1:
            raise RecipeValueError("distributed.pipeline.pp_microbatch_size",
                                   f"pp_microbatch_size must be a positive integer, got {micro_batch}",
                                   "use 1 or another divisor of step_scheduler.local_batch_size")
        vpp = _stages_per_rank(pipeline, pp, schedule, model)

    dispatcher = None
    backend = section(config, "model").get("backend")
    if isinstance(backend, Mapping) and backend.get("dispatcher") is not None:
        dispatcher = str(backend["dispatcher"])

    return Layout(world_size=world_size, strategy=strategy, tp=tp, pp=pp, cp=cp, ep=ep,
                  dp_replicate=dp_replicate, dp_size=dp_size, vpp=vpp, pp_schedule=schedule,
                  activation_checkpointing=ac_mode(ac), sequence_parallel=sequence_parallel,
                  global_batch_size=global_batch, local_batch_size=local_batch, micro_batch_size=micro_batch,
                  dispatcher=dispatcher)


def training_from_config(config: Mapping[str, Any], *, global_batch_size: int) -> TrainingSpec:
    """The training job as far as a recipe says it (seq_length 0 when it does not say)."""
    packed = _int(section(config, "packed_sequence"), "packed_sequence_size", 0, "packed_sequence")
    seq = max(packed, 0)
    if not seq:
        dataset = section(config, "dataset")
        seq = next((v for k in SEQUENCE_KEYS if isinstance(v := dataset.get(k), int) and v > 0), 0)
    peft = section(config, "peft")
    rank = peft.get("dim", peft.get("rank"))
    fp8 = section(config, "fp8")
    return TrainingSpec(task="peft" if peft else "sft", seq_length=seq, global_batch_size=global_batch_size,
                        packed_sequences=packed > 0, precision="fp8" if fp8.get("enabled") is True else "bf16",
                        peft_rank=rank if isinstance(rank, int) and not isinstance(rank, bool) and peft else None)


def section(config: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """A top-level mapping of the recipe; absent or null reads as empty, anything else is an input error."""
    value = config.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise _not_mapping(key, value)
    return value


def _stages_per_rank(pipeline: Mapping[str, Any], pp: int, schedule: str | None, model: ModelSpec | None) -> int:
    """vpp: from layers_per_stage when the layer count is known, else the schedule's default (1 or 2)."""
    default = 2 if is_multi_stage(schedule) else 1
    per_stage = pipeline.get("layers_per_stage")
    if per_stage is None:
        return default
    if isinstance(per_stage, bool) or not isinstance(per_stage, int) or per_stage < 1:
        raise RecipeValueError("distributed.pipeline.layers_per_stage",
                               f"layers_per_stage must be a positive integer or null, got {per_stage!r}",
                               "use null (1 stage per rank for 1f1b, 2 for interleaved schedules) or a layer count")
    if model is None:
        return default
    stages, _ = virtual_stages(model.num_layers, per_stage, pp, pipeline.get("round_virtual_stages_to_pp_multiple"))
    return stages // pp


def _schedule(pipeline: Mapping[str, Any]) -> str | None:
    value = pipeline.get("pp_schedule", DEFAULT_SCHEDULE)
    if value is None:
        return None
    if not isinstance(value, str):
        raise RecipeValueError("distributed.pipeline.pp_schedule",
                               f"pp_schedule must be a schedule name, got {value!r}",
                               "use 1f1b or interleaved1f1b")
    return value.lower()


def _size(dist: Mapping[str, Any], key: str) -> int:
    value = dist.get(key)
    if value is None:
        return 1
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        # mesh_utils._degree: a positive int as is, anything else 1, but True is an int > 0 and reaches the mesh
        outcome = ("AutoModel passes True into the device mesh's shape and fails (\"sizes (True,) and strides (1,) "
                   "don't match\")" if value is True else f"AutoModel silently reads {value!r} as 1")
        raise RecipeValueError(f"distributed.{key}", f"{key} must be a positive integer or null, got {value!r}",
                               f"use an integer >= 1 (null means 1); {outcome}")
    return value


def _dp_size(dist: Mapping[str, Any]) -> int | None:
    value = dist.get("dp_size")
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value == 0):
        return None  # null, none and 0 mean "inferred" to AutoModel
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise RecipeValueError("distributed.dp_size", f"dp_size must be a positive integer or null, got {value!r}",
                               "use null to infer it as world / (tp·cp·pp), or the exact integer")
    return value


def _int(mapping: Mapping[str, Any], key: str, default: int, where: str) -> int:
    value = mapping.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise RecipeValueError(f"{where}.{key}", f"{key} must be an integer, got {value!r}",
                               "write a plain integer, e.g. 8")
    return value


def _bool(mapping: Mapping[str, Any], key: str, where: str) -> bool:
    value = mapping.get(key, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise RecipeValueError(f"{where}.{key}", f"{key} must be true or false, got {value!r}",
                               "write true or false")
    return value


def _not_mapping(path: str, value: Any) -> RecipeValueError:
    return RecipeValueError(path, f"{path} must be a mapping, found {type(value).__name__} {value!r}",
                            "write `key: value` lines indented under it")

"""Recipe rules: checks on the recipe mapping that a Layout cannot carry (keys, names, blocks, backend).

Input is the recipe after AutoModel's own loading (env vars resolved, values translated; see
`targets/automodel/config.py`). Shapes and types are the schema's job; these are AutoModel's start-up
checks with its own wording, plus cross-field logic. Sizes are read leniently here: a size that cannot
be read at all is reported by the parser as an input error.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

from automodel_dist.catalog.fields import did_you_mean
from automodel_dist.catalog.specs import ModelSpec
from automodel_dist.findings import WARNING, Finding
from automodel_dist.layout import FLEX_DISPATCHERS, PP_SCHEDULES
from automodel_dist.limits import path_exists
from automodel_dist.pipeline_stages import virtual_stages
from automodel_dist.rules import registry as r
from automodel_dist.rules.launch import signal_entries, signal_name
from automodel_dist.rules.registry import listing
from automodel_dist.targets.automodel.config import (
    AC_MESSAGE,
    CHECKPOINT_KEYS,
    COMMON_KEYS,
    DATALOADER_KEYS,
    LR_SCHEDULER_KEYS,
    MOCK_DATASET_BATCH_DEFAULT,
    MOCK_DATASET_TARGET,
    MOE_KEYS,
    PIPELINE_KEYS,
    STRATEGY_KEYS,
    STRATEGY_NAMES,
    canonical_strategy,
    mesh_degree,
    normalize_activation_checkpointing,
)
from automodel_dist.targets.automodel.recipe_classes import RECIPE_CLASSES
from automodel_dist.targets.automodel.sections import misspelled_section
from automodel_dist.targets.automodel.target_paths import unresolved
from automodel_dist.yamlio import as_mapping

KEY_HINTS = {
    "backend": "the process-group backend belongs in dist_env.backend",
    "frozen_multimodal_sharding": "write it as distributed.multimodal.frozen_sharding",
}
TORCH_SCHEDULES = ("1F1B", "Interleaved1F1B", "GPipe", "LoopedBFS", "InterleavedZeroBubble", "PipelineScheduleSingle",
                   "PipelineScheduleMulti", "ZBVZeroBubble", "DualPipeV")
DTYPES = frozenset({"float", "float32", "float64", "double", "complex64", "cfloat", "float16", "half", "bfloat16",
                    "uint8", "int8", "int16", "short", "int32", "int", "int64", "long", "bool", "bf16"})
MP_POLICY_DTYPES = ("param_dtype", "reduce_dtype", "output_dtype")  # MixedPrecisionPolicy's dtype fields
AC_SCOPES = ("all", "audio", "language", "multimodal", "vision")
FROZEN_SHARDING = ("root", "per_layer", "replicate")
CUDA_GRAPH_MODULES = ("attn", "te_dpa", "moe_router", "moe_preprocess")
SAVE_FORMATS = ("torch_save", "safetensors")
# StepScheduler's checks: key -> (lowest allowed value, None allowed, AutoModel's message before ", got X").
STEP_SCHEDULER_LIMITS = {
    "global_batch_size": (1, False, "global_batch_size must be greater than 0"),
    "local_batch_size": (1, False, "local_batch_size must be greater than 0"),
    "num_epochs": (1, True, "num_epochs must be greater than 0 or None if max_steps is provided"),
    "max_steps": (1, True, "max_steps must be greater than 0"),
    "ckpt_every_steps": (1, True, "ckpt_every_steps must be greater than 0"),
    "val_every_steps": (1, True, "val_every_steps must be greater than 0 if not None"),
    "log_remote_every_steps": (1, False, "log_remote_every_steps must be greater than 0"),
    "loss_average_window_steps": (1, False, "loss_average_window_steps must be greater than 0"),
    "gc_every_steps": (1, True, "gc_every_steps must be greater than 0 if not None"),
    "start_step": (0, False, "start_step must be greater than or equal to 0"),
    "start_epoch": (0, False, "start_epoch must be greater than or equal to 0"),
}
# The modules whose recipe classes are TrainFinetuneRecipeForNextTokenPrediction or subclass it (the benchmarking,
# knowledge-distillation and diffusion-LM fine-tuning recipes), and what their setup does without a section.
TRAIN_FT_MODULES = frozenset({"nemo_automodel.recipes.llm.train_ft", "nemo_automodel.recipes.llm.benchmark",
                              "nemo_automodel.recipes.llm.kd", "nemo_automodel.recipes.dllm.train_ft"})
REQUIRED_SECTIONS = {
    "model": "builds its model from it (train_ft.py: build_model(self.cfg.model, ...)) and fails at setup",
    "optimizer": "builds its optimizer from it and fails at setup (AttributeError: 'NoneType' object has no "
                 "attribute 'build', train_ft.py: self.cfg.optimizer.build)",
}
# Sets dataset.batch_size to step_scheduler.local_batch_size before it builds anything (recipes/llm/benchmark.py).
BATCH_INJECTING_RECIPE = "BenchmarkingRecipeForNextTokenPrediction"
# The recipe module -> the seed its StatefulRNG takes when the recipe has no top-level `seed:` (42 elsewhere).
SEED_DEFAULTS = {"nemo_automodel.recipes.multimodal.finetune": 4396, "nemo_automodel.recipes.multimodal.pretrain": 4396}
MULTI_NODE_TIMEOUT_MINUTES = 10
# torch.distributed.Backend.backend_list (torch 2.13) but 'undefined'
TORCH_BACKENDS = ("gloo", "nccl", "xccl", "ucc", "mpi", "fake")
# Linux's signal names (without SIG) and its largest signal number (SIGRTMAX), as Python's signal.Signals has them
SIGNAL_NAMES = ("HUP", "INT", "QUIT", "ILL", "TRAP", "ABRT", "IOT", "BUS", "FPE", "KILL", "USR1", "SEGV", "USR2",
                "PIPE", "ALRM", "TERM", "STKFLT", "CHLD", "CONT", "STOP", "TSTP", "TTIN", "TTOU", "URG", "XCPU",
                "XFSZ", "VTALRM", "PROF", "WINCH", "IO", "POLL", "PWR", "SYS", "RTMIN", "RTMAX")
MAX_SIGNAL = 64
# Findings after which the recipe cannot be read as a Layout, so layout rules are skipped.
BLOCKING_RULES = frozenset({r.UNKNOWN_STRATEGY.id, r.AC_VALUE.id})


def check_recipe(config: Mapping[str, Any], *, world_size: int, gpus_per_node: int = 8,
                 model: ModelSpec | None = None) -> list[Finding]:
    """Every recipe rule that fires on a resolved recipe `config`, in AutoModel's start-up order."""
    out: list[Finding] = []
    _check_recipe_target(config, out)
    _check_target_paths(config, (), out)
    _check_sections(config, out)
    dist = as_mapping(config.get("distributed"))
    recipe_class = _recipe_class(config)
    _check_rng(config, recipe_class, out)
    _check_required_sections(config, recipe_class, out)
    _check_closed_sections(config, recipe_class, out)
    if recipe_class not in DISTRIBUTED_OPTIONAL:
        if "distributed" not in config:
            out.append(r.DISTRIBUTED_MISSING.finding(
                "the recipe has no distributed: section" + _written_as(config, "distributed") + "; AutoModel fails "
                "with an AttributeError reading cfg.distributed", path="", hint=_ADD_DISTRIBUTED))
        elif config["distributed"] is None and recipe_class is not None:
            # A generation config (no recipe class) may say `distributed: null`; a training recipe may not.
            out.append(r.DISTRIBUTED_MISSING.finding(
                f"{recipe_class} builds its device meshes from the distributed section, which is null",
                path="distributed", hint=_ADD_DISTRIBUTED,
                automodel_message="TypeError: 'NoneType' object is not iterable"))
    strategy = _check_strategy(dist, out)
    pp, ep, tp = (mesh_degree(dist.get(key)) for key in ("pp_size", "ep_size", "tp_size"))
    if strategy is not None:
        _check_unknown_options(dist, strategy, out)
    _check_activation_checkpointing(dist, out)
    _check_pipeline_block(dist, pp, model, out)
    if ep > 1 and isinstance(dist.get("moe"), Mapping):
        _unknown_keys(dist["moe"], MOE_KEYS, r.MOE_UNKNOWN_KEY, "distributed.moe", "MoEParallelizerConfig", out)
    if strategy in ("fsdp2", "ddp") and "activation_checkpointing_scope" in dist:
        _check_ac_scope(dist["activation_checkpointing_scope"], out)
    if isinstance(dist.get("multimodal"), Mapping):  # AutoModel builds it before it checks the strategy's keys
        _check_multimodal(dist["multimodal"], out)
    if strategy == "fsdp2":
        _check_async_tp(dist, tp, ep, out)
    _check_dtypes(dist, pp, ep, out)
    if strategy == "ddp" and isinstance(dist.get("dp_size"), int) and dist["dp_size"] not in (0, world_size):
        out.append(r.DDP_DP_SIZE_IGNORED.finding(
            f"ddp ignores dp_size={dist['dp_size']}: every one of the {world_size} ranks is a data-parallel rank",
            hint="remove distributed.dp_size (ddp has no device mesh)"))
    repair = config.get("embedding_row_repair")
    if pp > 1 and isinstance(repair, Mapping) and repair.get("enabled"):
        out.append(r.EMBEDDING_REPAIR_PP.finding(
            f"embedding_row_repair is enabled with pp_size={pp}",
            hint="set embedding_row_repair.enabled: false, or pp_size: 1",
            automodel_message="embedding_row_repair is not currently supported with pipeline parallelism"))
    _check_model_path(as_mapping(config.get("model")), out)
    backend = as_mapping(as_mapping(config.get("model")).get("backend"))
    _check_backend(backend, out)
    _check_step_scheduler(as_mapping(config.get("step_scheduler")), out)
    _check_preemption_signal(as_mapping(config.get("step_scheduler")), out)
    if recipe_class != BATCH_INJECTING_RECIPE:
        _check_mock_batch(as_mapping(config.get("dataset")), as_mapping(config.get("step_scheduler")), out)
    _check_packing(as_mapping(config.get("packed_sequence")), out)
    _check_checkpoint(as_mapping(config.get("checkpoint")), out)
    _check_dist_env(as_mapping(config.get("dist_env")), world_size, gpus_per_node, out)
    _check_kd(config, dist, world_size, out)
    return out


def kd_mesh_sizes(config: Mapping[str, Any]) -> tuple[int, int] | None:
    """(student ranks, teacher ranks) of a distillation recipe with `separate_meshes`, when both are explicit.

    AutoModel (`recipes/kd_utils.py`) gives the student ranks [0, s) and the teacher [s, s + t); each mesh
    is dp·tp·pp·cp of its own section.
    """
    teacher = config.get("teacher_distributed")
    if not config.get("separate_meshes") or not isinstance(teacher, Mapping):
        return None
    sizes = [_explicit_mesh_size(as_mapping(config.get("distributed"))), _explicit_mesh_size(teacher)]
    return (sizes[0], sizes[1]) if None not in sizes else None


def _explicit_mesh_size(dist: Mapping[str, Any]) -> int | None:
    dp = dist.get("dp_size")
    if not isinstance(dp, int) or isinstance(dp, bool) or dp <= 0:
        return None
    size = dp
    for key in ("tp_size", "pp_size", "cp_size"):
        size *= mesh_degree(dist.get(key))
    return size


def _check_kd(config: Mapping[str, Any], dist: Mapping[str, Any], world_size: int, out: list[Finding]) -> None:
    """Knowledge distillation's student/teacher rank split (`create_kd_distributed_setups`)."""
    separate, teacher = config.get("separate_meshes", False), config.get("teacher_distributed")
    if not separate:
        if teacher is not None:
            out.append(r.KD_MESHES.finding(
                "teacher_distributed is set but separate_meshes is not true", path="teacher_distributed",
                hint="set separate_meshes: true, or remove teacher_distributed to share the student's mesh",
                automodel_message="teacher_distributed requires separate_meshes=true"))
        return
    if not isinstance(teacher, Mapping):
        out.append(r.KD_MESHES.finding(
            "separate_meshes is true but there is no teacher_distributed section",
            hint="add teacher_distributed with its own strategy and explicit dp_size",
            automodel_message="separate_meshes=true requires a teacher_distributed section"))
        return
    for label, section in (("distributed", dist), ("teacher_distributed", teacher)):
        if _explicit_mesh_size(section) is None:
            out.append(r.KD_MESHES.finding(
                f"{label}.dp_size must be an explicit positive integer with separate_meshes", path=f"{label}.dp_size",
                hint="set dp_size so that the student and teacher meshes split the ranks exactly",
                automodel_message=f"{label}.dp_size must be set when separate_meshes=true so the non-overlapping "
                                  "rank split is explicit"))
        if canonical_strategy(section.get("strategy", "fsdp2")) == "ddp":
            out.append(r.KD_MESHES.finding(
                f"{label} uses ddp, which has no device mesh to separate", path=f"{label}.strategy",
                hint="use fsdp2 (or megatron_fsdp) for both student and teacher",
                automodel_message="Separate KD meshes currently require mesh-backed strategies; DDP is not supported"))
    sizes = kd_mesh_sizes(config)
    if sizes is not None and sum(sizes) != world_size:
        student, teacher_size = sizes
        out.append(r.KD_MESHES.finding(
            f"student ({student} ranks) + teacher ({teacher_size} ranks) = {student + teacher_size}, "
            f"but the world has {world_size}",
            hint=f"size the two meshes so they add up to {world_size}",
            automodel_message=f"Separate KD mesh sizes must use every rank exactly once: student={student} + "
                              f"teacher={teacher_size} != world_size={world_size}"))


def _suggest(key: str, valid: frozenset[str] | tuple[str, ...]) -> str:
    close = difflib.get_close_matches(key, sorted(valid), n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}?" if close else ""


# Recipe classes that build meshes only when the recipe has a `distributed:` section (`if self.cfg.get(
# "distributed", None) is not None` in nemo_automodel/recipes/llm/train_{eagle1,eagle3,dflash,dspark,vispec}.py;
# Eagle2, DFlash2, Domino and JetSpec inherit it). Every other recipe reads cfg.distributed unconditionally.
DISTRIBUTED_OPTIONAL = frozenset({"TrainEagle1Recipe", "TrainEagle2Recipe", "TrainEagle3Recipe", "TrainDFlashRecipe",
                                  "TrainDFlash2Recipe", "TrainDominoRecipe", "TrainJetSpecRecipe", "TrainDSparkRecipe",
                                  "TrainVispecRecipe", "TrainVispecStage1Recipe"})


_ADD_DISTRIBUTED = "add `distributed: {strategy: fsdp2}` (sizes default to 1, dp is inferred)"


def _recipe_target(config: Mapping[str, Any]) -> tuple[str, str] | None:
    """The recipe target the top-level `recipe:` names (a class name, a dotted path or a `_target_` mapping),
    stripped as AutoModel's CLI strips it, with its dotted key."""
    target, path = config.get("recipe"), "recipe"
    if isinstance(target, Mapping):
        target, path = target.get("_target_"), "recipe._target_"
    return (target.strip(), path) if isinstance(target, str) and target.strip() else None


def _recipe_class(config: Mapping[str, Any]) -> str | None:
    """The recipe class's bare name (the last part of a dotted path)."""
    target = _recipe_target(config)
    return target[0].rpartition(".")[2] if target else None


def _recipe_suggestion(name: str) -> str:
    """The classes a truncated name begins (`TrainFinetuneRecipe`), else the closest spellings."""
    truncated = [c for c in RECIPE_CLASSES if c.lower().startswith(name.lower())]
    return did_you_mean(name, truncated, n=3, cutoff=0) if truncated else did_you_mean(name, RECIPE_CLASSES, n=3)


def _check_recipe_target(config: Mapping[str, Any], out: list[Finding]) -> None:
    target = _recipe_target(config)
    if target is None:
        out.append(r.RECIPE_TARGET.finding(
            "the recipe does not name its recipe class (top-level `recipe:`): the `automodel` CLI will refuse it",
            hint="add e.g. `recipe: TrainFinetuneRecipeForNextTokenPrediction` (not needed when a recipe script "
                 "is run with -c)",
            automodel_message="YAML config must specify a recipe target."))
        return
    name, path = target
    if "." not in name and name not in RECIPE_CLASSES:  # AutoModel resolves only a bare name, a dotted path as is
        suggestion = _recipe_suggestion(name)
        out.append(r.RECIPE_CLASS.finding(
            f"unknown recipe class {name!r}{suggestion}: the `automodel` CLI exits at start-up",
            hint="name one of AutoModel 0.7.0's recipe classes, e.g. TrainFinetuneRecipeForNextTokenPrediction, "
                 "or give your own class's full dotted path", path=path,
            automodel_message=f"Unknown recipe class '{name}'. Available short names:"))


def _check_target_paths(node: Any, path: tuple[str, ...], out: list[Finding]) -> None:
    """Every `_target_` and `*_fn` string path, in every section (AutoModel's loader resolves them all, read or
    not), that names something AutoModel 0.7.0 does not have (`target_paths`)."""
    if isinstance(node, Mapping):
        for key, value in node.items():
            where = (*path, str(key))
            if isinstance(value, str) and (key == "_target_" or str(key).endswith("_fn")) and "$" not in value:
                dotted = value.strip()
                problem = unresolved(dotted) if ":" not in dotted else None
                if problem:
                    shown = dotted if len(dotted) <= 160 else dotted[:140] + "..."
                    out.append(r.TARGET_PATH.finding(
                        f"{shown!r} does not resolve: {problem}", path=".".join(where),
                        hint="fix the dotted path (module, then attribute)",
                        automodel_message=f"ImportError: ... cannot resolve attribute ... in '{shown}'"))
            else:
                _check_target_paths(value, where, out)
    elif isinstance(node, list):
        for i, item in enumerate(node):
            _check_target_paths(item, (*path, str(i)), out)


def _check_sections(config: Mapping[str, Any], out: list[Finding]) -> None:
    for key in config:
        meant = misspelled_section(key) if isinstance(key, str) else None
        if meant is None:
            continue
        present = f"; the recipe has a `{meant}:` section too, which AutoModel reads" if meant in config else ""
        out.append(r.SECTION_MISSPELLED.finding(
            f"`{key}:` is not a section AutoModel reads (did you mean `{meant}:`?): it is ignored without a word"
            f"{present}", path=key, hint=f"rename `{key}:` to `{meant}:`" + (" and merge the two" if present else "")))


def _written_as(config: Mapping[str, Any], section: str) -> str:
    """' (`distributd:` looks like a misspelling of it)' when a top-level key spells `section` wrong, else ''."""
    typo = next((key for key in config if isinstance(key, str) and misspelled_section(key) == section), None)
    return f" (`{typo}:` looks like a misspelling of it)" if typo else ""


def _trains_like_train_ft(recipe_class: str | None) -> bool:
    """TrainFinetuneRecipeForNextTokenPrediction, or a recipe class that subclasses it (TRAIN_FT_MODULES)."""
    return RECIPE_CLASSES.get(recipe_class or "") in TRAIN_FT_MODULES


def _check_required_sections(config: Mapping[str, Any], recipe_class: str | None, out: list[Finding]) -> None:
    if not _trains_like_train_ft(recipe_class):
        return
    for section, outcome in REQUIRED_SECTIONS.items():
        if config.get(section) is None:
            out.append(r.SECTION_MISSING.finding(
                f"the recipe has no {section}: section{_written_as(config, section)}; {recipe_class} {outcome}",
                path=section if section in config else "",
                hint=f"add the `{section}:` section (e.g. from one of AutoModel's example recipes)"))


def _check_closed_sections(config: Mapping[str, Any], recipe_class: str | None, out: list[Finding]) -> None:
    if not _trains_like_train_ft(recipe_class):
        return
    loaders = [key for key in config if isinstance(key, str)
               and (key == "dataloader" or key.startswith("validation_dataloader"))]
    for section, keys, built in (("lr_scheduler", LR_SCHEDULER_KEYS, "LRSchedulerConfig.__init__()"),
                                 ("checkpoint", CHECKPOINT_KEYS, "CheckpointingConfig.__init__()"),
                                 *((loader, DATALOADER_KEYS, "") for loader in loaders)):
        block = config.get(section)
        if not isinstance(block, Mapping):
            continue
        for key in sorted(str(k) for k in block if k not in keys):
            said = (f"TypeError: {built} got an unexpected keyword argument '{key}'" if built
                    else f"TypeError: Unexpected dataloader config field(s): {key}")
            out.append(r.SECTION_UNKNOWN_KEY.finding(
                f"`{key}` is not a key {recipe_class} takes in {section}:{did_you_mean(key, sorted(keys))}",
                path=f"{section}.{key}", hint=f"use one of: {listing(sorted(keys))}", automodel_message=said))


def _check_rng(config: Mapping[str, Any], recipe_class: str | None, out: list[Finding]) -> None:
    """`rng: {_target_: StatefulRNG, seed: N}` sits in most of AutoModel's example recipes, but every 0.7.0
    recipe builds its StatefulRNG from the top-level `seed:` (train_ft.py: `self.cfg.get("seed", 42)`;
    multimodal/finetune.py: default 4396), so N seeds nothing."""
    if recipe_class not in RECIPE_CLASSES or recipe_class in DISTRIBUTED_OPTIONAL:
        return  # a class of the user's own may read rng:; the drafter recipes seed from recipe_args
    rng_seed = as_mapping(config.get("rng")).get("seed")
    default = SEED_DEFAULTS.get(RECIPE_CLASSES[recipe_class], 42)
    seed = config.get("seed", default)
    if rng_seed is None or rng_seed == seed:
        return
    where = "" if "seed" in config else " (its default)"
    out.append(r.RNG_UNREAD.finding(
        f"rng.seed={rng_seed} seeds nothing: AutoModel reads no `rng:` section, and this run is seeded from the "
        f"top-level seed: {seed}{where}", hint=f"set a top-level `seed: {rng_seed}` (and drop rng:)"))


def _check_strategy(dist: Mapping[str, Any], out: list[Finding]) -> str | None:
    raw = dist.get("strategy", "fsdp2")
    strategy = canonical_strategy(raw)
    if strategy is not None:
        return strategy
    valid = sorted(STRATEGY_NAMES)
    if isinstance(raw, str):
        suggestion = _suggest(raw.lower(), tuple(valid))
        automodel = f"Unknown strategy: {raw}. Valid strategies: {valid}"
    else:
        suggestion = ""
        automodel = f"'{type(raw).__name__}' object has no attribute 'lower'"
    out.append(r.UNKNOWN_STRATEGY.finding(
        f"unknown strategy {raw!r}", hint=" ".join(filter(None, [suggestion, "use fsdp2, megatron_fsdp or ddp"])),
        automodel_message=automodel))
    return None


def _check_unknown_options(dist: Mapping[str, Any], strategy: str, out: list[Finding]) -> None:
    valid = STRATEGY_KEYS[strategy]
    unknown = sorted(str(k) for k in dist if k not in COMMON_KEYS and k not in valid)
    if not unknown:
        return
    automodel = f"Unknown options for strategy '{str(dist.get('strategy', 'fsdp2')).lower()}': {unknown}"
    for key in unknown:
        other = [s for s, keys in STRATEGY_KEYS.items() if key in keys]
        if key in KEY_HINTS:
            hint = KEY_HINTS[key]
        elif other:
            hint = f"{key} is an option of {' and '.join(other)}, not {strategy}: remove it (even when false)"
        else:
            hint = _suggest(key, valid | COMMON_KEYS) or f"remove it; {strategy} accepts: {', '.join(sorted(valid))}"
        out.append(r.UNKNOWN_OPTION.finding(f"{strategy} does not accept the option {key!r}",
                                            path=f"distributed.{key}", hint=hint, automodel_message=automodel))


def _unknown_keys(block: Mapping[str, Any], valid: frozenset[str], rule: r.Rule, where: str, cls: str,
                  out: list[Finding]) -> None:
    for key in sorted(str(k) for k in block if k not in valid):
        out.append(rule.finding(
            f"{cls} has no field {key!r}", path=f"{where}.{key}",
            hint=_suggest(key, valid) or f"remove it; accepted: {', '.join(sorted(valid))}",
            automodel_message=f"{cls}.__init__() got an unexpected keyword argument '{key}'"))


def _check_activation_checkpointing(dist: Mapping[str, Any], out: list[Finding]) -> None:
    value = dist.get("activation_checkpointing", False)
    try:
        normalize_activation_checkpointing(value)
    except ValueError:
        out.append(r.AC_VALUE.finding(f"activation_checkpointing {value!r} is not a value AutoModel reads",
                                      hint="use true, false or 'selective'", automodel_message=AC_MESSAGE))
    # selective with a strategy other than fsdp2/ddp (R5) is a layout rule: the planner prunes by it too



def _check_pipeline_block(dist: Mapping[str, Any], pp: int, model: ModelSpec | None, out: list[Finding]) -> None:
    pipeline = dist.get("pipeline")
    if pp <= 1:
        if pipeline is not None:
            out.append(r.PIPELINE_IGNORED.finding(
                f"distributed.pipeline is set but pp_size={pp}: the pipeline settings are ignored",
                hint="remove the pipeline block, or set pp_size > 1",
                automodel_message=f"`distributed.pipeline` is set but pp_size={pp} (<= 1): pipeline parallelism "
                                  "is disabled and the pipeline settings are ignored. Set pp_size > 1 to enable it."))
        return
    if pipeline is None:
        out.append(r.PIPELINE_MISSING.finding(
            f"pp_size={pp} but there is no distributed.pipeline block",
            hint="add `pipeline: {pp_schedule: 1f1b, pp_microbatch_size: 1}` under distributed (`pipeline: {}` "
                 "selects the defaults)",
            automodel_message=f"`pp_size={pp}` (> 1) enables pipeline parallelism but no `distributed.pipeline` "
                              "block was provided. Add a `distributed.pipeline` section (e.g. `pp_schedule`, "
                              "`pp_microbatch_size`); an empty `pipeline: {}` selects defaults."))
        return
    if not isinstance(pipeline, Mapping):
        return  # the parser reports a non-mapping block as an input error
    _unknown_keys(pipeline, PIPELINE_KEYS, r.PIPELINE_UNKNOWN_KEY, "distributed.pipeline", "PipelineConfig", out)
    schedule = pipeline.get("pp_schedule", "1f1b")
    path = "distributed.pipeline.pp_schedule"
    if schedule is None:
        if not pipeline.get("pp_schedule_csv"):
            out.append(r.SCHEDULE_NAME.finding(
                "pp_schedule is null and no pp_schedule_csv is given", path=path,
                hint="set pp_schedule: 1f1b (or interleaved1f1b)",
                automodel_message="Either pipeline_parallel_schedule or pipeline_parallel_schedule_csv must be "
                                  "provided"))
    elif not isinstance(schedule, str) or schedule.lower() not in PP_SCHEDULES:
        out.append(r.SCHEDULE_NAME.finding(
            f"unknown pipeline schedule {schedule!r}", path=path,
            hint=" ".join(filter(None, [_suggest(str(schedule).lower().replace("_", ""), PP_SCHEDULES),
                                        "torch names: 1f1b, interleaved1f1b, gpipe, loopedbfs, "
                                        "interleavedzerobubble, zbvzerobubble, dualpipev"])),
            automodel_message=f"Unknown schedule name '{schedule}'. The valid options are {list(TORCH_SCHEDULES)}"))
    per_stage = pipeline.get("layers_per_stage")
    if isinstance(per_stage, int) and not isinstance(per_stage, bool) and per_stage > 0:
        if model is None:
            out.append(r.SKIPPED.finding(
                "layers_per_stage needs the layer count: stage math not checked",
                path="distributed.pipeline.layers_per_stage", hint="pass --model to check it"))
            return
        layers = model.num_layers
        stages, error = virtual_stages(layers, per_stage, pp, pipeline.get("round_virtual_stages_to_pp_multiple"))
        if error:
            choices = [k for k in range(1, layers + 1) if virtual_stages(layers, k, pp, None)[1] is None][:8]
            out.append(r.VIRTUAL_STAGES.finding(
                f"layers_per_stage={per_stage} splits {layers} layers into {stages} stages, not a multiple of "
                f"pp_size={pp}",
                hint=f"layers_per_stage values that work: {listing(choices)}; or set "
                     "round_virtual_stages_to_pp_multiple: up", automodel_message=error))


def _check_ac_scope(value: Any, out: list[Finding]) -> None:
    if value is None:
        return
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)):
        out.append(r.AC_SCOPE.finding(
            f"activation_checkpointing_scope {value!r} is neither a string nor a list",
            hint="write e.g. `activation_checkpointing_scope: language`",
            automodel_message="activation_checkpointing_scope must be a string or list of strings."))
        return
    if not all(isinstance(item, str) for item in items):
        out.append(r.AC_SCOPE.finding("activation_checkpointing_scope entries must be strings",
                                      hint=f"use names from: {', '.join(AC_SCOPES)}",
                                      automodel_message="activation_checkpointing_scope entries must be strings."))
        return
    # Each string may itself join scopes with ',' or '+' ("language+vision"), as AutoModel splits them.
    parts = [p for item in items for p in item.lower().replace("-", "_").replace("+", ",").split(",")]
    scopes = []
    for part in parts:
        scope = "all" if part.strip() in ("default", "auto") else part.strip()
        if not scope:
            continue
        if scope not in AC_SCOPES:
            out.append(r.AC_SCOPE.finding(
                f"unknown activation_checkpointing_scope {part!r}",
                hint=" ".join(filter(None, [_suggest(scope, AC_SCOPES), f"use: {', '.join(AC_SCOPES)}"])),
                automodel_message=f"activation_checkpointing_scope must use only: {', '.join(AC_SCOPES)}. "
                                  f"Got {part!r}."))
            return
        scopes.append(scope)
    if "all" in scopes and len(set(scopes)) > 1:
        out.append(r.AC_SCOPE.finding(
            "activation_checkpointing_scope combines 'all' with other scopes", hint="use 'all' alone",
            automodel_message="activation_checkpointing_scope='all' cannot be combined with other scopes."))


def _check_multimodal(value: Any, out: list[Finding]) -> None:
    multimodal = as_mapping(value)
    sharding = multimodal.get("frozen_sharding", "root")
    if sharding not in FROZEN_SHARDING:
        out.append(r.MULTIMODAL.finding(
            f"unknown frozen_sharding {sharding!r}", path="distributed.multimodal.frozen_sharding",
            hint=f"use one of: {', '.join(FROZEN_SHARDING)}",
            automodel_message=f"distributed.multimodal.frozen_sharding must be one of: root, per_layer, replicate. "
                              f"Got {sharding!r}."))
    frames = as_mapping(as_mapping(multimodal.get("vision")).get("frame_sharding"))
    if "mesh_dims" in frames and list(frames["mesh_dims"] or []) != ["cp"]:
        out.append(r.MULTIMODAL.finding(
            f"frame_sharding.mesh_dims is {frames['mesh_dims']!r}",
            path="distributed.multimodal.vision.frame_sharding.mesh_dims", hint="use mesh_dims: [cp]",
            automodel_message='distributed.multimodal.vision.frame_sharding.mesh_dims currently supports only ["cp"]'))


def _check_async_tp(dist: Mapping[str, Any], tp: int, ep: int, out: list[Finding]) -> None:
    if dist.get("enable_async_tensor_parallel") is not True or tp <= 1:
        return
    if ep > 1:
        out.append(r.MOE_ASYNC_TP.finding(
            f"enable_async_tensor_parallel with ep_size={ep} and tp_size={tp}: the MoE TP path does not support it",
            hint="set enable_async_tensor_parallel: false",
            automodel_message="enable_async_tensor_parallel=True is not supported by the custom MoE TP path; it "
                              "requires sequence parallelism, which is intentionally disabled for replicated "
                              "router/attention paths."))
    elif dist.get("sequence_parallel") is not True:
        out.append(r.ASYNC_TP_NEEDS_SP.finding(
            "enable_async_tensor_parallel without sequence_parallel",
            hint="set distributed.sequence_parallel: true (or turn async TP off)",
            automodel_message="enable_async_tensor_parallel=True requires sequence_parallel=True"))


def _dtype_ok(value: Any) -> bool:
    if not isinstance(value, str):
        return True  # non-strings are the schema's business
    word = value.lower()
    return (word[len("torch."):] if word.startswith("torch.") else word) in DTYPES


def _check_dtypes(dist: Mapping[str, Any], pp: int, ep: int, out: list[Finding]) -> None:
    """dtype strings AutoModel converts at start-up (`dtype_from_str`), whatever the strategy."""
    mp = as_mapping(dist.get("mp_policy"))
    places = [(f"distributed.mp_policy.{k}", mp[k]) for k in MP_POLICY_DTYPES if k in mp]
    if "autocast_dtype" in dist:
        places.append(("distributed.autocast_dtype", dist["autocast_dtype"]))
    if pp > 1 and "dtype" in as_mapping(dist.get("pipeline")):
        places.append(("distributed.pipeline.dtype", dist["pipeline"]["dtype"]))
    if ep > 1:
        moe = as_mapping(dist.get("moe"))
        if "lm_head_precision" in moe:
            places.append(("distributed.moe.lm_head_precision", moe["lm_head_precision"]))
        moe_mp = as_mapping(moe.get("mp_policy"))
        if moe_mp.get("_target_"):
            places += [(f"distributed.moe.mp_policy.{k}", moe_mp[k]) for k in MP_POLICY_DTYPES if k in moe_mp]
    for path, value in places:
        if not _dtype_ok(value):
            out.append(r.DTYPE_STRING.finding(
                f"unknown dtype string {value!r}", path=path,
                hint=" ".join(filter(None, [_suggest(str(value).lower(), tuple(DTYPES)),
                                            "use bfloat16 (or bf16), float32, float16"])),
                automodel_message=f"Unknown dtype string: {value}"))


def _check_model_path(model: Mapping[str, Any], out: list[Finding]) -> None:
    """`pretrained_model_name_or_path` (or under `config:` for from_config) as transformers reads it: a hub id
    or a model folder. from_pretrained loads weights and tokenizer from beside the config, so a config.json
    file will not do there (AutoConfig alone accepts one); a relative path is resolved against the job's
    working directory, not the recipe's, and one that is not found there reads as a malformed hub id."""
    for path, value in (("model.pretrained_model_name_or_path", model.get("pretrained_model_name_or_path")),
                        ("model.config.pretrained_model_name_or_path",
                         as_mapping(model.get("config")).get("pretrained_model_name_or_path"))):
        if not isinstance(value, str) or not value.strip():
            continue
        local = Path(value).expanduser()
        exists = path_exists(local)  # a NUL or an over-long name is no path
        weights = path == "model.pretrained_model_name_or_path"
        if weights and (value.endswith(".json") or (exists and local.is_file())):
            out.append(r.MODEL_PATH.finding(
                f"{value!r} names a file; from_pretrained loads the model (config.json, weights, tokenizer) "
                "from its folder or a hub id", path=path, hint=f"point it at the folder: {local.parent}"))
        elif value.startswith(("./", "../")) or (not local.is_absolute() and exists):
            out.append(r.MODEL_PATH.finding(
                f"{value!r} is a relative path: transformers resolves it against the directory the job starts in, "
                "not the recipe's folder", path=path, severity=WARNING,
                hint=f"write the absolute path{f' ({local.resolve()})' if exists else ''}",
                automodel_message=f"Repo id must be in the form 'repo_name' or 'namespace/repo_name': '{value}'. "
                                  "Use `repo_type` argument if needed."))


def _check_backend(backend: Mapping[str, Any], out: list[Finding]) -> None:
    """BackendConfig.__post_init__ checks (defaults assume a GPU with Transformer Engine: linear te)."""
    if not backend:
        return
    linear, experts = backend.get("linear", "te"), backend.get("experts", "torch_mm")
    dispatcher = backend.get("dispatcher", "deepep")
    if experts in ("te", "gmm") and dispatcher not in FLEX_DISPATCHERS:
        experts = "torch_mm"  # AutoModel rewrites TE/gmm experts without a flex dispatcher
    if backend.get("te_fp8") is not None and linear != "te" and experts != "te":
        out.append(r.TE_FP8_BACKEND.finding(
            f"te_fp8 is set but neither linear ({linear!r}) nor experts ({experts!r}) uses Transformer Engine",
            hint="set model.backend.linear: te (or experts: te with a deepep/hybridep dispatcher)",
            automodel_message=f"te_fp8 requires at least one TE backend (linear='te' or experts='te'), but got "
                              f"linear='{linear}', experts='{experts}'"))
    _check_cuda_graph(backend, dispatcher, out)
    _check_mok(as_mapping(backend.get("mok")), out)


def _check_cuda_graph(backend: Mapping[str, Any], dispatcher: Any, out: list[Finding]) -> None:
    graph = backend.get("cuda_graph")
    if not isinstance(graph, Mapping) or graph.get("modules") is None:
        return
    modules = graph["modules"]

    def fire(message: str, automodel: str, hint: str) -> None:
        out.append(r.CUDA_GRAPH.finding(message, hint=hint, automodel_message=automodel))

    if not isinstance(modules, list):
        fire("cuda_graph.modules is not a list", "cuda_graph.modules must be a list", "write modules: [attn]")
        return
    unknown = [m for m in modules if m not in CUDA_GRAPH_MODULES]
    if unknown:
        fire(f"unsupported cuda_graph modules {unknown}", f"Unsupported cuda_graph.modules: {unknown}",
             f"use: {', '.join(CUDA_GRAPH_MODULES)}")
        return
    if len(set(modules)) != len(modules):
        fire("cuda_graph.modules has duplicates", "cuda_graph.modules must not contain duplicates",
             "list each module once")
    if "attn" in modules and "te_dpa" in modules:
        fire("cuda_graph.modules has both attn and te_dpa",
             "cuda_graph.modules cannot contain both 'attn' and 'te_dpa'", "keep one of them")
    if "moe_preprocess" in modules and "moe_router" not in modules:
        fire("moe_preprocess graphs need moe_router graphs", "'moe_preprocess' in cuda_graph.modules requires "
             "'moe_router'", "add moe_router to cuda_graph.modules")
    attention = sorted({"attn", "te_dpa"}.intersection(modules))
    if attention and backend.get("attn", "te") != "te":
        fire(f"{attention} graphs need attn: te", f"{attention} in cuda_graph.modules requires attn='te'",
             "set model.backend.attn: te")
    if "attn" in modules:
        for key, default in (("linear", "te"), ("rms_norm", "torch_fp32")):
            if backend.get(key, default) != "torch":
                fire(f"attn graphs need {key}: torch",
                     f"'attn' in cuda_graph.modules currently requires {key}='torch'",
                     f"set model.backend.{key}: torch")
    if "moe_router" in modules and backend.get("fake_balanced_gate") is True:
        fire("moe_router graphs need the learned gate",
             "'moe_router' in cuda_graph.modules requires the learned Gate (fake_balanced_gate=False)",
             "set fake_balanced_gate: false")
    if "moe_preprocess" in modules and dispatcher != "hybridep":
        fire("moe_preprocess graphs need dispatcher hybridep",
             "'moe_preprocess' in cuda_graph.modules requires dispatcher='hybridep'", "set dispatcher: hybridep")


def _check_mok(mok: Mapping[str, Any], out: list[Finding]) -> None:
    def number(key: str, default: int) -> Any:
        value = mok.get(key, default)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    for key, default in (("fwd_num_comm_sms", 40), ("bwd_num_comm_sms", 28)):
        value = number(key, default)
        if value is not None and (value <= 0 or value % 2):
            out.append(r.MOK_CONFIG.finding(f"mok.{key}={value} must be positive and even",
                                            path=f"model.backend.mok.{key}", hint="use an even SM count, e.g. 40"))
    minibatch, macrobatch = number("minibatch_size", 4096), number("macrobatch_size", 131072)
    if minibatch is not None and (minibatch <= 0 or minibatch % 256):
        out.append(r.MOK_CONFIG.finding(f"mok.minibatch_size={minibatch} must be a positive multiple of 256",
                                        path="model.backend.mok.minibatch_size", hint="use e.g. 4096"))
    elif minibatch and macrobatch is not None and (macrobatch <= 0 or macrobatch % minibatch):
        out.append(r.MOK_CONFIG.finding(
            f"mok.macrobatch_size={macrobatch} must be a positive multiple of minibatch_size={minibatch}",
            path="model.backend.mok.macrobatch_size", hint=f"use a multiple of {minibatch}"))
    chunk = number("all_gather_top_experts_chunk_bytes", 2048)
    if chunk is not None and (chunk <= 0 or chunk % 16):
        out.append(r.MOK_CONFIG.finding(f"mok.all_gather_top_experts_chunk_bytes={chunk} must be a multiple of 16",
                                        path="model.backend.mok.all_gather_top_experts_chunk_bytes",
                                        hint="use e.g. 2048"))


def _check_step_scheduler(steps: Mapping[str, Any], out: list[Finding]) -> None:
    for key, (lowest, nullable, automodel) in STEP_SCHEDULER_LIMITS.items():
        value = steps.get(key)
        if value is None or isinstance(value, bool) or not isinstance(value, (int, float)) or value >= lowest:
            continue
        out.append(r.STEP_SCHEDULER_POSITIVE.finding(
            f"step_scheduler.{key}={value} must be {'positive' if lowest == 1 else 'non-negative'}",
            path=f"step_scheduler.{key}", hint=f"use a value >= {lowest}" + (" or null" if nullable else ""),
            automodel_message=f"{automodel}, got {value}"))


def _positive_int(value: Any) -> bool:
    """A size that can be compared (other values are judged by the rules that own them)."""
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _check_mock_batch(dataset: Mapping[str, Any], steps: Mapping[str, Any], out: list[Finding]) -> None:
    """The mock dataset's batches are what a step trains on: a batch_size other than local_batch_size trains
    another global batch than the recipe states (and a pipeline's stages, shaped for local_batch_size, fail)."""
    local = steps.get("local_batch_size")
    if dataset.get("_target_") != MOCK_DATASET_TARGET or not _positive_int(local):
        return
    rows = dataset.get("batch_size", MOCK_DATASET_BATCH_DEFAULT)
    if not _positive_int(rows) or rows == local:
        return
    given = "" if "batch_size" in dataset else " (its default)"
    out.append(r.MOCK_BATCH_SIZE.finding(
        f"dataset.batch_size={rows}{given} but step_scheduler.local_batch_size={local}: MockIterableDataset yields "
        f"{rows}-row batches, so each forward/backward trains on {rows} instead of {local}",
        hint=f"set dataset.batch_size: {local} (the DataLoader's batch_size stays null)"))


def _check_packing(packing: Mapping[str, Any], out: list[Finding]) -> None:
    strategy = packing.get("packing_strategy")
    if strategy is None or (isinstance(strategy, str) and (strategy in ("thd", "neat") or "." in strategy)):
        return
    out.append(r.PACKING_STRATEGY.finding(
        f"unknown packing_strategy {strategy!r}", hint="use thd (default), neat, or a dotted import path",
        automodel_message=f"Unknown target {strategy!r}; expected one of ['neat', 'thd'] or a dotted path"))


def _check_checkpoint(ckpt: Mapping[str, Any], out: list[Finding]) -> None:
    timeout = ckpt.get("consolidation_timeout_minutes")
    if isinstance(timeout, (int, float)) and not isinstance(timeout, bool) and timeout <= 0:
        out.append(r.CHECKPOINT.finding(
            f"consolidation_timeout_minutes={timeout} must be positive",
            path="checkpoint.consolidation_timeout_minutes", hint="use e.g. 30",
            automodel_message="checkpoint.consolidation_timeout_minutes must be greater than 0"))
    recent = ckpt.get("max_recent_checkpoints")
    if recent is not None and (isinstance(recent, bool) or not isinstance(recent, int) or recent < 1):
        out.append(r.CHECKPOINT.finding(
            f"max_recent_checkpoints={recent!r} must be unset or a positive integer",
            path="checkpoint.max_recent_checkpoints", hint="use null or an integer >= 1",
            automodel_message="checkpoint.max_recent_checkpoints must be unset or a positive integer"))
    fmt = ckpt.get("model_save_format", "safetensors")
    if fmt not in SAVE_FORMATS:
        out.append(r.CHECKPOINT.finding(
            f"unknown model_save_format {fmt!r}", path="checkpoint.model_save_format",
            hint="use safetensors or torch_save",
            automodel_message=f"Unsupported model save format: {fmt}. Supported formats: {list(SAVE_FORMATS)}"))
    consolidated = ckpt.get("save_consolidated", "final")
    if not isinstance(consolidated, bool) and not (
            isinstance(consolidated, str) and consolidated.strip().lower() in ("true", "every", "final", "false")):
        out.append(r.CHECKPOINT.finding(
            f"unknown save_consolidated {consolidated!r}", path="checkpoint.save_consolidated",
            hint="use final, every or false",
            automodel_message=f"Unsupported save_consolidated value: {consolidated}. Supported values are false, "
                              "final, every, and legacy booleans."))


def _check_dist_backend(env: Mapping[str, Any], out: list[Finding]) -> None:
    """torch's Backend(name) takes one of its backends (any case) or a `device:backend` list; a name close to one
    is a typo AutoModel dies of at start-up ("Unknown backend type"), any other may be a backend the job
    registers itself (a warning)."""
    backend = env.get("backend")
    if not isinstance(backend, str) or ":" in backend or backend.lower() in TORCH_BACKENDS:
        return
    close = did_you_mean(backend, TORCH_BACKENDS)
    out.append(r.DIST_BACKEND.finding(
        f"dist_env.backend {backend!r} is no process-group backend torch knows{close}", severity=None if close
        else WARNING, hint="use nccl on GPUs (or a `device:backend` list such as cpu:gloo,cuda:nccl)",
        automodel_message=f"Unknown backend type {backend}" if close else None))


def _check_preemption_signal(steps: Mapping[str, Any], out: list[Finding]) -> None:
    """AutoModel's resolve_signal: an int must be a signal number, a name (any case, SIG optional) a signal."""
    for entry in signal_entries(steps.get("preemption_signal")):
        if entry is None or isinstance(entry, bool):
            continue
        if isinstance(entry, int) and not 1 <= entry <= MAX_SIGNAL:
            said, shown = f"Invalid signal number: {entry}", repr(entry)
        elif isinstance(entry, str) and (name := signal_name(entry)) not in SIGNAL_NAMES:
            said = f"Unknown signal name: {entry!r}"
            shown = f"{entry!r}{did_you_mean('SIG' + name, [f'SIG{n}' for n in SIGNAL_NAMES], n=2)}"
        else:
            continue
        out.append(r.SIGNAL_UNKNOWN.finding(
            f"preemption_signal {shown} is no signal", automodel_message=said,
            hint="use signal names without or with SIG (SIGTERM, SIGUSR1: what Slurm's --signal sends) or a list"))


def _check_dist_env(env: Mapping[str, Any], world_size: int, gpus_per_node: int, out: list[Finding]) -> None:
    _check_dist_backend(env, out)
    timeout = env.get("timeout_minutes")
    if timeout is not None and _check_timeout_value(timeout, out):
        return
    if world_size <= gpus_per_node:
        return
    if timeout is None or (isinstance(timeout, (int, float)) and timeout < MULTI_NODE_TIMEOUT_MINUTES):
        shown = "unset (AutoModel's default: 1 minute)" if timeout is None else f"{timeout} minutes"
        nodes = -(-world_size // gpus_per_node)  # a partly filled last node is a node too
        out.append(r.DIST_ENV_TIMEOUT.finding(
            f"dist_env.timeout_minutes is {shown} on a {nodes}-node run; start-up collectives "
            "and checkpoint saves across nodes routinely take longer",
            path="dist_env.timeout_minutes" if timeout is not None else "dist_env",
            hint=f"set dist_env.timeout_minutes: {MULTI_NODE_TIMEOUT_MINUTES} or more"))


# torch hands a process-group timeout to C++ as int64 microseconds (gloo refuses a larger one with "Invalid
# timeout"; checked with torch 2.13): 2**63 - 1 µs is about 1.5e11 minutes (292,000 years).
MAX_TIMEOUT_MINUTES = (2**63 - 1) // 60_000_000


def _check_timeout_value(timeout: Any, out: list[Finding]) -> bool:
    """AutoModel builds `datetime.timedelta(minutes=timeout_minutes)` at start-up (initialize_distributed):
    a non-number is a TypeError, NaN a ValueError, infinity or 1e30 an OverflowError, and torch refuses a
    negative timeout or one past int64 microseconds. True when the value is one of these (a finding added)."""
    if isinstance(timeout, bool):
        return False  # timedelta(minutes=True) is one minute; the schema says it is not a number
    if not isinstance(timeout, (int, float)):
        problem, fails = f"is {timeout!r}, not a number", "timedelta(minutes=...) raises TypeError"
    elif math.isnan(timeout):
        problem, fails = "is NaN", "timedelta(minutes=nan) raises ValueError"
    elif timeout > MAX_TIMEOUT_MINUTES:
        problem = f"is {timeout:g} minutes, past the {MAX_TIMEOUT_MINUTES:.3g} minutes (int64 microseconds) torch holds"
        fails = ("timedelta raises OverflowError" if timeout > timedelta.max / timedelta(minutes=1)
                 else "torch refuses it as an invalid timeout")
    elif timeout <= 0:
        problem, fails = f"is {timeout:g} minutes", "every collective times out at once (torch refuses a negative one)"
    else:
        return False
    out.append(r.DIST_ENV_TIMEOUT_VALUE.finding(
        f"dist_env.timeout_minutes {problem}: AutoModel fails at start-up ({fails})",
        hint=f"set dist_env.timeout_minutes to a number of minutes, e.g. {MULTI_NODE_TIMEOUT_MINUTES}"))
    return True

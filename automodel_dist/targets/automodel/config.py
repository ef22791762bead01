"""AutoModel's config-loading semantics, mirrored so recipes read here as they read at start-up.

AutoModel (`components/config/loader.py`) resolves `${VAR}` / `${VAR,default}` / `${oc.env:VAR,default}` /
`$VAR` inside strings, then passes every string through `translate_value` (`"none"` -> None, `"4"` -> 4,
`"[1,2]"` -> a list). `_target_` and `*_fn` strings are imported instead. Strategy names are matched
case-insensitively. Reading a recipe any other way would reject recipes AutoModel accepts.
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ruamel.yaml.scalarstring import ScalarString

from automodel_dist.errors import InputError
from automodel_dist.yamlio import PathKey, join_path, to_plain

# AutoModel reads recipes with PyYAML (YAML 1.1), where these plain (unquoted) words are booleans; the
# YAML 1.2 loader used here keeps them as strings. A quoted "yes" stays a string in both.
YAML11_BOOLEANS = {word: value for words, value in (("yes Yes YES on On ON", True), ("no No NO off Off OFF", False))
                   for word in words.split()}
_SPECIAL = {"none": None, "None": None, "true": True, "True": True, "false": False, "False": False}
_BRACED = re.compile(r"\$\{([^}]+)\}")
_DOLLAR = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)*)")

STRATEGY_NAMES = {"fsdp2": "fsdp2", "megatron_fsdp": "megatron_fsdp", "megatron-fsdp": "megatron_fsdp",
                  "mfsdp": "megatron_fsdp", "ddp": "ddp"}
COMMON_KEYS = frozenset({"strategy", "tp_size", "pp_size", "cp_size", "ep_size", "dp_size", "dp_replicate_size",
                         "pipeline", "moe", "activation_checkpointing", "_target_", "_recursive_", "_convert_"})
# Keys every strategy accepts (popped before the strategy constructor), then each constructor's own fields
# (closed sets: anything else is "Unknown options"), and the PipelineConfig / MoEParallelizerConfig fields;
# nemo_automodel 0.7.0 dataclass fields, plus reference/automodel.md §3.
STRATEGY_KEYS = {
    "fsdp2": frozenset({"sequence_parallel", "tp_plan", "patch_is_packed_sequence", "mp_policy", "offload_policy",
                        "autocast_dtype", "activation_checkpointing_scope", "defer_fsdp_grad_sync",
                        "reshard_after_forward", "enable_async_tensor_parallel", "enable_compile",
                        "enable_fsdp2_prefetch", "fsdp2_backward_prefetch_depth", "fsdp2_forward_prefetch_depth",
                        "multimodal"}),
    "megatron_fsdp": frozenset({"megatron_fsdp_unit_modules", "zero_dp_strategy", "init_fsdp_with_meta_device",
                                "grad_reduce_in_fp32", "preserve_fp32_weights", "overlap_grad_reduce",
                                "overlap_param_gather", "check_for_nan_in_grad", "report_nan_in_param_grad",
                                "average_in_collective", "disable_bucketing", "calculate_per_token_loss",
                                "keep_fp8_transpose_cache", "nccl_ub", "fsdp_double_buffer"}),
    "ddp": frozenset({"activation_checkpointing_scope", "broadcast_buffers", "find_unused_parameters",
                      "static_graph", "bucket_cap_mb", "gradient_as_bucket_view", "autocast_dtype"}),
}
PIPELINE_KEYS = frozenset({"pp_schedule", "pp_schedule_csv", "pp_microbatch_size", "pp_batch_size", "layers_per_stage",
                           "round_virtual_stages_to_pp_multiple", "module_fqns_per_model_part", "patch_inner_model",
                           "patch_causal_lm_model", "patch_stage_backward_maybe_with_nosync", "dtype",
                           "scale_grads_in_schedule", "loss_fn", "pp_seq_len", "pp_recv_buffer_pool",
                           "pp_recv_buffer_pool_slack"})
MOE_KEYS = frozenset({"ignore_router_for_ac", "reshard_after_forward", "lm_head_precision", "wrap_outer_model",
                      "mp_policy"})
# Sections TrainFinetuneRecipeForNextTokenPrediction (and its subclasses) builds closed config objects from, in
# nemo_automodel 0.7.0 (recipes/_typed_config.py): LRSchedulerConfig(**section) without `_target_`
# (components/optim/optimizer.py), CheckpointingConfig(**section) without `restore_from` (components/checkpoint/
# config.py), and the loader fields `_resolve_dataloader` accepts ("Unexpected dataloader config field(s)"), for
# `dataloader` and each `validation_dataloader*`. Any other key fails setup; tests/test_rules.py checks the tables
# against the installed AutoModel.
LR_SCHEDULER_KEYS = frozenset({"_target_", "lr_warmup_steps", "lr_decay_steps", "lr_decay_style", "init_lr", "max_lr",
                               "min_lr", "start_wd", "end_wd", "wd_incr_steps", "wd_incr_style",
                               "use_checkpoint_opt_param_scheduler", "override_opt_param_scheduler",
                               "wsd_decay_steps", "lr_wsd_decay_style"})
CHECKPOINT_KEYS = frozenset({"restore_from", "allow_legacy_pickle_restore", "best_metric_key", "checkpoint_dir",
                             "consolidation_timeout_minutes", "cpu_offload", "dequantize_base_checkpoint",
                             "diffusers_compatible", "enabled", "is_async", "is_peft", "legacy_paramwrapper_layout",
                             "max_recent_checkpoints", "model_cache_dir", "model_repo_id", "model_save_format",
                             "model_state_dict_keys", "original_model_root_dir", "save_consolidated",
                             "single_rank_consolidation", "skip_task_head_prefixes_for_base_model", "staging_dir",
                             "v4_compatible", "wait_for_staging"})
DATALOADER_KEYS = frozenset({"_target_", "collate_fn", "dataloader_type", "shuffle", "group_by_length",
                             "shuffle_buffer_size", "batch_size", "num_workers", "pin_memory", "persistent_workers",
                             "prefetch_factor", "drop_last"})
AC_FALSE = frozenset({"false", "off", "none", "disabled", "no"})
AC_TRUE = frozenset({"true", "on", "full", "enabled", "yes"})
AC_MESSAGE = "distributed.activation_checkpointing must be a boolean or one of 'full', 'selective', 'false'."


# The dataset that yields whole batches of its own `batch_size` rows (the DataLoader is given batch_size: null),
# so the batch a step trains on is dataset.batch_size, whatever step_scheduler.local_batch_size says. In
# AutoModel 0.7.0 this is the only such dataset (components/datasets/llm/mock_iterable_dataset.py; its
# batch_size defaults to 1); every other dataset yields samples the DataLoader batches.
MOCK_DATASET_TARGET = "nemo_automodel.components.datasets.llm.mock_iterable_dataset.MockIterableDataset"
MOCK_DATASET_BATCH_DEFAULT = 1

# The top-level sections AutoModel's LLM recipes read (reference/automodel.md §1, from nemo_automodel 0.7.0's
# recipes and its examples). A base recipe must hold at least one, so that a file that is not a recipe at
# all (a key file, /etc/shadow) is refused instead of being merged into the output.
RECIPE_SECTIONS = frozenset({
    "recipe", "model", "distributed", "dist_env", "step_scheduler", "packed_sequence", "checkpoint", "dataset",
    "dataloader", "validation_dataset", "validation_dataloader", "loss_fn", "optimizer", "lr_scheduler",
    "clip_grad_norm", "peft", "fp8", "compile", "quantization", "qat", "freeze_config", "processor", "seed", "rng",
    "wandb", "mlflow", "comet", "teacher_model", "teacher_distributed", "kd_loss_fn", "kd_ratio", "separate_meshes",
})


@dataclass(frozen=True)
class MissingEnvVar:
    """A `${VAR}` with no default whose variable is not set (AutoModel raises KeyError at load)."""

    path: PathKey
    name: str
    token: str

    @property
    def automodel_message(self) -> str:
        return f"Environment variable '{self.name}' is not set (required by '{self.token}')."


def translate_value(value: Any) -> Any:
    """AutoModel's `translate_value`: special words, then `ast.literal_eval`, else the string itself."""
    if not isinstance(value, str):
        return value
    if value in _SPECIAL:
        return _SPECIAL[value]
    if len(value) > 1000:
        return value
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return value


class EnvSecrets:
    """The values the environment gave a recipe's `${VAR}`s, so that a message can say the token and never
    the value: validate runs on untrusted recipes in CI logs, and `strategy: ${SECRET_TOKEN}` must read as
    "${SECRET_TOKEN} is not a strategy", not print the token's value."""

    # Shorter values (a "1", a "no") are not secrets, and replacing them would garble every number.
    MIN_LENGTH = 4

    def __init__(self) -> None:
        self.tokens: dict[str, str] = {}  # value -> the token it replaced

    def add(self, value: str, token: str) -> None:
        if len(value) >= self.MIN_LENGTH:
            self.tokens.setdefault(value, token)

    def redact(self, text: str | None) -> str | None:
        """`text` with every environment value replaced by its token (longest first)."""
        if not text:
            return text
        for value in sorted(self.tokens, key=len, reverse=True):
            text = text.replace(value, self.tokens[value])
        return text


def _resolve_string(text: str, path: PathKey, environ: Mapping[str, str],
                    missing: list[MissingEnvVar], secrets: EnvSecrets) -> str | None:
    if "$" not in text:
        return text

    def lookup(name: str, default: str | None, token: str) -> str:
        if name in environ:
            secrets.add(environ[name], token)
            return environ[name]
        if default is not None:
            return default
        missing.append(MissingEnvVar(path, name, token))
        return ""

    def braced(match: re.Match[str]) -> str:
        expr = match.group(1).strip()
        if expr.startswith("oc.env:"):
            expr = expr[len("oc.env:"):].strip()
        name, default = (part.strip() for part in expr.split(",", 1)) if "," in expr else (expr, None)
        return lookup(name, default, match.group(0))

    before = len(missing)
    resolved = _DOLLAR.sub(lambda m: lookup(m.group(1), None, m.group(0)), _BRACED.sub(braced, text))
    if len(missing) > before and not resolved.strip():
        return None  # the value was only an unset variable: judge the recipe with the key's default
    return resolved


def resolve_config(data: Any, environ: Mapping[str, str] | None = None, *,
                   secrets: EnvSecrets | None = None) -> tuple[Any, list[MissingEnvVar]]:
    """Plain copy of `data` with env vars resolved and values translated as AutoModel does.

    Unset variables without a default are returned, not raised, so `validate` can report them and go on.
    `secrets` collects the values taken from the environment, for messages to redact.
    """
    env = os.environ if environ is None else environ
    missing: list[MissingEnvVar] = []
    secrets = EnvSecrets() if secrets is None else secrets

    def walk(value: Any, path: PathKey, key: Any) -> Any:
        if isinstance(value, Mapping):
            plain = ((to_plain(k), v) for k, v in value.items())
            return {k: walk(v, (*path, k), k) for k, v in plain}
        if isinstance(value, (list, tuple)):
            return [walk(v, (*path, i), "") for i, v in enumerate(value)]
        if isinstance(value, str):
            if value in YAML11_BOOLEANS and not isinstance(value, ScalarString):
                return YAML11_BOOLEANS[value]
            value = _resolve_string(str(value), path, env, missing, secrets)
            if isinstance(key, str) and (key == "_target_" or key.endswith("_fn")):
                return value
            return translate_value(value)
        return to_plain(value)

    return walk(data, (), None), missing


def load_config(data: Any, environ: Mapping[str, str] | None = None) -> Any:
    """`resolve_config`, but an unset variable is an input error (what AutoModel's loader does)."""
    config, missing = resolve_config(data, environ)
    if missing:
        first = missing[0]
        raise InputError(first.automodel_message, where=join_path(first.path) or None,
                         hint=f"export {first.name}=... or give a default: ${{{first.name},VALUE}}")
    return config


def canonical_strategy(value: Any) -> str | None:
    """'FSDP2' -> 'fsdp2', 'mfsdp' -> 'megatron_fsdp'; None for anything AutoModel would reject."""
    if not isinstance(value, str):
        return None
    return STRATEGY_NAMES.get(value.lower())


def normalize_activation_checkpointing(value: Any) -> bool | str:
    """AutoModel's `_normalize_activation_checkpointing`: a bool or 'selective'; ValueError otherwise."""
    if value is None:
        return False
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        word = value.lower().replace("-", "_")
        if word in AC_FALSE:
            return False
        if word in AC_TRUE:
            return True
        if word == "selective":
            return "selective"
    raise ValueError(AC_MESSAGE)


def mesh_degree(value: Any) -> int:
    """AutoModel's `mesh_utils._degree`: a size that is a positive int counts as given, anything else is 1."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 1

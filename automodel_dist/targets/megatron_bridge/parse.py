"""Megatron-Bridge target, reading side: an override set (YAML mapping or Hydra list) becomes an `OverrideSet`.

Keys the target does not model are left to the recipe; keys it models and the file leaves out take the recipe
function's values when validate knows them (`base`, from fields.recipe_values), else ConfigContainer's defaults
(`MegatronSettings()`, TP=PP=CP=EP=ETP=1). A value of the wrong type is bad
input (exit 2) at its line:col; a value of the right type that Megatron refuses (an unknown CUDA-graph
implementation, `recompute_granularity: partial`) is left for the rules, which quote Megatron's message.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from automodel_dist import limits
from automodel_dist.errors import InputError
from automodel_dist.layout import AC_MODES, Layout
from automodel_dist.targets.megatron_bridge.choose import layout_dispatcher
from automodel_dist.targets.megatron_bridge.overrides import DIST_OPTIMIZER, KEYS, Key, MegatronSettings, OverrideSet
from automodel_dist.yamlio import Document, to_plain

INT_FIELDS = frozenset({"tp", "pp", "vpp", "cp", "ep", "etp", "micro_batch_size", "global_batch_size",
                        "recompute_num_layers", "mtp_num_layers", "seq_length", "dataset_seq_length",
                        "packed_sequence_size",
                        "pad_seq_to_mult", "peft_dim", "peft_alpha"})
ZERO_ALLOWED = frozenset({"mtp_num_layers"})  # 0 MTP layers is no MTP, as MCore reads it
NULLABLE = frozenset({"vpp", "pipeline_layout", "hierarchical_cp_sizes", "flex_backend", "recompute_granularity",
                      "recompute_method", "recompute_num_layers", "recompute_modules", "mtp_num_layers", "etp",
                      "packed_sequence_size", "pad_seq_to_mult", "per_token_loss", "average_in_collective",
                      "pretrained_checkpoint", "peft_dim", "peft_alpha", "comm_overlap_target", "grad_reduce_in_fp32",
                      "fp8", "fp8_recipe", "fp8_param_gather", "reuse_grad_buf_for_mxfp8_param_ag",
                      "precision_aware_optimizer"})
BOOL_FIELDS = frozenset({"sequence_parallel", "shared_expert_overlap", "ep_overlap", "delay_wgrad",
                         "tp_comm_overlap", "overlap_grad_reduce", "overlap_param_gather",
                         "gradient_accumulation_fusion", "check_for_nan_in_loss", "te_rng_tracker",
                         "account_for_embedding", "account_for_loss", "per_token_loss", "average_in_collective",
                         "grad_reduce_in_fp32", "fp8_param_gather", "reuse_grad_buf_for_mxfp8_param_ag",
                         "precision_aware_optimizer"})
LIST_FIELDS = frozenset({"hierarchical_cp_sizes", "recompute_modules", "cuda_graph_scope"})
# The one place's limits for the sizes an override set carries (automodel_dist/limits.py).
SIZE_LIMITS = {**dict.fromkeys(("tp", "pp", "vpp", "cp", "ep", "etp"), limits.WORLD_SIZE),
               **dict.fromkeys(("micro_batch_size", "global_batch_size"), limits.BATCH),
               **dict.fromkeys(("seq_length", "dataset_seq_length", "packed_sequence_size", "pad_seq_to_mult"),
                               limits.SEQ_LENGTH),
               **dict.fromkeys(("peft_dim", "peft_alpha"), limits.WIDTH),
               **dict.fromkeys(("recompute_num_layers", "mtp_num_layers"), limits.LAYERS)}
_HYDRA = re.compile(r"^(?P<prefix>\+{0,2})(?P<key>[A-Za-z_][A-Za-z0-9_.]*)=(?P<value>.*)$")


def flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{'model': {'tp': 2}} -> {'model.tp': 2} (lists stay values)."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, path + "."))
        else:
            out[path] = to_plain(value)
    return out


def hydra_scalar(text: str) -> Any:
    """One Hydra override value: null, true/false, int, float, [list], 'quoted' or plain string."""
    text = text.strip()
    if text.startswith("[") and text.endswith("]"):
        inner = text[1:-1].strip()
        return [hydra_scalar(part) for part in inner.split(",")] if inner else []
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1].replace("\\'", "'").replace("\\\\", "\\")
    lowered = text.lower()
    if lowered == "null":
        return None
    if lowered in ("true", "false"):
        return lowered == "true"
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


@dataclass(frozen=True)
class HydraOverride:
    """One `[+|++]key=value` item as written: Hydra's prefix ("+" appends a key the config lacks, "++" adds or
    overrides, none overrides a key the config has), the dotted key, the value, and the item's text."""

    prefix: str
    key: str
    value: Any
    text: str


def read_hydra(overrides: Sequence[str], where: str = "overrides") -> list[HydraOverride]:
    """Each item of a `key=value` list, in order; one that is not `[+|++]key=value` is an InputError."""
    out = []
    for i, item in enumerate(overrides):
        text = item.strip()
        match = _HYDRA.match(text)
        if not match:
            raise InputError(f"not a Hydra override: {item!r}", where=f"{where}[{i}]", hint=_misfit(text))
        out.append(HydraOverride(match["prefix"], match["key"], hydra_scalar(match["value"]), text))
    return out


def hydra_mapping(overrides: Sequence[str], where: str = "overrides") -> dict[str, Any]:
    """A `key=value` list as a flat {dotted key: value} (the last of a repeated key wins, as in Hydra)."""
    return {item.key: item.value for item in read_hydra(overrides, where)}


def _typed(key: Key, value: Any, where: str) -> Any:
    """The value of one key as its field holds it; a wrong type is an InputError naming the key."""
    name, path = key.field, key.path
    if value is None:
        if name in NULLABLE or name in LIST_FIELDS:
            return None
        raise InputError(f"{path} cannot be null", where=where, hint="give a value or remove the key")
    if name in LIST_FIELDS:
        if not isinstance(value, list):
            raise InputError(f"{path}: expected a list, got {value!r}", where=where,
                             hint="write a YAML list, e.g. [2, 2]")
        if name == "hierarchical_cp_sizes" and not all(isinstance(v, int) and not isinstance(v, bool)
                                                       for v in value):
            raise InputError(f"{path}: expected a list of integers, got {value!r}", where=where, hint="e.g. [8, 2]")
        return tuple(value) if name == "hierarchical_cp_sizes" else tuple(str(v) for v in value)
    if name in INT_FIELDS:
        lowest = 0 if name in ZERO_ALLOWED else 1
        if isinstance(value, bool) or not isinstance(value, int) or value < lowest:
            what = "a non-negative" if lowest == 0 else "a positive"
            raise InputError(f"{path}: expected {what} integer, got {value!r}", where=where, hint="e.g. 2")
        limits.check_size(value, SIZE_LIMITS[name], name=path, where=where)
        return value
    if name in BOOL_FIELDS:
        if not isinstance(value, bool):
            raise InputError(f"{path}: expected true or false, got {value!r}", where=where,
                             hint="write true or false")
        return value
    return str(value)


def megatron_layout(world_size: int, *, tp: int = 1, pp: int = 1, vpp: int = 1, cp: int = 1, ep: int = 1,
                    etp: int = 1, sequence_parallel: bool = False, activation_checkpointing: str | bool = "off",
                    global_batch_size: int = 1, micro_batch_size: int = 1, dispatcher: str | None = None) -> Layout:
    """A Megatron layout with what follows from its sizes: the schedule and the per-rank batch.

    Megatron runs a step's whole per-rank batch (global / DP) through the pipeline in one flush, so with PP
    the local batch is global / DP; without PP, micro batches accumulate one after another.
    """
    dp = world_size // (tp * pp * cp) if tp * pp * cp > 0 else 0
    local = global_batch_size // dp if pp > 1 and dp > 0 and global_batch_size % dp == 0 else micro_batch_size
    return Layout(world_size=world_size, strategy=DIST_OPTIMIZER, tp=tp, pp=pp, cp=cp, ep=ep, etp=etp, vpp=vpp,
                  pp_schedule=None if pp <= 1 else ("interleaved1f1b" if vpp > 1 else "1f1b"),
                  activation_checkpointing=activation_checkpointing, sequence_parallel=sequence_parallel,
                  global_batch_size=global_batch_size, local_batch_size=local, micro_batch_size=micro_batch_size,
                  dispatcher=dispatcher)


# A line written as a Hydra override, well-formed or not: a deletion, or a key and `=` (spaces around it too).
_HYDRA_LIKE = re.compile(r"^(~|\+{0,2}[A-Za-z_][A-Za-z0-9_.\-]*\s*=)")


def hydra_file(text: str, filename: str = "overrides") -> list[tuple[int, str]] | None:
    """(line number, override) of every line of a Hydra override list (`compile --format hydra` writes one;
    `#` comments and blank lines aside), or None when no line is one (the file is YAML). A list with a line
    that is not `[+|++]key=value` is an InputError at that line."""
    lines = [(number, line.strip()) for number, line in enumerate(text.splitlines(), start=1)]
    lines = [(number, line) for number, line in lines if line and not line.startswith("#")]
    if not any(_HYDRA_LIKE.match(line) for _, line in lines):
        return None
    for number, line in lines:
        if not _HYDRA.match(line):
            raise InputError(f"not a Hydra override: {line!r}", where=f"{filename}:{number}:1", hint=_misfit(line))
    return lines or None


def _misfit(line: str) -> str:
    """How to write one line of a Hydra list that is not `[+|++]key=value`."""
    if line.startswith("~"):
        return ("remove the line: ~key deletes the key from the config Hydra sees, and Megatron-Bridge then keeps "
                "the recipe's value")
    if re.match(r"^\+{0,2}[A-Za-z_][A-Za-z0-9_.]*\s+=", line):
        fixed = re.sub(r"\s*=\s*", "=", line, count=1)
        return f"no spaces around '=' (Hydra's grammar refuses 'a.b = 2'): write {fixed}"
    return ("write one [+|++]key=value per line, e.g. model.tensor_model_parallel_size=2 (a file of Hydra items takes "
            "no YAML lines)")


def flat_overrides(source: Document | Mapping[str, Any] | Sequence[str]) -> dict[str, Any]:
    """{dotted key: value} of an override set (a loaded YAML document, a mapping, or a Hydra list)."""
    if isinstance(source, Document):
        return flatten(source.data)
    if isinstance(source, Mapping):
        return flatten(source)
    return hydra_mapping(source)


def _usable(base: Mapping[str, Any]) -> dict[str, Any]:
    """The recipe's values the override set's fields can hold (a recipe's None where the field takes none, e.g.
    a CommOverlapConfig not yet finalized, leaves the field at ConfigContainer's default)."""
    out = {}
    for key in KEYS:
        if key.path in base:
            try:
                _typed(key, base[key.path], key.path)
            except InputError:
                continue
            out[key.path] = base[key.path]
    return out


def _kept(base: Mapping[str, Any], own: Mapping[str, Any]) -> dict[str, Any]:
    """The recipe's values an override set leaves in place: not those under a key it sets to a name (a precision
    recipe's name replaces the recipe's MixedPrecisionConfig object, and its fields with it; any other value in a
    section's place is the rules' mb-section-value)."""
    names = [key for key, value in own.items() if isinstance(value, str)]
    return {path: value for path, value in base.items() if not any(path.startswith(key + ".") for key in names)}


def parse_overrides(source: Document | Mapping[str, Any] | Sequence[str], *, world_size: int,
                    where: Callable[[str], str] | None = None, base: Mapping[str, Any] | None = None) -> OverrideSet:
    """Read an override set on `world_size` GPUs (a loaded YAML document, a mapping, or a Hydra list);
    `where(dotted key)` places a bad value (a YAML document's keys are placed by the document). `base`: the
    recipe's own values (fields.recipe_values), which a key the set leaves out keeps."""
    own = flat_overrides(source)
    flat = {**_kept(_usable(base or {}), own), **own}
    doc = source if isinstance(source, Document) else None
    locate = where or (doc.where if doc else (lambda path: path))
    layout_values: dict[str, Any] = {}
    settings_values: dict[str, Any] = {}
    for key in KEYS:
        if key.path not in flat:
            continue
        value = _typed(key, flat[key.path], locate(key.path))
        (layout_values if key.on_layout else settings_values)[key.field] = value
    settings_values["vpp_set_to_one"] = layout_values.get("vpp") == 1
    for name in ("vpp", "etp"):
        if layout_values.get(name, 0) is None:
            layout_values[name] = 1
    if settings_values.get("dataset_seq_length") == settings_values.get("seq_length", MegatronSettings.seq_length):
        settings_values.pop("dataset_seq_length")  # None: the model's
    settings_values["comm_overlap"] = any(path.startswith("comm_overlap.") for path in flat)
    if "mixed_precision" not in flat and any(path.startswith("mixed_precision.") for path in flat):
        settings_values["precision"] = None  # the recipe's MixedPrecisionConfig object, its fields as read
    settings = MegatronSettings(**settings_values)
    moe = "model.moe_token_dispatcher_type" in flat
    layout_values["dispatcher"] = layout_dispatcher(settings.dispatcher_type, settings.flex_backend) if moe else None
    # the layout's checkpointing mode is the granularity; one Megatron does not know (the rules say so) as full
    granularity = settings.recompute_granularity
    layout_values["activation_checkpointing"] = ("off" if granularity is None
                                                 else granularity if granularity in AC_MODES else "full")
    return OverrideSet(megatron_layout(world_size, **layout_values), settings)


# Keys only a Megatron-Bridge override set has (AutoModel's recipe says distributed.tp_size and so on).
MEGATRON_ONLY = tuple(key.path for key in KEYS if key.path.startswith("model.") and key.path.endswith("_size"))


def megatron_key(data: Mapping[str, Any]) -> str | None:
    """The first key that makes `data` a Megatron-Bridge override set rather than an AutoModel recipe (a
    Megatron parallel size and no `distributed:` section), or None."""
    if "distributed" in data:
        return None
    flat = flatten(data)
    return next((path for path in MEGATRON_ONLY if path in flat), None)

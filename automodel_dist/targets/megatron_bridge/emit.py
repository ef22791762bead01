"""Megatron-Bridge target, writing side: an `OverrideSet` becomes a YAML file and a Hydra `key=value` list.

Both forms hold the same (dotted path, value) pairs, in `overrides.KEYS` order, for a recipe function's
`ConfigContainer` (the YAML nests the dotted paths; the list is what `run_recipe.py` takes after the
recipe name). Every value carries a why-comment in the YAML. `parse.parse_overrides(emit(x)) == x`.
"""

from __future__ import annotations

import re
from typing import Any

from automodel_dist.layout import Layout
from automodel_dist.targets.commented import Section
from automodel_dist.targets.megatron_bridge.overrides import KEYS, OverrideSet, appended
from automodel_dist.yamlio import dump_yaml

# Written only for MoE models (a layout with a dispatcher); a dense model keeps the recipe's.
MOE_FIELDS = frozenset({"dispatcher_type", "flex_backend", "shared_expert_overlap", "ep_overlap", "delay_wgrad"})
# Written only when set: the section's _target_ only where the recipe has none, the MTP layer count is the
# recipe's unless the model has one, only the sft/peft recipes pack sequences, and the fine-tuning keys are the
# sft/peft recipes' (the loss averaging only with CP), and a MixedPrecisionConfig's own fields only where the set
# holds one (the compiler names a precision recipe instead), the optimizer's precision where the set decides it.
# recompute_modules is always written: a recipe's list stays in force with recompute off, and Megatron-Bridge
# refuses EP overlap with moe in it.
OPTIONAL_FIELDS = frozenset({"comm_overlap_target", "mtp_num_layers", "packed_sequence_size", "pad_seq_to_mult",
                             "per_token_loss", "average_in_collective", "pretrained_checkpoint", "peft_dim",
                             "peft_alpha", "precision", "grad_reduce_in_fp32", "fp8", "fp8_recipe",
                             "fp8_param_gather", "reuse_grad_buf_for_mxfp8_param_ag", "precision_aware_optimizer"})
# A Hydra value outside these characters is quoted (pipeline layouts: `Et*3|(tt|)*29m|L`).
_HYDRA_PLAIN = re.compile(r"[A-Za-z0-9_.:+\-/]+")


def field_value(override: OverrideSet, name: str, on_layout: bool) -> Any:
    """The value of one field, as written (VPP 1 is `null`, no interleaving, unless the set holds it at 1; the
    dataset's sequence length the model's unless set; tuples as lists)."""
    if on_layout:
        value = getattr(override.layout, name)
        return None if name == "vpp" and value <= 1 and not override.settings.vpp_set_to_one else value
    value = getattr(override.settings, name)
    if name == "dataset_seq_length" and value is None:
        return override.settings.seq_length  # the two must match
    return list(value) if isinstance(value, tuple) else value


def override_pairs(override: OverrideSet) -> list[tuple[str, str, Any]]:
    """(dotted path, field, value) for every key this override set writes, in emission order."""
    moe = override.layout.dispatcher is not None
    out = []
    for key in KEYS:
        if key.field in MOE_FIELDS and not moe:
            continue
        if key.path.startswith("comm_overlap.") and not override.settings.comm_overlap:
            continue
        value = field_value(override, key.field, key.on_layout)
        if key.field in OPTIONAL_FIELDS and value is None:
            continue
        out.append((key.path, key.field, value))
    return out


def hydra_value(value: Any) -> str:
    """One value in Hydra's override grammar."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, list):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    text = str(value)
    return text if _HYDRA_PLAIN.fullmatch(text) else "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def hydra_overrides(override: OverrideSet) -> list[str]:
    """The `key=value` list for the recipe runner."""
    return [f"{'+' if appended(path, override.settings) else ''}{path}={hydra_value(value)}"
            for path, _, value in override_pairs(override)]


def override_yaml(override: OverrideSet, why: dict[str, str], header: str = "") -> str:
    """The YAML file: the dotted paths nested, each value with its reason."""
    root = Section()
    sections: dict[str, Section] = {}
    for path, name, value in override_pairs(override):
        *parents, leaf = path.split(".")
        node = root
        for i, part in enumerate(parents):
            prefix = ".".join(parents[: i + 1])
            if prefix not in sections:
                sections[prefix] = Section()
                node.put(part, sections[prefix])
            node = sections[prefix]
        node.put(leaf, value, why.get(name))
    return header + dump_yaml(root.finish(), explicit_null=True)


def layout_reasons(layout: Layout) -> dict[str, str]:
    """Why-comments for the layout's own fields (the planner chose them against the cost model)."""
    dp = layout.dp
    edp = layout.ep_shard
    return {
        "tp": "TP inside the NVLink domain" if layout.tp > 1 else "no tensor parallelism needed to fit",
        "pp": f"{layout.pp} pipeline stages" if layout.pp > 1 else "no pipeline needed",
        "vpp": f"{layout.vpp} virtual stages per rank shrink the bubble" if layout.vpp > 1 else "no interleaving",
        "cp": f"sequence split over {layout.cp} ranks" if layout.cp > 1 else "no context parallelism",
        "ep": f"experts over {layout.ep} ranks, expert data parallelism {edp}" if layout.ep > 1 else "no EP",
        "etp": "expert layers without tensor parallelism (folded: EP spans the stage's ranks)",
        "sequence_parallel": "on with TP (Megatron requires TP > 1)" if layout.sequence_parallel else "off: TP=1",
        "micro_batch_size": "micro batch the cost model ranked best",
        "global_batch_size": f"the intent's global batch: {dp} data-parallel ranks",
    }


# Reasons for the values `decide` leaves at ConfigContainer's defaults.
DEFAULT_WHY = {
    "pipeline_layout": "layers split evenly over the stages: no explicit layout",
    "hierarchical_cp_sizes": "no hierarchical CP",
    "account_for_embedding": "the split places layers only (a layout string, if any, places the embedding)",
    "account_for_loss": "the split places layers only (a layout string, if any, places the loss)",
    "delay_wgrad": "off",
    "tp_comm_overlap": "no TP to overlap",
    "gradient_accumulation_fusion": "fused wgrad accumulation into the main-gradient buffer",
    "recompute_granularity": "no recompute: the layout fits without it",
    "recompute_method": "no full recompute (it also blocks EP overlap)",
    "recompute_num_layers": "no full recompute",
    "recompute_modules": "no selective recompute: clears the recipe's list (Qwen3-Next's holds moe, which EP overlap "
                         "refuses even with recompute off)",
    "cuda_graph_impl": "no CUDA graphs: only after a profile shows launch gaps",
    "cuda_graph_scope": "no CUDA graphs",
    "te_rng_tracker": "only CUDA graphs need TE's RNG tracker",
    "check_for_nan_in_loss": "keep the NaN check (only full-iteration graphs must drop it)",
}


def reasons(layout: Layout, chosen: dict[str, str]) -> dict[str, str]:
    """Every field's why-comment: the defaults', the layout's, then what `decide` chose."""
    return {**DEFAULT_WHY, **layout_reasons(layout), **chosen}

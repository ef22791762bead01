"""Differential test: our verdict on a `distributed:` section's keys and values equals AutoModel 0.7.0's parser.

`parse_distributed_section` (recipes/_dist_utils.py) normalises activation checkpointing, builds the
multimodal policy, converts dtype strings, resolves the strategy (unknown strategy or key, AC scope),
builds PipelineConfig / MoEParallelizerConfig (unknown keys) and requires a pipeline block for pp > 1.
It needs no process group, so it runs in-process on hypothesis-generated sections.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from automodel_dist.rules import registry as r
from automodel_dist.validate import validate_recipe

SECTION_RULES = frozenset(rule.id for rule in (
    r.UNKNOWN_STRATEGY, r.UNKNOWN_OPTION, r.PIPELINE_UNKNOWN_KEY, r.MOE_UNKNOWN_KEY, r.AC_VALUE, r.SELECTIVE_AC,
    r.PIPELINE_MISSING, r.AC_SCOPE, r.MULTIMODAL, r.DTYPE_STRING))
ABSENT = object()


def maybe(*values: Any) -> st.SearchStrategy[Any]:
    """Absent most of the time, else one of `values` (one odd key at a time keeps verdicts informative)."""
    return st.sampled_from([*[ABSENT] * 10, *values])


sections = st.fixed_dictionaries({
    "strategy": st.sampled_from(["fsdp2", "fsdp2", "fsdp2", "FSDP2", "megatron_fsdp", "mfsdp", "ddp", "ddp", "zero3",
                                 None]),
    "pp_size": st.sampled_from([None, 1, 2]),
    "ep_size": st.sampled_from([None, 1, 2]),
    "pipeline": maybe({}, {"pp_schedule": "1f1b"}, {"pp_schedul": "1f1b"}, {"dtype": "fp32"}, {"dtype": "bf16"}),
    "moe": maybe({"wrap_outer_model": False}, {"wrap_outer": False}),
    "activation_checkpointing": maybe(True, "FULL", "selective", "sometimes", None),
    "sequence_parallel": maybe(False),
    "overlap_grad_reduce": maybe(True),
    "static_graph": maybe(True),
    "backend": maybe("nccl"),
    "mp_policy": maybe({"param_dtype": "bfloat16"}, {"param_dtype": "fp32"}, {"reduce_dtype": "torch.float32"}),
    "autocast_dtype": maybe("bf16", "fp16"),
    "activation_checkpointing_scope": maybe("language+vision", "bogus", ["all", "vision"], 3),
    "multimodal": maybe({"frozen_sharding": "per_layer"}, {"frozen_sharding": "bogus"}),
}).map(lambda d: {k: v for k, v in d.items() if v is not ABSENT})


def automodel_error(section: dict[str, Any]) -> str | None:
    import logging

    from nemo_automodel.recipes._dist_utils import parse_distributed_section

    logging.disable(logging.WARNING)
    try:
        parse_distributed_section(section)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        return str(exc.args[0]) if exc.args else str(exc)
    return None


@settings(max_examples=250, deadline=None, derandomize=True)
@given(section=sections)
def test_section_verdicts_match_automodel(section: dict[str, Any]) -> None:
    expected = automodel_error(section)
    report = validate_recipe({"recipe": "TrainFinetuneRecipeForNextTokenPrediction", "distributed": section},
                             world_size=8)
    ours = [f for f in report.errors if f.rule in SECTION_RULES]
    context = f"{section}: AutoModel {expected!r}; we say {[(f.rule, f.automodel_message) for f in ours]}"
    if expected is None:
        assert ours == [], context
    else:
        assert expected in {f.automodel_message for f in ours}, context

"""Differential test: our pipeline stage math equals AutoModel 0.7.0's (and torch's) on random pipelines.

AutoModel splits `num_layers` into `ceil(num_layers / layers_per_stage)` stages (rounded to a multiple of
pp on request), checks stages per rank against the schedule kind, cuts the layers into stages and assigns
stage ids per rank; torch's V schedules then insist on exactly 2 stages per rank. We run those same
functions (`pipelining/functional.py`, torch's `get_schedule_class`) and compare verdicts with what
`validate` says about a recipe with that pipeline block and a model of that many layers.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from automodel_dist.rules import registry as r
from automodel_dist.validate import validate_recipe

STAGE_RULES = frozenset({r.VIRTUAL_STAGES.id, r.STAGES_PER_RANK.id, r.STAGES_EXCEED_LAYERS.id})
SCHEDULES = ("1F1B", "GPipe", "Interleaved1F1B", "LoopedBFS", "InterleavedZeroBubble", "ZBVZeroBubble", "DualPipeV")


def automodel_stage_error(num_layers: int, per_stage: int | None, pp: int, schedule: str,
                          rounding: str | None) -> str | None:
    """AutoModel's split_model_into_stages verdict, without a model: None or the error text."""
    from nemo_automodel.components.distributed.pipelining.functional import (
        calculate_virtual_stages,
        generate_hf_model_fqn_per_model_part,
        stage_ids_this_rank,
    )
    from torch.distributed.pipelining.schedules import (
        PipelineScheduleSingle,
        ScheduleDualPipeV,
        ScheduleZBVZeroBubble,
        get_schedule_class,
    )

    cls = get_schedule_class(schedule)
    try:
        stages, per_rank = calculate_virtual_stages(num_layers, per_stage, pp, issubclass(cls, PipelineScheduleSingle),
                                                    rounding)
        generate_hf_model_fqn_per_model_part(num_stages=stages, num_layers=num_layers)
        stage_ids_this_rank(0, pp, stages, style="v" if cls is ScheduleZBVZeroBubble else "loop")
        if cls is ScheduleDualPipeV and per_rank != 2:  # torch's constructor (AutoModel builds it next)
            raise ValueError(f"ZBV requires exactly 2 stages per rank, but got {per_rank}.")
    except (ValueError, AssertionError) as exc:
        return str(exc)
    return None


def our_stage_errors(num_layers: int, per_stage: int | None, pp: int, schedule: str,
                     rounding: str | None) -> list[Any]:
    pipeline: dict[str, Any] = {"pp_schedule": schedule, "pp_microbatch_size": 1}
    if per_stage is not None:
        pipeline["layers_per_stage"] = per_stage
    if rounding is not None:
        pipeline["round_virtual_stages_to_pp_multiple"] = rounding
    recipe = {"recipe": "TrainFinetuneRecipeForNextTokenPrediction",
              "distributed": {"pp_size": pp, "pipeline": pipeline},
              "step_scheduler": {"global_batch_size": 720, "local_batch_size": 720}}
    report = validate_recipe(recipe, world_size=pp, model={"preset": "llama-3.1-8b", "num_layers": num_layers})
    return [f for f in report.errors if f.rule in STAGE_RULES]


@settings(max_examples=250, deadline=None, derandomize=True)
@given(num_layers=st.integers(2, 64), per_stage=st.none() | st.integers(1, 20), pp=st.sampled_from([2, 3, 4, 8]),
       schedule=st.sampled_from(SCHEDULES), rounding=st.sampled_from([None, None, "up", "down", "nearest"]))
def test_stage_verdicts_match_automodel(num_layers: int, per_stage: int | None, pp: int, schedule: str,
                                        rounding: str | None) -> None:
    expected = automodel_stage_error(num_layers, per_stage, pp, schedule, rounding)
    ours = our_stage_errors(num_layers, per_stage, pp, schedule, rounding)
    context = (f"{num_layers} layers, layers_per_stage={per_stage}, pp={pp}, {schedule}, round={rounding}: "
               f"AutoModel {expected!r}; we say {[(f.rule, f.automodel_message) for f in ours]}")
    if expected is None:
        assert ours == [], context
    else:
        assert ours, context
        assert any(f.automodel_message and expected.startswith(f.automodel_message) for f in ours), context

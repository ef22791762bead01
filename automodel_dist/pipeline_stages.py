"""Pipeline stage arithmetic AutoModel uses (reference/automodel.md §3.4, R33/R34).

AutoModel splits a model into `ceil(num_layers / layers_per_stage)` stages, which must be a multiple of
pp; a single-stage schedule (1f1b) needs exactly one stage per rank, a multi-stage one (interleaved1f1b)
at least two. The planner speaks in stages per rank (vpp); the recipe speaks in `layers_per_stage`.
`layers_per_stage` only fixes the stage count: AutoModel's `generate_hf_model_fqn_per_model_part` then
gives every stage num_layers // stages layers and the first num_layers % stages one more (61 layers on
32 stages: 2 each on stages 0-28, 1 on 29-31), the first stage the embedding, the last the norm and head;
`stage_ids_this_rank` then hands pp rank r the stages r, r + pp, r + 2pp, ... ("loop"), or r and
2pp - 1 - r for ScheduleZBVZeroBubble ("v"). `pipeline_split` reproduces all of it without torch, so the
cost model and the emitter see the ranks AutoModel builds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

# AutoModel's split_model_into_stages places stages V-style only when the schedule class *is*
# ScheduleZBVZeroBubble (an exact class comparison): every other schedule, DualPipeV included, is looped.
V_STYLE_SCHEDULES = ("zbvzerobubble",)


def layers_per_stage(num_layers: int, stages: int) -> int | None:
    """The smallest `layers_per_stage` that gives exactly `stages` stages, or None if none does."""
    if stages < 1 or stages > num_layers:
        return None
    k = math.ceil(num_layers / stages)
    return k if math.ceil(num_layers / k) == stages else None


def virtual_stages(num_layers: int, per_stage: int, pp: int, rounding: Any) -> tuple[int, str | None]:
    """AutoModel's `calculate_virtual_stages` with `layers_per_stage` set: (stage count, its error or None)."""
    stages = math.ceil(num_layers / per_stage)
    if stages % pp == 0:
        return stages, None
    if rounding == "up":
        return stages + pp - stages % pp, None
    if rounding == "down":
        return stages - stages % pp, None
    if rounding is not None:
        return stages, f"Invalid value for round_to_pp_multiple: {rounding}. Use 'up' or 'down'."
    return stages, (f"Number of virtual stages ({stages}) must be divisible by pipeline parallel size ({pp}). "
                    f"Model has {num_layers} layers with pipeline_parallel_layers_per_stage={per_stage}.")


def stage_split(num_layers: int, stages: int, pp: int) -> tuple[int, str | None] | None:
    """(layers_per_stage, round_virtual_stages_to_pp_multiple) that make exactly `stages` stages, the
    rounding only where whole layers alone cannot (94 layers on 48 stages: 2 per stage gives 47, rounded
    up to 48); None when nothing does."""
    exact = layers_per_stage(num_layers, stages)
    if exact is not None:
        return exact, None
    for rounding in ("up", "down"):
        for per_stage in range(1, num_layers + 1):
            if virtual_stages(num_layers, per_stage, pp, rounding)[0] == stages:
                return per_stage, rounding
    return None


def virtual_stage_options(num_layers: int, pp: int, max_vpp: int) -> list[int]:
    """Stages per pp rank (vpp) from 2 to `max_vpp` that some `layers_per_stage` realizes exactly."""
    return [v for v in range(2, max_vpp + 1) if layers_per_stage(num_layers, pp * v) is not None]


def stage_layer_counts(num_layers: int, num_stages: int) -> tuple[int, ...]:
    """Decoder layers per stage: num_layers // num_stages each, the first num_layers % num_stages one more.

    AutoModel refuses more stages than layers (the rules report it); the formula then leaves the last
    stages empty rather than failing, so an estimate of such a layout still has numbers.
    """
    base, extra = divmod(num_layers, num_stages)
    return tuple(base + (stage < extra) for stage in range(num_stages))


def stage_ids(pp_rank: int, pp: int, stages_per_rank: int, schedule: str | None) -> tuple[int, ...]:
    """The stages pp rank `pp_rank` runs (AutoModel's stage_ids_this_rank with its schedule's style).

    A V-style schedule with other than two stages per rank, which AutoModel asserts against, is looped here.
    """
    if schedule in V_STYLE_SCHEDULES and stages_per_rank == 2:
        return pp_rank, 2 * pp - 1 - pp_rank
    return tuple(pp_rank + k * pp for k in range(stages_per_rank))


@dataclass(frozen=True)
class RankShare:
    """What one pp rank holds: its stages, their decoder layers as [start, end) spans, embedding, head."""

    rank: int
    stages: tuple[int, ...]
    layer_spans: tuple[tuple[int, int], ...]
    embedding: bool
    head: bool

    @property
    def num_layers(self) -> int:
        return sum(end - start for start, end in self.layer_spans)

    def layers_below(self, index: int) -> int:
        """How many of this rank's layers come before layer `index` (e.g. the leading dense layers)."""
        return sum(max(0, min(end, index) - start) for start, end in self.layer_spans)


@lru_cache(maxsize=1024)
def pipeline_split(num_layers: int, pp: int, stages_per_rank: int = 1,
                   schedule: str | None = None) -> tuple[RankShare, ...]:
    """Every pp rank's share of a `num_layers` model on pp x stages_per_rank stages, as AutoModel splits it."""
    pp, stages_per_rank = max(pp, 1), max(stages_per_rank, 1)
    num_stages = pp * stages_per_rank
    starts = [0]
    for count in stage_layer_counts(num_layers, num_stages):
        starts.append(starts[-1] + count)
    shares = []
    for rank in range(pp):
        stages = stage_ids(rank, pp, stages_per_rank, schedule)
        shares.append(RankShare(rank=rank, stages=stages,
                                layer_spans=tuple((starts[s], starts[s + 1]) for s in stages),
                                embedding=0 in stages, head=num_stages - 1 in stages))
    return tuple(shares)

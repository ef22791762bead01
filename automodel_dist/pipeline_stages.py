"""Pipeline stage arithmetic AutoModel uses (reference/automodel.md §3.4, R33/R34).

AutoModel splits a model into `ceil(num_layers / layers_per_stage)` stages, which must be a multiple of
pp; a single-stage schedule (1f1b) needs exactly one stage per rank, a multi-stage one (interleaved1f1b)
at least two. The planner speaks in stages per rank (vpp); the recipe speaks in `layers_per_stage`.
`layers_per_stage` only fixes the stage count: AutoModel's `generate_hf_model_fqn_per_model_part` then
gives every stage num_layers // stages layers and the first num_layers % stages one more (61 layers on
32 stages: 2 each on stages 0-28, 1 on 29-31), the first stage the embedding, the last the norm and head.
"""

from __future__ import annotations

import math


def layers_per_stage(num_layers: int, stages: int) -> int | None:
    """The smallest `layers_per_stage` that gives exactly `stages` stages, or None if none does."""
    if stages < 1 or stages > num_layers:
        return None
    k = math.ceil(num_layers / stages)
    return k if math.ceil(num_layers / k) == stages else None


def virtual_stage_options(num_layers: int, pp: int, max_vpp: int) -> list[int]:
    """Stages per pp rank (vpp) from 2 to `max_vpp` that some `layers_per_stage` realizes exactly."""
    return [v for v in range(2, max_vpp + 1) if layers_per_stage(num_layers, pp * v) is not None]

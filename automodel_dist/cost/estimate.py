"""Estimate: what the cost model says about one layout (breakdowns, not just numbers)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Estimate:
    """Peak memory of the most loaded rank and the step time of one layout.

    `memory` and `time` are breakdowns (GiB, seconds) whose parts sum to the totals. `bound` names the
    wall that binds: "memory", "communication" or "compute". `not_modeled` lists what is left out.
    """

    memory_gib: float
    memory: dict[str, float]
    fits: bool
    hbm_gib: float
    step_time_s: float
    time: dict[str, float]
    tflops_per_gpu: float
    tokens_per_s_per_gpu: float
    mfu: float
    bound: str
    not_modeled: tuple[str, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

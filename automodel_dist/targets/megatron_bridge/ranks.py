"""Megatron Core's rank groups for a Layout, as plain arithmetic (the HTML report's rank map of this target).

MCore lays ranks out in the order `tp-cp-ep-dp-pp` (TP fastest; `parallel_state.RankGenerator`, the default
Megatron-Bridge keeps). Dense layers use a (pp, dp, cp, tp) grid; expert layers fold their own grid over
the same ranks, (pp, expert dp, ep, etp), so EP spans TP·CP·DP ranks of one stage. Both are row-major
`Grid`s of the AutoModel mesh arithmetic (verify/groups.py), read the same way by the rank map.
tests/test_mbridge_oracle.py checks every group against MCore's own RankGenerator.
"""

from __future__ import annotations

from automodel_dist.layout import Layout
from automodel_dist.verify.groups import DEVICE_MESH, MOE_MESH, Axis, Grid, MeshPlan

DENSE_DIMS = ("pp", "dp", "cp", "tp")
EXPERT_DIMS = ("ep_shard", "ep", "etp")
# MCore's data-parallel group with CP (gradients are reduced over it when CP > 1).
DP_CP = ("dp", "cp")
PROVENANCE = "Megatron Core's rank order tp-cp-ep-dp-pp (RankGenerator arithmetic, no torch needed)"


def plan_ranks(layout: Layout) -> MeshPlan:
    """The dense grid and, with EP or ETP, the expert grid of one layout (sizes must multiply to the world)."""
    dense = Grid(DENSE_DIMS, (layout.pp, layout.dp, layout.cp, layout.tp))
    axes = tuple(Axis(name, DEVICE_MESH, (name,)) for name in DENSE_DIMS)
    if layout.cp > 1:
        axes += (Axis("dp_cp", DEVICE_MESH, DP_CP, flattened=True),)
    if layout.ep <= 1 and layout.etp <= 1:
        return MeshPlan("megatron", layout.world_size, device_mesh=dense, axes=axes)
    etp = max(layout.etp, 1)
    expert_dp = layout.world_size // (layout.pp * layout.ep * etp)
    expert = Grid(EXPERT_DIMS, (expert_dp, layout.ep, etp))
    staged = Grid(("pp", *EXPERT_DIMS), (layout.pp, expert_dp, layout.ep, etp))
    axes += tuple(Axis(name, MOE_MESH, (name,)) for name in EXPERT_DIMS)
    return MeshPlan("megatron", layout.world_size, device_mesh=dense, moe_mesh=expert, moe_grid=staged, axes=axes)

"""AutoModel 0.7.0's device meshes for a Layout, as plain arithmetic: shapes, axis names, every rank group.

AutoModel lays ranks out row-major over its mesh dims (TP innermost, PP outermost; reference/automodel.md
§5.2), so the group of a set of dims D holding rank r is every rank that shares r's coordinates outside D.
This module needs no torch: it is the table the torch build is checked against, the answer for `--rank`,
and the source of the node map. Groups come out in ascending order, each sorted ascending, which is also
the order torch's mesh layouts list them in.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from automodel_dist.layout import Layout

FSDP2_DIMS = ("pp", "dp_replicate", "dp_shard", "cp", "tp")
FSDP2_FLATTENED = {
    "dp": ("dp_replicate", "dp_shard"),
    "dp_shard_cp": ("dp_shard", "cp"),
    "dp_cp": ("dp_replicate", "dp_shard", "cp"),
}
# The MoE mesh is carved from one pipeline stage: these dims flattened (torch's default name joins them),
# then unflattened into (ep_shard, ep).
NON_PP_DIMS = ("dp_replicate", "dp_shard", "cp", "tp")
NON_PP_FLAT_NAME = "_".join(NON_PP_DIMS)
MOE_DIMS = ("ep_shard", "ep")
MEGATRON_DIMS = ("dp", "cp", "tp")
MEGATRON_FLATTENED_WITH_CP = {"dp_cp": ("dp", "cp")}

DEVICE_MESH = "device_mesh"
MOE_MESH = "moe_mesh"


@dataclass(frozen=True)
class Grid:
    """World ranks laid out row-major over named dims: rank = Σ coordinate[i] · stride[i]."""

    names: tuple[str, ...]
    shape: tuple[int, ...]

    @property
    def size(self) -> int:
        return prod(self.shape)

    @property
    def strides(self) -> tuple[int, ...]:
        strides, step = [], 1
        for extent in reversed(self.shape):
            strides.append(step)
            step *= extent
        return tuple(reversed(strides))

    def coordinates(self, rank: int) -> tuple[int, ...]:
        return tuple((rank // stride) % extent for stride, extent in zip(self.strides, self.shape, strict=True))

    def _offsets(self, dims: tuple[str, ...]) -> list[int]:
        """Rank offsets spanned by `dims` (row-major over them), starting at 0."""
        offsets = [0]
        for name in dims:
            i = self.names.index(name)
            stride = self.strides[i]
            offsets = [base + k * stride for base in offsets for k in range(self.shape[i])]
        return offsets

    def _progression(self, dims: tuple[str, ...]) -> tuple[int, int] | None:
        """(size, step) when `dims` are adjacent in the grid, so a group is range(base, base + size·step, step).

        Every axis AutoModel builds is such a run of adjacent dims; the fast path builds each group in C.
        """
        idx = [self.names.index(name) for name in dims]
        if idx != list(range(idx[0], idx[0] + len(idx))):
            return None
        return prod(self.shape[i] for i in idx), self.strides[idx[-1]]

    def groups(self, dims: tuple[str, ...]) -> list[list[int]]:
        """Every group of `dims`: ranks equal outside `dims`, ordered by their first rank."""
        bases = self._offsets(tuple(name for name in self.names if name not in dims))
        run = self._progression(dims)
        if run is not None:
            span = run[0] * run[1]
            return [list(range(base, base + span, run[1])) for base in bases]
        within = self._offsets(dims)
        return [[base + offset for offset in within] for base in bases]

    def group_of(self, dims: tuple[str, ...], rank: int) -> list[int]:
        coords = self.coordinates(rank)
        base = rank - sum(coords[self.names.index(n)] * self.strides[self.names.index(n)] for n in dims)
        return [base + offset for offset in self._offsets(dims)]


@dataclass(frozen=True)
class Axis:
    """One named axis AutoModel can ask a group of: a mesh dim, or a flattened set of dims."""

    name: str
    mesh: str
    dims: tuple[str, ...]
    flattened: bool = False


@dataclass(frozen=True)
class MeshPlan:
    """The meshes of one layout. `device_mesh` covers the world; `moe_grid` prefixes the per-stage MoE
    mesh with the pp dim so one table lists the groups of every stage."""

    strategy: str
    world_size: int
    device_mesh: Grid | None = None
    moe_mesh: Grid | None = None
    moe_grid: Grid | None = None
    axes: tuple[Axis, ...] = ()

    @property
    def flattened(self) -> dict[str, tuple[str, ...]]:
        """Each flattened axis of the device mesh and the dims it joins, in the order they are built."""
        return {axis.name: axis.dims for axis in self.axes if axis.flattened}

    def axis(self, name: str) -> Axis:
        for axis in self.axes:
            if axis.name == name:
                return axis
        raise KeyError(name)

    def grid_of(self, axis: Axis) -> Grid:
        grid = self.moe_grid if axis.mesh == MOE_MESH else self.device_mesh
        assert grid is not None, f"{axis.name} has no mesh"
        return grid

    def groups(self, name: str) -> list[list[int]]:
        axis = self.axis(name)
        return self.grid_of(axis).groups(axis.dims)

    def tables(self) -> dict[str, list[list[int]]]:
        """Every group of every axis."""
        return {axis.name: self.groups(axis.name) for axis in self.axes}

    def group_of(self, name: str, rank: int) -> list[int]:
        axis = self.axis(name)
        return self.grid_of(axis).group_of(axis.dims, rank)

    def coordinates(self, rank: int) -> dict[str, dict[str, int]]:
        """`rank`'s coordinate on each mesh it belongs to (the MoE mesh: within its own stage)."""
        coords: dict[str, dict[str, int]] = {}
        if self.device_mesh is not None:
            coords[DEVICE_MESH] = dict(zip(self.device_mesh.names, self.device_mesh.coordinates(rank), strict=True))
        if self.moe_grid is not None and self.moe_mesh is not None:
            full = dict(zip(self.moe_grid.names, self.moe_grid.coordinates(rank), strict=True))
            coords[MOE_MESH] = {name: full[name] for name in self.moe_mesh.names}
        return coords


def plan_meshes(layout: Layout) -> MeshPlan:
    """The meshes AutoModel builds for `layout` (mesh_utils._create_device_meshes).

    The layout must already pass the mesh arithmetic (rules.check_layout): every size ≥ 1 and
    pp·dp·cp·tp == world. DDP builds no mesh; MegatronFSDP a (dp, cp, tp) mesh with `dp_cp` only when
    cp > 1; FSDP2 the 5-D mesh, its three flattened axes, and with ep > 1 the MoE mesh per stage.
    """
    world = layout.world_size
    if layout.strategy == "ddp":
        return MeshPlan(strategy="ddp", world_size=world)
    if layout.strategy == "megatron_fsdp":
        grid = Grid(MEGATRON_DIMS, (layout.dp, layout.cp, layout.tp))
        flattened = dict(MEGATRON_FLATTENED_WITH_CP) if layout.cp > 1 else {}
        axes = tuple(Axis(n, DEVICE_MESH, (n,)) for n in MEGATRON_DIMS)
        axes += tuple(Axis(n, DEVICE_MESH, dims, flattened=True) for n, dims in flattened.items())
        return MeshPlan("megatron_fsdp", world, device_mesh=grid, axes=axes)
    grid = Grid(FSDP2_DIMS, (layout.pp, layout.dp_replicate, layout.dp_shard, layout.cp, layout.tp))
    flattened = dict(FSDP2_FLATTENED)
    axes = tuple(Axis(n, DEVICE_MESH, (n,)) for n in FSDP2_DIMS)
    moe_mesh = moe_grid = None
    if layout.ep > 1:
        flattened[NON_PP_FLAT_NAME] = NON_PP_DIMS
        moe_mesh = Grid(MOE_DIMS, (layout.ep_shard, layout.ep))
        moe_grid = Grid(("pp", *MOE_DIMS), (layout.pp, layout.ep_shard, layout.ep))
    axes += tuple(Axis(n, DEVICE_MESH, dims, flattened=True) for n, dims in flattened.items())
    if moe_grid is not None:
        axes += tuple(Axis(n, MOE_MESH, (n,)) for n in MOE_DIMS)
    return MeshPlan("fsdp2", world, device_mesh=grid, moe_mesh=moe_mesh, moe_grid=moe_grid, axes=axes)


@dataclass(frozen=True)
class Locality:
    """Where one axis's groups live: inside a node? inside the NVLink domain? how many nodes at most."""

    axis: str
    size: int
    num_groups: int
    intra_node: bool
    intra_nvlink: bool
    max_nodes_spanned: int


def _blocks_spanned(group: list[int], block: int) -> int:
    first, last = group[0] // block, group[-1] // block
    if first == last:
        return 1
    return len({rank // block for rank in group})


def locality(name: str, groups: list[list[int]], *, gpus_per_node: int, nvlink_domain: int) -> Locality:
    """Groups are ascending, so a group stays in one block exactly when its first and last ranks do."""
    return Locality(
        axis=name,
        size=len(groups[0]) if groups else 0,
        num_groups=len(groups),
        intra_node=all(g[0] // gpus_per_node == g[-1] // gpus_per_node for g in groups),
        intra_nvlink=all(g[0] // nvlink_domain == g[-1] // nvlink_domain for g in groups),
        max_nodes_spanned=max((_blocks_spanned(g, gpus_per_node) for g in groups), default=0),
    )


def node_map(tables: dict[str, list[list[int]]], *, gpus_per_node: int, nvlink_domain: int) -> dict[str, Locality]:
    return {name: locality(name, groups, gpus_per_node=gpus_per_node, nvlink_domain=nvlink_domain)
            for name, groups in tables.items()}

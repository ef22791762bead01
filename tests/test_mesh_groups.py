"""The mesh arithmetic (verify/groups.py) against numpy's reshape/transpose, brute-force node sets, and
torch's own mesh layouts built under the fake process group (verify/torch_build.py)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from automodel_dist.layout import Layout
from automodel_dist.verify.groups import (
    DEVICE_MESH,
    FSDP2_DIMS,
    MOE_MESH,
    NON_PP_FLAT_NAME,
    Grid,
    node_map,
    plan_meshes,
)

POW2 = st.sampled_from([1, 2, 4, 8])


@st.composite
def valid_layouts(draw: st.DrawFn, max_world: int = 4096) -> Layout:
    """A layout whose sizes multiply to its world (the only kind plan_meshes is given)."""
    strategy = draw(st.sampled_from(["fsdp2", "fsdp2", "fsdp2", "megatron_fsdp", "ddp"]))
    tp, cp = draw(st.sampled_from([1, 2, 3, 4, 8])), draw(POW2)
    if strategy == "ddp":
        return Layout(world_size=draw(st.integers(1, max_world)), strategy="ddp")
    pp = draw(st.sampled_from([1, 2, 4, 8])) if strategy == "fsdp2" else 1
    dp_shard = draw(st.sampled_from([1, 2, 3, 4, 8, 16, 32]))
    dp_replicate = draw(st.sampled_from([1, 2, 4])) if strategy == "fsdp2" and dp_shard > 1 else 1
    world = pp * dp_replicate * dp_shard * cp * tp
    if world > max_world:
        return Layout(world_size=tp * cp, strategy=strategy, tp=tp, cp=cp)
    non_pp = dp_replicate * dp_shard * cp * tp
    ep = draw(st.sampled_from([d for d in (1, 2, 4, 8, 16, 32, 64, 3, 6) if non_pp % d == 0])) \
        if strategy == "fsdp2" else 1
    return Layout(world_size=world, strategy=strategy, tp=tp, pp=pp, cp=cp, ep=ep, dp_replicate=dp_replicate)


def numpy_groups(shape: tuple[int, ...], names: tuple[str, ...], dims: tuple[str, ...]) -> list[list[int]]:
    """reference/torch-mesh.md §2.3: arange(N).reshape(shape), other dims first, then reshape(-1, |D|)."""
    idx = [names.index(d) for d in dims]
    others = [i for i in range(len(names)) if i not in idx]
    size = int(np.prod([shape[i] for i in idx]))
    return np.arange(int(np.prod(shape))).reshape(shape).transpose(others + idx).reshape(-1, size).tolist()


@settings(max_examples=150, deadline=None)
@given(valid_layouts())
def test_every_axis_matches_numpy(layout: Layout) -> None:
    plan = plan_meshes(layout)
    tables = plan.tables()
    if layout.strategy == "ddp":
        assert plan.device_mesh is None and tables == {}
        return
    for axis in plan.axes:
        grid = plan.grid_of(axis)
        assert tables[axis.name] == numpy_groups(grid.shape, grid.names, axis.dims), axis.name
        # every axis partitions the world
        assert sorted(r for g in tables[axis.name] for r in g) == list(range(layout.world_size))


@settings(max_examples=150, deadline=None)
@given(valid_layouts(), st.data())
def test_rank_coordinates_and_groups(layout: Layout, data: st.DataObject) -> None:
    plan = plan_meshes(layout)
    if plan.device_mesh is None:
        return
    rank = data.draw(st.integers(0, layout.world_size - 1))
    coords = plan.coordinates(rank)
    expected = np.unravel_index(rank, plan.device_mesh.shape)
    assert tuple(coords[DEVICE_MESH].values()) == tuple(int(c) for c in expected)
    if plan.moe_grid is not None:
        _, ep_shard, ep = (int(c) for c in np.unravel_index(rank, plan.moe_grid.shape))
        assert coords[MOE_MESH] == {"ep_shard": ep_shard, "ep": ep}
    tables = plan.tables()
    for axis in plan.axes:
        group = plan.group_of(axis.name, rank)
        assert rank in group and group in tables[axis.name]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(1, 5), min_size=1, max_size=5), st.data())
def test_grid_groups_of_any_dim_subset(shape: list[int], data: st.DataObject) -> None:
    """Adjacent dims take the range fast path, others the general one; both equal numpy."""
    names = tuple(f"d{i}" for i in range(len(shape)))
    dims = tuple(sorted(data.draw(st.sets(st.sampled_from(names), min_size=1)), key=names.index))
    grid = Grid(names, tuple(shape))
    assert grid.groups(dims) == numpy_groups(tuple(shape), names, dims)
    rank = data.draw(st.integers(0, grid.size - 1))
    assert grid.group_of(dims, rank) in grid.groups(dims) and rank in grid.group_of(dims, rank)


def test_worked_example_from_automodel_reference() -> None:
    """reference/automodel.md §5.4: W=64, tp2 cp2 pp2 dp_replicate2 → (2,2,4,2,2); ep8 → moe (4,8)."""
    plan = plan_meshes(Layout(world_size=64, tp=2, cp=2, pp=2, dp_replicate=2, ep=8))
    assert plan.device_mesh == Grid(FSDP2_DIMS, (2, 2, 4, 2, 2))
    assert plan.moe_mesh == Grid(("ep_shard", "ep"), (4, 8))
    sizes = {name: len(plan.groups(name)[0]) for name in ("dp", "dp_shard_cp", "dp_cp", NON_PP_FLAT_NAME)}
    assert sizes == {"dp": 8, "dp_shard_cp": 8, "dp_cp": 16, NON_PP_FLAT_NAME: 32}
    # EP is a block of consecutive ranks inside a stage; ep_shard strides by ep.
    assert plan.group_of("ep", 40) == list(range(40, 48))
    assert plan.group_of("ep_shard", 33) == [33, 41, 49, 57]


def test_oracle_script_example() -> None:
    """reference/torch-mesh.md §5: W=64, pp2 dp_rep2 tp4 cp2 → rank 0's dp_cp group."""
    plan = plan_meshes(Layout(world_size=64, pp=2, dp_replicate=2, tp=4, cp=2, ep=8))
    assert plan.group_of("dp_cp", 0) == [0, 4, 8, 12, 16, 20, 24, 28]


def test_megatron_and_ddp_shapes() -> None:
    with_cp = plan_meshes(Layout(world_size=16, strategy="megatron_fsdp", tp=2, cp=2))
    assert with_cp.device_mesh == Grid(("dp", "cp", "tp"), (4, 2, 2))
    assert with_cp.flattened == {"dp_cp": ("dp", "cp")}
    without_cp = plan_meshes(Layout(world_size=16, strategy="megatron_fsdp", tp=2))
    assert without_cp.flattened == {} and [a.name for a in without_cp.axes] == ["dp", "cp", "tp"]
    ddp = plan_meshes(Layout(world_size=16, strategy="ddp"))
    assert ddp.device_mesh is None and ddp.axes == ()


@settings(max_examples=100, deadline=None)
@given(valid_layouts(max_world=1024), st.sampled_from([4, 6, 8]), st.sampled_from([1, 2, 9]))
def test_node_map_matches_brute_force(layout: Layout, gpus_per_node: int, domain_nodes: int) -> None:
    tables = plan_meshes(layout).tables()
    domain = gpus_per_node * domain_nodes
    for name, loc in node_map(tables, gpus_per_node=gpus_per_node, nvlink_domain=domain).items():
        nodes = [{r // gpus_per_node for r in g} for g in tables[name]]
        assert loc.intra_node == all(len(n) == 1 for n in nodes)
        assert loc.intra_nvlink == all(len({r // domain for r in g}) == 1 for g in tables[name])
        assert loc.max_nodes_spanned == max(len(n) for n in nodes)
        assert (loc.size, loc.num_groups) == (len(tables[name][0]), len(tables[name]))


@pytest.fixture(scope="module")
def torch_build():
    from automodel_dist.verify.torch_build import build_with_torch, require_torch

    require_torch()
    return build_with_torch


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(valid_layouts())
def test_torch_builds_the_arithmetic(torch_build, layout: Layout) -> None:
    """torch's meshes (init_device_mesh, _flatten, _unflatten under the fake group) list exactly our groups."""
    plan = plan_meshes(layout)
    built = torch_build(plan)
    assert built.tables == plan.tables()
    if plan.device_mesh is None:
        assert built.mesh_shape is None
        return
    assert (built.mesh_names, built.mesh_shape) == (plan.device_mesh.names, plan.device_mesh.shape)
    assert sorted(built.flattened) == sorted(plan.flattened)
    if plan.moe_mesh is not None:
        assert (built.moe_names, built.moe_shape) == (plan.moe_mesh.names, plan.moe_mesh.shape)
    else:
        assert built.moe_shape is None


def test_torch_build_16384_ranks(torch_build) -> None:
    plan = plan_meshes(Layout(world_size=16384, pp=8, dp_replicate=8, tp=4, cp=2, ep=32))
    built = torch_build(plan)
    assert built.mesh_shape == (8, 8, 32, 2, 4) and built.moe_shape == (64, 32)
    assert {k: len(v) for k, v in built.tables.items()} == {
        "pp": 2048, "dp_replicate": 2048, "dp_shard": 512, "cp": 8192, "tp": 4096, "dp": 64,
        "dp_shard_cp": 256, "dp_cp": 32, NON_PP_FLAT_NAME: 8, "ep_shard": 256, "ep": 512}
    assert built.tables == plan.tables()

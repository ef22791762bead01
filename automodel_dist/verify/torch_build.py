"""Build AutoModel's device meshes with torch, in this one CPU process, under torch's fake process group.

The calls are the ones AutoModel 0.7.0 makes (`mesh_utils._create_fsdp2_device_mesh`,
`_create_megatron_fsdp_device_mesh`, `_create_moe_mesh`): `init_device_mesh`, `_flatten` for every
flattened axis, and `_flatten()._unflatten(...)` for the MoE mesh. Every axis's groups are then read from
the mesh layouts built once (`_MeshLayout(...).remap_to_tensor`), never by re-initialising per rank.
torch is imported only inside functions, so the package imports without it.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from automodel_dist.errors import InputError
from automodel_dist.verify.groups import MOE_DIMS, MOE_MESH, NON_PP_DIMS, NON_PP_FLAT_NAME, MeshPlan

INSTALL_HINT = "pip install 'automodel-dist[dryrun]' (install torch==2.13.0 first)"


def require_torch() -> str:
    """Import torch.distributed or fail with the one-line install instruction; returns torch's version."""
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
            import torch
            import torch.distributed as dist
    except ImportError:
        raise InputError(f"dry-run needs torch, which is not installed: {INSTALL_HINT}") from None
    if not dist.is_available():
        raise InputError(f"dry-run needs a torch build with torch.distributed: {INSTALL_HINT}")
    return str(torch.__version__)


@contextmanager
def fake_world(world_size: int, rank: int = 0) -> Iterator[None]:
    """A fake default process group of `world_size` ranks for the duration of the block."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore  # importing registers backend "fake"

    if dist.is_initialized():
        raise InputError("a torch.distributed process group is already initialised in this process",
                         hint="call build_meshes from a process without one: it builds its own fake group")
    dist.init_process_group(backend="fake", rank=rank, world_size=world_size, store=FakeStore())
    try:
        yield
    finally:
        dist.destroy_process_group()


@dataclass
class TorchMeshes:
    """What torch built: the meshes' shapes and names, and every axis's groups as nested lists."""

    mesh_shape: tuple[int, ...] | None
    mesh_names: tuple[str, ...] | None
    moe_shape: tuple[int, ...] | None
    moe_names: tuple[str, ...] | None
    flattened: tuple[str, ...]
    tables: dict[str, list[list[int]]]


def _all_groups(flat_layout: Any, rank_map: Any) -> list[list[int]]:
    from torch.distributed._mesh_layout import _MeshLayout

    return _MeshLayout([flat_layout]).remap_to_tensor(rank_map).tolist()


def build_with_torch(plan: MeshPlan) -> TorchMeshes:
    """Build the plan's meshes the way AutoModel does, under a fake process group of the plan's world."""
    from torch.distributed.device_mesh import init_device_mesh

    if plan.device_mesh is None:  # DDP: AutoModel builds no mesh
        return TorchMeshes(None, None, None, None, (), {})
    with fake_world(plan.world_size):
        root = init_device_mesh("cpu", plan.device_mesh.shape, mesh_dim_names=plan.device_mesh.names)
        for name, dims in plan.flattened.items():
            if name != NON_PP_FLAT_NAME:
                root[dims]._flatten(name)
        moe = None
        if plan.moe_mesh is not None:  # torch names the unnamed flatten itself and records it on the root
            moe = root[NON_PP_DIMS]._flatten()._unflatten(0, plan.moe_mesh.shape, MOE_DIMS)
        flat_names = tuple(str(n) for n in root._flatten_mapping)
        tables: dict[str, list[list[int]]] = {}
        for axis in plan.axes:
            if axis.mesh == MOE_MESH and moe is not None:
                tables[axis.name] = _all_groups(moe._layout[moe.mesh_dim_names.index(axis.name)], moe._rank_map)
            elif axis.flattened and axis.name in root._flatten_mapping:
                tables[axis.name] = _all_groups(root._flatten_mapping[axis.name]._layout[0], root._rank_map)
            elif axis.name in root.mesh_dim_names:
                tables[axis.name] = _all_groups(root._layout[root.mesh_dim_names.index(axis.name)], root._rank_map)
        return TorchMeshes(
            mesh_shape=tuple(root.shape),
            mesh_names=tuple(str(n) for n in root.mesh_dim_names),
            moe_shape=tuple(moe.shape) if moe is not None else None,
            moe_names=tuple(str(n) for n in moe.mesh_dim_names) if moe is not None else None,
            flattened=flat_names,
            tables=tables,
        )

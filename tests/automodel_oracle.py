"""Test oracle: AutoModel 0.7.0's own mesh builder, run under torch's fake process group in a worker process.

`create_distributed_setup_from_config` is AutoModel's recipe entry point to its meshes. A process group
only holds the caller's groups, so to read rank r's group on an axis the worker re-initialises the fake
group with rank=r (the expensive, per-rank way this tool avoids); tests sample a few ranks.

The worker runs in its own process so AutoModel's imports and torch's process-group state never touch
the test process. Protocol: one JSON request per line on stdin, one JSON answer per line on stdout.
    request:  {"section": {...distributed...}, "world_size": N, "ranks": [r, ...]}
    answer:   {"ok": true, "device_mesh": {names, shape} | null, "moe_mesh": ... , "flattened": [...],
               "ranks": {"r": {"coordinate": [...], "moe_coordinate": [...], "groups": {axis: [...]}}}}
           or {"ok": false, "error": "ValueError: ..."}
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any


def _name(axis: Any) -> str:
    """AutoModel's axis names are str enums; their plain value is the name."""
    return str(getattr(axis, "value", axis))


def _rank_view(dist: Any, mc: Any, get_flat_mesh: Any) -> dict[str, Any]:
    mesh, moe = mc.device_mesh, mc.moe_mesh
    if mesh.get_coordinate() is None:  # a rank the mesh leaves out (an explicit dp_size too small)
        return {"coordinate": None, "groups": {}, "moe_coordinate": None}
    groups: dict[str, list[int]] = {}
    for axis in [*mesh.mesh_dim_names, *mesh._flatten_mapping]:
        groups[_name(axis)] = dist.get_process_group_ranks(get_flat_mesh(mesh, axis).get_group())
    view: dict[str, Any] = {"coordinate": mesh.get_coordinate(), "groups": groups, "moe_coordinate": None}
    if moe is not None:
        view["moe_coordinate"] = moe.get_coordinate()
        for axis in moe.mesh_dim_names:
            groups[_name(axis)] = dist.get_process_group_ranks(moe[axis].get_group())
    return view


def _mesh_json(mesh: Any) -> dict[str, Any] | None:
    return None if mesh is None else {"names": [_name(n) for n in mesh.mesh_dim_names], "shape": list(mesh.shape)}


def _answer(request: dict[str, Any]) -> dict[str, Any]:
    import torch.distributed as dist
    from nemo_automodel.components.distributed.mesh_utils import get_flat_mesh
    from nemo_automodel.recipes._dist_utils import create_distributed_setup_from_config
    from torch.testing._internal.distributed.fake_pg import FakeStore

    world = request["world_size"]
    answer: dict[str, Any] = {"ok": True, "ranks": {}}
    for rank in request["ranks"]:
        dist.init_process_group("fake", rank=rank, world_size=world, store=FakeStore())
        try:
            try:
                setup = create_distributed_setup_from_config({"distributed": dict(request["section"])},
                                                             world_size=world)
            except Exception as exc:  # the verdict: whatever AutoModel or torch raises while building
                return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            mc = setup.mesh_context
            answer["device_mesh"] = _mesh_json(mc.device_mesh)
            answer["moe_mesh"] = _mesh_json(mc.moe_mesh)
            mesh = mc.device_mesh
            answer["flattened"] = [] if mesh is None else sorted(_name(n) for n in mesh._flatten_mapping)
            if mesh is not None:
                answer["ranks"][str(rank)] = _rank_view(dist, mc, get_flat_mesh)
        finally:
            dist.destroy_process_group()
    return answer


def serve() -> None:
    import logging
    import warnings

    logging.disable(logging.WARNING)
    warnings.simplefilter("ignore")
    for line in sys.stdin:
        print(json.dumps(_answer(json.loads(line))), flush=True)


class Oracle:
    """A running worker; `ask` sends one request and waits for its answer."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", "from automodel_oracle import serve; serve()"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     cwd=Path(__file__).parent)

    def ask(self, section: dict[str, Any], world_size: int, ranks: list[int]) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"section": section, "world_size": world_size, "ranks": ranks}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"AutoModel oracle worker died (exit {self.proc.poll()})")
        return json.loads(line)

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)

"""Differential tests: our dry-run against AutoModel 0.7.0's own mesh builder (the oracle).

The oracle (tests/automodel_oracle.py) runs `create_distributed_setup_from_config` under torch's fake
process group in a worker process, once per sampled rank. We compare mesh shapes, axis names, flattened
axes, and the sampled ranks' coordinates and groups on every axis; on invalid sections, the verdict.
"""

from __future__ import annotations

from math import prod
from pathlib import Path
from typing import Any

import pytest
from automodel_oracle import Oracle
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from recipe_fixtures import VALID, fixture_world_size

from automodel_dist.errors import InputError
from automodel_dist.targets.automodel.config import resolve_config
from automodel_dist.verify.groups import DEVICE_MESH, MOE_MESH
from automodel_dist.verify.mesh import MeshReport, build_meshes
from automodel_dist.yamlio import load_document

MAX_WORLD = 4096
POW2_WORLDS = [2**k for k in range(13)]


def ours(section: dict[str, Any], world_size: int) -> MeshReport | InputError:
    try:
        return build_meshes({"recipe": "TrainFinetuneRecipeForNextTokenPrediction", "distributed": section},
                            world_size=world_size)
    except InputError as exc:
        return exc


def leaves_ranks_out(section: dict[str, Any], world_size: int) -> bool:
    """AutoModel's known gap: an explicit dp_size whose mesh is smaller than the world builds silently."""
    dp = section.get("dp_size")
    strategy = str(section.get("strategy", "fsdp2")).lower().replace("-", "_")
    if not isinstance(dp, int) or dp <= 0 or strategy == "ddp":  # ddp builds no mesh and ignores dp_size
        return False
    megatron = strategy in ("megatron_fsdp", "mfsdp")
    sizes = [section.get(k) or 1 for k in (("tp_size", "cp_size") if megatron else ("tp_size", "cp_size", "pp_size"))]
    return dp * prod(sizes) < world_size


def assert_same(section: dict[str, Any], world_size: int, ranks: list[int], answer: dict[str, Any],
                report: MeshReport | InputError) -> None:
    context = f"{section} on {world_size} ranks"
    if not answer["ok"]:
        rejected = isinstance(report, InputError) or not report.built
        assert rejected, f"AutoModel rejects {context} ({answer['error']}) but we build it"
        return
    if leaves_ranks_out(section, world_size):
        assert isinstance(report, MeshReport) and not report.built, context
        assert "mesh-world-product" in {f.rule for f in report.errors}, (
            "AutoModel builds a mesh smaller than the world without a word; we must reject it")
        return
    assert isinstance(report, MeshReport) and report.ok, f"AutoModel builds {context} but we reject it: {report}"
    mesh, moe = answer["device_mesh"], answer["moe_mesh"]
    assert (list(report.mesh_names or []), list(report.mesh_shape or [])) == \
        ((mesh["names"], mesh["shape"]) if mesh else ([], [])), context
    assert (list(report.moe_names or []), list(report.moe_shape or [])) == \
        ((moe["names"], moe["shape"]) if moe else ([], [])), context
    assert sorted(report.flattened) == answer["flattened"], context
    for rank in ranks if mesh else []:
        theirs = answer["ranks"][str(rank)]
        view = report.rank_view(rank)
        assert list(view.coordinates[DEVICE_MESH].values()) == theirs["coordinate"], (context, rank)
        if moe:
            assert list(view.coordinates[MOE_MESH].values()) == theirs["moe_coordinate"], (context, rank)
        assert set(view.groups) == set(theirs["groups"]), (context, rank)
        for axis, group in theirs["groups"].items():
            assert view.groups[axis] == group, (context, rank, axis)
            assert group in report.tables[axis], (context, rank, axis)


@st.composite
def sections(draw: st.DrawFn) -> tuple[dict[str, Any], int, list[int]]:
    """A distributed section and a world size, mostly valid (sizes drawn to divide the world)."""
    strategy = draw(st.sampled_from(["fsdp2"] * 6 + ["megatron_fsdp", "mfsdp", "Megatron-FSDP", "ddp"]))
    tp, cp = draw(st.sampled_from([1, 1, 2, 4, 8, 3])), draw(st.sampled_from([1, 1, 2, 4]))
    pp = draw(st.sampled_from([1, 1, 2, 4, 8]))
    base = tp * cp * pp
    multiples = [m for m in POW2_WORLDS if base * m <= MAX_WORLD]
    divisible = multiples and draw(st.integers(0, 3)) > 0
    world = base * draw(st.sampled_from(multiples)) if divisible else draw(st.sampled_from([*POW2_WORLDS, 6, 24, 96]))
    section: dict[str, Any] = {"strategy": strategy}
    for key, value in (("tp_size", tp), ("cp_size", cp), ("pp_size", pp)):
        if value > 1 or draw(st.booleans()):
            section[key] = value
    dp = world // base if world % base == 0 else 1
    if draw(st.integers(0, 9)) == 0:
        section["dp_size"] = draw(st.sampled_from([dp, dp * 2, max(dp // 2, 1)]))
    dpr = draw(st.sampled_from([None, None, 1, 2, 4, 3]))
    if dpr is not None:
        section["dp_replicate_size"] = dpr
    non_pp = dp * cp * tp
    ep_choices = [d for d in (2, 4, 8, 16, 32, 64) if non_pp % d == 0] or [1]
    ep = draw(st.sampled_from([1, 1, 3, *ep_choices]))
    if ep > 1:
        section["ep_size"] = ep
    if pp > 1:
        section["pipeline"] = {}
    ranks = sorted({draw(st.integers(0, world - 1)), world - 1})
    return section, world, ranks


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sections())
def test_same_meshes_as_automodel(oracle: Oracle, case: tuple[dict[str, Any], int, list[int]]) -> None:
    section, world, ranks = case
    assert_same(section, world, ranks, oracle.ask(section, world, ranks), ours(section, world))


# reference/torch-mesh.md §3.5: the builder cases measured there, valid and invalid.
REFERENCE_CASES = [
    ({"strategy": "fsdp2"}, 8),
    ({"strategy": "fsdp2", "tp_size": 2, "cp_size": 2}, 8),
    ({"strategy": "fsdp2", "tp_size": 2, "dp_replicate_size": 2}, 8),
    ({"strategy": "fsdp2", "pp_size": 2, "tp_size": 2, "pipeline": {}}, 8),
    ({"strategy": "fsdp2", "ep_size": 4}, 8),
    ({"strategy": "fsdp2", "ep_size": 8}, 8),
    ({"strategy": "fsdp2", "pp_size": 2, "ep_size": 4, "pipeline": {}}, 8),
    ({"strategy": "megatron_fsdp", "tp_size": 2, "cp_size": 2}, 8),
    ({"strategy": "megatron_fsdp"}, 8),
    ({"strategy": "ddp"}, 8),
    ({"strategy": "fsdp2", "pp_size": 2, "dp_replicate_size": 2, "tp_size": 4, "cp_size": 2, "ep_size": 8,
      "pipeline": {}}, 64),
    ({"strategy": "fsdp2", "tp_size": 8, "dp_replicate_size": 2}, 64),
    ({"strategy": "fsdp2", "ep_size": 64}, 64),
    ({"strategy": "megatron_fsdp", "tp_size": 4, "cp_size": 2}, 64),
    ({"strategy": "fsdp2", "pp_size": 8, "dp_replicate_size": 4, "tp_size": 4, "cp_size": 2, "ep_size": 16,
      "pipeline": {}}, 4096),
    # invalid
    ({"strategy": "fsdp2", "tp_size": 3}, 8),
    ({"strategy": "fsdp2", "tp_size": 2, "dp_replicate_size": 3}, 8),
    ({"strategy": "fsdp2", "dp_replicate_size": 8}, 8),
    ({"strategy": "fsdp2", "tp_size": 2, "ep_size": 3}, 8),
    ({"strategy": "fsdp2", "dp_size": 16}, 8),
    ({"strategy": "megatron_fsdp", "pp_size": 2, "pipeline": {}}, 8),
    ({"strategy": "megatron_fsdp", "ep_size": 2}, 8),
    ({"strategy": "megatron_fsdp", "dp_replicate_size": 2}, 8),
    ({"strategy": "ddp", "tp_size": 2}, 8),
    ({"strategy": "ddp", "cp_size": 2}, 8),
    ({"strategy": "zero3"}, 8),
    ({"strategy": "fsdp2", "bogus_key": 1}, 8),
    ({"strategy": "fsdp2", "pp_size": 2}, 8),
    ({"strategy": "ddp", "sequence_parallel": True}, 8),
    # AutoModel's gap: builds a 4-rank mesh on 8 ranks without a word
    ({"strategy": "fsdp2", "dp_size": 2, "tp_size": 2}, 8),
    ({"strategy": "megatron_fsdp", "dp_size": 2}, 8),
    ({"strategy": "ddp", "dp_size": 2}, 8),
]


@pytest.mark.parametrize(("section", "world"), REFERENCE_CASES, ids=lambda v: str(v))
def test_reference_cases(oracle: Oracle, section: dict[str, Any], world: int) -> None:
    ranks = [0, world - 1]
    assert_same(section, world, ranks, oracle.ask(section, world, ranks), ours(section, world))


def test_rank_4095_coordinates() -> None:
    """reference/torch-mesh.md §3.5: rank 4095 of pp8 dp_rep4 tp4 cp2 ep16 → (7,3,15,1,3), moe (31,15)."""
    section = {"pp_size": 8, "dp_replicate_size": 4, "tp_size": 4, "cp_size": 2, "ep_size": 16, "pipeline": {}}
    report = ours(section, 4096)
    assert isinstance(report, MeshReport) and report.ok
    view = report.rank_view(4095)
    assert tuple(view.coordinates[DEVICE_MESH].values()) == (7, 3, 15, 1, 3)
    assert tuple(view.coordinates[MOE_MESH].values()) == (31, 15)


def test_rejections_carry_automodel_wording(oracle: Oracle) -> None:
    """Where AutoModel has a message for the failure, our finding carries it word for word."""
    for section in ({"tp_size": 3}, {"tp_size": 2, "dp_replicate_size": 3}, {"dp_replicate_size": 8},
                    {"tp_size": 2, "ep_size": 3}, {"strategy": "ddp", "tp_size": 2}, {"dp_size": 16}):
        answer = oracle.ask(section, 8, [0])
        report = ours(section, 8)
        assert isinstance(report, MeshReport) and not report.built
        theirs = answer["error"].split(": ", 1)[1]
        assert theirs in {f.automodel_message for f in report.errors}, (section, theirs)


@pytest.mark.parametrize("section", [{"tp_size": 0}, {"cp_size": -2}, {"ep_size": 0}, {"dp_replicate_size": 0}])
def test_non_positive_sizes_are_input_errors(oracle: Oracle, section: dict[str, Any]) -> None:
    """AutoModel silently reads a size <= 0 as 1 (`mesh_utils._degree`); we call it bad input (exit 2)
    rather than guess what was meant."""
    assert oracle.ask(section, 8, [0])["ok"]
    result = ours(section, 8)
    assert isinstance(result, InputError) and result.exit_code == 2
    assert next(iter(section)) in str(result)


# The fixtures with a distributed section: AutoModel's mesh builder has nothing to build for the others (a
# generation config with `distributed: null`, a draft-model recipe that builds meshes only when given one).
MESHED = [p for p in VALID if isinstance(load_document(p).plain().get("distributed"), dict)]


@pytest.mark.parametrize("path", MESHED, ids=lambda p: p.stem)
def test_valid_recipes_build_as_automodel_builds_them(oracle: Oracle, path: Path) -> None:
    """Recipes shaped like public AutoModel ones build, at their world size, exactly as AutoModel builds them."""
    world = fixture_world_size(path)
    report = build_meshes(path, world_size=world)
    assert report.ok, [f"{f.rule}: {f.message}" for f in report.errors]
    config = resolve_config(load_document(path).data)[0]
    section = config["distributed"]
    # Distillation on separate meshes: the student's mesh covers its own ranks [0, s), not the world.
    mesh_world = report.world_size
    if config.get("separate_meshes"):
        assert mesh_world < world and "am-r42-kd-meshes" in {f.rule for f in report.findings}
    else:
        assert mesh_world == world
    ranks = sorted({0, mesh_world // 3, mesh_world - 1})
    assert_same(section, mesh_world, ranks, oracle.ask(section, mesh_world, ranks), report)

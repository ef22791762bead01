"""`build_meshes`: prove on a CPU that the device meshes AutoModel will build for a recipe exist.

Two layers. First the plain arithmetic, through the shared rules, so every failure is our clear message
with AutoModel's wording beside it (torch accepts a mesh smaller than the world silently and divides by
zero on a 0-sized axis). Then torch itself, in this one process under its fake process group, builds
exactly AutoModel's meshes; every axis's groups read from them must equal the arithmetic tables, and a
difference is an internal error, reported loudly.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from automodel_dist.catalog.hardware import resolve_gpu
from automodel_dist.catalog.specs import GpuSpec, nvlink_domain_size
from automodel_dist.errors import AutomodelDistError, InputError
from automodel_dist.findings import NOTE, WARNING, BySeverity, Finding, locate_all
from automodel_dist.layout import INTER_NODE_DISPATCHERS, Layout
from automodel_dist.limits import RECIPE_SIZES, WORLD_SIZE, check_count, check_sizes, check_world
from automodel_dist.rules import check_layout
from automodel_dist.rules import registry as r
from automodel_dist.rules.recipe import BLOCKING_RULES, check_recipe, kd_mesh_sizes
from automodel_dist.targets.automodel.config import EnvSecrets, MissingEnvVar, resolve_config
from automodel_dist.targets.automodel.parse import RecipeValueError, layout_from_config
from automodel_dist.validate import env_var_findings, redacted, redacting
from automodel_dist.verify.groups import Locality, MeshPlan, node_map, plan_meshes
from automodel_dist.verify.torch_build import TorchMeshes, build_with_torch, require_torch
from automodel_dist.yamlio import Document, join_path, load_document

# Typical figures, per GPU and direction, used to name the cost when the GPU is not known (H100 SXM:
# NVLink 4 at 450 GB/s; one 400 Gb/s InfiniBand NDR port per GPU at 50 GB/s).
TYPICAL_NVLINK_GBPS = 450.0
TYPICAL_INTERNODE_GBPS = 50.0


class MeshMismatchError(AutomodelDistError):
    """torch built groups that differ from AutoModel's arithmetic: a bug in this tool or a torch change."""

    exit_code = 1


@dataclass(frozen=True)
class RankView:
    """One rank: its node, its coordinates on each mesh, and its group on every axis."""

    rank: int
    node: int
    coordinates: dict[str, dict[str, int]]
    groups: dict[str, list[int]]


@dataclass
class MeshReport(BySeverity):
    """The meshes of one recipe on `world_size` ranks, or the findings that stop them being built.

    `layout` is None when the recipe's distributed section cannot be read as one (e.g. an unknown strategy).

    `tables` holds every group of every axis (torch's, equal to the arithmetic); `node_map` says per
    axis whether its groups stay inside a node and inside the NVLink domain. `timing` is in seconds.
    """

    layout: Layout | None
    world_size: int
    gpus_per_node: int
    nvlink_domain: int
    source: str = ""
    built: bool = False
    mesh_shape: tuple[int, ...] | None = None
    mesh_names: tuple[str, ...] | None = None
    moe_shape: tuple[int, ...] | None = None
    moe_names: tuple[str, ...] | None = None
    tables: dict[str, list[list[int]]] = field(default_factory=dict)
    node_map: dict[str, Locality] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    timing: dict[str, float] = field(default_factory=dict)
    torch_version: str = ""
    plan: MeshPlan | None = None

    @property
    def ok(self) -> bool:
        return self.built and not self.errors

    @property
    def flattened(self) -> dict[str, tuple[str, ...]]:
        """Each flattened axis and the mesh dims it joins (none until the meshes are built)."""
        return self.plan.flattened if self.plan is not None else {}

    @property
    def axis_mesh(self) -> dict[str, str]:
        """The mesh (device_mesh or moe_mesh) each axis is read from (none until the meshes are built)."""
        return {axis.name: axis.mesh for axis in self.plan.axes} if self.plan is not None else {}

    @property
    def nodes(self) -> int:
        return -(-self.world_size // self.gpus_per_node)

    def rank_view(self, rank: int) -> RankView:
        if not 0 <= rank < self.world_size:
            raise ValueError(f"rank {rank} is outside the world of {self.world_size} ranks")
        plan = self.plan
        coordinates = plan.coordinates(rank) if plan is not None else {}
        groups = {axis.name: plan.group_of(axis.name, rank) for axis in plan.axes} if plan is not None else {}
        return RankView(rank=rank, node=rank // self.gpus_per_node, coordinates=coordinates, groups=groups)


# AutoModel's checks up to and including mesh creation (reference/automodel.md §4: YAML parsing R3–R8,
# mesh creation R9–R16, and R42, the student/teacher rank split of distillation with separate meshes),
# plus ours on the same stage. Batch, schedule and model rules come later in AutoModel's start-up and
# belong to `validate`.
MESH_STAGE_AUTOMODEL_RULES = frozenset({*(f"R{n}" for n in range(3, 17)), "R42"})
MESH_STAGE_RULES = frozenset(rule.id for rule in (r.WORLD_PRODUCT, r.DISTRIBUTED_MISSING, r.PIPELINE_UNKNOWN_KEY,
                                                  r.MOE_UNKNOWN_KEY, r.DTYPE_STRING))


MESH_SECTIONS = frozenset({"distributed", "teacher_distributed", "separate_meshes"})


def decides_meshes(finding: Finding) -> bool:
    """Whether a finding belongs to the stage that builds the meshes (per the rule registry)."""
    rule = r.RULES.get(finding.rule)
    if rule is None:
        return False
    return rule.id in MESH_STAGE_RULES or bool(MESH_STAGE_AUTOMODEL_RULES.intersection(rule.automodel))


def judge_mesh_stage(doc: Document, *, world_size: int, gpus_per_node: int) -> tuple[Layout | None, list[Finding]]:
    """The recipe's layout (None when it cannot be read) and the shared rules' findings on the mesh stage.

    For distillation on separate meshes the layout is the student's, on its own ranks [0, s): the
    teacher's mesh takes the ranks after it (AutoModel's `create_kd_distributed_setups`).
    """
    # An unset ${VAR} in a section the meshes do not read (a data path, a wandb key) is a warning, as in
    # validate: the job's environment sets it. One the meshes depend on cannot be guessed: bad input.
    secrets = EnvSecrets()
    config, missing = resolve_config(doc.data, secrets=secrets)
    with redacting(secrets):
        check_sizes(config, RECIPE_SIZES, doc.where)
        layout, findings = _judge_config(doc, config, missing, world_size=world_size, gpus_per_node=gpus_per_node)
    return layout, redacted(findings, secrets)


def _judge_config(doc: Document, config: Any, missing: list[MissingEnvVar], *, world_size: int,
                  gpus_per_node: int) -> tuple[Layout | None, list[Finding]]:
    for var in missing:
        if var.path and var.path[0] in MESH_SECTIONS:
            raise InputError(var.automodel_message, where=doc.where(join_path(var.path)),
                             hint=f"export {var.name}=... or give a default: ${{{var.name},VALUE}}")
    findings = env_var_findings(missing)
    findings += [f for f in check_recipe(config, world_size=world_size, gpus_per_node=gpus_per_node)
                 if decides_meshes(f)]
    layout = None
    if not any(f.rule in BLOCKING_RULES for f in findings):
        kd = kd_mesh_sizes(config)
        if kd:
            findings.append(r.KD_MESHES.finding(
                f"distillation on separate meshes: these are the student's meshes on ranks 0-{kd[0] - 1}; "
                f"the teacher's (teacher_distributed) take ranks {kd[0]}-{kd[0] + kd[1] - 1}",
                severity=NOTE, hint="dry-run the teacher_distributed section on its own to see its meshes"))
        try:
            layout = layout_from_config(config, world_size=kd[0] if kd else world_size)
        except RecipeValueError as exc:
            raise exc.located(doc) from None
        findings += [f for f in check_layout(layout) if decides_meshes(f)]
    return layout, locate_all(doc, findings)


def _compare(plan: MeshPlan, built: TorchMeshes, tables: dict[str, list[list[int]]]) -> None:
    """torch's meshes against the arithmetic: shapes, names, flattened axes, and every group."""
    expected_shape = plan.device_mesh.shape if plan.device_mesh else None
    expected_names = plan.device_mesh.names if plan.device_mesh else None
    problems = []
    if built.mesh_shape != expected_shape or built.mesh_names != expected_names:
        problems.append(f"device mesh {built.mesh_names}={built.mesh_shape}, "
                        f"expected {expected_names}={expected_shape}")
    moe = plan.moe_mesh
    if (built.moe_shape, built.moe_names) != ((moe.shape, moe.names) if moe else (None, None)):
        problems.append(f"MoE mesh {built.moe_names}={built.moe_shape}, expected "
                        f"{moe.names if moe else None}={moe.shape if moe else None}")
    if sorted(built.flattened) != sorted(plan.flattened):
        problems.append(f"flattened axes {sorted(built.flattened)}, expected {sorted(plan.flattened)}")
    for name, groups in tables.items():
        if built.tables.get(name) != groups:
            problems.append(f"the groups of axis {name!r}")
    if problems:
        raise MeshMismatchError(
            "internal error: torch built meshes that differ from AutoModel's arithmetic: " + "; ".join(problems)
            + ". This is a bug in automodel-dist or a torch change; please report it with the recipe.")


def _bandwidths(gpu: GpuSpec | None) -> tuple[str, str]:
    if gpu is not None:
        return f"~{gpu.internode_gbps:g} GB/s ({gpu.name})", f"~{gpu.nvlink_gbps:g} GB/s"
    return (f"~{TYPICAL_INTERNODE_GBPS:g} GB/s (one 400 Gb/s InfiniBand port per GPU, typical)",
            f"~{TYPICAL_NVLINK_GBPS:g} GB/s (H100)")


def _dispatcher_advice(layout: Layout | None) -> str:
    dispatcher = layout.dispatcher if layout else None
    if dispatcher in INTER_NODE_DISPATCHERS:
        return f" (the {dispatcher} dispatcher this recipe uses is built for inter-node all-to-all)"
    return ", or use a dispatcher built for inter-node all-to-all (deepep, hybridep)"


def locality_findings(report: MeshReport, gpu: GpuSpec | None = None) -> list[Finding]:
    """The registry's topology warnings, judged from the groups torch built, with the cost named."""
    inter, nvlink = _bandwidths(gpu)
    findings = []
    tp = report.node_map.get("tp")
    if tp is not None and not tp.intra_node:
        where = ("leaves its node but stays in the NVLink domain" if tp.intra_nvlink
                 else "leaves its node and the NVLink domain")
        cost = ("" if tp.intra_nvlink else
                f": every layer's TP all-reduce/all-gather (forward and backward) runs over inter-node links at "
                f"{inter} instead of NVLink at {nvlink}")
        findings.append(r.TP_CROSSES_NODE.finding(
            f"each TP group of {tp.size} ranks {where} (spans up to {tp.max_nodes_spanned} nodes of "
            f"{report.gpus_per_node} GPUs){cost}", severity=NOTE if tp.intra_nvlink else WARNING,
            hint=f"keep tp_size a divisor of the GPUs per node ({report.gpus_per_node}); "
                 "scale across nodes with pp, cp or data parallelism instead"))
    ep = report.node_map.get("ep")
    if ep is not None and not ep.intra_nvlink:
        findings.append(r.EP_LEAVES_NVLINK.finding(
            f"each EP group of {ep.size} ranks leaves the NVLink domain of {report.nvlink_domain} GPUs "
            f"(spans up to {ep.max_nodes_spanned} nodes): every MoE layer's all-to-all dispatch and "
            f"combine cross nodes at {inter} instead of NVLink at {nvlink}",
            hint=f"keep ep_size within the NVLink domain ({report.nvlink_domain}) and shard experts further "
                 f"with ep_shard{_dispatcher_advice(report.layout)}"))
    return findings


def build_meshes(source: str | Path | Mapping[str, Any], *, world_size: int, gpus_per_node: int = 8,
                 nvlink_domain: int | None = None, gpu: GpuSpec | str | None = None) -> MeshReport:
    """Build AutoModel 0.7.0's device meshes for a recipe (path, YAML text or mapping) on `world_size` ranks.

    `nvlink_domain` defaults to the node; `gpu` (optional) names the link speeds in locality warnings.
    Raises InputError (exit 2) for unusable input or a missing torch; a layout the rules reject comes
    back as a report with errors and `built=False`.
    """
    return build_document_meshes(load_document(source, what="recipe"), world_size=world_size,
                                 gpus_per_node=gpus_per_node, nvlink_domain=nvlink_domain, gpu=gpu)


def build_document_meshes(doc: Document, *, world_size: int, gpus_per_node: int = 8,
                          nvlink_domain: int | None = None, gpu: GpuSpec | str | None = None) -> MeshReport:
    """`build_meshes` on an already loaded recipe document (the CLI loads it once to tell intents apart)."""
    check_world(world_size, gpus_per_node)  # validate's check, so both refuse the same sizes alike
    gpu = resolve_gpu(gpu)  # a preset name, as validate_recipe takes it, or a GpuSpec
    if nvlink_domain is not None:
        check_count(nvlink_domain, WORLD_SIZE, name="nvlink_domain",
                    hint="the GPUs one NVLink domain joins (8 for an HGX node, 72 for a GB200 NVL72 rack), or None")
    timing: dict[str, float] = {}
    start = time.perf_counter()
    torch_version = require_torch()
    timing["import_torch"] = time.perf_counter() - start

    t = time.perf_counter()
    layout, findings = judge_mesh_stage(doc, world_size=world_size, gpus_per_node=gpus_per_node)
    if layout is not None:
        world_size = layout.world_size
    domain = nvlink_domain_size(nvlink_domain, gpus_per_node=gpus_per_node, world_size=world_size)
    report = MeshReport(layout=layout, world_size=world_size, gpus_per_node=gpus_per_node, nvlink_domain=domain,
                        source=doc.filename, findings=findings, torch_version=torch_version)
    timing["parse_and_rules"] = time.perf_counter() - t
    if layout is None or report.errors:
        report.timing = timing
        return report

    t = time.perf_counter()
    plan = plan_meshes(layout)
    tables = plan.tables()
    timing["arithmetic"] = time.perf_counter() - t

    t = time.perf_counter()
    built = build_with_torch(plan)
    timing["torch_build"] = time.perf_counter() - t

    t = time.perf_counter()
    _compare(plan, built, tables)
    timing["compare"] = time.perf_counter() - t

    report.built = True
    report.plan = plan
    report.mesh_shape, report.mesh_names = built.mesh_shape, built.mesh_names
    report.moe_shape, report.moe_names = built.moe_shape, built.moe_names
    report.tables = built.tables
    t = time.perf_counter()
    report.node_map = node_map(built.tables, gpus_per_node=gpus_per_node, nvlink_domain=domain)
    report.findings += locate_all(doc, locality_findings(report, gpu))
    timing["node_map"] = time.perf_counter() - t
    timing["total"] = time.perf_counter() - start
    report.timing = timing
    return report


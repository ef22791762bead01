"""What the HTML report draws, gathered from `explain`'s data and the mesh plan; nothing is recomputed here.

The ranking is `explain_json` as `explain --format json` prints it; the memory per pipeline rank comes from
the cost model's per-rank breakdown (its largest total is the winner's peak); the rank map from the mesh
plan, which `dry-run` has checked against torch and `explain` takes from the arithmetic alone (no torch).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from automodel_dist import __version__
from automodel_dist.verify.groups import MeshPlan

if TYPE_CHECKING:
    from automodel_dist.compiler import CompileResult
    from automodel_dist.verify.mesh import MeshReport


@dataclass(frozen=True)
class StageMemory:
    """One pipeline rank: what it holds and its memory parts (GiB, the cost model's PARTS)."""

    rank: int
    dense_layers: int
    moe_layers: int
    stages: int
    embedding: bool
    head: bool
    parts: dict[str, float]

    @property
    def total_gib(self) -> float:
        return sum(self.parts.values())


@dataclass(frozen=True)
class MeshView:
    """The rank groups to draw: the mesh plan of the layout, where its ranks sit, and where the groups come
    from (empty when there are none: no mesh was built)."""

    plan: MeshPlan | None
    world_size: int
    gpus_per_node: int
    nvlink_domain: int
    provenance: str
    stack: str = "AutoModel"
    axis_names: Mapping[str, str] = field(default_factory=dict)  # where the stack names an axis otherwise


@dataclass(frozen=True)
class ReportData:
    """Everything one report shows. `explain` is None when there is no plan to rank (a recipe's dry-run);
    `notes` say what a view cannot show and why."""

    title: str
    lines: tuple[str, ...]
    layout_label: str
    explain: dict[str, Any] | None = None
    why: str = ""
    stages: tuple[StageMemory, ...] = ()
    hbm_gib: float = 0.0
    headroom: float = 0.0
    mesh: MeshView | None = None
    notes: dict[str, str] = field(default_factory=dict)
    findings: tuple[str, ...] = ()
    not_modeled: tuple[str, ...] = ()
    # The target's own choices beyond the layout ((path, value, why)), what it writes, and the environment
    # its launch exports (empty for AutoModel: its reasons are the recipe's comments).
    writes: str = ""
    settings: tuple[tuple[str, str, str], ...] = ()
    environment: tuple[tuple[str, str, str], ...] = ()
    generator: str = f"automodel-dist {__version__}"
    # the stack's words (CompileResult.layout_legend and part_names)
    layout_legend: str = ""
    part_names: Mapping[str, str] = field(default_factory=dict)


def _stages(result: CompileResult) -> tuple[StageMemory, ...]:
    from automodel_dist.cost.model import memory_by_pp_rank

    # The stack's options (Megatron's for its target; None: the AutoModel settings the compiler writes).
    return tuple(StageMemory(rank=load.rank, dense_layers=load.dense, moe_layers=load.moe, stages=load.stages,
                             embedding=load.embedding, head=load.head, parts=parts)
                 for load, parts in memory_by_pp_rank(result.problem, result.layout, options=result.cost_options()))


def _title(result: CompileResult) -> str:
    cluster = result.problem.cluster
    return f"{result.problem.model.name} on {cluster.world_size} × {cluster.gpu.name}"


def from_compile(result: CompileResult, top: int, mesh: MeshView | None = None) -> ReportData:
    """The report of a compiled intent: explain's ranking, the winner's stages and step, its rank map
    (by default the arithmetic mesh plan, which needs no torch)."""
    from automodel_dist.explain import explain_json, headline, why_it_won

    cluster = result.problem.cluster
    if mesh is None:
        mesh = MeshView(plan=result.rank_plan(), world_size=cluster.world_size,
                        gpus_per_node=cluster.gpus_per_node, nvlink_domain=cluster.nvlink_domain,
                        provenance=result.rank_provenance, stack=result.stack, axis_names=dict(result.axis_names))
    return ReportData(title=_title(result), lines=headline(result), layout_label=result.layout.short(),
                      explain=explain_json(result, top), why=why_it_won(result), stages=_stages(result),
                      hbm_gib=cluster.gpu.hbm_gib, headroom=result.problem.memory_headroom, mesh=mesh,
                      not_modeled=result.estimate.not_modeled, writes=result.writes,
                      layout_legend=result.layout_legend, part_names=dict(result.part_names),
                      settings=tuple((s.path, s.value, s.why) for s in result.settings()),
                      environment=tuple((s.path, s.value, s.why) for s in result.environment()))


def _mesh_view(report: MeshReport) -> MeshView:
    provenance = (f"the meshes torch {report.torch_version} built under its fake process group (equal to "
                  "AutoModel's arithmetic)") if report.built and report.mesh_shape is not None else ""
    return MeshView(plan=report.plan if report.built else None, world_size=report.world_size,
                    gpus_per_node=report.gpus_per_node, nvlink_domain=report.nvlink_domain, provenance=provenance)


def _finding_texts(report: MeshReport) -> tuple[str, ...]:
    return tuple(f"{f.severity} [{f.rule}] {f.path}: {f.message}" + (f" (fix: {f.hint})" if f.hint else "")
                 for f in report.findings)


def from_dry_run(report: MeshReport, result: CompileResult | None, top: int) -> ReportData:
    """The report of a dry-run: with the compiled intent, every view; with a recipe alone, the rank map
    (a recipe names neither the GPU nor the alternatives, so there is nothing to rank or to estimate)."""
    mesh = _mesh_view(report)
    findings = _finding_texts(report)
    if result is not None:
        return replace(from_compile(result, top, mesh=mesh), findings=findings)
    no_gpu = ("A recipe names no GPU, so there is nothing to estimate against: dry-run the intent it was compiled "
              "from, or run `automodel-dist explain INTENT --html`, for this view.")
    no_ranking = ("A recipe is one layout, with no alternatives to rank: `automodel-dist explain INTENT --html` ranks "
                  "the layouts of an intent.")
    label = report.layout.short() if report.layout else "unreadable (see the findings)"
    return ReportData(title=f"{report.source} on {report.world_size} ranks", layout_label=label,
                      lines=(f"dry-run of {report.source} on {report.nodes} node(s) × {report.gpus_per_node} GPUs",),
                      mesh=mesh, notes={"ranking": no_ranking, "memory": no_gpu, "step-time": no_gpu},
                      findings=findings)

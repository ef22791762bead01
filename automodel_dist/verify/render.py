"""Render a MeshReport: text for people (shapes, per-axis summary, one rank, node map, findings) and JSON
for tools (the same, plus every group of every axis). Deterministic: timings are not part of either."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from automodel_dist.findings import Finding
from automodel_dist.verify.groups import MOE_MESH
from automodel_dist.verify.mesh import MeshReport, RankView

GROUP_HEAD = 6
GROUP_TAIL = 2
FIRST_GROUPS = 3
FIRST_GROUPS_WIDTH = 60


def format_group(group: list[int]) -> str:
    """A group as a list, eliding the middle of long ones: [0, 8, 16, 24, 32, 40, …, 2040, 2048] (256)."""
    if len(group) <= GROUP_HEAD + GROUP_TAIL:
        return "[" + ", ".join(map(str, group)) + "]"
    head = ", ".join(map(str, group[:GROUP_HEAD]))
    tail = ", ".join(map(str, group[-GROUP_TAIL:]))
    return f"[{head}, …, {tail}] ({len(group)} ranks)"


def _shape_text(names: tuple[str, ...] | None, shape: tuple[int, ...] | None) -> str:
    if names is None or shape is None:
        return "none"
    return "(" + ", ".join(f"{n}={s}" for n, s in zip(names, shape, strict=True)) + ")"


def _finding_lines(finding: Finding, source: str) -> list[str]:
    where = f"{source}:{finding.line}:{finding.col}" if finding.line is not None else source
    lines = [f"  {finding.severity} [{finding.rule}] {where} ({finding.path}): {finding.message}"]
    if finding.automodel_message:
        lines.append(f"      AutoModel says: {finding.automodel_message}")
    if finding.hint:
        lines.append(f"      hint: {finding.hint}")
    return lines


def _yes_no(flag: bool) -> str:
    return "yes" if flag else "NO"


def _header(report: MeshReport) -> list[str]:
    nodes = f"{report.nodes} node{'s' if report.nodes != 1 else ''} × {report.gpus_per_node} GPUs"
    return [f"dry-run: {report.source} on {report.world_size} ranks ({nodes}; NVLink domain "
            f"{report.nvlink_domain} GPUs)",
            f"layout:  {report.layout.short() if report.layout else 'unreadable (see the findings)'}"]


def _mesh_lines(report: MeshReport) -> list[str]:
    lines = [f"device_mesh  {_shape_text(report.mesh_names, report.mesh_shape)}"]
    for name, dims in report.flattened.items():
        lines.append(f"  flattened  {name} = ({', '.join(dims)})")
    if report.moe_shape is not None:
        lines.append(f"moe_mesh     {_shape_text(report.moe_names, report.moe_shape)}, one per pipeline stage")
    return lines


def _axis_table(report: MeshReport) -> list[str]:
    width = max(len(name) for name in report.tables)
    lines = [f"{'axis':<{width}}  {'mesh':<4}  {'size':>5}  {'groups':>6}  {'in node':>7}  {'in NVLink':>9}  "
             f"{'nodes/group':>11}  first groups"]
    for name, groups in report.tables.items():
        loc = report.node_map[name]
        mesh = "moe" if report.axis_mesh[name] == MOE_MESH else "root"
        shown = [format_group(g) for g in groups[:FIRST_GROUPS]]
        while len(shown) > 1 and sum(len(text) + 2 for text in shown) > FIRST_GROUPS_WIDTH:
            shown.pop()
        first = "  ".join(shown)
        more = " …" if len(groups) > len(shown) else ""
        lines.append(f"{name:<{width}}  {mesh:<4}  {loc.size:>5}  {loc.num_groups:>6}  {_yes_no(loc.intra_node):>7}  "
                     f"{_yes_no(loc.intra_nvlink):>9}  {loc.max_nodes_spanned:>11}  {first}{more}")
    return lines


def _node_map_lines(report: MeshReport) -> list[str]:
    """Which axes keep their groups inside a node, inside the NVLink domain only, or spread over nodes."""
    inside = [n for n, loc in report.node_map.items() if loc.intra_node]
    nvlink = [n for n, loc in report.node_map.items() if not loc.intra_node and loc.intra_nvlink]
    across = [f"{n} ({loc.max_nodes_spanned} nodes)" for n, loc in report.node_map.items() if not loc.intra_nvlink]
    lines = [f"node map ({report.gpus_per_node} GPUs per node, NVLink domain {report.nvlink_domain} GPUs; "
             f"node n holds ranks {report.gpus_per_node}·n to {report.gpus_per_node}·n+{report.gpus_per_node - 1})",
             f"  {'inside one node:':<40}{', '.join(inside) or 'none'}"]
    if report.nvlink_domain > report.gpus_per_node:
        lines.append(f"  {'inside the NVLink domain, across nodes:':<40}{', '.join(nvlink) or 'none'}")
    lines.append(f"  {'across nodes over the network:':<40}{', '.join(across) or 'none'}")
    return lines


def _rank_lines(view: RankView) -> list[str]:
    lines = [f"rank {view.rank} (node {view.node})"]
    for mesh, coords in view.coordinates.items():
        lines.append(f"  {mesh:<11}  " + " ".join(f"{n}={c}" for n, c in coords.items()))
    if view.groups:
        width = max(len(name) for name in view.groups)
        lines += [f"  {name:<{width}}  {format_group(group)}" for name, group in view.groups.items()]
    return lines


def render_text(report: MeshReport, rank: int = 0) -> str:
    lines = _header(report)
    if not report.built:
        lines.append("result:  the meshes cannot be built")
        lines.append("findings:")
        for finding in report.findings:
            lines += _finding_lines(finding, report.source)
        return "\n".join(lines) + "\n"
    if report.mesh_shape is None:
        lines.append("result:  nothing to build: AutoModel builds no device mesh for DDP; every rank is a "
                     f"data-parallel replica in the default process group (dp = {report.world_size})")
    else:
        lines.append(f"result:  meshes built by torch {report.torch_version} under its fake process group; "
                     "every group equals AutoModel's arithmetic")
        lines.append("")
        lines += _mesh_lines(report)
    if report.tables:
        lines.append("")
        lines += _axis_table(report)
        lines.append("")
        lines += _node_map_lines(report)
    lines.append("")
    lines += _rank_lines(report.rank_view(rank))
    lines.append("")
    if report.findings:
        lines.append("findings:")
        for finding in report.findings:
            lines += _finding_lines(finding, report.source)
    else:
        lines.append("findings: none")
    return "\n".join(lines) + "\n"


def report_json(report: MeshReport, rank: int = 0) -> dict[str, Any]:
    data: dict[str, Any] = {
        "ok": report.ok,
        "built": report.built,
        "source": report.source,
        "world_size": report.world_size,
        "nodes": report.nodes,
        "gpus_per_node": report.gpus_per_node,
        "nvlink_domain": report.nvlink_domain,
        "layout": asdict(report.layout) if report.layout else None,
        "device_mesh": None if report.mesh_shape is None else
        {"names": list(report.mesh_names or ()), "shape": list(report.mesh_shape)},
        "moe_mesh": None if report.moe_shape is None else
        {"names": list(report.moe_names or ()), "shape": list(report.moe_shape), "per_pipeline_stage": True},
        "flattened": {name: list(dims) for name, dims in report.flattened.items()},
        "axes": {},
        "rank": None,
        "findings": [f.to_json() for f in report.findings],
    }
    for name, groups in report.tables.items():
        loc = report.node_map[name]
        data["axes"][name] = {"mesh": report.axis_mesh[name], "size": loc.size, "num_groups": loc.num_groups,
                              "intra_node": loc.intra_node, "intra_nvlink": loc.intra_nvlink,
                              "max_nodes_spanned": loc.max_nodes_spanned, "groups": groups}
    if report.built:
        data["rank"] = asdict(report.rank_view(rank))
    return data


def render_json(report: MeshReport, rank: int = 0) -> str:
    return json.dumps(report_json(report, rank), separators=(",", ":")) + "\n"

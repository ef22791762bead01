"""View 4: the rank map. One small grid per parallel dimension (rows are nodes, columns the GPUs of a
node), each GPU coloured by its group on that dimension (by its stage for PP), and a table of every axis.

Large worlds keep the file small: past MAX_NODES nodes only the first HEAD_NODES and the last TAIL_NODES
are drawn (the table still covers every group), and the page says so.
"""

from __future__ import annotations

from automodel_dist.html_report import svg
from automodel_dist.html_report.data import MeshView
from automodel_dist.verify.groups import MeshPlan, locality
from automodel_dist.verify.render import format_group

PALETTE = ("#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#eeca3b", "#b279a2", "#ff9da6", "#9d755d",
           "#bab0ac", "#88d27a", "#83bcff")
# The dimensions drawn, in this order, when the layout has them with more than one rank per group.
DRAWN_AXES = ("tp", "cp", "ep", "etp", "ep_shard", "dp_shard", "dp_replicate", "dp", "pp")
AXIS_NAMES = {"tp": "tensor parallel", "cp": "context parallel", "ep": "expert parallel",
              "etp": "expert tensor parallel",
              "ep_shard": "expert FSDP shard", "dp_shard": "FSDP shard", "dp_replicate": "HSDP replica",
              "dp": "data parallel", "pp": "pipeline stage"}
MAX_NODES, HEAD_NODES, TAIL_NODES = 16, 12, 4
PANEL_WIDTH, MIN_CELL, GUTTER, HEADER, GAP_ROW = 96.0, 16.0, 30.0, 14.0, 18.0


def drawn_nodes(nodes: int) -> tuple[list[int], int]:
    """The nodes drawn (all, or the first and last few) and how many are left out between them."""
    if nodes <= MAX_NODES:
        return list(range(nodes)), 0
    return [*range(HEAD_NODES), *range(nodes - TAIL_NODES, nodes)], nodes - HEAD_NODES - TAIL_NODES


def _axes(plan: MeshPlan) -> list[str]:
    present = {axis.name for axis in plan.axes if not axis.flattened}  # flattened axes join drawn ones
    return [name for name in DRAWN_AXES if name in present and len(plan.group_of(name, 0)) > 1]


def _colour_index(plan: MeshPlan, name: str, world: int) -> list[int]:
    """Per rank, the index of its group on `name` (for pp, its stage), in the order groups are listed."""
    if name == "pp":
        assert plan.device_mesh is not None
        return [rank // (world // plan.device_mesh.shape[0]) for rank in range(world)]
    index = [0] * world
    for i, group in enumerate(plan.groups(name)):
        for rank in group:
            index[rank] = i
    return index


def _panel(plan: MeshPlan, name: str, mesh: MeshView, nodes: list[int], skipped: int) -> str:
    gpn, world = mesh.gpus_per_node, mesh.world_size
    groups = plan.groups(name)
    loc = locality(name, groups, gpus_per_node=gpn, nvlink_domain=mesh.nvlink_domain)
    colour = _colour_index(plan, name, world)
    cell = max(MIN_CELL, PANEL_WIDTH / gpn)
    body: list[str] = []
    for gpu in range(gpn):
        if gpn <= 16 or gpu % 4 == 0:
            body.append(svg.text(GUTTER + gpu * cell + cell / 2, HEADER - 4, gpu, anchor="middle", css_class="tick"))
    y = HEADER
    for i, node in enumerate(nodes):
        if skipped and i == HEAD_NODES:
            body.append(svg.text(GUTTER + gpn * cell / 2, y + 13, f"⋮ {skipped} nodes", anchor="middle",
                                 css_class="tick"))
            y += GAP_ROW
        body.append(svg.text(GUTTER - 4, y + cell / 2 + 4, f"n{node}", anchor="end", css_class="tick"))
        for gpu in range(gpn):
            rank = node * gpn + gpu
            if rank >= world:
                break
            what = (f"stage {colour[rank]}" if name == "pp" else
                    f"{name} group {colour[rank]}: {format_group(groups[colour[rank]])}")
            body.append(svg.rect(GUTTER + gpu * cell, y, cell, cell, PALETTE[colour[rank] % len(PALETTE)],
                                 title=f"rank {rank} (node {node}, GPU {gpu}) · {what}", css_class="cell"))
        y += cell
    group = "each pipeline (a rank per stage)" if name == "pp" else "each group"
    where = f"{group} inside a node" if loc.intra_node else (
        f"{group} inside the NVLink domain" if loc.intra_nvlink else
        f"{group} spans up to {loc.max_nodes_spanned} nodes")
    coloured = f"{loc.size} stages of {world // loc.size} ranks" if name == "pp" else (
        f"{loc.num_groups} group{'s' if loc.num_groups != 1 else ''} of {loc.size}")
    axis_name = mesh.axis_names.get(name, AXIS_NAMES[name])
    caption = (f'<figcaption><b>{svg.esc(name)}</b> = {loc.size} <span class="muted">({axis_name})</span>'
               f"<br>{coloured}<br>{where}</figcaption>")
    chart = svg.svg(GUTTER + gpn * cell + 2, y + 2, body, label=f"ranks coloured by {name} group", css_class="map")
    return f'<figure class="panel" data-axis="{svg.esc(name)}">{caption}{chart}</figure>'


def _axis_table(plan: MeshPlan, mesh: MeshView) -> str:
    rows = []
    for axis in plan.axes:
        groups = plan.groups(axis.name)
        loc = locality(axis.name, groups, gpus_per_node=mesh.gpus_per_node, nvlink_domain=mesh.nvlink_domain)
        rows.append(f'<tr><td class="mono">{svg.esc(axis.name)}</td><td class="mono">{svg.esc(", ".join(axis.dims))}'
                    f'</td><td class="num">{loc.size}</td><td class="num">{loc.num_groups:,}</td>'
                    f'<td>{"yes" if loc.intra_node else "no"}</td><td>{"yes" if loc.intra_nvlink else "no"}</td>'
                    f'<td class="num">{loc.max_nodes_spanned}</td><td class="mono">{svg.esc(format_group(groups[0]))}'
                    "</td></tr>")
    return (f'<details><summary>Every axis {svg.esc(mesh.stack)} asks a group of</summary>'
            '<table class="parts"><thead><tr>'
            '<th>axis</th><th>mesh dims</th><th class="num">size</th><th class="num">groups</th><th>in a node</th>'
            '<th>in NVLink</th><th class="num">nodes/group</th><th>first group</th></tr></thead><tbody>'
            + "".join(rows) + "</tbody></table></details>")


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def rank_map_view(mesh: MeshView) -> str:
    plan = mesh.plan
    gpn = mesh.gpus_per_node
    nodes = -(-mesh.world_size // gpn)
    holds = f" (node n holds ranks {gpn}·n to {gpn}·n+{gpn - 1})" if gpn > 1 else ""
    where = (f"{_count(mesh.world_size, 'rank')} on {_count(nodes, 'node')} of {_count(gpn, 'GPU')}{holds}; "
             f"NVLink domain {_count(mesh.nvlink_domain, 'GPU')}."
             + (f" Groups from {svg.esc(mesh.provenance)}." if mesh.provenance else ""))
    if plan is None:
        return f"<p>{where}</p><p class=\"note\">The meshes could not be built: see the findings below.</p>"
    if plan.device_mesh is None:
        return (f"<p>{where}</p><p class=\"note\">DDP builds no device mesh: every rank is a data-parallel replica "
                "in the default process group.</p>")
    axes = _axes(plan)
    if not axes:
        return (f'<p>{where}</p><p class="note">Every dimension has one rank per group: nothing to colour.</p>'
                + _axis_table(plan, mesh))
    shown, skipped = drawn_nodes(nodes)
    elided = (f' <strong>Only nodes 0–{HEAD_NODES - 1} and {nodes - TAIL_NODES}–{nodes - 1} are drawn</strong>; the '
              f"{skipped} nodes between them are left out to keep this file small (the table covers every group)."
              if skipped else "")
    panels = "".join(_panel(plan, name, mesh, shown, skipped) for name in axes)
    return (f"<p>{where} Each grid is one dimension: a row is a node, a column a GPU of it, and GPUs of the same "
            f"colour share a group (for pp, a stage); colours repeat every {len(PALETTE)} groups. Hover a GPU for "
            f"its rank and group.{elided}</p>"
            f'<div class="panels">{panels}</div>' + _axis_table(plan, mesh))

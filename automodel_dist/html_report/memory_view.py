"""View 2: peak memory of every pipeline rank, stacked by what holds it, against the GPU's HBM."""

from __future__ import annotations

import math
from collections.abc import Mapping

from automodel_dist.html_report import svg
from automodel_dist.html_report.data import StageMemory

# The cost model's parts, grouped as people read a memory budget: (group, colour, parts, what it holds).
GROUPS = (
    ("parameters", "#4c78a8", ("parameters",), "the rank's shard of the weights"),
    ("gradients", "#f58518", ("gradients",), "gradient shards, and unsharded gradients kept across micro batches"),
    ("optimizer", "#54a24b", ("optimizer",), "Adam's two moments"),
    ("activations", "#e45756", ("activations", "logits"), "micro batches in flight, and the logits at the loss"),
    ("buffers", "#9d8ec4", ("fsdp_gather", "fragmentation", "runtime"),
     "FSDP all-gathered weights, allocator fragmentation, CUDA context and NCCL"),
)
# A group's description where the stack names one of its parts otherwise (CompileResult.part_names).
RENAMED = {"dp_gather": "the distributed optimizer's parameter all-gather, allocator fragmentation, CUDA context "
                        "and NCCL"}
Group = tuple[str, str, tuple[str, ...], str]
PART_LABELS = {"parameters": "params", "gradients": "grads", "optimizer": "optimizer", "fsdp_gather": "all-gather",
               "activations": "activations", "logits": "logits", "fragmentation": "fragment.", "runtime": "runtime"}
HEIGHT = 300.0
MIN_PLOT, MAX_PLOT, SLOT = 240.0, 640.0, 80.0  # the plot grows with the ranks, up to MAX_PLOT
LEFT, RIGHT, TOP, BOTTOM = 52.0, 150.0, 14.0, 40.0
MAX_BAR = 56.0
MAX_X_LABELS = 16


def _group_value(stage: StageMemory, parts: tuple[str, ...]) -> float:
    return sum(stage.parts.get(part, 0.0) for part in parts)


def _held(stage: StageMemory) -> str:
    layers = stage.dense_layers + stage.moe_layers
    what = [f"{layers} layer{'s' if layers != 1 else ''}"]
    if stage.dense_layers and stage.moe_layers:
        what.append(f"{stage.dense_layers} dense")
    if stage.stages > 1:
        what.append(f"{stage.stages} stages")
    if stage.embedding:
        what.append("embedding")
    if stage.head:
        what.append("head + loss")
    return ", ".join(what)


def _chart(stages: tuple[StageMemory, ...], hbm: float, headroom: float) -> str:
    limit = hbm * (1.0 - headroom)
    peak = max(s.total_gib for s in stages)
    step = svg.nice_step(max(hbm, peak) * 1.05)
    top = math.ceil(max(hbm, peak) * 1.05 / step) * step
    plot_w, plot_h = min(MAX_PLOT, max(MIN_PLOT, len(stages) * SLOT)), HEIGHT - TOP - BOTTOM
    width = LEFT + plot_w + RIGHT

    def y(gib: float) -> float:
        return TOP + plot_h * (1.0 - gib / top)

    body: list[str] = []
    tick = 0.0
    while tick <= top + 1e-9:
        body.append(svg.line(LEFT, y(tick), LEFT + plot_w, y(tick), css_class="grid"))
        body.append(svg.text(LEFT - 6, y(tick) + 4, f"{tick:g}", anchor="end", css_class="tick"))
        tick += step
    body.append(svg.text(14, TOP + plot_h / 2, "GiB per GPU", anchor="middle", css_class="axis-label vertical"))
    slot = plot_w / len(stages)
    bar = min(MAX_BAR, slot * 0.7)
    label_every = math.ceil(len(stages) / MAX_X_LABELS)
    for i, stage in enumerate(stages):
        x = LEFT + i * slot + (slot - bar) / 2
        base = 0.0
        for name, colour, parts, _ in GROUPS:
            value = _group_value(stage, parts)
            if value <= 0:
                continue
            body.append(svg.rect(x, y(base + value), bar, y(base) - y(base + value), colour,
                                 title=f"pp rank {stage.rank}: {name} {value:.1f} GiB"))
            base += value
        if bar >= 26:
            body.append(svg.text(x + bar / 2, y(base) - 4, f"{base:.1f}", anchor="middle", css_class="value"))
        if i % label_every == 0:
            label = f"pp{stage.rank}" if len(stages) > 1 else "every rank (no pipeline)"
            body.append(svg.text(x + bar / 2, TOP + plot_h + 16, label, anchor="middle", css_class="tick"))
    if len(stages) > 1:
        body.append(svg.text(LEFT + plot_w / 2, HEIGHT - 6, "pipeline rank", anchor="middle", css_class="axis-label"))
    body.append(svg.line(LEFT, y(hbm), LEFT + plot_w, y(hbm), css_class="hbm"))
    body.append(svg.text(LEFT + plot_w + 6, y(hbm) + 4, f"HBM {hbm:g} GiB", css_class="hbm-label"))
    if headroom > 0:
        body.append(svg.line(LEFT, y(limit), LEFT + plot_w, y(limit), css_class="limit"))
        body.append(svg.text(LEFT + plot_w + 6, y(limit) + 14 if hbm - limit < top * 0.06 else y(limit) + 4,
                             f"limit {limit:.1f} GiB ({headroom:.0%} free)", css_class="limit-label"))
    return svg.svg(width, HEIGHT, body, label="peak memory per pipeline rank against the HBM")


def _groups(names: Mapping[str, str]) -> tuple[Group, ...]:
    """GROUPS in the stack's words."""
    return tuple((name, colour, parts, next((RENAMED[names[p]] for p in parts if names.get(p) in RENAMED), what))
                 for name, colour, parts, what in GROUPS)


def _legend(groups: tuple[Group, ...]) -> str:
    items = "".join(f'<li><span class="swatch" style="background:{colour}"></span><b>{name}</b>: {what}</li>'
                    for name, colour, _, what in groups)
    return f'<ul class="legend">{items}</ul>'


def _table(stages: tuple[StageMemory, ...]) -> str:
    names = list(stages[0].parts)
    head = "".join(f'<th class="num">{svg.esc(PART_LABELS.get(n, n))}</th>' for n in names)
    rows = "".join(
        f'<tr><td class="num">{s.rank}</td><td>{svg.esc(_held(s))}</td>'
        + "".join(f'<td class="num">{s.parts[n]:.1f}</td>' for n in names)
        + f'<td class="num"><b>{s.total_gib:.1f}</b></td></tr>' for s in stages)
    return ('<details><summary>Every part, per pipeline rank (GiB)</summary><table class="parts"><thead><tr>'
            f'<th class="num">pp rank</th><th>holds</th>{head}<th class="num">total</th></tr></thead>'
            f"<tbody>{rows}</tbody></table></details>")


def memory_view(stages: tuple[StageMemory, ...], hbm: float, headroom: float,
                names: Mapping[str, str] | None = None) -> str:
    """The memory view; `names`: the stack's names of cost-model parts (CompileResult.part_names)."""
    peak = max(stages, key=lambda s: s.total_gib)
    where = f"pp rank {peak.rank}" if len(stages) > 1 else "every rank"
    return (f'<p>The winner\'s estimated peak is <strong>{peak.total_gib:.1f} GiB</strong> on {where}, against '
            f'{hbm:g} GiB of HBM and a limit of {hbm * (1 - headroom):.1f} GiB (the intent keeps {headroom:.0%} '
            "free). Each bar is the most loaded moment of one pipeline rank's GPU.</p>"
            + _chart(stages, hbm, headroom) + _legend(_groups(names or {})) + _table(stages))

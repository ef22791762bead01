"""View 3: where one optimizer step's time goes, for the winner and the first runners-up, on one scale."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from automodel_dist.html_report import svg
from automodel_dist.html_report.ranking import candidates, seconds

# The cost model's time parts: (part, label, colour, what it is).
PARTS = (
    ("compute", "compute", "#4c78a8", "forward and backward GEMMs and attention, on the busiest pipeline rank"),
    ("recompute", "recompute", "#9ecae9", "the forward that activation checkpointing replays"),
    ("host", "host", "#eeca3b", "MoE layers waiting on Python to launch their kernels (less under CUDA graphs)"),
    ("pipeline_bubble", "pipeline bubble", "#bab0ac", "pipeline fill and drain"),
    ("tp_comm", "TP comm", "#f58518", "tensor-parallel collectives on the critical path"),
    ("ep_comm", "EP comm", "#e45756", "MoE token dispatch and combine"),
    ("cp_comm", "CP comm", "#72b7b2", "context-parallel K/V ring exchange not hidden by attention"),
    ("pp_comm", "PP comm", "#b279a2", "pipeline activation and gradient send/receive"),
    ("fsdp_comm", "FSDP comm", "#54a24b", "FSDP/HSDP all-gathers and gradient sync not hidden behind compute"),
)
# A stack's own (label, what it is) of a part, by its name there (CompileResult.part_names).
RENAMED = {"dp_comm": ("DP comm", "the distributed optimizer's gradient reduce-scatter and parameter all-gather "
                                  "not hidden behind compute")}


Part = tuple[str, str, str, str]


def _parts(names: Mapping[str, str]) -> tuple[Part, ...]:
    """PARTS in the stack's words."""
    out = []
    for part, label, colour, what in PARTS:
        label, what = RENAMED.get(names.get(part, ""), (label, what))
        out.append((part, label, colour, what))
    return tuple(out)


SHOWN = 6
WIDTH = 760.0
LEFT, RIGHT = 8.0, 70.0
BAR, LABEL, GAP = 22.0, 16.0, 12.0


def _chart(rows: list[tuple[str, dict[str, Any]]], parts: tuple[Part, ...]) -> str:
    longest = max(c["estimate"]["step_time_s"] for _, c in rows) or 1.0
    plot_w = WIDTH - LEFT - RIGHT
    body: list[str] = []
    y = 0.0
    for rank, candidate in rows:
        est = candidate["estimate"]
        body.append(svg.text(LEFT, y + 12, f"#{rank}{' (winner)' if rank == '1' else ''}  {candidate['label']}",
                             css_class="bar-label" + (" winner" if rank == "1" else "")))
        y += LABEL
        x = LEFT
        for part, label, colour, _ in parts:
            value = est["time"].get(part, 0.0)
            if value <= 0:
                continue
            width = plot_w * value / longest
            share = value / est["step_time_s"] if est["step_time_s"] else 0.0
            body.append(svg.rect(x, y, width, BAR, colour, title=f"#{rank} {label}: {seconds(value)} ({share:.0%})"))
            inner = next((t for t in (f"{label} {seconds(value)}", seconds(value)) if svg.fits(t, width - 8)), "")
            if inner:
                body.append(svg.text(x + 4, y + 15, inner, css_class="inner"))
            x += width
        body.append(svg.text(x + 6, y + 15, seconds(est["step_time_s"]), css_class="value"))
        y += BAR + GAP
    return svg.svg(WIDTH, y, body, label="step time breakdown of the winner and the runners-up")


def _legend(parts: tuple[Part, ...]) -> str:
    items = "".join(f'<li><span class="swatch" style="background:{colour}"></span><b>{label}</b>: {what}</li>'
                    for _, label, colour, what in parts)
    return f'<ul class="legend">{items}</ul>'


def _table(winner: dict[str, Any], parts: tuple[Part, ...]) -> str:
    est = winner["estimate"]
    step = est["step_time_s"] or 1.0
    rows = "".join(f'<tr><td>{label}</td><td class="num">{seconds(est["time"].get(part, 0.0))}</td>'
                   f'<td class="num">{est["time"].get(part, 0.0) / step:.1%}</td></tr>'
                   for part, label, _, _ in parts)
    return ('<details><summary>The winner\'s step, part by part</summary><table class="parts"><thead><tr>'
            '<th>part</th><th class="num">time</th><th class="num">share</th></tr></thead>'
            f'<tbody>{rows}<tr><td><b>step</b></td><td class="num"><b>{seconds(est["step_time_s"])}</b></td>'
            '<td class="num">100%</td></tr></tbody></table></details>')


def step_time_view(explain: dict[str, Any], names: Mapping[str, str] | None = None) -> str:
    """The step-time view; `names`: the stack's names of cost-model parts (CompileResult.part_names)."""
    rows = candidates(explain)[:SHOWN]
    parts = _parts(names or {})
    winner = explain["winner"]["estimate"]
    return (f'<p>One optimizer step of the winner takes an estimated <strong>{seconds(winner["step_time_s"])}'
            f'</strong> ({winner["tokens_per_s_per_gpu"]:,.0f} tokens/s/GPU). Communication is counted only where '
            "it is exposed (not hidden behind compute). The first runners-up are drawn on the same scale.</p>"
            + _chart(rows, parts) + _legend(parts) + _table(explain["winner"], parts))

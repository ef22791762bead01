"""View 1: the ranking of layouts (explain's winner and runners-up) and what the rules pruned."""

from __future__ import annotations

from typing import Any

from automodel_dist.html_report.svg import esc

# (header, numeric column?)
HEADERS = (("#", True), ("layout", False), ("peak memory", True), ("step time", True), ("tokens/s/GPU", True),
           ("TFLOP/s/GPU", True), ("MFU", True), ("binding wall", False))


def seconds(value: float) -> str:
    """A duration for people: '412 ms' under a second, '2.41 s' above."""
    return f"{value * 1000:.0f} ms" if value < 1.0 else f"{value:.2f} s"


def _bar(share: float, css_class: str) -> str:
    width = max(0.0, min(share, 1.0)) * 100
    return f'<span class="meter"><span class="{css_class}" style="width:{width:.1f}%"></span></span>'


def candidates(explain: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(rank label, candidate) for the winner then the runners-up, as explain lists them."""
    return [("1", explain["winner"]), *((str(i), c) for i, c in enumerate(explain["alternatives"], start=2))]


def _row(rank: str, candidate: dict[str, Any], best_tps: float) -> str:
    est = candidate["estimate"]
    winner = rank == "1"
    memory_share = est["memory_gib"] / est["hbm_gib"] if est["hbm_gib"] else 0.0
    tps_share = est["tokens_per_s_per_gpu"] / best_tps if best_tps else 0.0
    cells = [
        f'<td class="num">{rank}{"★" if winner else ""}</td>',
        f'<td class="mono">{esc(candidate["label"])}</td>',
        f'<td class="num">{est["memory_gib"]:.1f} GiB {_bar(memory_share, "mem")}</td>',
        f'<td class="num">{seconds(est["step_time_s"])}</td>',
        f'<td class="num">{est["tokens_per_s_per_gpu"]:,.0f} {_bar(tps_share, "tps")}</td>',
        f'<td class="num">{est["tflops_per_gpu"]:.0f}</td>',
        f'<td class="num">{est["mfu"]:.0%}</td>',
        f'<td>{esc(est["bound"])}</td>',
    ]
    return ('<tr class="winner">' if winner else "<tr>") + "".join(cells) + "</tr>"


def _pruned(explain: dict[str, Any]) -> str:
    pruned: dict[str, int] = explain["pruned"]
    if not pruned:
        return "<p>No layout was pruned by a rule.</p>"
    rows = "".join(
        f'<tr><td class="mono">{esc(rule)}</td><td class="num">{count:,}</td>'
        f'<td>{esc(explain["pruned_examples"].get(rule, ""))}</td></tr>'
        for rule, count in sorted(pruned.items(), key=lambda kv: (-kv[1], kv[0])))
    return ('<h3>Layouts pruned, by rule</h3><p class="caption">A layout breaking several rules counts under each; '
            'the example is one of the messages the rule gave.</p><table class="pruned"><thead><tr><th>rule</th>'
            f'<th class="num">layouts</th><th>for example</th></tr></thead><tbody>{rows}</tbody></table>')


def ranking_view(explain: dict[str, Any], why: str, legend: str) -> str:
    """The table of explain's candidates (winner first), why the winner won, and the pruning counts."""
    rows = candidates(explain)
    best_tps = max(c["estimate"]["tokens_per_s_per_gpu"] for _, c in rows)
    head = "".join(('<th class="num">' if numeric else "<th>") + f"{name}</th>" for name, numeric in HEADERS)
    body = "".join(_row(rank, c, best_tps) for rank, c in rows)
    summary = (f'{explain["considered"]:,} layouts considered, {explain["dropped"]:,} dropped by rules, '
               f'{explain["feasible"]:,} fit; the best of each distinct structure is shown '
               f'(objective: {esc(explain["objective"])}).')
    return (f'<p>{summary} <strong>Why the winner won:</strong> {esc(why)}.</p>'
            f'<p class="caption">{esc(legend)} Memory bars are the share of the GPU\'s HBM; throughput bars '
            "are relative to the fastest layout shown. "
            "Binding wall: what limits the layout "
            '(memory, communication or compute).</p>'
            f'<div class="scroll"><table class="ranking"><thead><tr>{head}</tr></thead><tbody>{body}</tbody>'
            "</table></div>"
            + _pruned(explain))

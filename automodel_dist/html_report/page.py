"""The report as one self-contained HTML file: inline CSS and SVG, no script, no font or file fetched."""

from __future__ import annotations

from automodel_dist.html_report.data import ReportData
from automodel_dist.html_report.memory_view import memory_view
from automodel_dist.html_report.rank_map import rank_map_view
from automodel_dist.html_report.ranking import ranking_view, seconds
from automodel_dist.html_report.settings_view import SECTION_ID, settings_section
from automodel_dist.html_report.settings_view import heading as settings_heading
from automodel_dist.html_report.step_time import step_time_view
from automodel_dist.html_report.svg import esc
from automodel_dist.output import WRITTEN_BY_MARKER

# (id, heading) of the four views, in page order.
VIEWS = (
    ("ranking", "1. Ranking of layouts"),
    ("memory", "2. Memory per pipeline stage"),
    ("step-time", "3. Step time breakdown"),
    ("rank-map", "4. Rank map"),
)

# Nothing may load or run: no script, no font, no image, no request (inline styles only).
CSP = "default-src 'none'; style-src 'unsafe-inline'"

CSS = """
:root{color-scheme:light}
*{box-sizing:border-box}
body{margin:0;background:#f6f7f9;color:#1d2430;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,
"Helvetica Neue",Arial,sans-serif}
header{background:#1d2430;color:#f6f7f9;padding:18px 28px}
header h1{margin:0 0 4px;font-size:20px;font-weight:600}
header p{margin:2px 0;color:#c9d1dc}
header .winner{margin-top:10px;color:#fff;font-size:15px}
header .winner b{color:#ffd479}
nav{margin-top:10px}
nav a{color:#9ecae9;margin-right:16px;text-decoration:none}
main{max-width:1180px;margin:0 auto;padding:8px 28px 28px}
section{background:#fff;border:1px solid #dde2e8;border-radius:8px;padding:14px 20px 16px;margin:16px 0}
h2{margin:0 0 8px;font-size:17px}
h3{margin:16px 0 4px;font-size:14px}
p{margin:6px 0}
.caption,.muted{color:#5b6573;font-size:12.5px}
.note{background:#fff7e0;border-left:4px solid #eeca3b;padding:6px 10px}
.mono{font-family:ui-monospace,"SFMono-Regular",Menlo,Consolas,"Liberation Mono",monospace;font-size:12.5px}
table{border-collapse:collapse;margin:8px 0;font-size:13px}
.scroll{overflow-x:auto}
th,td{padding:4px 8px;border-bottom:1px solid #e6e9ee;text-align:left;vertical-align:middle}
th{background:#f0f2f5;font-weight:600;white-space:nowrap}
td.num,th.num{text-align:right;white-space:nowrap;font-variant-numeric:tabular-nums}
tr.winner td{background:#fff8e1;font-weight:600}
table.ranking td.mono{white-space:nowrap;font-size:12px}
table.settings td.mono{white-space:nowrap}
.meter{display:inline-block;width:44px;height:8px;background:#e9edf2;border-radius:4px;margin-left:6px;
vertical-align:middle;overflow:hidden}
.meter span{display:block;height:100%}
.meter .mem{background:#9d8ec4}
.meter .tps{background:#4c78a8}
.legend{list-style:none;padding:0;margin:6px 0;display:grid;grid-template-columns:repeat(2,minmax(0,1fr));
gap:3px 18px;font-size:12.5px;max-width:900px}
.legend li{padding-left:16px;text-indent:-16px}
.swatch{display:inline-block;width:11px;height:11px;border-radius:2px;margin-right:5px;vertical-align:-1px}
details{margin-top:8px}
summary{cursor:pointer;color:#365f91}
svg{display:block;margin:8px 0;overflow:visible}
svg text{font-family:system-ui,-apple-system,"Segoe UI",Roboto,Arial,sans-serif;font-size:11px;fill:#1d2430}
svg .tick{fill:#5b6573;font-size:10px}
svg .axis-label{fill:#5b6573;font-size:11px}
svg .vertical{writing-mode:vertical-rl;transform-box:fill-box;transform-origin:center;transform:rotate(180deg)}
svg .value{font-weight:600}
svg .inner{fill:#fff;font-size:10.5px;font-weight:600}
svg .bar-label{font-family:ui-monospace,Menlo,Consolas,"Liberation Mono",monospace;font-size:11.5px}
svg .bar-label.winner{font-weight:700}
svg .grid{stroke:#e6e9ee;stroke-width:1}
svg .hbm{stroke:#c0392b;stroke-width:2;stroke-dasharray:6 3}
svg .limit{stroke:#e67e22;stroke-width:1.5;stroke-dasharray:2 3}
svg .hbm-label{fill:#c0392b;font-weight:600}
svg .limit-label{fill:#b35f10}
svg .cell{stroke:#fff;stroke-width:1}
.panels{display:flex;flex-wrap:wrap;gap:10px 22px;align-items:flex-start}
.panel{margin:6px 0}
.panel figcaption{font-size:12.5px;line-height:1.35}
footer{color:#5b6573;font-size:12px;max-width:1180px;margin:0 auto;padding:0 28px 28px}
footer ul{margin:4px 0;padding-left:18px}
"""


def _header(data: ReportData) -> str:
    lines = "".join(f"<p>{esc(line)}</p>" for line in data.lines)
    winner = ""
    if data.explain is not None:
        est = data.explain["winner"]["estimate"]
        winner = (f'<p class="winner">Winner: <b class="mono">{esc(data.layout_label)}</b> · '
                  f'{est["memory_gib"]:.1f} GiB peak · {seconds(est["step_time_s"])} per step · '
                  f'{est["tokens_per_s_per_gpu"]:,.0f} tokens/s/GPU · bound by {esc(est["bound"])}</p>')
    else:
        winner = f'<p class="winner">Layout: <b class="mono">{esc(data.layout_label)}</b></p>'
    nav = "".join(f'<a href="#{view_id}">{heading}</a>' for view_id, heading in VIEWS)
    if data.settings or data.environment:  # as settings_section draws it
        nav += f'<a href="#{SECTION_ID}">{esc(settings_heading(data))}</a>'
    return f"<header><h1>{esc(data.title)}</h1>{lines}{winner}<nav>{nav}</nav></header>"


def _body(data: ReportData, view_id: str) -> str:
    if view_id in data.notes:
        return f'<p class="note">{esc(data.notes[view_id])}</p>'
    if view_id == "rank-map":
        return rank_map_view(data.mesh) if data.mesh else '<p class="note">No mesh to draw.</p>'
    assert data.explain is not None
    if view_id == "ranking":
        return ranking_view(data.explain, data.why, data.layout_legend)
    if view_id == "memory":
        return memory_view(data.stages, data.hbm_gib, data.headroom, data.part_names)
    return step_time_view(data.explain, data.part_names)


def _findings(data: ReportData) -> str:
    if not data.findings:
        return ""
    items = "".join(f"<li>{esc(text)}</li>" for text in data.findings)
    return f'<section id="findings"><h2>Findings of the dry-run</h2><ul>{items}</ul></section>'


def _footer(data: ReportData) -> str:
    caveat = ""
    if data.not_modeled:
        items = "".join(f"<li>{esc(item)}</li>" for item in data.not_modeled)
        caveat = ("<details><summary>What the estimates do not model</summary>"
                  f"<ul>{items}</ul></details>")
    return (f"<footer><p>Made by {esc(data.generator)}. Memory and time are the cost model's estimates, not "
            f"measurements.</p>{caveat}</footer>")


def render_page(data: ReportData) -> str:
    """The whole document; the same data gives the same bytes."""
    sections = "".join(f'<section id="{view_id}"><h2>{heading}</h2>{_body(data, view_id)}</section>'
                       for view_id, heading in VIEWS)
    return (f'<!DOCTYPE html>\n<!-- {WRITTEN_BY_MARKER} explain/dry-run --html -->\n'
            '<html lang="en"><head><meta charset="utf-8">'
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>automodel-dist report: {esc(data.title)}</title><style>{CSS}</style></head><body>"
            f"{_header(data)}<main>{sections}{settings_section(data)}{_findings(data)}</main>{_footer(data)}"
            "</body></html>\n")

"""The target's own settings beyond the layout (a Megatron-Bridge override set): every key, its value and
why, and the environment the launch exports. AutoModel writes its reasons into the recipe itself, so its
report has no such section."""

from __future__ import annotations

from automodel_dist.html_report.data import ReportData
from automodel_dist.html_report.svg import esc

SECTION_ID = "settings"


def _table(rows: tuple[tuple[str, str, str], ...], key: str) -> str:
    body = "".join(f'<tr><td class="mono">{esc(path)}</td><td class="mono">{esc(value)}</td><td>{esc(why)}</td>'
                   "</tr>" for path, value, why in rows)
    return (f'<div class="scroll"><table class="settings"><thead><tr><th>{key}</th><th>value</th><th>why</th></tr>'
            f"</thead><tbody>{body}</tbody></table></div>")


def settings_section(data: ReportData) -> str:
    """The section, or nothing when the target has no settings of its own to list."""
    if not data.settings and not data.environment:
        return ""
    parts = [f'<section id="{SECTION_ID}"><h2>{esc(heading(data))}</h2>',
             "<p>Every value the override set writes, with the reason the compiler gave it (the YAML file carries "
             "the same reasons as comments).</p>", _table(data.settings, "key")]
    if data.environment:
        parts += ["<h3>Environment the launch exports</h3>", _table(data.environment, "variable")]
    return "".join(parts) + "</section>"


def heading(data: ReportData) -> str:
    return f"5. {data.writes[:1].upper()}{data.writes[1:]}" if data.writes else "5. Settings"

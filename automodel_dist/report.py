"""Render a validation Report as text (one block per finding, editor-clickable) or JSON."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable

from automodel_dist.errors import InputError
from automodel_dist.findings import WARNING, Finding, Report

FORMATS = ("text", "json")


def render_report(report: Report, fmt: str = "text") -> str:
    """`text`: `file:line:col: severity [rule] path: message`, AutoModel's words, the fix, a summary line.
    `json`: {"ok": ..., "findings": [{"rule", "severity", "path", "line", "col", "message", "hint", ...}]}."""
    if fmt == "json":
        return json.dumps(report.to_json(), indent=2) + "\n"
    if fmt != "text":
        raise InputError(f"unknown report format {fmt!r}", hint=f"use one of: {', '.join(FORMATS)}")
    blocks = [_block(report.source, f) for f in report.findings]
    return "".join(block + "\n" for block in blocks) + _summary(report) + "\n"


def _block(source: str, finding: Finding) -> str:
    where = finding.file or source or "<recipe>"
    if finding.line is not None:
        where += f":{finding.line}:{finding.col}"
    path = f" {finding.path}:" if finding.path else ""
    lines = [f"{where}: {finding.severity} [{finding.rule}]{path} {finding.message}"]
    if finding.automodel_message:
        said = finding.automodel_message.replace("\n", "\n    ")
        lines.append(f"  AutoModel says: {said}")
    if finding.hint:
        lines.append(f"  fix: {finding.hint}")
    return "\n".join(lines)


def _summary(report: Report) -> str:
    counts = f"{len(report.errors)} error(s), {len(report.warnings)} warning(s), {len(report.notes)} note(s)"
    verdict = "OK" if report.ok else "FAILED"
    return f"{report.source or '<recipe>'}: {verdict}: {counts}"


def print_warnings(findings: Iterable[Finding]) -> None:
    """Each warning among `findings` on stderr with its fix: what a writer that still writes its files says."""
    for finding in findings:
        if finding.severity == WARNING:
            print(f"warning: {finding.message}\n  hint: {finding.hint}", file=sys.stderr)

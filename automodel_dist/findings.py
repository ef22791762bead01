"""Findings and reports: what validate, the planner's pruning and dry-run all say about a config."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from automodel_dist.yamlio import Document

ERROR = "error"
WARNING = "warning"
NOTE = "note"


@dataclass(frozen=True)
class Finding:
    """One judgement on a config: which rule, how bad, where (dotted recipe key), what, and the fix.

    `automodel_message` is AutoModel's own wording for the same failure, where it has one. `file` names
    the file `line` points into when that is not the judged recipe (the sbatch script that launches it).
    """

    rule: str
    severity: str
    path: str
    message: str
    hint: str = ""
    automodel_message: str | None = None
    line: int | None = None
    col: int | None = None
    file: str | None = None

    def located(self, line: int | None, col: int | None) -> Finding:
        return replace(self, line=line, col=col)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def locate_all(doc: Document, findings: Iterable[Finding]) -> list[Finding]:
    """Each finding not yet placed at the line:col of its key in `doc` (or of its nearest existing parent)."""
    located = []
    for finding in findings:
        pos = doc.locate(finding.path) if finding.line is None and finding.path else None
        located.append(finding.located(*pos) if pos else finding)
    return located


class BySeverity:
    """`errors`, `warnings` and `notes` of a report's `findings` (validate's Report and dry-run's MeshReport)."""

    findings: list[Finding]

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == ERROR]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == WARNING]

    @property
    def notes(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == NOTE]


@dataclass
class Report(BySeverity):
    """Every finding on one recipe; `ok` means no errors (warnings and notes allowed)."""

    findings: list[Finding] = field(default_factory=list)
    source: str = ""

    @property
    def ok(self) -> bool:
        return not self.errors

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "findings": [f.to_json() for f in self.findings]}

"""The HTML report of `explain --html` and `dry-run --html`: one self-contained file, four views."""

from __future__ import annotations

from automodel_dist.html_report.data import ReportData, from_compile, from_dry_run
from automodel_dist.html_report.page import VIEWS, render_page

__all__ = ["VIEWS", "ReportData", "from_compile", "from_dry_run", "render_page"]

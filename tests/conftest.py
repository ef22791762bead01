"""Fixtures several test modules share."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from automodel_oracle import Oracle
from hypothesis import settings

# CI replays the same examples every run (a landing must not hinge on a lucky draw); local runs explore.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture(scope="module")
def oracle() -> Iterator[Oracle]:
    """AutoModel's own mesh builder in a worker process, one per test module (tests/automodel_oracle.py)."""
    worker = Oracle()
    yield worker
    worker.close()


def pytest_configure(config: pytest.Config) -> None:
    # Tests that render in headless Chromium (Debian's `chromium`); scripts/setup-env.sh installs it, and
    # under CI a missing browser fails the test instead of skipping it.
    config.addinivalue_line("markers", "browser: renders the HTML report in headless Chromium")

"""Fixtures several test modules share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from automodel_oracle import Oracle


@pytest.fixture(scope="module")
def oracle() -> Iterator[Oracle]:
    """AutoModel's own mesh builder in a worker process, one per test module (tests/automodel_oracle.py)."""
    worker = Oracle()
    yield worker
    worker.close()

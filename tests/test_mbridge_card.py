"""The hardware-config card's tuned MoE layouts against `compile --target megatron-bridge`.

benchmarks/mbridge_tuned.py compiles each card row and estimates the card's own layout pinned; the README
carries its table. These tests keep the README current and hold the rows the model reproduces.
"""

from __future__ import annotations

import sys
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from mbridge_tuned import HEADER, ROWS, intent, table  # noqa: E402

from automodel_dist.targets.megatron_bridge.compile import compile_megatron  # noqa: E402


@cache
def compiled_table() -> tuple[str, ...]:
    return tuple(table())


def test_readme_carries_the_current_card_table() -> None:
    readme = (ROOT / "README.md").read_text().splitlines()
    start = readme.index(HEADER[0])
    assert tuple(readme[start:start + len(ROWS) + 2]) == compiled_table(), (
        "README's card table is stale: paste `python benchmarks/mbridge_tuned.py`")


def test_the_qwen3_30b_16_h100_card_layout_is_compiled() -> None:
    row = next(r for r in ROWS if (r.label, r.gpus) == ("Qwen3-30B-A3B", 16))
    lay = compile_megatron(intent(row)).layout
    assert (lay.tp, lay.pp, lay.ep, lay.etp) == (row.tp, row.pp, row.ep, 1)


def test_compiled_layouts_stay_within_the_published_band_on_most_rows() -> None:
    """Predicted against published TFLOP/s, within the cross-validated band on at least 6 of the 10 rows
    that publish a figure (the README names those outside and why)."""
    lines = compiled_table()[2:]
    published = [line for line, row in zip(lines, ROWS, strict=True) if row.published]
    assert len(published) == 10
    assert sum("(within)" in line for line in published) >= 6

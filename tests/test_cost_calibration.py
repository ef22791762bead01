"""The cost model against measurement: the calibration table meets its targets (accuracy, not speed).

The rows and their sources live in benchmarks/calibration_data.py; benchmarks/calibration.py prints the
same table. The FLOP-convention test checks our model FLOPs per token against the ratio of the
TFLOP/s and tokens/s AutoModel itself reported for each row (its own counting, an independent oracle).
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import calibration
from calibration_data import AUTOMODEL, ROWS

from automodel_dist.cost.shape import model_shape
from automodel_dist.cost.throughput import model_flops_per_token


@pytest.fixture(scope="module")
def results() -> list[calibration.RowResult]:
    return calibration.run()


def test_throughput_median_error_on_fit_rows_within_target(results):
    summary = calibration.summarize(results)
    assert summary.throughput_median_fit <= calibration.THROUGHPUT_TARGET, calibration.render(results)


def test_every_fit_row_within_25_percent(results):
    """No fitted row is wildly off even though the median meets the target."""
    bad = [(r.row.name, r.throughput_error) for r in results
           if r.row.role == "fit" and abs(r.throughput_error or 0.0) > 0.25]
    assert not bad


def test_torchtitan_memory_rows_within_10_percent(results):
    rows = [r for r in results if r.row.source.startswith("pytorch/torchtitan") and r.row.memory_role == "fit"]
    assert len(rows) >= 12
    bad = [(r.row.name, round(r.memory_error or 0.0, 3)) for r in rows
           if abs(r.memory_error or 0.0) > calibration.MEMORY_TARGET]
    assert not bad


def test_every_configuration_that_ran_is_predicted_to_fit(results):
    assert [r.row.name for r in results if not r.fits] == []
    # the AutoModel rows, which ran on 80 GB H100s, fit even with the planner's default 10% headroom
    assert all(r.fits_with_headroom for r in results if r.row.source == AUTOMODEL)


def test_summary_reports_targets_met(results):
    text = calibration.render(results)
    assert "targets met: yes" in text
    assert text.count("\n| ") == len(ROWS)  # one line per row after the header


@pytest.mark.parametrize("row", [r for r in ROWS if r.source == AUTOMODEL], ids=lambda r: r.name)
def test_model_flops_per_token_match_automodel_counting(row):
    """Dense and LoRA rows: within 2.5% of AutoModel's reported TFLOP/s ÷ tokens/s; MoE within 8%
    (GPT-OSS counts its attention differently)."""
    problem, _ = calibration.problem_and_layout(row)
    ours = model_flops_per_token(model_shape(problem.model, problem.training))
    theirs = row.tflops_per_gpu * 1e12 / row.tokens_per_s_per_gpu
    tolerance = 0.08 if problem.model.is_moe else 0.025
    assert ours == pytest.approx(theirs, rel=tolerance)


def test_the_70b_recipes_known_oom_is_predicted():
    """AutoModel's Llama-3.1-70B benchmark recipe sets defer_fsdp_grad_sync false because "True → delayed
    resharding → OOM" (its own comment): with the default, the model must say it does not fit."""
    row = next(r for r in ROWS if r.name == "AM Llama-3-70B pretrain 64xH100 CP2")
    assert calibration.evaluate(row).fits
    assert not calibration.evaluate(replace(row, defer_grad_sync=True)).fits

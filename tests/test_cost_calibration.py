"""The cost model against measurement (accuracy, not speed): the measurement set, the fitted parameters, the
cross-validated error, pairwise ordering and memory.

The rows and their sources live in benchmarks/calibration_data.py and benchmarks/measurements/;
benchmarks/calibration.py prints the table. The bounds below are the figures the current fit reaches
(benchmarks/calibration.py prints them against the issue's targets); a change that makes any of them
worse fails here. The FLOP-convention test checks our model FLOPs per token against the ratio of the
TFLOP/s and tokens/s AutoModel itself reported for each row (its own counting, an independent oracle).
"""

from __future__ import annotations

import csv
import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import calibration
from calibration_data import AUTOMODEL, MEASUREMENTS, ROWS

from automodel_dist.cost import profiles
from automodel_dist.cost.shape import model_shape
from automodel_dist.cost.throughput import model_flops_per_token


@pytest.fixture(scope="module")
def results() -> list[calibration.RowResult]:
    return calibration.run()


@pytest.fixture(scope="module")
def summary(results) -> calibration.Summary:
    return calibration.summarize(results, calibration.cv_errors_from_file())


def test_the_measurement_set_covers_every_public_source():
    frameworks = {r.framework for r in ROWS}
    assert frameworks == {"automodel", "megatron", "torchtitan"}
    assert len(ROWS) >= 300 and len(calibration.EVALUATED) >= 250
    with (MEASUREMENTS / "megatron_bridge.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    # every row names the file and commit it came from, and its layout
    assert all(r["source"].startswith("NVIDIA-NeMo/Megatron-Bridge docs/performance-summary") and "@" in r["source"]
               for r in rows)
    assert len({r["release"] for r in rows}) >= 8
    assert all(float(r["tokens_per_s_per_gpu"]) > 0 and int(r["gpus"]) > 0 and r["tp"] for r in rows)


def test_the_megatron_importer_reads_a_table_with_parenthesised_variants():
    import import_measurements

    text = ("## 25.09 NeMo Container\n### Pre-Training Performance\n#### System: DGX-H100\n"
            "| Model | #-GPUs | GBS | MBS | Sequence Length | FSDP | TP | PP | CP | VP | EP | GA | Tokens / sec / GPU "
            "| Model TFLOP / sec / GPU |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
            "| DeepSeekV3 (dropless) | 1024 | 8192 | 1 | 4096 | 0 | 2 | 8 | 1 | 4 | 64 | 128 | 1297 | 338 (330) |\n")
    rows = list(import_measurements.parse(text, "0" * 40, "docs/performance-summary.md"))
    assert [(r["precision"], r["tflops_per_gpu"], r["model"], r["tp"]) for r in rows] == [
        ("FP8", "338", "DeepSeekV3", "2"), ("FP8-blockwise", "330", "DeepSeekV3", "2")]
    assert all(r["release"] == "25.09" and "dropless" in r["notes"] for r in rows)


def test_megatron_rows_run_as_their_presets_hold_gradients():
    """FSDP off is MCore's distributed optimizer, with the bf16 gradient buffer of `grad_reduce_in_fp32=False`
    (every performance preset); Megatron FSDP rows stay sharded (their neighbour)."""
    mb = [r for r in ROWS if r.framework == "megatron" and r.release]  # the performance tables' rows
    assert len(mb) >= 250 and all(r.reduce_dtype == "bfloat16" for r in mb)
    fsdp_off = [r for r in mb if "distributed optimizer" in r.notes]
    assert fsdp_off and all(r.layout["strategy"] == "distributed_optimizer" for r in fsdp_off)
    assert all(r.layout["strategy"] == "fsdp2" for r in mb if "FSDP on" in r.notes)


def test_a_table_cell_its_own_row_contradicts_runs_as_the_preset_states():
    """25.11 GPT-OSS-120B on 64 H100 prints MBS 4 (and GA 2, the B200 row's): the preset's MBS 1 is what ran; the
    B200 row beside it keeps its MBS 4."""
    gpt_oss = {r.gpu: r for r in ROWS if r.release == "25.11" and r.model == "openai/gpt-oss-120b"
               and r.global_batch_size == 512}
    assert gpt_oss["h100"].layout["micro_batch_size"] == 1 and "corrected" in gpt_oss["h100"].notes
    assert gpt_oss["b200"].layout["micro_batch_size"] == 4 and "corrected" not in gpt_oss["b200"].notes


def test_every_fitted_parameter_rests_on_at_least_five_rows():
    spec = json.loads(profiles.PARAMETERS_FILE.read_text())["parameters"]
    fitted = {name: entry["rows"] for name, entry in spec.items() if entry["fit"]}
    assert fitted and all(rows >= calibration.MIN_ROWS for rows in fitted.values()), fitted
    # a parameter that is not fitted keeps its prior
    assert all(entry["value"] == entry["prior"] for entry in spec.values() if not entry["fit"])


def test_cross_validated_errors_are_stored_for_every_measured_row():
    cv = calibration.cv_errors_from_file()
    measured = [r for r in calibration.EVALUATED if calibration.measured(r)]
    assert set(cv) == {r.name for r in measured}


def test_throughput_errors_meet_the_targets(summary):
    """Issue targets: 15% cross-validated over all rows and over AutoModel rows, held-out AutoModel rows within
    15%. The Megatron-Bridge rows are evaluated with the recipe conditions their presets state (recompute
    modules, EP overlap, dispatcher, CUDA graphs, bf16 gradient reduction); the fit reaches 7.9% in-sample and
    14.8% cross-validated over every row (14.5% over the fitted ones) with MoE host time and CUDA graphs modelled
    (cost/host.py)."""
    assert summary.median_in_sample <= 0.09
    assert summary.median_cv_automodel <= calibration.THROUGHPUT_TARGET
    assert summary.median_held_out <= calibration.THROUGHPUT_TARGET
    assert summary.median_cv_every_row <= calibration.THROUGHPUT_TARGET
    assert summary.median_cv <= calibration.THROUGHPUT_TARGET


def test_reported_rows_are_evaluated_and_paired_but_never_fitted(results, summary):
    """Moonlight's six runs (costs the model does not price): out of the fit and out of the error bands explain
    quotes, in the cross-validated figure the target takes and in the pairwise ordering."""
    reported = {r.name for r in calibration.EVALUATED if r.role == "reported"}
    assert len(reported) == summary.reported_rows == 6
    assert not reported & {r.name for r in calibration.fit_rows()}
    assert reported <= set(calibration.cv_errors_from_file())
    assert any(a.row.name in reported for pair in calibration.pairs(results) for a in pair)
    bands = json.loads(profiles.PARAMETERS_FILE.read_text())["cv_bands"]
    deepseek_hopper = sum(1 for r in calibration.EVALUATED if r.framework == "megatron" and r.family == "deepseek"
                          and r.gpu.startswith("h100") and r.role != "reported" and calibration.measured(r))
    assert bands.get("megatron/deepseek/hopper", {"rows": 0})["rows"] == deepseek_hopper


def test_pairwise_ordering_of_measured_layouts(results, summary):
    """Pairs of layouts measured on the same model, GPUs, job and release: the model orders them as measured."""
    assert summary.pairwise_total >= 23
    assert summary.pairwise >= calibration.PAIRWISE_TARGET, [
        (a.row.name, b.row.name) for a, b in calibration.pairs(results) if not calibration.ordered(a, b)]


def test_pairwise_ordering_across_releases_stays_where_the_fit_reached(results):
    """Across Megatron-Bridge releases and batch sizes software changes move throughput as much as layouts
    do (and the stated conditions of each release's runs differ): reported, below the target (78.8% of 212
    reached), held from getting worse."""
    broad = calibration.pairs(results, broad=True)
    assert len(broad) >= 200
    assert sum(calibration.ordered(a, b) for a, b in broad) / len(broad) >= 0.78


def test_recompute_variants_and_tflops_only_rows_pair(results):
    """Megatron-Bridge's Llama-3 70B SFT study reports TFLOP/s only, and changes recompute modules on one layout:
    its rows pair by TFLOP/s, a module change is a setting that differs, and the 704-vs-702 TFLOP/s rows (0.3%
    apart) are a tie, not a pair. The model orders the recompute and PP pairs as measured; TP8 it over-predicts."""
    study = [(a, b) for a, b in calibration.pairs(results) if "PR3107" in a.row.name]
    assert len(study) == 14 and all("PR3107" in b.row.name for _, b in study)
    prefix = "MB PR3107 sft LLAMA3_70B 32xH100 FP8-CS TP4 PP4 VP5 "
    tie = {prefix + "core_attn", prefix + "core_attn+layernorm"}
    assert not any({a.row.name, b.row.name} == tie for a, b in study)
    assert any({a.row.name, b.row.name} == {prefix + "core_attn", prefix + "mlp"} for a, b in study)
    wrong = [(a.row.name, b.row.name) for a, b in study if not calibration.ordered(a, b)]
    assert len(wrong) <= 2 and all("TP8" in a + b for a, b in wrong)


def test_pairs_compare_different_layouts_of_the_same_job(results):
    for a, b in calibration.pairs(results):
        assert calibration._pair_key(a.row) == calibration._pair_key(b.row)
        assert calibration._setup(a.row) != calibration._setup(b.row)


def test_torchtitan_memory_rows_within_10_percent(results):
    rows = [r for r in results if r.row.source.startswith("pytorch/torchtitan") and r.row.memory_gib
            and r.row.memory_role == "fit"]
    assert len(rows) >= 18  # the 2024-12 H100 rows and the 2025-06 H200 ones
    bad = [(r.row.name, round(r.memory_error or 0.0, 3)) for r in rows
           if abs(r.memory_error or 0.0) > calibration.MEMORY_TARGET]
    assert not bad


def test_every_row_that_measured_memory_is_within_10_percent_but_moonlights(results):
    """The memory target over every measured row, held: only Moonlight's six runs (one job, recompute modules
    changed one set at a time) are outside, each predicted low by about the same GiB (memory.MEGATRON_ACTIVATION_SHARE
    says what that is not). The FP8 Llama-3 70B TP8 run, whose peak is the optimizer step's, comes within it through
    the bf16 copies Transformer Engine casts FP8 weights from (memory.step_grad_copy)."""
    rows = [r for r in results if r.row.memory_gib]
    assert len(rows) >= 32
    bad = [r for r in rows if abs(r.memory_error or 0.0) > calibration.MEMORY_TARGET]
    assert sorted(r.row.name for r in bad) == sorted(r.row.name for r in rows if "Moonlight" in r.row.name)
    assert len(bad) == 6 and all(r.memory_error < 0 for r in bad)
    gaps = [r.row.memory_gib - r.memory_gib for r in bad]  # GiB the estimate misses
    assert max(gaps) - min(gaps) < 0.5


def test_moonlights_expert_recompute_frees_what_balanced_routing_keeps(results):
    """What `moe_act` recompute frees, measured against the study's own control (0.63 GiB), is what the model frees
    with balanced routing within 0.15 GiB: a hot EP rank holding more tokens would free more. So the gap above is
    not the learned router's activations. (`mla_up_proj` frees 0.67 GiB measured, 0.99 modelled; the `mlp` and
    `layernorm` labels added to them free nothing measured.)"""
    moon = {r.row.recompute_modules: r for r in results if "Moonlight" in r.row.name}
    control, moe_act = moon[()], moon[("moe_act",)]
    measured = control.row.memory_gib - moe_act.row.memory_gib
    modelled = control.memory_gib - moe_act.memory_gib
    assert measured > 0.5 and abs(measured - modelled) < 0.15


def test_the_fp8_study_runs_that_peak_at_the_step_are_priced_there(results):
    """The Llama-3 70B FP8 study's TP8 run (DP 1: every master weight on the rank) peaks at the optimizer step: its
    estimate holds the fp32 gradient copy and the bf16 cast copies above the forward/backward peak, and meets the
    measured peak within 5%; without the cast copies it was 11% low."""
    by_name = {r.row.name: r for r in results}
    tp8 = by_name["MB PR3107 sft LLAMA3_70B 32xH100 FP8-CS TP8 PP4 VP5 core_attn"]
    assert abs(tp8.memory_error) < 0.05
    plain = calibration.evaluate(replace(tp8.row, name=tp8.row.name + " bf16 weights", fp8_primary_weights=False))
    assert plain.memory_error < -0.10


def test_the_memory_bands_explain_quotes_are_those_of_the_current_model(results):
    """`calibration.py --fit` stores them; a change to the memory model or the rows without it fails here."""
    assert json.loads(profiles.PARAMETERS_FILE.read_text())["memory_bands"] == calibration.memory_bands(results)


def test_configurations_that_ran_are_predicted_to_fit(results):
    """Every run that happened is predicted to fit (issue target)."""
    assert [r.row.name for r in results if not r.fits] == []
    # the AutoModel rows that calibrate it fit even with the planner's default 10% headroom
    assert all(r.fits_with_headroom for r in results if r.row.source == AUTOMODEL)


def test_summary_table_has_a_line_per_row_and_the_error_table(results):
    text = calibration.render(results, calibration.cv_errors_from_file())
    assert text.count("\n| AM") + text.count("\n| MB") + text.count("\n| TT") + text.count("\n| AMp") >= len(
        calibration.EVALUATED)
    assert "| Framework | GPU generation |" in text and "cross-validated" in text and "pairwise ordering" in text


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
    assert not calibration.evaluate(replace(row, name=row.name + " deferred", defer_grad_sync=True)).fits

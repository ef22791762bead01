"""Cost model against measurement: every row of the measurement set, in-sample and cross-validated.

    python benchmarks/calibration.py            # the table, the summary, pairwise ordering
    python benchmarks/calibration.py --fit      # refit the free parameters first and write them
                                                # (automodel_dist/cost/fitted_parameters.json)

The rows are benchmarks/calibration_data.py (curated runs with their memory) plus every Megatron-Bridge
performance-summary row (benchmarks/measurements/megatron_bridge.csv). Rows whose role is "held-out"
(AutoModel's performance page beyond the calibration notes) are never fitted to.

The fit minimises squared log throughput error (tokens/s/GPU, or TFLOP/s where only that is published) over
the fit rows, with a weak pull towards each parameter's prior; a parameter moved by fewer than
MIN_ROWS rows keeps its prior. Cross-validation leaves one model family out at a time: each family's rows
are predicted by a fit to the other families only.

Targets (issue "cost model fitted to public measurements"): median |throughput error| <= 15% cross-validated
over all rows and over AutoModel rows; pairwise ordering >= 90%; memory within +-10% where the torchtitan rows
measured it; every configuration that ran predicted to fit.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from itertools import combinations
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from calibration_data import ROWS, CalibrationRow

from automodel_dist.catalog.hardware import get_gpu
from automodel_dist.catalog.models import resolve_model
from automodel_dist.catalog.specs import ClusterSpec, GpuSpec
from automodel_dist.cost import profiles, throughput
from automodel_dist.cost.memory import RecipeOptions
from automodel_dist.cost.model import estimate_layout, peak_gib, recompute_ladder
from automodel_dist.cost.profiles import Parameters
from automodel_dist.cost.shape import model_shape
from automodel_dist.layout import Layout
from automodel_dist.problem import Problem, TrainingSpec
from automodel_dist.targets.megatron_bridge.choose import recompute_candidates

THROUGHPUT_TARGET = 0.15
MEMORY_TARGET = 0.10
PAIRWISE_TARGET = 0.90
MIN_ROWS = 5
ROBUST_SCALE = 0.1  # log errors beyond ~10% weigh linearly, not squared: releases differ by more than layouts
PAIR_TIE = 0.01  # measured throughputs closer than this are not an ordering to get right
EVALUATED = tuple(r for r in ROWS if not r.excluded)


@dataclass(frozen=True)
class RowResult:
    row: CalibrationRow
    tokens_per_s_per_gpu: float
    tflops_per_gpu: float
    memory_gib: float  # comparable with the row's metric
    peak_gib: float  # the model's full peak, what `fits` uses
    hbm_gib: float
    fits: bool  # peak <= HBM (the run did not OOM)
    fits_with_headroom: bool  # peak <= HBM less the default 10% headroom
    checkpointing: str  # the recompute the row was evaluated with ("auto" rows: the least that fits)

    @property
    def throughput_error(self) -> float | None:
        return throughput_error(self.row, self.tokens_per_s_per_gpu, self.tflops_per_gpu)

    @property
    def memory_error(self) -> float | None:
        return self.memory_gib / self.row.memory_gib - 1 if self.row.memory_gib else None


def throughput_error(row: CalibrationRow, tokens_per_s: float, tflops: float) -> float | None:
    if row.tokens_per_s_per_gpu:
        return tokens_per_s / row.tokens_per_s_per_gpu - 1
    if row.tflops_per_gpu:
        return tflops / row.tflops_per_gpu - 1
    return None


def row_gpu(row: CalibrationRow) -> GpuSpec:
    """The GPU the row ran on: its preset, with the conditions the source states where they differ."""
    return replace(get_gpu(row.gpu), **(row.gpu_conditions or {}))


def problem_and_layout(row: CalibrationRow) -> tuple[Problem, Layout]:
    gpu = row_gpu(row)
    per_node = min(gpu.gpus_per_node, row.world_size)
    cluster = ClusterSpec(gpu=gpu, nodes=math.ceil(row.world_size / per_node), gpus_per_node=per_node)
    training = TrainingSpec(task=row.task, seq_length=row.seq_length, global_batch_size=row.global_batch_size,
                            precision=row.precision, peft_rank=row.peft_rank)
    fields = dict(row.layout)
    fields.setdefault("micro_batch_size", fields.get("local_batch_size", 1))
    layout = Layout(world_size=row.world_size, global_batch_size=row.global_batch_size, **fields)
    return Problem(model=resolve_model(row.model), cluster=cluster, training=training), layout


def _options(row: CalibrationRow, checkpointing: str) -> RecipeOptions:
    return RecipeOptions(checkpointing=checkpointing, master_weights=row.master_weights,
                         logit_bytes=row.logit_bytes, defer_grad_sync=row.defer_grad_sync,
                         reduce_dtype=row.reduce_dtype, async_tp=row.async_tp, framework=row.framework,
                         fp8_recipe=row.fp8_recipe, balanced_gate=row.balanced_gate, attention=row.attention,
                         compiled=row.compiled, ep_overlap=row.ep_overlap, recompute_modules=row.recompute_modules,
                         cuda_graphs=row.cuda_graphs, moment_dtype=row.moment_dtype,
                         fp8_primary_weights=row.fp8_primary_weights,
                         precision_aware=row.precision_aware)


def options(row: CalibrationRow) -> RecipeOptions:
    if row.name not in _OPTIONS:
        _OPTIONS[row.name] = _resolve_options(row)
    return _OPTIONS[row.name]


_OPTIONS: dict[str, RecipeOptions] = {}
_TIMING: dict[str, tuple] = {}


def _resolve_options(row: CalibrationRow) -> RecipeOptions:
    """The row's recipe settings. Recompute the source does not state ("auto": Megatron-Bridge's tables) is
    the least that fits the GPU (none, then selective, then full) as the row's stack holds memory: its recipes
    are tuned to that."""
    if row.checkpointing != "auto":
        return _options(row, row.checkpointing)
    problem, layout = problem_and_layout(row)
    for opts in _auto_choices(row, problem, layout):
        if peak_gib(problem, layout, opts) <= problem.cluster.gpu.hbm_gib:
            return opts
    return opts


def _auto_choices(row: CalibrationRow, problem: Problem, layout: Layout) -> list[RecipeOptions]:
    """The recompute an "auto" row may have run, least first: none; selective (Megatron's: the module sets its
    target would try, narrowest first); full."""
    selective = [_options(row, "selective")]
    if row.framework == "megatron":
        ladder = recompute_ladder(problem, layout, selective[0], recompute_candidates(problem.model))
        selective = [replace(selective[0], recompute_modules=modules) for modules in ladder]
    return [_options(row, "none"), *selective, _options(row, "full")]


def evaluate(row: CalibrationRow, params: Parameters | None = None) -> RowResult:
    problem, layout = problem_and_layout(row)
    opts = options(row)
    estimate = estimate_layout(problem, layout, options=opts, params=params)
    parts = estimate.memory
    comparable = estimate.memory_gib - parts["runtime"]
    if row.memory_metric == "allocated":
        comparable -= parts["fragmentation"]
    hbm = problem.cluster.gpu.hbm_gib
    return RowResult(
        row=row, tokens_per_s_per_gpu=estimate.tokens_per_s_per_gpu, tflops_per_gpu=estimate.tflops_per_gpu,
        memory_gib=comparable, peak_gib=estimate.memory_gib, hbm_gib=hbm, fits=estimate.memory_gib <= hbm,
        fits_with_headroom=estimate.memory_gib <= hbm * 0.9, checkpointing=opts.checkpointing or "none",
    )


def run(params: Parameters | None = None, rows: Sequence[CalibrationRow] = EVALUATED) -> list[RowResult]:
    return [evaluate(row, params) for row in rows]


# --- the fast path the fit uses: only the step time, from per-row inputs built once ---------------------
def _timing_inputs(row: CalibrationRow) -> tuple:
    if row.name not in _TIMING:
        problem, layout = problem_and_layout(row)
        shape = model_shape(problem.model, problem.training)
        flops = throughput.model_flops_per_token(shape)
        _TIMING[row.name] = shape, layout, problem.training, problem.cluster.gpu, problem.cluster.nvlink_domain, flops
    return _TIMING[row.name]


def log_error(row: CalibrationRow, params: Parameters) -> float:
    """log(predicted / measured) throughput of one row under `params`."""
    shape, layout, training, gpu, domain, flops = _timing_inputs(row)
    step = sum(throughput.time_breakdown(shape, layout, training, gpu, nvlink_domain=domain, options=options(row),
                                         params=params).values())
    tokens = training.global_batch_size * training.seq_length / layout.world_size / step
    error = throughput_error(row, tokens, tokens * flops / 1e12)
    return math.log1p(error)


def measured(row: CalibrationRow) -> bool:
    return bool(row.tokens_per_s_per_gpu or row.tflops_per_gpu)


def fit_rows(rows: Sequence[CalibrationRow] = EVALUATED) -> list[CalibrationRow]:
    return [r for r in rows if r.role == "fit" and measured(r)]


# --- fitting ---------------------------------------------------------------------------------------------
def _spec() -> dict:
    return json.loads(profiles.PARAMETERS_FILE.read_text())


def _write_spec(data: dict) -> None:
    """Write the parameters file and drop the runtime's cached copy of it."""
    profiles.PARAMETERS_FILE.write_text(json.dumps(data, indent=1) + "\n")
    profiles.parameters.cache_clear()


def free_parameters(spec: dict) -> list[str]:
    return [name for name, entry in spec["parameters"].items() if entry["fit"]]


def _params(names: Sequence[str], values: Sequence[float], base: dict[str, float]) -> Parameters:
    return profiles.parameters_from_values({**base, **dict(zip(names, (float(v) for v in values), strict=True))})


def prior_residuals(x, prior, prior_sd):
    """Each parameter's distance from its prior in units of the prior's physical uncertainty (`prior_sd` in the
    parameters file, with its source), weighted like one measured row ROBUST_SCALE off: where the rows pin a
    parameter they decide, and where they do not (directions the rows leave flat, e.g. GEMM efficiency against
    FP8 speed-up on rows that are all FP8, or a stack whose only family is held out) the physical estimate
    does, instead of whatever value happens to trade off against another.

    The prior is Gaussian: its cost grows with the square of the distance however far it is. The fit's robust
    loss (soft_l1, for the rows: releases differ by more than layouts) would make it linear beyond
    ROBUST_SCALE, so the residual handed to it is the one whose robust cost is that square."""
    import numpy as np

    quadratic = ROBUST_SCALE * (x - prior) / prior_sd
    f2 = ROBUST_SCALE ** 2
    return np.sign(quadratic) * ROBUST_SCALE * np.sqrt((1.0 + quadratic ** 2 / (2.0 * f2)) ** 2 - 1.0)


def least_squares_fit(rows: Sequence[CalibrationRow], names: Sequence[str], start: dict[str, float],
                      fixed: dict[str, float]) -> tuple[dict[str, float], object]:
    """Fit `names` on `rows` (robust log error, Gaussian priors); returns the values and scipy's result."""
    import numpy as np
    from scipy.optimize import least_squares

    spec = _spec()["parameters"]
    lo = np.array([spec[n]["bounds"][0] for n in names])
    hi = np.array([spec[n]["bounds"][1] for n in names])
    prior = np.array([spec[n]["prior"] for n in names])
    prior_sd = np.array([spec[n]["prior_sd"] for n in names])
    span = hi - lo

    def residuals(x: np.ndarray) -> np.ndarray:
        params = _params(names, x, fixed)
        errors = [log_error(r, params) for r in rows]
        return np.concatenate([errors, prior_residuals(x, prior, prior_sd)])

    x0 = np.clip([start[n] for n in names], lo + 1e-9 * span, hi - 1e-9 * span)
    result = least_squares(residuals, x0, bounds=(lo, hi), x_scale=span, diff_step=1e-3, max_nfev=60,
                           loss="soft_l1", f_scale=ROBUST_SCALE)
    return dict(zip(names, (float(v) for v in result.x), strict=True)), result


def rows_moving(result: object, names: Sequence[str], n_rows: int) -> dict[str, int]:
    """How many rows each parameter moves (|d log error / d parameter| over its range above 1%)."""
    import numpy as np

    spec = _spec()["parameters"]
    span = np.array([spec[n]["bounds"][1] - spec[n]["bounds"][0] for n in names])
    jac = np.abs(result.jac[:n_rows]) * span
    return {n: int((jac[:, j] > 0.01).sum()) for j, n in enumerate(names)}


def fit() -> dict:
    """Fit the free parameters on every fit row, drop those resting on fewer than MIN_ROWS rows back to their
    prior, refit, and write the values and row counts into the parameters file."""
    data = _spec()
    spec = data["parameters"]
    candidates = [n for n, e in spec.items() if e["fittable"]]
    fixed = {n: e["prior"] for n, e in spec.items()}
    rows = fit_rows()
    names = list(candidates)
    for _ in range(3):
        values, result = least_squares_fit(rows, names, {n: spec[n]["value"] for n in names}, fixed)
        counts = rows_moving(result, names, len(rows))
        weak = [n for n in names if counts[n] < MIN_ROWS]
        if not weak:
            break
        names = [n for n in names if n not in weak]
    for n in candidates:
        entry = spec[n]
        entry["fit"] = n in names
        entry["value"] = round(values[n], 4) if n in names else entry["prior"]
        entry["rows"] = counts.get(n, 0) if n in names else 0
    _write_spec(data)
    return {n: (spec[n]["value"], spec[n]["rows"]) for n in candidates}


def cross_validate(rows: Sequence[CalibrationRow] = EVALUATED) -> dict[str, float]:
    """Leave-one-model-family-out: each family's rows predicted by a fit to the others (error, not log)."""
    spec = _spec()["parameters"]
    names = free_parameters(_spec())
    fixed = {n: e["value"] for n, e in spec.items()}
    start = {n: spec[n]["value"] for n in names}
    training = fit_rows(rows)
    out: dict[str, float] = {}
    for family in sorted({r.family for r in rows if measured(r)}):
        kept = [r for r in training if r.family != family]
        values, _ = least_squares_fit(kept, names, start, fixed)
        params = _params(names, [values[n] for n in names], fixed)
        for r in rows:
            if r.family == family and measured(r):
                out[r.name] = math.expm1(log_error(r, params))
    return out


def write_cv_bands(cv: dict[str, float]) -> None:
    """Store the cross-validated median |error| of each (framework, family, GPU generation) group, and of
    each coarser group, in the parameters file: `explain` quotes the band of rows like the estimate. The rows
    reported but not fitted stay out: their errors are the costs the model does not price, not its error on the
    runs it does (a DeepSeek-V3 estimate on H100 is not as far off as Moonlight's one-micro-batch steps)."""
    groups: dict[str, list[float]] = {}
    by_name = {r.name: r for r in EVALUATED}
    for name, error in cv.items():
        row = by_name[name]
        if row.role == "reported":
            continue
        gen = throughput.generation(row_gpu(row).compute_capability)
        for key in profiles.band_groups(row.framework, row.family, gen):
            groups.setdefault(key, []).append(abs(error))
    data = _spec()
    data["cv_bands"] = {k: {"median_abs_error": round(statistics.median(v), 4), "rows": len(v)}
                        for k, v in sorted(groups.items())}
    _write_spec(data)


def memory_bands(results: Sequence[RowResult]) -> dict[str, dict[str, float]]:
    """Measured / estimated peak - 1 of every row that measured its peak, by group (`profiles.memory_groups`):
    its range and median magnitude, which `explain` quotes beside an estimate of the same kind."""
    groups: dict[str, list[float]] = {}
    for r in results:
        if r.memory_error is None:
            continue
        for key in profiles.memory_groups(r.row.framework, resolve_model(r.row.model).is_moe):
            groups.setdefault(key, []).append(1 / (1 + r.memory_error) - 1)
    return {k: {"low": round(min(v), 4), "high": round(max(v), 4),
                "median_abs_error": round(statistics.median(abs(e) for e in v), 4), "rows": len(v)}
            for k, v in sorted(groups.items())}


def write_memory_bands(results: Sequence[RowResult]) -> None:
    """Store `memory_bands` in the parameters file."""
    data = _spec()
    data["memory_bands"] = memory_bands(results)
    _write_spec(data)


# --- pairwise ordering -----------------------------------------------------------------------------------
def _pair_key(row: CalibrationRow, broad: bool = False) -> tuple:
    """Rows that compare layouts of one job: same stack, model, GPUs, sequence, task and precision, and
    (unless `broad`) the same software release and global batch."""
    key = (row.framework, str(row.model), row.gpu, row.world_size, row.seq_length, row.task, row.precision,
           row.fp8_recipe)
    return key if broad else (*key, row.release, row.global_batch_size)


def _setup(row: CalibrationRow) -> tuple:
    return tuple(sorted(row.layout.items())), row.async_tp, row.checkpointing, row.recompute_modules


def _speeds(r: RowResult) -> tuple[float, float]:
    """(measured, predicted) speed in the unit the row reports: tokens/s/GPU, else TFLOP/s/GPU (rows of one job
    count the same FLOPs per token, so either orders them)."""
    if r.row.tokens_per_s_per_gpu:
        return r.row.tokens_per_s_per_gpu, r.tokens_per_s_per_gpu
    return r.row.tflops_per_gpu or 0.0, r.tflops_per_gpu


def pairs(results: Sequence[RowResult], broad: bool = False) -> list[tuple[RowResult, RowResult]]:
    """Every pair of measured rows of one job (`_pair_key`, one reported unit) whose layouts (or recipe settings:
    recompute) differ and whose measured speeds differ by more than PAIR_TIE. `broad` also pairs rows across
    software releases and global batches (Megatron-Bridge's releases move throughput by up to 2x on one layout)."""
    groups: dict[tuple, list[RowResult]] = {}
    for r in results:
        if measured(r.row):
            groups.setdefault((*_pair_key(r.row, broad), bool(r.row.tokens_per_s_per_gpu)), []).append(r)
    out = []
    for members in groups.values():
        for a, b in combinations(members, 2):
            if _setup(a.row) != _setup(b.row) and abs(_speeds(a)[0] / _speeds(b)[0] - 1) > PAIR_TIE:
                out.append((a, b))
    return out


def ordered(a: RowResult, b: RowResult) -> bool:
    """The model orders the pair as measured."""
    (measured_a, predicted_a), (measured_b, predicted_b) = _speeds(a), _speeds(b)
    return (predicted_a > predicted_b) == (measured_a > measured_b)


# --- summary and table -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Summary:
    median_in_sample: float
    median_cv: float  # over the fitted rows
    median_cv_every_row: float  # over every evaluated row that measured throughput, the target's figure
    median_reported: float  # the rows reported, never fitted (role "reported"), in-sample
    reported_rows: int
    median_cv_automodel: float
    median_held_out: float
    pairwise_correct: int
    pairwise_total: int
    memory_within: int
    memory_rows: int
    memory_max_error: float
    memory_outside: tuple[str, ...]  # every row that measured memory and is off by more than the target
    memory_measured: int
    not_fitting: tuple[str, ...]

    @property
    def pairwise(self) -> float:
        return self.pairwise_correct / self.pairwise_total if self.pairwise_total else 1.0

    @property
    def ok(self) -> bool:
        return (self.median_cv_every_row <= THROUGHPUT_TARGET and self.median_cv_automodel <= THROUGHPUT_TARGET
                and self.pairwise >= PAIRWISE_TARGET and self.memory_within == self.memory_rows
                and not self.memory_outside and not self.not_fitting)  # memory: wherever measured


def _median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else 0.0


def summarize(results: Sequence[RowResult], cv: dict[str, float] | None = None) -> Summary:
    errors = {role: [abs(r.throughput_error) for r in results if r.row.role == role and r.throughput_error is not None]
              for role in ("fit", "held-out", "reported")}
    by_name = {r.row.name: r.row for r in results}
    cv = {name: abs(e) for name, e in (cv or {}).items() if name in by_name}
    titan = [r for r in results if r.row.source.startswith("pytorch/torchtitan") and r.row.memory_gib
             and r.row.memory_role == "fit"]
    mem_errors = [abs(r.memory_error or 0.0) for r in titan]
    with_memory = [r for r in results if r.row.memory_gib and r.memory_error is not None]
    all_pairs = pairs(results)
    return Summary(
        median_in_sample=_median(errors["fit"]),
        median_cv=_median([e for name, e in cv.items() if by_name[name].role == "fit"]),
        median_cv_every_row=_median(list(cv.values())),
        median_reported=_median(errors["reported"]),
        reported_rows=len(errors["reported"]),
        median_cv_automodel=_median([e for name, e in cv.items() if by_name[name].framework == "automodel"]),
        median_held_out=_median(errors["held-out"]),
        pairwise_correct=sum(ordered(a, b) for a, b in all_pairs),
        pairwise_total=len(all_pairs),
        memory_within=sum(e <= MEMORY_TARGET for e in mem_errors),
        memory_rows=len(titan),
        memory_max_error=max(mem_errors, default=0.0),
        memory_outside=tuple(r.row.name for r in with_memory if abs(r.memory_error) > MEMORY_TARGET),
        memory_measured=len(with_memory),
        not_fitting=tuple(r.row.name for r in results if not r.fits),
    )


def _pct(x: float | None) -> str:
    return "" if x is None else f"{x * 100:+.1f}%"


def render(results: Sequence[RowResult], cv: dict[str, float] | None = None) -> str:
    cv = cv or {}
    header = ("| Row | Role | Measured tok/s/GPU | Model tok/s/GPU | Error | CV error | Measured GiB | Model GiB | "
              "Error | Model peak / HBM | Fits (0% / 10% headroom) |")
    lines = [header, "|" + "---|" * 11]
    for r in results:
        row = r.row
        measured_tps = row.tokens_per_s_per_gpu
        tput = (f"{measured_tps:,.0f}" if measured_tps else f"{row.tflops_per_gpu:g} TFLOP/s"
                if row.tflops_per_gpu else "")
        only_tflops = not measured_tps and row.tflops_per_gpu
        model_tps = f"{r.tflops_per_gpu:.0f} TFLOP/s" if only_tflops else f"{r.tokens_per_s_per_gpu:,.0f}"
        mem = f"{row.memory_gib:.1f} ({row.memory_metric})" if row.memory_gib else ""
        role = row.role if measured(row) else "-"
        if row.memory_gib:
            role += f" / mem {row.memory_role}"
        lines.append(
            f"| {row.name} | {role} | {tput} | {model_tps} | {_pct(r.throughput_error)} | {_pct(cv.get(row.name))} | "
            f"{mem} | {r.memory_gib:.1f} | {_pct(r.memory_error)} | {r.peak_gib:.1f} / {r.hbm_gib:.1f} | "
            f"{'yes' if r.fits else 'NO'} / {'yes' if r.fits_with_headroom else 'no'} |"
        )
    s = summarize(results, cv)
    lines += ["", error_table(results, cv), ""]
    wrong = [f"{a.row.name} vs {b.row.name}" for a, b in pairs(results) if not ordered(a, b)]
    broad = pairs(results, broad=True)
    broad_ok = sum(ordered(a, b) for a, b in broad)
    excluded: dict[str, int] = {}
    for row in ROWS:
        if row.excluded:
            excluded[row.excluded] = excluded.get(row.excluded, 0) + 1
    lines += [
        f"rows: {len(ROWS)} measured runs, {len(results)} evaluated ("
        + ", ".join(f"{n} not: {why}" for why, n in sorted(excluded.items())) + ")",
        f"throughput median |error|: in-sample {s.median_in_sample * 100:.1f}%, cross-validated (leave one model "
        f"family out) {s.median_cv_every_row * 100:.1f}% over every row (target <= {THROUGHPUT_TARGET * 100:.0f}%) "
        f"and {s.median_cv * 100:.1f}% over the fitted ones, AutoModel rows cross-validated "
        f"{s.median_cv_automodel * 100:.1f}%, held-out AutoModel rows {s.median_held_out * 100:.1f}%, rows reported "
        f"but not fitted ({s.reported_rows}) {s.median_reported * 100:.1f}% in-sample",
        f"pairwise ordering: {s.pairwise_correct}/{s.pairwise_total} pairs ({s.pairwise * 100:.1f}%, target >= "
        f"{PAIRWISE_TARGET * 100:.0f}%)" + (f"; wrong: {'; '.join(wrong)}" if wrong else "")
        + f"; across releases and batch sizes too: {broad_ok}/{len(broad)} "
          f"({broad_ok / max(len(broad), 1) * 100:.1f}%)",
        f"memory within +-{MEMORY_TARGET * 100:.0f}% on torchtitan FSDP2 rows: {s.memory_within}/{s.memory_rows} "
        f"(max |error| {s.memory_max_error * 100:.1f}%); every row that measured memory: "
        f"{s.memory_measured - len(s.memory_outside)}/{s.memory_measured}"
        + (f" (outside: {'; '.join(s.memory_outside)})" if s.memory_outside else ""),
        "configurations that ran but are predicted not to fit: "
        + (", ".join(s.not_fitting) if s.not_fitting else "none"),
        f"targets met: {'yes' if s.ok else 'NO'}",
    ]
    return "\n".join(lines)


def error_table(results: Sequence[RowResult], cv: dict[str, float]) -> str:
    """Median |throughput error| by framework and GPU generation: in-sample over the fitted rows, cross-validated over
    every row, and over the held-out rows."""
    groups: dict[tuple[str, str], list[RowResult]] = {}
    for r in results:
        if r.throughput_error is None:
            continue
        gen = throughput.generation(row_gpu(r.row).compute_capability)
        for key in ((r.row.framework, gen), (r.row.framework, "all"), ("all", "all")):
            groups.setdefault(key, []).append(r)
    lines = ["| Framework | GPU generation | Rows | In-sample median abs error | CV median abs error | "
             "CV within 15% | Held-out median abs error |", "|---|---|---:|---:|---:|---:|---:|"]
    for (framework, gen), members in sorted(groups.items()):
        fit = [r for r in members if r.row.role == "fit"]
        held = [r for r in members if r.row.role == "held-out"]
        cv_errors = [abs(cv[r.row.name]) for r in members if r.row.name in cv]
        within = sum(e <= THROUGHPUT_TARGET for e in cv_errors)
        lines.append(
            f"| {framework} | {gen} | {len(members)} | {_median([abs(r.throughput_error) for r in fit]) * 100:.1f}% | "
            + (f"{_median(cv_errors) * 100:.1f}% | {within}/{len(cv_errors)} | " if cv_errors else "| | ")
            + (f"{_median([abs(r.throughput_error) for r in held]) * 100:.1f}% |" if held else "|"))
    return "\n".join(lines)


CV_ERRORS = Path(__file__).resolve().parent / "measurements" / "cv_errors.json"


def cv_errors_from_file() -> dict[str, float]:
    """The cross-validated errors stored by the last `--fit` (row name -> error)."""
    stored = json.loads(CV_ERRORS.read_text()) if CV_ERRORS.exists() else {}
    return {r.name: stored[r.name] for r in EVALUATED if r.name in stored}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fit", action="store_true", help="refit the free parameters and cross-validate first, "
                        "and store the error bands explain quotes")
    args = parser.parse_args(argv)
    if args.fit:
        for name, (value, rows) in fit().items():
            print(f"{name} = {value} ({rows} rows)" if rows else f"{name} = {value} (prior: fewer than "
                  f"{MIN_ROWS} rows move it)")
        cv = cross_validate()
        write_cv_bands(cv)
        errors = {name: round(e, 4) for name, e in sorted(cv.items())}
        CV_ERRORS.write_text(json.dumps(errors, indent=1) + "\n")
        print()
    results = run()
    if args.fit:
        write_memory_bands(results)
    print(render(results, cv_errors_from_file()))
    return 0 if summarize(results, cv_errors_from_file()).ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

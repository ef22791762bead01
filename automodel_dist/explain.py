"""`explain`: why the winner won. The winner and the next layouts side by side, and what the rules pruned."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict
from typing import Any

from automodel_dist.compiler import CompileResult, Source, compile_intent, layout_json
from automodel_dist.cost.estimate import Estimate
from automodel_dist.cost.profiles import ErrorBand, MemoryBand, memory_risk, parameters
from automodel_dist.cost.throughput import generation
from automodel_dist.errors import InputError
from automodel_dist.infeasible import largest_parts
from automodel_dist.layout import AC_MODES
from automodel_dist.planner import THROUGHPUT_TIE, Candidate, simplicity, structure
from automodel_dist.targets import AUTOMODEL

COLUMNS = ("#", "layout", "peak GiB", "largest memory parts (GiB)", "step s", "tok/s/GPU", "TFLOP/s", "MFU",
           "bound")


def _row(rank: str, c: Candidate, names: Mapping[str, str]) -> list[str]:
    est = c.estimate
    memory = {names.get(part, part): gib for part, gib in est.memory.items()}
    return [rank, c.layout.short(), f"{est.memory_gib:.1f}", largest_parts(memory), f"{est.step_time_s:.2f}",
            f"{est.tokens_per_s_per_gpu:,.0f}", f"{est.tflops_per_gpu:.0f}", f"{est.mfu:.0%}", est.bound]


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def _candidate_json(c: Candidate) -> dict[str, Any]:
    return {"layout": layout_json(c.layout), "label": c.layout.short(), "estimate": c.estimate.to_json()}


def error_band(result: CompileResult) -> ErrorBand | None:
    """The cross-validated error of measured rows like this problem (target's stack, family, GPU generation)."""
    problem = result.problem
    return parameters().error_band(getattr(result, "framework", "automodel"), problem.model.family,
                                   generation(problem.cluster.gpu.compute_capability))


def _band_text(band: ErrorBand | None) -> str:
    if band is None:
        return "model error: unknown (no cross-validated rows like this one)"
    return (f"model error: throughput estimates of rows like this one ({band.group}, {band.rows} measured runs) "
            f"are off by {band.median_abs_error:.0%} (median, cross-validated)")


def memory_band(result: CompileResult) -> tuple[MemoryBand | None, MemoryBand | None]:
    """How measured peaks of rows like this problem (target's stack, dense or MoE) compared with their estimates,
    and the thinner group of rows more like it (`Parameters.memory_band`)."""
    return parameters().memory_band(getattr(result, "framework", "automodel"), result.problem.model.is_moe)


def _memory_band_text(result: CompileResult) -> str:
    band, thin = memory_band(result)
    if band is None:
        return "memory error: unknown (no measured peaks of rows like this one)"
    risk = memory_risk(band, thin, result.estimate.memory_gib, result.problem.cluster.gpu.hbm_gib)
    text = (f"memory error: peaks measured on rows like this one ({band.group}, {band.rows} runs) were "
            f"{band.low:+.0%} to {band.high:+.0%} off their estimates (measured over estimated; median |error| "
            f"{band.median_abs_error:.0%})")
    if thin is not None:
        text += f"; the {thin.rows} of them most like it ({thin.group}): {thin.low:+.0%} to {thin.high:+.0%}"
    text += f"; at {risk.high:+.0%} the winner's peak would be {risk.raised_gib:.1f} of {risk.hbm_gib:.1f} GiB"
    if not risk.over:
        return text
    return text + f": over; memory_headroom: {risk.headroom:.2f} in the intent plans for it"


def _memory_band_json(band: MemoryBand | None) -> dict[str, Any] | None:
    return None if band is None else asdict(band)


def checkpointing_twins(result: CompileResult) -> dict[str, Candidate | None]:
    """The winner's structure under each other checkpointing mode the planner searched: its best fitting batch split
    among the plan's alternatives, or None (no split fits, the rules drop it, or it ranks below the alternatives
    kept). Modes it did not search are `result.unsearched_checkpointing()`."""
    key = structure(result.layout)[:-1]  # the structure but its checkpointing mode (the last field)
    unsearched = result.unsearched_checkpointing()
    twins: dict[str, Candidate | None] = {m: None for m in AC_MODES
                                          if m != result.layout.activation_checkpointing and m not in unsearched}
    for c in result.alternatives:
        mode = c.layout.activation_checkpointing
        if mode in twins and twins[mode] is None and structure(c.layout)[:-1] == key:
            twins[mode] = c
    return twins


def _checkpointing_text(result: CompileResult) -> str:
    best = result.estimate.tokens_per_s_per_gpu
    parts = []
    for mode, twin in checkpointing_twins(result).items():
        if twin is None:
            parts.append(f"{mode}: no fitting split among the alternatives")
            continue
        est = twin.estimate
        change = est.tokens_per_s_per_gpu / best - 1 if best else 0.0
        parts.append(f"{mode}: {est.tokens_per_s_per_gpu:,.0f} tokens/s/GPU ({change:+.1%}), {est.memory_gib:.1f} GiB")
    parts += [f"{mode}: not searched ({why})" for mode, why in result.unsearched_checkpointing().items()]
    options = result.cost_options()
    mode = result.layout.activation_checkpointing
    modules = options.recompute_modules if options and mode == "selective" else ()
    named = f" of modules {', '.join(modules)} (Megatron-Core's recompute_modules)" if modules else ""
    return f"{result.checkpointing_term}: {mode}{named}; the same structure with " + "; ".join(parts)


def explain_json(result: CompileResult, top: int) -> dict[str, Any]:
    problem = result.problem
    band, memory = error_band(result), memory_band(result)
    return {
        "target": result.target,
        "writes": result.writes,
        "model": problem.model.name,
        "gpu": problem.cluster.gpu.name,
        "world_size": problem.cluster.world_size,
        "objective": problem.objective,
        "considered": result.considered,
        "dropped": result.dropped_count,
        "feasible": result.feasible,
        "winner": _candidate_json(Candidate(result.layout, result.estimate)),
        "alternatives": [_candidate_json(c) for c in result.alternatives[:top]],
        "pruned": result.pruned,
        "pruned_examples": result.reasons,
        "error_band": None if band is None else {"median_abs_error": band.median_abs_error, "rows": band.rows,
                                                 "group": band.group},
        "tie_within_error_band": within_band(result, band),
        "memory_error_band": _memory_band_json(memory[0]),
        "memory_error_band_closest": _memory_band_json(memory[1]),
        "advantage_over_runner_up_s": (advantage_by_part(result.estimate, result.alternatives[0].estimate)
                                       if result.alternatives else None),
        "settings": [setting.to_json() for setting in result.settings()],
        "environment": [setting.to_json() for setting in result.environment()],
        "checkpointing": {"mode": result.layout.activation_checkpointing,
                          "same_structure": {mode: None if c is None else _candidate_json(c)
                                             for mode, c in checkpointing_twins(result).items()},
                          "not_searched": result.unsearched_checkpointing()},
    }


def _gain(result: CompileResult) -> float:
    """How much better the winner is than #2 under the objective (a share; 0 without a runner-up)."""
    if not result.alternatives:
        return 0.0
    best, second = result.estimate, result.alternatives[0].estimate
    if result.problem.objective == "memory":
        return second.memory_gib / best.memory_gib - 1 if best.memory_gib else 0.0
    return best.tokens_per_s_per_gpu / second.tokens_per_s_per_gpu - 1 if second.tokens_per_s_per_gpu else 0.0


def within_band(result: CompileResult, band: ErrorBand | None) -> bool:
    """The winner's throughput margin over #2 is inside the model's cross-validated error: a tie the
    measurements cannot break."""
    return (band is not None and bool(result.alternatives) and result.problem.objective == "throughput"
            and _gain(result) < band.median_abs_error)


def why_it_won(result: CompileResult) -> str:
    """One sentence on what separates the winner from the runner-up.

    `rank` breaks ties of the objective (within THROUGHPUT_TIE) by simplicity, under either objective, so
    a simpler winner within the tie is reported as such: it may need more memory, or run slower, than #2.
    """
    if not result.alternatives:
        return "the only layout that fits"
    best, second = result.estimate, result.alternatives[0].estimate
    memory = result.problem.objective == "memory"
    gain = _gain(result)
    gpn = result.problem.cluster.gpus_per_node
    simpler = simplicity(result.layout, gpn) < simplicity(result.alternatives[0].layout, gpn)
    if abs(gain) <= THROUGHPUT_TIE and simpler:
        return (f"ties with #2 within {THROUGHPUT_TIE:.0%} of {'peak memory' if memory else 'throughput'}; the "
                "simpler layout wins (fewer parallel dimensions, groups inside a node)")
    if memory:
        return f"lowest peak memory ({best.memory_gib:.1f} GiB; next {second.memory_gib:.1f} GiB)"
    return f"{gain:.1%} more tokens/s/GPU than #2"


def advantage_by_part(winner: Estimate, other: Estimate) -> dict[str, float]:
    """Seconds per step the winner saves on each part of the step time against `other` (negative: it
    spends more there). Layouts of one problem move the same tokens per GPU per step, so the parts add up to
    the whole difference in throughput."""
    return {part: other.time.get(part, 0.0) - spent for part, spent in winner.time.items()}


def parts_against(winner: Estimate, other: Estimate, label: str, names: Mapping[str, str] | None = None) -> list[str]:
    """The step-time parts of the winner beside another layout's, term by term (parts both leave at zero
    are left out): where the winner's advantage comes from. `names`: the stack's names of parts."""
    gains = advantage_by_part(winner, other)
    names = names or {}
    rows = [["part", "winner s", f"{label} s", "winner saves s"]]
    rows += [[names.get(part, part), f"{winner.time[part]:.3f}", f"{other.time.get(part, 0.0):.3f}", f"{gain:+.3f}"]
             for part, gain in gains.items() if winner.time[part] or other.time.get(part, 0.0)]
    rows.append(["step", f"{winner.step_time_s:.3f}", f"{other.step_time_s:.3f}", f"{sum(gains.values()):+.3f}"])
    return _table(rows)


def headline(result: CompileResult) -> tuple[str, str]:
    """The problem in one line, and the search in another (the text and the HTML report open with them)."""
    problem = result.problem
    cluster, training = problem.cluster, problem.training
    return (
        f"{problem.model.name} on {cluster.nodes} x {cluster.gpus_per_node} {cluster.gpu.name} "
        f"({cluster.world_size} GPUs, {cluster.gpu.hbm_gib:g} GiB each); {training.task}, seq {training.seq_length}, "
        f"global batch {training.global_batch_size}, {training.precision}; objective: {problem.objective}; "
        f"writes {result.writes}",
        f"{result.considered} layouts considered: {result.dropped_count} dropped by rules, {result.feasible} fit with "
        f"{problem.memory_headroom:.0%} headroom; showing the best of each distinct structure",
    )


def render_explain(result: CompileResult, top: int = 10, fmt: str = "text") -> str:
    """The winner and the next `top` layouts (one per distinct structure); text or JSON."""
    if fmt == "json":
        return json.dumps(explain_json(result, top), indent=2) + "\n"
    est = result.estimate
    band = error_band(result)
    lines = [
        *headline(result),
        f"winner: {result.layout.short()}: {est.memory_gib:.1f} GiB peak, {est.tokens_per_s_per_gpu:,.0f} "
        f"tokens/s/GPU, bound by {est.bound}",
        f"why: {why_it_won(result)}",
        _checkpointing_text(result),
        _band_text(band),
        _memory_band_text(result),
    ]
    if within_band(result, band):
        lines.append(f"tie: the winner's margin over #2 is inside that error; measure both before committing to "
                     f"one (#2: {result.alternatives[0].layout.short()})")
    lines.append("")
    names = result.part_names
    rows = [list(COLUMNS), _row("1*", Candidate(result.layout, result.estimate), names)]
    rows += [_row(str(i), c, names) for i, c in enumerate(result.alternatives[:top], start=2)]
    lines += _table(rows)
    lines.append("")
    if result.alternatives:
        lines.append("step time by part against #2 (seconds per step; the same tokens per GPU):")
        lines += parts_against(est, result.alternatives[0].estimate, "#2", names)
        lines.append("")
    if result.pruned:
        lines.append("layouts pruned, by rule (a layout breaking several rules counts under each):")
        width = max(len(rule) for rule in result.pruned)
        for rule, count in sorted(result.pruned.items(), key=lambda kv: (-kv[1], kv[0])):
            lines.append(f"  {rule.ljust(width)}  {count:>6}  e.g. {result.reasons.get(rule, '')}")
    else:
        lines.append("no layout was pruned by a rule")
    settings, environment = result.settings(), result.environment()
    if settings or environment:
        lines += ["", f"{result.writes}, each value and why:"]
        lines += [f"  {s.path} = {s.value}: {s.why}" for s in settings]
        lines += [f"  env {s.path}={s.value}: {s.why}" for s in environment]
    return "\n".join(lines) + "\n"


FORMATS = ("text", "json", "html")


def explain_intent(source: Source, overrides: Iterable[str] = (), *, target: str = AUTOMODEL, top: int = 10,
                   fmt: str = "text") -> str:
    """Compile an intent for `target` and explain the choice: the winner, the next `top` layouts, what the
    rules pruned, and the target's own settings with their reasons; as text, JSON, or the HTML report's page.

    Raises InputError (exit 2) for a bad intent or argument and InfeasibleError (exit 1) when nothing fits.
    """
    if fmt not in FORMATS:
        raise InputError(f"unknown format {fmt!r}", where="fmt", hint=f"one of: {', '.join(FORMATS)}")
    if isinstance(top, bool) or not isinstance(top, int) or top < 1:
        raise InputError(f"top must be a positive integer, got {top!r}", where="top",
                         hint="how many runner-up layouts to show, e.g. 10")
    result = compile_intent(source, overrides, target=target)
    if fmt == "html":
        from automodel_dist.html_report import from_compile, render_page

        return render_page(from_compile(result, top=top))
    return render_explain(result, top=top, fmt=fmt)

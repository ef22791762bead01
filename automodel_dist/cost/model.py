"""estimate_layout: memory and step time of one layout of one problem.

The planner calls this on thousands of layouts, so everything that depends only on the model and the
training job (`ModelShape`, FLOPs per token) is built once and cached; the per-layout work is plain
arithmetic in `memory_breakdown` and `time_breakdown`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from functools import lru_cache

from automodel_dist.cost import memory, throughput
from automodel_dist.cost.estimate import Estimate
from automodel_dist.cost.memory import AUTOMODEL_DEFAULTS, RecipeOptions
from automodel_dist.cost.profiles import Parameters
from automodel_dist.cost.shape import ModelShape, model_shape
from automodel_dist.layout import Layout
from automodel_dist.problem import Problem

# Exposed communication above this share of the step makes communication the binding wall.
COMMUNICATION_BOUND_SHARE = 0.25
_COMM_PARTS = ("tp_comm", "ep_comm", "cp_comm", "pp_comm", "fsdp_comm")
NOT_MODELED = memory.NOT_MODELED + throughput.NOT_MODELED
def memory_limit_gib(problem: Problem) -> float:
    """The GPU's HBM less the problem's headroom: what a layout's peak must stay under to fit."""
    return problem.cluster.gpu.hbm_gib * (1.0 - problem.memory_headroom)


def option_choices(problem: Problem, layout: Layout) -> tuple[RecipeOptions, ...]:
    """The recipe settings the compiler may write for `layout`, AutoModel's defaults first.

    `defer_fsdp_grad_sync` has a choice only for FSDP2 without PP and with several micro batches per step
    (pipelines defer regardless; one micro batch has nothing to defer). Deferring keeps every layer's
    unsharded fp32 gradients across the accumulation micro batches (AutoModel's own Llama-3.1-70B recipes
    turn it off: "True → delayed resharding → OOM"); syncing every micro batch reduce-scatters ga times.
    A base recipe's other settings (`problem.recipe_options`) stay as it has them; the compiler owns
    `defer_fsdp_grad_sync` and writes its choice over the base's.
    """
    deferred, every_micro_batch = _sync_choices(problem.recipe_options or AUTOMODEL_DEFAULTS)
    if layout.strategy != "fsdp2" or layout.pp > 1 or layout.grad_accumulation <= 1:
        return (deferred,)
    return deferred, every_micro_batch


@lru_cache(maxsize=64)
def _sync_choices(options: RecipeOptions) -> tuple[RecipeOptions, RecipeOptions]:
    """`options` with the deferred gradient sync on, and off: built once per base, not per layout judged."""
    return replace(options, defer_grad_sync=True), replace(options, defer_grad_sync=False)


def planned_options(problem: Problem, layout: Layout) -> RecipeOptions:
    """The recipe settings the compiler writes for `layout` (the emitter and the planner's estimates agree):
    of `option_choices`, the best for the objective that fits (the fastest; under the memory objective the
    smallest peak), else the one needing the least memory. A layout is thus unfit only when it is unfit
    under every setting the compiler may emit."""
    return _planned(problem, layout)[0]


def cannot_fit(problem: Problem) -> bool:
    """Whether no layout at all can fit `problem`: its memory limit is below `memory.peak_floor_gib`."""
    shape = model_shape(problem.model, problem.training)
    return memory.peak_floor_gib(shape, problem.cluster.world_size) > memory_limit_gib(problem)


def screen_layout(problem: Problem, layout: Layout) -> tuple[bool, float, Callable[[], Estimate]]:
    """Whether `layout` fits, the best value it could reach for the objective (smaller is better), and how to
    time it (`estimate_layout`, with the memory already computed): the planner times only the layouts whose
    best case can still place.

    Memory comes first (it decides fitting). The best value is, under the memory objective, the smallest peak
    of the settings that fit (exact: it is what the estimate ranks by); under the throughput objective, minus
    a ceiling on tokens/s/GPU from the step time floor (`throughput.step_time_floor`). A layout that does not
    fit has none (inf): only a search where nothing fits reports those, and times them then."""
    shape = model_shape(problem.model, problem.training)
    choices = _memories(problem, layout, shape)
    limit = memory_limit_gib(problem)
    fitting = [peak for _, _, peak in choices if peak <= limit]

    def timed() -> Estimate:
        return _choose(problem, layout, shape, choices)[1]

    if not fitting:
        return False, math.inf, timed
    if problem.objective == "memory":
        return True, min(fitting), timed
    # the choices differ only in the gradient sync, which the step-time floor does not depend on: one floor serves
    options = next(options for options, _, peak in choices if peak <= limit)
    return True, -tokens_ceiling(problem, layout, options, shape), timed


# each setting the compiler may write, with the memory breakdown (GiB by part) and peak under it
Memories = list[tuple[RecipeOptions, dict[str, float], float]]


def _memories(problem: Problem, layout: Layout, shape: ModelShape) -> Memories:
    """Each of `option_choices` with its memory breakdown and peak."""
    out = []
    for options in option_choices(problem, layout):
        mem = memory.memory_breakdown(shape, layout, problem.training, nvlink_domain=problem.cluster.nvlink_domain,
                                      options=options)
        out.append((options, mem, sum(mem.values())))
    return out


def _planned(problem: Problem, layout: Layout) -> tuple[RecipeOptions, Estimate]:
    """The settings the compiler writes for `layout` and its estimate under them (`_choose`)."""
    shape = model_shape(problem.model, problem.training)
    return _choose(problem, layout, shape, _memories(problem, layout, shape))


def _choose(problem: Problem, layout: Layout, shape: ModelShape, choices: Memories) -> tuple[RecipeOptions, Estimate]:
    """Memory first: of `choices` (`_memories`), only settings that could win are timed (all that fit when speed
    decides, else the one with the smallest peak). Returns the settings and the estimate."""
    limit = memory_limit_gib(problem)
    fitting = [i for i, (_, _, peak) in enumerate(choices) if peak <= limit]
    if len(fitting) < 2 or problem.objective == "memory":
        i = min(fitting or range(len(choices)), key=lambda j: choices[j][2])
        options, mem, _ = choices[i]
        return options, _estimate(problem, layout, options, mem=mem, shape=shape)
    timed = [(_estimate(problem, layout, choices[i][0], mem=choices[i][1], shape=shape), i) for i in fitting]
    est, i = min(timed, key=lambda t: (t[0].step_time_s, t[1]))
    return choices[i][0], est


def tokens_ceiling(problem: Problem, layout: Layout, options: RecipeOptions, shape: ModelShape | None = None) -> float:
    """Tokens/s/GPU `layout` cannot exceed under `options`."""
    training = problem.training
    shape = shape or model_shape(problem.model, training)
    floor = throughput.step_time_floor(shape, layout, training, problem.cluster.gpu, options=options)
    tokens = training.global_batch_size * training.seq_length / max(layout.world_size, 1)
    return tokens / floor if floor > 0 else float("inf")


def peak_gib(problem: Problem, layout: Layout, options: RecipeOptions) -> float:
    """The most loaded rank's peak (GiB) under `options`, as the options' stack holds memory."""
    return _peak_gib(problem, layout, options, model_shape(problem.model, problem.training))


def _peak_gib(problem: Problem, layout: Layout, options: RecipeOptions, shape: ModelShape) -> float:
    return sum(memory.memory_breakdown(shape, layout, problem.training, nvlink_domain=problem.cluster.nvlink_domain,
                                       options=options).values())


@lru_cache(maxsize=1024)
def with_recompute_modules(options: RecipeOptions, modules: tuple[str, ...]) -> RecipeOptions:
    """`options` recomputing `modules` (cached: the recompute ladder asks for the same few sets for every layout)."""
    return replace(options, recompute_modules=modules)


def recompute_ladder(problem: Problem, layout: Layout, options: RecipeOptions, candidates: tuple[str, ...],
                     peaks: dict[tuple[str, ...], float] | None = None) -> tuple[tuple[str, ...], ...]:
    """Megatron's selective-recompute sets to try, narrowest first: `candidates` ranked by the peak memory each
    frees alone per second of forward it replays (cost/recompute.py), then taken cumulatively; a label that
    frees nothing on the peak is left out. `peaks`, when given, receives the peak (GiB) of each set measured on
    the way (none, and each label alone), for the caller to reuse."""
    shape = model_shape(problem.model, problem.training)
    measured = {} if peaks is None else peaks
    for modules in ((), *((module,) for module in candidates)):
        measured[modules] = _peak_gib(problem, layout, with_recompute_modules(options, modules), shape)
    scored = []
    for module in candidates:
        freed = measured[()] - measured[(module,)]
        if freed > 1e-9:
            seconds = throughput.compute_seconds(shape, layout, problem.training, problem.cluster.gpu,
                                                 options=with_recompute_modules(options, (module,)))[1]
            scored.append((-freed / seconds if seconds > 0 else -math.inf, module))
    order = [module for _, module in sorted(scored)]
    return tuple(tuple(order[:i + 1]) for i in range(len(order)))


def memory_by_pp_rank(problem: Problem, layout: Layout, *, options: RecipeOptions | None = None
                      ) -> list[tuple[memory.RankLoad, dict[str, float]]]:
    """Every pp rank's load and memory breakdown (GiB) for `layout`, with the settings `estimate_layout` uses: the
    largest total is the estimate's peak (a per-stage view draws them all)."""
    if options is None:
        options = planned_options(problem, layout)
    shape = model_shape(problem.model, problem.training)
    return memory.memory_by_pp_rank(shape, layout, problem.training, nvlink_domain=problem.cluster.nvlink_domain,
                                    options=options)


def estimate_layout(problem: Problem, layout: Layout, *, options: RecipeOptions | None = None,
                    params: Parameters | None = None) -> Estimate:
    """Peak memory (most loaded rank), step time and throughput of `layout` for `problem`.

    `fits` compares the peak with the GPU's HBM less `problem.memory_headroom`; it never raises for a
    layout that does not fit. TFLOP/s count model FLOPs without recompute and MFU divides them by the
    bf16 dense peak, as AutoModel's performance tables do (also for fp8 runs). `options` are the recipe
    settings outside the Layout: by default the best of those the compiler may write (`planned_options`); a
    caller with a recipe in hand passes the recipe's (validate, and the calibration for each measured run).
    `options.framework` picks the stack's profile (AutoModel by default; "megatron" and "torchtitan"
    time the same layout as those stacks run it). `params` replaces the fitted parameters (the fit's trials).
    """
    if options is None:
        return _planned(problem, layout)[1]
    return _estimate(problem, layout, options, params=params)


def _estimate(problem: Problem, layout: Layout, options: RecipeOptions, *, params: Parameters | None = None,
              mem: dict[str, float] | None = None, shape: ModelShape | None = None) -> Estimate:
    """`estimate_layout` under `options`; `mem` is the memory breakdown and `shape` the model's when the caller
    has them already."""
    training, cluster = problem.training, problem.cluster
    gpu = cluster.gpu
    shape = shape or model_shape(problem.model, training)
    domain = cluster.nvlink_domain
    if mem is None:
        mem = memory.memory_breakdown(shape, layout, training, nvlink_domain=domain, options=options)
    time = throughput.time_breakdown(shape, layout, training, gpu, nvlink_domain=domain, options=options,
                                     params=params)
    peak = sum(mem.values())
    step = sum(time.values())
    fits = peak <= memory_limit_gib(problem)
    world = max(layout.world_size, 1)
    tokens_per_gpu = training.global_batch_size * training.seq_length / world / step if step > 0 else 0.0
    tflops = tokens_per_gpu * throughput.model_flops_per_token(shape) / 1e12
    comm = sum(time[name] for name in _COMM_PARTS)
    if not fits:
        bound = "memory"
    elif step > 0 and comm / step > COMMUNICATION_BOUND_SHARE:
        bound = "communication"
    else:
        bound = "compute"
    return Estimate(
        memory_gib=peak,
        memory=mem,
        fits=fits,
        hbm_gib=gpu.hbm_gib,
        step_time_s=step,
        time=time,
        tflops_per_gpu=tflops,
        tokens_per_s_per_gpu=tokens_per_gpu,
        mfu=tflops / gpu.tflops_bf16 if gpu.tflops_bf16 else 0.0,
        bound=bound,
        not_modeled=NOT_MODELED,
    )

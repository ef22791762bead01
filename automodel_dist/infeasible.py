"""Nothing fits: the closest layouts, and what would make one fit, each found by re-planning a variation.

Every suggestion is computed by searching the varied problem (more GPUs, activation checkpointing, a
smaller local batch, a shorter sequence, a larger GPU, a nearby global batch, fewer pins), never written
from a template.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

from automodel_dist.catalog.specs import ClusterSpec
from automodel_dist.cost.memory import checkpointing_mode
from automodel_dist.errors import InfeasibleError
from automodel_dist.layout import AC_MODES
from automodel_dist.planner import (
    MIN_CP_TOKENS,
    Candidate,
    Checker,
    Enumerator,
    Estimator,
    Screen,
    Search,
    distinct_structures,
    memory_limit_gib,
    search,
    short_cp_search,
    simplicity,
)
from automodel_dist.problem import Pins, Problem

CLOSEST_SHOWN = 5
MAX_NODES = 1024
SEQ_STEP = 1024
# Layouts the remedy search judges over all its re-plans before it stops (a count, so the answer does not depend on
# the machine). A problem at 8,192 GPUs whose every layout breaks a rule judged ~40K layouts per re-plan over ~20
# re-plans (15-25 s); typical infeasible problems judge a few thousand in all.
REMEDY_LAYOUTS = 150_000

Attempt = Callable[[Problem], Candidate | None]
# A proof that no layout fits a problem (the cost model's `cannot_fit`): a variation it rules out is not searched,
# which finds the same remedies (the search would find nothing) without re-planning hopeless variations (a
# 99%-headroom intent at 262,144 GPUs tried ~20 of them, seconds each).
Hopeless = Callable[[Problem], bool]


def largest_parts(memory: dict[str, float], n: int = 3) -> str:
    parts = sorted(memory.items(), key=lambda kv: (-kv[1], kv[0]))[:n]
    return ", ".join(f"{name} {gib:.1f}" for name, gib in parts)


class _Budget:
    """The layouts the remedy search may still judge (REMEDY_LAYOUTS in all), and the re-plans it refused."""

    def __init__(self, layouts: int) -> None:
        self.left = layouts
        self.refused = 0

    @property
    def spent(self) -> bool:
        return self.left <= 0


def _attempt_with(check: Checker, estimate: Estimator, screen: Screen | None = None,
                  space: type[Enumerator] | None = None, hopeless: Hopeless | None = None,
                  budget: _Budget | None = None, short_cp: bool = False) -> Attempt:
    """A first-fit re-plan of a variation. With `short_cp`, as `plan` does, the CP shards below MIN_CP_TOKENS when
    no longer ones fit (where every layout broke a rule, the batch split may need them; a memory-bound search
    leaves them out: each would re-walk half the space, and the budgeted compiles cannot afford it)."""

    def attempt(problem: Problem) -> Candidate | None:
        if hopeless is not None and hopeless(problem):
            return None  # the search would find nothing: skip it
        if budget is not None and budget.spent:
            budget.refused += 1  # the remedy search has judged its share of layouts
            return None
        result = search(problem, check=check, estimate=estimate, first_fit=True, screen=screen, space=space)
        short = None if result.fitting or not short_cp else short_cp_search(
            problem, check=check, estimate=estimate, screen=screen, space=space)
        if budget is not None:
            budget.left -= result.considered + (short.considered if short else 0)
        found = result.fitting or (short.fitting if short else [])
        return found[0] if found else None

    return attempt


def _example(c: Candidate) -> str:
    return f"e.g. {c.layout.short()} at {c.estimate.memory_gib:.1f} GiB"


def _more_gpus(problem: Problem, attempt: Attempt) -> str | None:
    """The smallest GPU count that fits: first fill a partly used node, then double the nodes."""
    cluster = problem.cluster
    shapes: list[tuple[int, int]] = []
    per_node = cluster.gpus_per_node
    if cluster.nodes == 1:
        while per_node * 2 <= cluster.gpu.gpus_per_node:
            per_node *= 2
            shapes.append((1, per_node))
    node_counts = sorted({cluster.nodes * 2 ** i for i in range(1, 11)} | {2 ** j for j in range(11)})
    shapes += [(n, per_node) for n in node_counts if cluster.nodes < n <= MAX_NODES]
    for nodes, gpus in shapes:
        found = attempt(replace(problem, cluster=ClusterSpec(gpu=cluster.gpu, nodes=nodes, gpus_per_node=gpus)))
        if found:
            return (f"more GPUs: {nodes} node(s) × {gpus} ({nodes * gpus} GPUs) instead of "
                    f"{cluster.nodes} × {cluster.gpus_per_node}; {_example(found)}")
    return None


def _activation_checkpointing(problem: Problem, attempt: Attempt) -> str | None:
    allowed = problem.pins.activation_checkpointing
    untried = tuple(mode for mode in AC_MODES if allowed is not None and mode not in allowed)
    if not untried:
        return None  # every mode was already tried
    found = attempt(replace(problem, pins=replace(problem.pins, activation_checkpointing=untried)))
    if found:  # the mode in effect: MegatronFSDP skips checkpointing on more than one GPU
        mode = {"none": "off"}.get(checkpointing_mode(found.layout), found.layout.activation_checkpointing)
        return f"another checkpointing mode (parallelism.activation_checkpointing: {mode}); {_example(found)}"
    return None


def _smaller_local_batch(problem: Problem, attempt: Attempt) -> str | None:
    pins = problem.pins
    smallest = min(pins.local_batch_size or (1,))
    micro = min(pins.micro_batch_size or (1,))
    if smallest <= 1 and micro <= 1:
        return None  # local batch 1 was already tried
    size = max(smallest, micro) // 2
    while size >= 1:
        varied = replace(pins, local_batch_size=None if pins.local_batch_size is None else (size,),
                         micro_batch_size=None if pins.micro_batch_size is None else (min(size, micro),))
        found = attempt(replace(problem, pins=varied))
        if found:
            return (f"a smaller local batch: local_batch_size {found.layout.local_batch_size} "
                    f"(micro batch {found.layout.micro_batch_size}); {_example(found)}")
        size //= 2
    return None


def _with_seq(problem: Problem, seq: int) -> Problem:
    return replace(problem, training=replace(problem.training, seq_length=seq))


def _shorter_sequence(problem: Problem, attempt: Attempt) -> str | None:
    seq = problem.training.seq_length
    step = SEQ_STEP if seq > 2 * SEQ_STEP else max(seq // 8, 64)
    fail, ok, found = seq, None, None
    trial = (seq // 2) // step * step
    while trial >= step:
        found = attempt(_with_seq(problem, trial))
        if found:
            ok = trial
            break
        fail, trial = trial, (trial // 2) // step * step
    if ok is None or found is None:
        return None
    lo, hi = ok // step, fail // step  # largest multiple of `step` that fits, by bisection
    while hi - lo > 1:
        mid = (lo + hi) // 2
        better = attempt(_with_seq(problem, mid * step))
        if better:
            lo, found = mid, better
        else:
            hi = mid
    return f"a shorter sequence: seq_length {lo * step} is the longest that fits (was {seq}); {_example(found)}"


def _larger_gpu(problem: Problem, attempt: Attempt) -> str | None:
    from automodel_dist.catalog.hardware import list_gpus

    current = problem.cluster.gpu
    world = problem.cluster.world_size
    for gpu in sorted(list_gpus(), key=lambda g: (g.hbm_gib, g.name)):
        if gpu.hbm_gib <= current.hbm_gib:
            continue
        per_node = min(gpu.gpus_per_node, world)
        cluster = ClusterSpec(gpu=gpu, nodes=math.ceil(world / per_node), gpus_per_node=per_node)
        found = attempt(replace(problem, cluster=cluster))
        if found:
            return (f"a larger GPU: {gpu.name} ({gpu.hbm_gib:g} GiB), {cluster.nodes} × {per_node}; "
                    f"{_example(found)}")
    return None


def _other_global_batch(problem: Problem, attempt: Attempt) -> str | None:
    """The nearest global batch some data-parallel size divides (when the batch split is what breaks).

    Each data-parallel size (a divisor of the world) offers its multiples next above and below the intent's batch,
    nearest first, all of them within the remedy budget: a batch smaller than the world may fit only at a multiple
    of the widest DP, where every rank gets a sample (gpt-oss-120b PEFT on 32 A100s fits at 32, not at 2-16)."""
    gbs, world = problem.training.global_batch_size, problem.cluster.world_size
    sizes = [d for d in range(2, world + 1) if world % d == 0]
    nearby = sorted(({-(-gbs // d) * d for d in sizes} | {gbs // d * d for d in sizes if gbs // d}) - {gbs},
                    key=lambda b: (abs(b - gbs), b))
    for batch in nearby:
        found = attempt(replace(problem, training=replace(problem.training, global_batch_size=batch)))
        if found:
            return f"global_batch_size {batch} instead of {gbs} (the batch split must divide it); {_example(found)}"
    return None


def _fewer_pins(problem: Problem, attempt: Attempt) -> str | None:
    if problem.pins == Pins():
        return None
    found = attempt(replace(problem, pins=Pins()))
    if found:
        return f"drop the parallelism pins (let the planner choose); {_example(found)}"
    return None


# Each remedy, in the order its suggestion is listed, with what it searches
SUGGESTERS: tuple[tuple[Callable[[Problem, Attempt], str | None], str], ...] = (
    (_more_gpus, f"more GPUs (up to {MAX_NODES} nodes)"), (_activation_checkpointing, "activation checkpointing"),
    (_smaller_local_batch, "a smaller local batch"), (_shorter_sequence, "a shorter sequence"),
    (_larger_gpu, "every larger GPU preset"), (_other_global_batch, "nearby global batches"),
    (_fewer_pins, "dropping the pins"))
# Where every layout breaks a rule, the remedies that change what the rules read go first (the batch split, the
# pins, the world size); the memory remedies after them take what the budget leaves
RULE_REMEDIES_FIRST = (_other_global_batch, _fewer_pins, _more_gpus, _smaller_local_batch, _activation_checkpointing,
                       _shorter_sequence, _larger_gpu)


def suggestions(problem: Problem, check: Checker, estimate: Estimator, screen: Screen | None = None,
                space: type[Enumerator] | None = None, hopeless: Hopeless | None = None, *,
                any_legal: bool = True) -> tuple[list[str], list[str]]:
    """What would make a layout fit, in SUGGESTERS order, and the remedies the budget left unsearched
    (`any_legal`: some layout of the problem broke no rule)."""
    budget = _Budget(REMEDY_LAYOUTS)
    attempt = _attempt_with(check, estimate, screen, space, hopeless, budget, short_cp=not any_legal)
    found: dict[int, str] = {}
    untried: set[int] = set()
    position = {suggest: i for i, (suggest, _) in enumerate(SUGGESTERS)}
    for i in (range(len(SUGGESTERS)) if any_legal else [position[f] for f in RULE_REMEDIES_FIRST]):
        refused = budget.refused
        if hint := SUGGESTERS[i][0](problem, attempt):
            found[i] = hint
        elif budget.refused > refused:
            untried.add(i)
    return [found[i] for i in sorted(found)], [SUGGESTERS[i][1] for i in sorted(untried)]


def closest(result: Search) -> list[Candidate]:
    gpn = result.problem.cluster.gpus_per_node
    ordered = sorted(result.candidates, key=lambda c: (c.estimate.memory_gib, simplicity(c.layout, gpn)))
    return distinct_structures(ordered)[:CLOSEST_SHOWN]


def infeasible_error(result: Search, *, check: Checker, estimate: Estimator, screen: Screen | None = None,
                     space: type[Enumerator] | None = None, hopeless: Hopeless | None = None) -> InfeasibleError:
    """Nothing fits: the closest layouts and what would make one fit (`screen`, `space`: see `planner.search`;
    `hopeless`: a proof that nothing fits a variation, valid for `estimate`)."""
    problem = result.problem
    cluster = problem.cluster
    near = closest(result)
    hints, untried = suggestions(problem, check, estimate, screen, space, hopeless,
                                 any_legal=bool(result.candidates))
    dropped = sum(result.pruned.values())
    what = "no layout fits" if result.candidates else "no layout is legal (every one breaks a rule)"
    lines = [f"{what}: {problem.model.name} on {cluster.nodes} × {cluster.gpus_per_node} "
             f"{cluster.gpu.name} ({cluster.world_size} GPUs, {cluster.gpu.hbm_gib:g} GiB HBM, "
             f"{problem.memory_headroom:.0%} kept free); {result.considered} layouts considered, "
             f"{len(result.candidates)} estimated, none fits"]
    if near:
        lines.append("closest layouts (peak memory of the most loaded rank):")
        for c in near:
            est = c.estimate
            lines.append(f"  {c.layout.short()}: {est.memory_gib:.1f} GiB > {memory_limit_gib(problem, est):.1f} "
                         f"GiB limit ({largest_parts(est.memory)})")
    if dropped:
        lines.append("rules that dropped layouts:")
        lines += [f"  {rule}: {n} ({result.reasons.get(rule, '')})" for rule, n in sorted(result.pruned.items())]
    if hints:
        lines.append("what would make one fit:")
        lines += [f"  - {h}" for h in hints]
    else:
        searched = [label for _, label in SUGGESTERS if label not in untried]
        shards = f" (with at least {MIN_CP_TOKENS} tokens per CP rank)" if result.candidates else ""
        lines.append(f"nothing tried makes it fit: {', '.join(searched)} were searched{shards}")
    if untried:
        lines.append(f"not searched (the remedy search stops after {REMEDY_LAYOUTS:,} layouts): {', '.join(untried)}")
    return InfeasibleError("\n".join(lines), closest=near, suggestions=hints)

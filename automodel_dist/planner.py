"""Planner: enumerate every layout the world size admits, drop what breaks a rule, estimate the rest, rank.

The search is exhaustive over a bounded discrete space (strategy, tp, pp, vpp, cp, ep, HSDP replication,
activation checkpointing, local batch, pipeline micro batch). Sizes are generated so that they tile the
world (tp·cp·pp divides it, ep divides dp·cp·tp, the batch split divides the global batch); everything
generated still goes through the shared rules (`rules.check_layout`), so the compiler can never emit what
`validate` rejects and the pruning counts are the rules' own.

Four shortcuts keep it fast without changing the answer (tests/test_planner.py checks the premises on
the real cost model and compares the search with a brute-force walk over many problems: the same winner,
the same best layout of every structure, and the same fitting layouts but the ones the last shortcut
skips). A layout whose rule errors do not involve the batch split is checked once, with its smallest
batch: the other splits break the same rules. Within one structure, a batch split with several micro
batches per step is skipped when a split no larger in micro batch and in local batch did not fit: peak
memory grows with the tokens of a micro batch and with the micro batches a pipeline keeps in flight.
The split with one micro batch per step (no PP, no gradient accumulation) is judged on its own: it has
no deferred gradient sync (no unsharded gradients kept across micro batches, no weights kept gathered),
so it can fit where smaller splits do not. A split without activation checkpointing is skipped where the
same split with selective checkpointing did not fit: selective keeps a share of the same activations and
nothing else differs. (Full checkpointing is not ordered with either: it keeps a few whole layers'
activations for the layer being recomputed, more than a pipeline rank with few layers keeps without
checkpointing.) Under PP with the throughput objective, local batches are tried from the largest down (after
the smallest) and the smaller ones are skipped once one fits: at the same micro batch a smaller local batch
runs the same micro batches in more pipeline flushes, so it is never faster (it may need less memory, which
is why the memory objective judges them all).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import product
from typing import Any

from automodel_dist.cost.estimate import Estimate
from automodel_dist.dispatcher import choose_dispatcher, ep_group_in_domain
from automodel_dist.findings import ERROR, Finding
from automodel_dist.layout import AC_MODES, STRATEGIES, Layout
from automodel_dist.pipeline_stages import virtual_stage_options
from automodel_dist.problem import Problem
from automodel_dist.rules.registry import divisors
from automodel_dist.targets.automodel.model_classes import automodel_moe

Checker = Callable[..., list[Finding]]
Estimator = Callable[[Problem, Layout], Estimate]
# (problem, layout) -> (fits, the best value of the objective it could reach (smaller is better), its estimate
# when asked)
Screen = Callable[[Problem, Layout], tuple[bool, float, Callable[[], Estimate]]]

MIN_CP_TOKENS = 2048      # tokens per CP rank; Megatron-Bridge sizes CP ≈ seq/4096 (megatron-bridge.md A1)
# Which CP degrees a search walks: those leaving at least MIN_CP_TOKENS per rank (a speed heuristic), the shorter
# shards it skips, or both. The heuristic only orders the search: when no "long" layout fits, `plan` looks at the
# "short" ones before it declares that nothing is legal or fits.
CP_SHARDS = ("long", "short", "all")
MAX_VPP = 4               # stages per pp rank explored (measured tuned layouts use VPP 2-4, §5)
THROUGHPUT_TIE = 0.01     # within 1% of the best value of the objective is a tie (see rank)
ALTERNATIVES_KEPT = 100   # runner-up layouts (one per distinct structure) kept on a Plan
BATCH_PATHS = ("step_scheduler.", "distributed.pipeline.pp_microbatch_size")


@dataclass(frozen=True)
class Candidate:
    """A layout that passed every rule, with what the cost model says about it."""

    layout: Layout
    estimate: Estimate


@dataclass
class Plan:
    """The winner, the runners-up (best first), and how many generated layouts each rule dropped.

    `alternatives` keep the best layout of each distinct structure; `dropped` holds every layout a rule
    dropped with the errors it broke, `reasons` one example message per rule.
    """

    best: Candidate
    alternatives: list[Candidate]
    pruned: dict[str, int]
    considered: int
    reasons: dict[str, str] = field(default_factory=dict)
    feasible: int = 0
    dropped: list[tuple[Layout, tuple[Finding, ...]]] = field(default_factory=list)

    @property
    def dropped_count(self) -> int:
        """Layouts the rules dropped, each once however many rules it broke (`pruned` counts per rule)."""
        return len(self.dropped)


@dataclass
class Search:
    """Everything one enumeration saw: estimated candidates (fitting or not) and the rule drops."""

    problem: Problem
    candidates: list[Candidate] = field(default_factory=list)
    pruned: dict[str, int] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)
    considered: int = 0
    dropped: list[tuple[Layout, tuple[Finding, ...]]] = field(default_factory=list)
    untimed_fits: int = 0  # fitting layouts a bound showed could not place (not in `candidates`)
    legal: int = 0  # layouts that broke no rule (a first-fit search keeps no candidates to tell)

    @property
    def fitting(self) -> list[Candidate]:
        return [c for c in self.candidates if fits(self.problem, c.estimate)]


def memory_limit_gib(problem: Problem, estimate: Estimate) -> float:
    """The estimate's HBM less the intent's headroom: the planner fits against it, infeasible and the
    recipe header quote it."""
    return estimate.hbm_gib * (1.0 - problem.memory_headroom)


def fits(problem: Problem, estimate: Estimate) -> bool:
    """Fits with the intent's headroom kept free."""
    return estimate.fits and estimate.memory_gib <= memory_limit_gib(problem, estimate)


def _default_checker() -> Checker:
    """The shared layout rules, without the checks that can only warn (the search keeps errors)."""
    from functools import partial

    from automodel_dist.rules import check_layout

    return partial(check_layout, warnings=False)


def _default_estimator() -> Estimator:
    from automodel_dist.cost.model import estimate_layout

    return estimate_layout


def _pinned(allowed: tuple | None, natural: Iterable) -> list:
    return sorted(allowed) if allowed is not None else list(natural)


def layout_fields(problem: Problem, *, strategy: str, tp: int, pp: int, cp: int, ep: int, dp_replicate: int,
                  vpp: int, activation_checkpointing: str, dispatcher: str | None) -> dict:
    """A layout's fields but the batch split, with what follows from its sizes: schedule, sequence
    parallelism and the global batch (`dispatcher` is `choose_dispatcher`'s, cached by the caller)."""
    model = problem.model
    return {
        "world_size": problem.cluster.world_size, "strategy": strategy, "tp": tp, "pp": pp, "cp": cp, "ep": ep,
        "dp_replicate": dp_replicate, "vpp": vpp,
        "pp_schedule": None if pp == 1 else ("interleaved1f1b" if vpp > 1 else "1f1b"),
        "activation_checkpointing": activation_checkpointing,
        "sequence_parallel": strategy == "fsdp2" and tp > 1 and not model.is_moe,
        "global_batch_size": problem.training.global_batch_size,
        "dispatcher": dispatcher,
    }


def make_layout(problem: Problem, *, strategy: str, tp: int, pp: int, cp: int, ep: int, dp_replicate: int,
                vpp: int, activation_checkpointing: str | bool, local_batch_size: int = 1,
                micro_batch_size: int | None = None) -> Layout:
    """A layout with what follows from its sizes (see `layout_fields`); micro batch = local batch without PP."""
    fields = layout_fields(problem, strategy=strategy, tp=tp, pp=pp, cp=cp, ep=ep, dp_replicate=dp_replicate,
                           vpp=vpp, activation_checkpointing=activation_checkpointing,
                           dispatcher=choose_dispatcher(problem.model, problem.cluster, ep).name)
    return Layout(**fields, local_batch_size=local_batch_size,
                  micro_batch_size=local_batch_size if micro_batch_size is None else micro_batch_size)


class _Standing:
    """What the fitting layouts timed so far guarantee about the final ranking (see `rank`).

    A layout whose best case (a ceiling on its throughput; under the memory objective its exact peak) is
    outside the best value's tie band and strictly worse than the best layouts of `ALTERNATIVES_KEPT` + 1
    distinct structures ranks behind all of them: it is neither the winner nor the best of a structure
    among the alternatives kept, so it need not be timed. Values only improve as the search goes on, so
    a cut-off refreshed now and then is a safe (looser) one.
    """

    KEPT = ALTERNATIVES_KEPT + 1
    REFRESH = 64  # improvements between cut-off refreshes
    MARGIN = 1e-9  # relative: the bound and the estimate sum the same parts in different orders

    def __init__(self, memory_objective: bool) -> None:
        self.memory = memory_objective
        self.by_structure: dict[tuple, float] = {}  # best value per structure, smaller is better
        self.best = float("inf")
        self.cutoff = float("inf")
        self.improved = 0

    def add(self, candidate: Candidate) -> None:
        est = candidate.estimate
        value = est.memory_gib if self.memory else -est.tokens_per_s_per_gpu
        self.best = min(self.best, value)
        key = structure(candidate.layout)
        if value < self.by_structure.get(key, float("inf")):
            self.by_structure[key] = value
            self.improved += 1
            if self.improved >= self.REFRESH or (self.cutoff == float("inf")
                                                 and len(self.by_structure) >= self.KEPT):
                self.cutoff = heapq.nsmallest(self.KEPT, self.by_structure.values())[-1] \
                    if len(self.by_structure) >= self.KEPT else float("inf")
                self.improved = 0

    def cannot_place(self, best_case: float) -> bool:
        """Whether a layout whose value (peak GiB, or minus tokens/s/GPU) is at best `best_case` ranks behind."""
        value = best_case - abs(best_case) * self.MARGIN
        return value > self.best + abs(self.best) * THROUGHPUT_TIE and value > self.cutoff


class _Misses:
    """The batch splits of one structure that did not fit, and which untried splits they rule out (see
    `Enumerator.walk_batches`): a split with several micro batches per step is ruled out by a miss no larger
    in micro batch and in local batch; the one-micro-batch split only by itself. Kept per micro batch (its
    smallest missing local batch), so a check costs the micro batch sizes, not every miss so far (a search
    where nothing fits piles up hundreds per structure)."""

    def __init__(self) -> None:
        self.least: dict[int, int] = {}  # micro batch -> smallest local batch that did not fit (several)
        self.single: set[tuple[int, int]] = set()  # (micro, local) of one-micro-batch splits that did not fit

    def copy(self) -> _Misses:
        other = _Misses()
        other.least, other.single = dict(self.least), set(self.single)
        return other

    def add(self, mbs: int, lbs: int, several: bool) -> None:
        if several:
            self.least[mbs] = min(lbs, self.least.get(mbs, lbs))
        else:
            self.single.add((mbs, lbs))

    def rule_out(self, mbs: int, lbs: int, several: bool) -> bool:
        if several:
            return any(m <= mbs and b <= lbs for m, b in self.least.items())
        return (mbs, lbs) in self.single


class Enumerator:
    """One pass over the space for one problem; records drops, estimates and the count considered.

    With `screen` (the cost model's `screen_layout`), the walk only sorts layouts into fitting and not; the
    fitting ones are then timed best case first (`time_fitting`), so the best values come early and
    `_Standing` rules out the rest sooner; those it shows cannot place are counted but not timed. Layouts
    that do not fit are timed only if nothing fits (in their order, as an exhaustive search would have
    listed them)."""

    def __init__(self, problem: Problem, check: Checker, estimate: Estimator, first_fit: bool,
                 screen: Screen | None = None, cp_shards: str = "long") -> None:
        if cp_shards not in CP_SHARDS:
            raise ValueError(f"cp_shards must be one of {CP_SHARDS}, got {cp_shards!r}")
        self.p = problem
        self.cp_shards = cp_shards
        self.check = check
        self.estimate = estimate
        self.first_fit = first_fit
        self.screen = screen
        self.standing = _Standing(problem.objective == "memory")
        self.unfit: list[tuple[Layout, Callable[[], Estimate]]] = []  # not fitting, not yet timed (with `screen`)
        # fitting, not yet timed (with `screen`): (best case, order, layout, its estimate when asked)
        self.untimed: list[tuple[float, int, Layout, Callable[[], Estimate]]] = []
        self.search = Search(problem)
        self.found_fit = False
        model, cluster = problem.model, problem.cluster
        self.W = cluster.world_size
        self.nvl = cluster.nvlink_domain
        self.gpn = cluster.gpus_per_node
        # a first-fit search only asks whether each layout is legal: the checker may stop at its first error
        self.rule_kwargs = {"model": model, "cluster": cluster, "training": problem.training,
                            **({"first_error": True} if first_fit else {})}
        self.divisor_cache: dict[int, list[int]] = {}
        self.batch_cache: dict[tuple[int, int], list[tuple[int, list[int]]]] = {}
        self.dispatchers: dict[int, list[str | None]] = {}

    def divisors(self, n: int) -> list[int]:
        if n not in self.divisor_cache:
            self.divisor_cache[n] = divisors(n)
        return self.divisor_cache[n]

    # -- the natural domain of each dimension -------------------------------------------------------------
    def tps(self, strategy: str) -> list[int]:
        natural = [1] if strategy == "ddp" else [d for d in self.divisors(self.W)
                                                 if ep_group_in_domain(d, self.nvl, self.W)]  # TP groups inside NVLink
        return _pinned(self.p.pins.tp, natural)

    def pps(self, strategy: str, tp: int) -> list[int]:
        layers = self.p.model.num_layers
        natural = [d for d in self.divisors(self.W // tp) if d <= layers] if strategy == "fsdp2" else [1]
        if self.p.pins.micro_batch_size is not None:  # it pins the pipeline's micro batch: a pipeline it is
            natural = [d for d in natural if d > 1]
        return _pinned(self.p.pins.pp, natural)

    def cps(self, strategy: str, tp: int, pp: int) -> list[int]:
        """The CP degrees that split the sequence into 2·cp equal chunks, those `cp_shards` asks for."""
        seq = self.p.training.seq_length
        legal = [1] if strategy == "ddp" else [c for c in self.divisors(self.W // (tp * pp))
                                                if c == 1 or seq % (2 * c) == 0]
        if self.cp_shards != "all":
            short = self.cp_shards == "short"
            legal = [c for c in legal if (c > 1 and seq // c < MIN_CP_TOKENS) == short]
        return _pinned(self.p.pins.cp, legal)

    def eps(self, strategy: str, pp: int) -> list[int]:
        model = self.p.model
        if strategy == "fsdp2" and automodel_moe(model):  # the only classes AutoModel expert-shards
            natural = [e for e in self.divisors(self.W // pp) if e <= model.num_routed_experts]
        else:
            natural = [1]
        return _pinned(self.p.pins.ep, natural)

    def dprs(self, strategy: str, tp: int, cp: int, dp: int) -> list[int]:
        """1 (shard across all of dp), or shard within a node / NVLink domain and replicate across."""
        natural = {1}
        if strategy == "fsdp2":
            for domain in (self.gpn, self.nvl):
                if domain % (tp * cp) == 0:
                    shard = domain // (tp * cp)
                    if shard >= 2 and dp % shard == 0 and dp // shard > 1:
                        natural.add(dp // shard)
        return _pinned(self.p.pins.dp_replicate, sorted(natural))

    def vpps(self, pp: int) -> list[int]:
        pins = self.p.pins.vpp
        if pp == 1:  # without a pipeline there are no virtual stages (AutoModel drops the block)
            return [1] if pins is None or 1 in pins else []
        natural = [1, *virtual_stage_options(self.p.model.num_layers, pp, MAX_VPP)]
        return _pinned(pins, natural)

    def dispatcher_options(self, ep: int) -> list[str | None]:
        """The dispatcher `choose_dispatcher` picks, or with EP the intent's pinned ones."""
        if ep not in self.dispatchers:
            pinned = self.p.pins.dispatcher
            self.dispatchers[ep] = (list(pinned) if pinned is not None and ep > 1 and self.p.model.is_moe
                                    else [choose_dispatcher(self.p.model, self.p.cluster, ep).name])
        return self.dispatchers[ep]

    def acs(self, strategy: str) -> list[str]:
        """Checkpointing modes in `AC_MODES` order, "off" last: it cannot fit where a checkpointed twin does not.

        AutoModel runs selective checkpointing with fsdp2 and ddp only (R5: a pin asking for it elsewhere is
        left to that rule), and MegatronFSDP skips any checkpointing when world > 1 (automodel.md §3.3)."""
        natural = AC_MODES if strategy != "megatron_fsdp" else ("off",) if self.W > 1 else ("full", "off")
        allowed = _pinned(self.p.pins.activation_checkpointing, natural)
        return sorted(allowed, key=AC_MODES.index)

    def ac_left_out(self, strategy: str, mode: str) -> str | None:
        """Why `acs(strategy)` leaves checkpointing `mode` out (None: it searches it)."""
        if mode in self.acs(strategy):
            return None
        pins = self.p.pins.activation_checkpointing
        if pins is not None and mode not in pins:
            return "the intent pins parallelism.activation_checkpointing"
        return self.ac_domain_note(strategy)

    def ac_domain_note(self, strategy: str) -> str:
        """Why the checkpointing modes `strategy` can run are fewer than AC_MODES (only MegatronFSDP's are)."""
        if self.W > 1:
            return "AutoModel skips activation checkpointing with MegatronFSDP on more than one GPU"
        return "AutoModel runs selective checkpointing with fsdp2 and ddp only"

    def batches(self, pp: int, dp: int) -> list[tuple[int, list[int]]]:
        """(micro batch, [local batches ascending]) pairs, micro batch ascending: memory grows along both.

        Every local batch whose split divides the global batch (3 and 6 too: a global batch of 384 over 128
        data-parallel ranks has no other); under PP, every micro batch that divides it into at least pp micro
        batches."""
        key = (pp, dp)
        if key not in self.batch_cache:
            self.batch_cache[key] = self._batches(pp, dp)
        return self.batch_cache[key]

    def _batches(self, pp: int, dp: int) -> list[tuple[int, list[int]]]:
        pins = self.p.pins
        gbs = self.p.training.global_batch_size
        per_rank = gbs // dp if dp > 0 and gbs % dp == 0 else 0
        lbs_all = [b for b in _pinned(pins.local_batch_size, self.divisors(per_rank) if per_rank else [])
                   if per_rank and per_rank % b == 0]
        if pp == 1:  # the micro batch is the local batch; a micro_batch_size pin is for pp > 1 only
            return [(b, [b]) for b in lbs_all]
        out = []
        for mbs in _pinned(pins.micro_batch_size, sorted({m for b in lbs_all for m in self.divisors(b)})):
            lbs = [b for b in lbs_all if b % mbs == 0 and b // mbs >= pp]
            if lbs:
                out.append((mbs, lbs))
        return out

    def strategies(self) -> list[str]:
        return _pinned(self.p.pins.strategy, STRATEGIES)

    def expert_options(self, strategy: str, pp: int, tp: int) -> list[tuple[int, int]]:
        """(ep, etp) pairs; AutoModel has no expert tensor parallelism."""
        return [(ep, 1) for ep in self.eps(strategy, pp)]

    def fields(self, *, etp: int, **sizes: Any) -> dict:
        """The layout's fields but the batch split (`layout_fields`; AutoModel's etp is always 1)."""
        return layout_fields(self.p, **sizes)

    def make(self, base: dict, local_batch_size: int, micro_batch_size: int) -> Layout:
        """The layout of one structure (`fields`) with one batch split."""
        return Layout(**base, local_batch_size=local_batch_size, micro_batch_size=micro_batch_size)

    # -- the walk ---------------------------------------------------------------------------------------
    def structures(self) -> Iterator[tuple[dict, int]]:
        """Every (layout fields but the batch split, dp) the world size admits, in a fixed order."""
        for strategy in self.strategies():
            for tp in self.tps(strategy):
                for pp in self.pps(strategy, tp):
                    for cp in self.cps(strategy, tp, pp):
                        denom = tp * cp * (1 if strategy == "megatron_fsdp" else pp)
                        dp = self.W if strategy == "ddp" else self.W // denom
                        for (ep, etp), dpr, vpp, ac in product(self.expert_options(strategy, pp, tp),
                                                               self.dprs(strategy, tp, cp, dp),
                                                               self.vpps(pp), self.acs(strategy)):
                            for dispatcher in self.dispatcher_options(ep):
                                yield self.fields(strategy=strategy, tp=tp, pp=pp, cp=cp, ep=ep, etp=etp,
                                                  dp_replicate=dpr, vpp=vpp, activation_checkpointing=ac,
                                                  dispatcher=dispatcher), dp

    def run(self) -> Search:
        selective: tuple[dict, _Misses] = ({}, _Misses())  # the last selective structure's misses
        for base, dp in self.structures():
            mode = base["activation_checkpointing"]
            twin = {**base, "activation_checkpointing": "selective"}
            known = selective[1] if mode == "off" and selective[0] == twin else _Misses()
            too_big = self.walk_batches(base, dp, known)
            if mode == "selective":
                selective = (base, too_big)
            if self.first_fit and self.found_fit:
                break
        if self.screen is not None:
            self.time_fitting()
            if not self.found_fit and not self.first_fit:
                self.search.candidates = [Candidate(lay, timed()) for lay, timed in self.unfit]
        return self.search

    def time_fitting(self) -> None:
        """Time the fitting layouts the screen passed, best case first, until `_Standing` shows the next cannot
        place: its best case is the best of those left and the standing only tightens, so none of them can.
        Candidates are kept in the walk's order, as an exhaustive search lists them."""
        timed: list[tuple[int, Candidate]] = []
        self.untimed.sort(key=lambda item: item[:2])
        for done, (best_case, order, layout, timed_estimate) in enumerate(self.untimed):
            if self.standing.cannot_place(best_case):
                self.search.untimed_fits += len(self.untimed) - done
                break
            candidate = Candidate(layout, timed_estimate())
            self.standing.add(candidate)
            timed.append((order, candidate))
        self.search.candidates = [candidate for _, candidate in sorted(timed, key=lambda item: item[0])]

    def walk_batches(self, base: dict, dp: int, known: _Misses) -> _Misses:
        """Judge the batch splits of one structure, micro batch ascending; return the splits that did not fit.

        A split is skipped when it cannot fit (see the module docstring): with several micro batches per
        step, when a split no larger in both batches did not fit; the one-micro-batch split, only when the
        same split did not fit. `known` are the misses of the same structure with selective checkpointing.
        A pipeline chasing throughput tries its smallest local batch, then walks down from the largest and
        stops at the first that fits.
        """
        batches = self.batches(base["pp"], dp)
        if not batches:  # no batch split divides the global batch: let the rules say why
            pins = self.p.pins
            lbs = min(pins.local_batch_size or (1,))
            mbs = min(pins.micro_batch_size or (lbs,))  # a pinned micro batch is judged as pinned, at any PP
            self.judge(self.make(base, lbs, mbs))
            return _Misses()
        gbs = self.p.training.global_batch_size
        largest_first = base["pp"] > 1 and self.p.objective == "throughput"
        too_big = known.copy()
        for mbs, lbs_list in batches:
            if base["pp"] > 1 and too_big.rule_out(mbs, lbs_list[0], True):
                continue  # under PP every split has several micro batches: the row's smallest rules out the rest
            # the smallest first: when it does not fit, no local batch at this or a larger micro batch does
            order = [lbs_list[0], *reversed(lbs_list[1:])] if largest_first else lbs_list
            for i, lbs in enumerate(order):
                several = base["pp"] > 1 or lbs * dp < gbs
                if too_big.rule_out(mbs, lbs, several):
                    continue
                verdict = self.judge(self.make(base, lbs, mbs))
                if verdict == "structural":
                    return _Misses()
                if verdict == "too-big":
                    too_big.add(mbs, lbs, several)
                elif verdict == "fits" and largest_first and i > 0:
                    break
        return too_big

    def judge(self, layout: Layout) -> str:
        """'structural' | 'batch' (a rule broke) | 'too-big' | 'fits'."""
        self.search.considered += 1
        errors = [f for f in self.check(layout, **self.rule_kwargs) if f.severity == ERROR]
        if errors:
            if not self.first_fit:  # a first-fit search reports only what fits (the remedy search's re-plans)
                self.search.dropped.append((layout, tuple(errors)))
                for rule in dict.fromkeys(f.rule for f in errors):
                    self.search.pruned[rule] = self.search.pruned.get(rule, 0) + 1
                    if rule not in self.search.reasons:
                        self.search.reasons[rule] = next(f.message for f in errors if f.rule == rule)
            batch = any(f.path.startswith(BATCH_PATHS) for f in errors)
            return "batch" if batch else "structural"
        self.search.legal += 1
        if self.screen is not None:
            fit, best_case, timed = self.screen(self.p, layout)
            if not fit:
                self.unfit.append((layout, timed))
                return "too-big"
            self.untimed.append((best_case, self.search.considered, layout, timed))
            self.found_fit = True
            return "fits"
        candidate = Candidate(layout, self.estimate(self.p, layout))
        self.search.candidates.append(candidate)
        if fits(self.p, candidate.estimate):
            self.found_fit = True
            return "fits"
        return "too-big"


def search(problem: Problem, *, check: Checker | None = None, estimate: Estimator | None = None,
           first_fit: bool = False, screen: Screen | None = None, space: type[Enumerator] | None = None,
           cp_shards: str = "long") -> Search:
    """Enumerate, prune and estimate (no ranking). `first_fit` stops at the first layout that fits; with a
    `screen` it times no layout that does not fit (`candidates` then holds the fitting one only).

    `space` is the target's enumerator (AutoModel's by default); another target overrides the domains.
    `cp_shards` (CP_SHARDS) picks the CP degrees walked.
    """
    return (space or Enumerator)(problem, check or _default_checker(), estimate or _default_estimator(),
                                 first_fit, screen, cp_shards).run()


def short_cp_search(problem: Problem, *, check: Checker, estimate: Estimator, screen: Screen | None = None,
                    space: type[Enumerator] | None = None) -> Search | None:
    """A first-fit search over the CP degrees MIN_CP_TOKENS skips (None when CP is pinned: the pin holds).

    The heuristic is for speed: it must not decide that no layout is legal or fits (a global batch of 2 on 8
    GPUs needs dp 2, so CP 4: 1,024 tokens a rank of a 4,096-token sequence; the long shards leave dp 4 or 8)."""
    if problem.pins.cp is not None:
        return None
    return search(problem, check=check, estimate=estimate, first_fit=True, screen=screen, space=space,
                  cp_shards="short")


# -- ranking ----------------------------------------------------------------------------------------------
def structure(layout: Layout) -> tuple:
    """What makes two layouts different beyond their batch split."""
    return (layout.strategy, layout.tp, layout.pp, layout.vpp, layout.cp, layout.ep, layout.dp_replicate,
            layout.activation_checkpointing)


def groups_leaving_node(layout: Layout, gpus_per_node: int) -> int:
    """How many of the TP, TP·CP and EP groups span more than one node."""
    return sum(not ep_group_in_domain(size, gpus_per_node, layout.world_size)
               for size in (layout.tp, layout.tp * layout.cp, layout.ep) if size > 1)


def simplicity(layout: Layout, gpus_per_node: int) -> tuple:
    """The simplicity key: smaller is simpler, compared in this order.

    1. parallel dimensions in use (tp, pp, cp, ep, dp_replicate and virtual stages greater than 1);
    2. TP, TP·CP and EP groups leaving a node;
    3. the strategy, in `STRATEGIES` order (fsdp2, megatron_fsdp, ddp);
    4. the sizes tp, pp, vpp, cp, ep, dp_replicate, smallest first;
    5. no activation checkpointing, then full, then selective (no recompute; then the plainer policy).
    Two layouts with the same key differ only in their batch split.
    """
    dims = sum(x > 1 for x in (layout.tp, layout.pp, layout.cp, layout.ep, layout.dp_replicate, layout.vpp))
    return (dims, groups_leaving_node(layout, gpus_per_node), STRATEGIES.index(layout.strategy)
            if layout.strategy in STRATEGIES else len(STRATEGIES), layout.tp, layout.pp, layout.vpp, layout.cp,
            layout.ep, layout.dp_replicate, _AC_SIMPLICITY.index(layout.activation_checkpointing))


_AC_SIMPLICITY = ("off", "full", "selective")


def rank(problem: Problem, candidates: Sequence[Candidate]) -> list[Candidate]:
    """Best first. A tie is a candidate within `THROUGHPUT_TIE` of the best value of the objective.

    Throughput: tokens/s/GPU at least (1 - 1%) of the highest is a tie; memory: a peak at most (1 + 1%) of
    the lowest. Ties come first, simplest first (`simplicity`), then by the objective, then the smaller
    batch split; the rest follow by the objective, then simplicity. Every candidate is measured against the
    one best value, not against fixed buckets (whose edges can split two layouts 0.3% apart), so a simpler
    layout within 1% of the best always wins over it.
    """
    if not candidates:
        return []
    gpn = problem.cluster.gpus_per_node
    memory = problem.objective == "memory"
    lowest = min(c.estimate.memory_gib for c in candidates)
    highest = max(c.estimate.tokens_per_s_per_gpu for c in candidates)

    def key(c: Candidate) -> tuple:
        est, simple = c.estimate, simplicity(c.layout, gpn)
        if memory:
            tied = est.memory_gib <= lowest * (1.0 + THROUGHPUT_TIE)
            objective = (est.memory_gib, -est.tokens_per_s_per_gpu)
        else:
            tied = est.tokens_per_s_per_gpu >= highest * (1.0 - THROUGHPUT_TIE)
            objective = (-est.tokens_per_s_per_gpu, est.memory_gib)
        return (not tied, simple if tied else (), *objective, simple, _batch(c.layout))

    return sorted(candidates, key=key)


def _batch(layout: Layout) -> tuple[int, int]:
    return layout.local_batch_size, layout.micro_batch_size


def distinct_structures(candidates: Iterable[Candidate]) -> list[Candidate]:
    """The first (best) candidate of each structure, order kept."""
    seen: set[tuple] = set()
    out = []
    for c in candidates:
        key = structure(c.layout)
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out


def plan(problem: Problem, *, check: Checker | None = None, estimate: Estimator | None = None,
         screen: Screen | None = None, exhaustive: bool = False, space: type[Enumerator] | None = None) -> Plan:
    """The best layout for the objective, the runners-up, and what the rules pruned.

    With a `screen` (the cost model's `screen_layout` with its own estimator; a target's own beside its
    estimator), fitting layouts whose throughput ceiling (memory objective: peak) cannot place are counted but
    not timed (`_Standing`); `exhaustive` times every layout (the same plan: tests/test_planner.py and
    tests/test_megatron_plan.py compare the two).
    When no layout with MIN_CP_TOKENS per CP rank fits, the shorter CP shards are searched too (`short_cp_search`).
    Raises InfeasibleError (exit 1) when nothing fits, with the closest layouts and what would make one fit.
    """
    hopeless = None
    if estimate is None:  # the cost model's own bounds hold
        from automodel_dist.cost.model import cannot_fit, screen_layout

        screen = screen or screen_layout
        hopeless = cannot_fit
    if exhaustive:
        screen = None
    check = check or _default_checker()
    estimate = estimate or _default_estimator()
    result = search(problem, check=check, estimate=estimate, screen=screen, space=space)
    ranked = rank(problem, result.fitting)
    if not ranked and not (hopeless is not None and hopeless(problem)):
        short = short_cp_search(problem, check=check, estimate=estimate, screen=screen, space=space)
        # a short-shard layout fits, or is legal where no other is: the answer (or the report) is the whole space's
        if short is not None and (short.fitting or (short.legal and not result.legal)):
            result = search(problem, check=check, estimate=estimate, screen=screen, space=space, cp_shards="all")
            ranked = rank(problem, result.fitting)
    if not ranked:
        from automodel_dist.infeasible import infeasible_error

        raise infeasible_error(result, check=check, estimate=estimate, screen=screen, space=space, hopeless=hopeless)
    best = ranked[0]
    runners = [c for c in distinct_structures(ranked) if structure(c.layout) != structure(best.layout)]
    return Plan(best=best, alternatives=runners[:ALTERNATIVES_KEPT], pruned=dict(sorted(result.pruned.items())),
                considered=result.considered, reasons=dict(sorted(result.reasons.items())),
                feasible=len(ranked) + result.untimed_fits,
                dropped=result.dropped)



"""The planner's search space for Megatron-Bridge, and the checker and estimator it searches with.

The same planner walks it (`planner.plan(..., space=MegatronSpace)`); only the domains differ from
AutoModel's: one strategy (Megatron's DDP with the distributed optimizer; no FSDP2 or HSDP), PP need not
divide the layers (a pipeline layout string places them), EP·ETP must divide the ranks of one stage
(Megatron folds the expert mesh over TP·CP·DP), ETP divides TP (the skills: "rarely used"), recompute is
selective or none, and with PP a step's whole per-rank batch goes through one pipeline flush. Every
candidate is judged with the settings the emitter would write for it (`choose.decide`), so the
compiler never writes what `validate --target megatron-bridge` rejects.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache
from typing import Any, NamedTuple

from automodel_dist.catalog.specs import ClusterSpec, ModelSpec
from automodel_dist.cost.estimate import Estimate
from automodel_dist.cost.memory import RecipeOptions
from automodel_dist.cost.model import (
    estimate_layout,
    memory_limit_gib,
    peak_gib,
    tokens_ceiling,
    with_recompute_modules,
)
from automodel_dist.findings import Finding
from automodel_dist.layout import AC_MODES, Layout
from automodel_dist.planner import MAX_VPP, Enumerator, _pinned
from automodel_dist.problem import Problem, TrainingSpec
from automodel_dist.targets.megatron_bridge.choose import (
    cost_options,
    decide,
    dispatcher_of,
    layout_dispatcher,
    recompute_candidates,
    settings_for_rules,
)
from automodel_dist.targets.megatron_bridge.flops import megatron_flops_per_token, vocab_divisible_by
from automodel_dist.targets.megatron_bridge.overrides import DIST_OPTIMIZER, MegatronSettings, OverrideSet
from automodel_dist.targets.megatron_bridge.parse import megatron_layout
from automodel_dist.targets.megatron_bridge.recipes import recipe_for
from automodel_dist.targets.megatron_bridge.rules import check_batch_split, check_structure


class MegatronSpace(Enumerator):
    """Megatron-Bridge's domains over the shared enumeration."""

    def strategies(self) -> list[str]:
        return [DIST_OPTIMIZER]

    def pps(self, strategy: str, tp: int) -> list[int]:
        """The PP sizes the minimum-GPU formula leaves room for: PP·max(TP·CP, EP·ETP) divides the world, so
        (CP and EP at least 1) PP·TP divides it; no more stages than layers. A TP that does not divide the world
        leaves none (its layouts are pruned with Megatron's message, not offered at a floored PP)."""
        layers = self.p.model.num_layers
        return _pinned(self.p.pins.pp, [d for d in self.divisors(self.W) if self.W % (d * tp) == 0 and d <= layers])

    def eps(self, strategy: str, pp: int) -> list[int]:
        model = self.p.model
        natural = [e for e in self.divisors(self.W // pp)
                   if e <= model.num_routed_experts and model.num_routed_experts % e == 0] if model.is_moe else [1]
        return _pinned(self.p.pins.ep, natural)

    def expert_options(self, strategy: str, pp: int, tp: int) -> list[tuple[int, int]]:
        """(ep, etp): expert tensor parallelism up to the dense TP (an expert split no wider than the
        attention's, inside its NVLink group); EP x ETP must divide a stage's ranks."""
        stage = self.W // pp
        split = self.divisors(tp) if not self.p.model.mlp_bias else [1]  # biased experts: ETP 1 (mb-moe-bias-etp)
        return [(ep, etp) for ep in self.eps(strategy, pp)
                for etp in (split if ep > 1 else [1]) if stage % (ep * etp) == 0]

    def dprs(self, strategy: str, tp: int, cp: int, dp: int) -> list[int]:
        return [1]

    def vpps(self, pp: int) -> list[int]:
        if pp == 1:
            return [1] if self.p.pins.vpp is None or 1 in self.p.pins.vpp else []
        natural = [v for v in range(1, MAX_VPP + 1) if pp * v <= self.p.model.num_layers]
        return _pinned(self.p.pins.vpp, natural)

    def acs(self, strategy: str) -> list[str]:
        """Selective recompute or none (megatron-bridge.md §10: the narrowest recompute first); full when pinned."""
        return sorted(_pinned(self.p.pins.activation_checkpointing, ("selective", "off")), key=AC_MODES.index)

    def ac_domain_note(self, strategy: str) -> str:
        return "the megatron-bridge target searches selective recompute or none; full recompute only when pinned"

    def dispatcher_options(self, ep: int) -> list[str | None]:
        """The one dispatcher `choose.dispatcher_of` writes for this EP size (None for a dense model)."""
        if ep not in self.dispatchers:
            self.dispatchers[ep] = [layout_dispatcher(*dispatcher_of(self.p, ep)[:2]) if self.p.model.is_moe
                                    else None]
        return self.dispatchers[ep]

    def fields(self, *, etp: int, **sizes: Any) -> dict:
        tp, pp = sizes["tp"], sizes["pp"]
        return {"world_size": self.W, "tp": tp, "pp": pp, "vpp": sizes["vpp"], "cp": sizes["cp"],
                "ep": sizes["ep"], "etp": etp, "sequence_parallel": tp > 1,
                "activation_checkpointing": sizes["activation_checkpointing"],
                "global_batch_size": self.p.training.global_batch_size, "dispatcher": sizes["dispatcher"]}

    def make(self, base: dict, local_batch_size: int, micro_batch_size: int) -> Layout:
        return megatron_layout(**base, micro_batch_size=micro_batch_size)

    def _batches(self, pp: int, dp: int) -> list[tuple[int, list[int]]]:
        """Without PP, as AutoModel's (micro batches accumulate), but a micro_batch_size pin holds: Megatron's
        `train.micro_batch_size` is the forward batch at any PP size; with PP, one flush of global/DP samples."""
        if pp == 1:
            pinned = self.p.pins.micro_batch_size
            return [(m, b) for m, b in super()._batches(pp, dp) if pinned is None or m in pinned]
        gbs = self.p.training.global_batch_size
        if dp <= 0 or gbs % dp:
            return []
        local = gbs // dp
        micro = [m for m in _pinned(self.p.pins.micro_batch_size, self.divisors(local))
                 if local % m == 0 and local // m >= pp]
        return [(m, [local]) for m in micro]


def problem_of(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec) -> Problem:
    return Problem(model=model, cluster=cluster, training=training)


class _Structure:
    """A layout that hashes and compares by its fields but the batch split: the key of what `_judged` finds once per
    structure."""

    __slots__ = ("key", "layout")

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self.key = (layout.world_size, layout.tp, layout.pp, layout.vpp, layout.cp, layout.ep, layout.etp,
                    layout.sequence_parallel, layout.activation_checkpointing, layout.dispatcher,
                    layout.global_batch_size)

    def __hash__(self) -> int:
        return hash(self.key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Structure) and self.key == other.key


class _Judged(NamedTuple):
    """What the rules judge and the screen prices of one structure: the settings for the rules
    (`choose.settings_for_rules`), how they run (`choose.cost_options`), and the findings of the rules that do not
    read the batch split."""

    settings: MegatronSettings
    options: RecipeOptions
    findings: tuple[Finding, ...]


@lru_cache(maxsize=4096)
def _judged(problem: Problem, structure: _Structure) -> _Judged:
    """Once per structure: without the recompute ladder nothing here reads the batch split (tests/test_megatron_plan.py
    checks it against every batch split)."""
    layout = structure.layout
    settings = settings_for_rules(problem, layout)
    findings = check_structure(OverrideSet(layout, settings), model=problem.model, cluster=problem.cluster)
    return _Judged(settings, cost_options(problem, layout, settings), tuple(findings))


def check_planned(layout: Layout, *, model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec,
                  first_error: bool = False) -> list[Finding]:
    """The Megatron rules on `layout` with the settings the emitter would write for it, but for the recompute set
    a selective layout's ladder picks, on which no verdict depends (`choose.settings_for_rules`); all of them: a
    first-fit search's `first_error` saves nothing here. The rules that do not read the batch split run once per
    structure."""
    judged = _judged(problem_of(model, cluster, training), _Structure(layout))
    return [*judged.findings,
            *check_batch_split(OverrideSet(layout, judged.settings), model=model, cluster=cluster)]


def screen_planned(problem: Problem, layout: Layout) -> tuple[bool, float, Callable[[], Estimate]]:
    """The planner's screen (`planner.Screen`) on the override set the emitter writes for `layout`: whether it fits,
    the best value it could reach (smaller is better) and how to time it (`estimate_planned`).

    The recompute ladder runs only where a bound cannot answer: recomputing more never raises a rank's peak, so a
    selective layout is unfit when recomputing every label the rules allow does not fit, and fits when recomputing
    none does. Recomputing none also gives the lowest step-time floor (no replay, attention in a Blackwell graph), so
    the ceiling is taken there; not the fastest estimate, which can gain a hair from recompute hiding more gradient
    reduction, but the floor counts no communication. Under the memory objective the best value is the peak with
    every label recomputed, a floor under the written set's."""
    def timed() -> Estimate:
        return estimate_planned(problem, layout)

    limit = memory_limit_gib(problem)
    options = _judged(problem, _Structure(layout)).options
    peak = lowest = peak_gib(problem, layout, options)
    if layout.activation_checkpointing == "selective" and (peak > limit or problem.objective == "memory"):
        lowest = peak_gib(problem, layout, with_recompute_modules(options, recompute_candidates(problem.model)))
        if lowest > limit:
            return False, math.inf, timed
        if peak > limit:  # between the bounds: the ladder decides
            peak = lowest = peak_gib(problem, layout, megatron_options(problem, layout))
    if peak > limit:
        return False, math.inf, timed
    if problem.objective == "memory":
        return True, lowest, timed
    return True, -tokens_ceiling(problem, layout, options), timed


def megatron_options(problem: Problem, layout: Layout) -> RecipeOptions:
    """How the override set the emitter writes for `layout` runs, for the cost model (`choose.cost_options`)."""
    return cost_options(problem, layout, decide(problem, layout)[0])


def megatron_flops(problem: Problem, layout: Layout, mtp_layers: int | None = None) -> float:
    """Megatron-Bridge's model FLOPs per token (its logged TFLOP/s' count) of the override set the emitter writes for
    `layout`: the MTP depths it trains (`mtp_layers`, else the emitter's), the vocabulary padded as its recipe
    function's bridge pads it."""
    mtp = megatron_options(problem, layout).mtp_layers if mtp_layers is None else mtp_layers
    return _flops_per_token(problem.model, problem.training.seq_length, problem.training.task, layout.tp, mtp)


@lru_cache(maxsize=256)
def _flops_per_token(model: ModelSpec, seq_length: int, task: str, tp: int, mtp_layers: int) -> float:
    """`megatron_flops`, once per job and TP (the planner reports it for every layout it times)."""
    recipe = recipe_for(model, task)
    return megatron_flops_per_token(model, seq_length, tp=tp, mtp_layers=mtp_layers,
                                    vocab_divisible_by=vocab_divisible_by(recipe.function if recipe else None))


def in_megatron_count(problem: Problem, layout: Layout, estimate: Estimate, mtp_layers: int) -> Estimate:
    """`estimate` with its TFLOP/s and MFU in Megatron-Bridge's FLOP count, the figure its training log prints
    (the cost model counts FLOPs as AutoModel does: no MTP, no padded vocabulary, its own attention count)."""
    tflops = estimate.tokens_per_s_per_gpu * megatron_flops(problem, layout, mtp_layers) / 1e12
    scale = tflops / estimate.tflops_per_gpu if estimate.tflops_per_gpu else 0.0
    # built from the fields directly: `dataclasses.replace` re-checks each field, a visible share of a compile
    return Estimate(**{**vars(estimate), "tflops_per_gpu": tflops, "mfu": estimate.mfu * scale})


def estimate_megatron_run(problem: Problem, layout: Layout, options: RecipeOptions) -> Estimate:
    """The Megatron cost profile on `layout` run with `options`, in Megatron's FLOP count."""
    return in_megatron_count(problem, layout, estimate_layout(problem, layout, options=options), options.mtp_layers)


def estimate_planned(problem: Problem, layout: Layout) -> Estimate:
    """The Megatron cost profile on the override set the emitter writes for `layout`, in Megatron's FLOP count."""
    return estimate_megatron_run(problem, layout, megatron_options(problem, layout))

"""The compiler's front door: intent -> Problem -> Plan -> AutoModel recipe, and `estimate` of a pinned intent."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from automodel_dist.compile_warnings import compile_warnings
from automodel_dist.cost.estimate import Estimate
from automodel_dist.errors import InputError, ValidationFailed
from automodel_dist.findings import ERROR, Finding, Report
from automodel_dist.intent import Intent, load_intent, resolve_intent
from automodel_dist.layout import AC_MODES, Layout
from automodel_dist.output import JSON_MARKER
from automodel_dist.planner import Candidate, Enumerator, make_layout, plan
from automodel_dist.problem import Problem
from automodel_dist.targets import AUTOMODEL, MEGATRON_BRIDGE, check_target
from automodel_dist.targets.automodel.emit import emit_recipe, load_base, pinned_to_one
from automodel_dist.targets.automodel.reshape import reshaping
from automodel_dist.yamlio import Document, to_plain

if TYPE_CHECKING:
    from automodel_dist.cost.memory import RecipeOptions
    from automodel_dist.verify.groups import MeshPlan

Source = str | Path | Mapping[str, Any]


@dataclass(frozen=True)
class TargetSetting:
    """One value a target writes beyond the layout (a config path, or an environment variable), and why."""

    path: str
    value: str
    why: str

    def to_json(self) -> dict[str, str]:
        return {"path": self.path, "value": self.value, "why": self.why}


@dataclass
class CompileResult:
    """The recipe (text and mapping), the chosen layout with its estimate, and what else was weighed.

    The methods below are what explain and the HTML report ask of a target; a target's result subclass
    answers them for its stack (targets/megatron_bridge/compile.py).
    """

    target: ClassVar[str] = AUTOMODEL
    stack: ClassVar[str] = "AutoModel"  # the framework that lays out the ranks
    # Where the rank map's groups come from, and the names of its axes where they differ from AutoModel's.
    rank_provenance: ClassVar[str] = "AutoModel's mesh arithmetic (no torch needed)"
    axis_names: ClassVar[Mapping[str, str]] = {}
    # The stack's words in explain and the HTML report: what Layout.short()'s label says, the name of
    # activation checkpointing, and the names of cost-model parts where the stack has its own.
    layout_legend: ClassVar[str] = (
        "Layout labels: strategy, then the tp, pp (v: virtual stages per pp rank), cp and ep sizes, dpr HSDP "
        "replicas, dp the data-parallel size, ac/sac/noac activation checkpointing (full, selective, off), lbs the "
        "local batch, mbs the pipeline micro batch, sp sequence parallelism.")
    checkpointing_term: ClassVar[str] = "checkpointing"
    part_names: ClassVar[Mapping[str, str]] = {}
    space: ClassVar[type[Enumerator]] = Enumerator  # the planner's search space for this target

    yaml: str
    recipe: dict[str, Any]
    layout: Layout
    estimate: Estimate
    alternatives: list[Candidate]
    pruned: dict[str, int]
    problem: Problem
    intent: Intent
    considered: int
    feasible: int = 0
    reasons: dict[str, str] = field(default_factory=dict)
    dropped_count: int = 0  # layouts the rules dropped, each once (`Plan.dropped_count`)

    @property
    def writes(self) -> str:
        """What the output is, in a few words (explain's headline)."""
        return "an AutoModel recipe"

    def settings(self) -> list[TargetSetting]:
        """The target's own choices beyond the layout (AutoModel's are the recipe's why-comments)."""
        return []

    def environment(self) -> list[TargetSetting]:
        """Environment variables the launch must export."""
        return []

    def cost_options(self) -> RecipeOptions | None:
        """The recipe settings the estimates assume (None: the planner's, `cost.model.planned_options`)."""
        return None

    def unsearched_checkpointing(self) -> dict[str, str]:
        """The checkpointing modes the planner did not search for the winner's strategy, and why (the target's
        domain, or the intent's pin)."""
        space = self.space(self.problem, None, None, False)
        notes = {mode: space.ac_left_out(self.layout.strategy, mode) for mode in AC_MODES}
        return {mode: note for mode, note in notes.items() if note is not None}

    def warnings(self) -> list[str]:
        """What the file's header warns of (`compile_warnings`), for compile to say on stderr too."""
        return compile_warnings(self.problem, self.estimate, getattr(self, "framework", "automodel"))

    def rank_plan(self) -> MeshPlan:
        """The winner's rank groups, as the stack lays them out (the rank map)."""
        from automodel_dist.verify.groups import plan_meshes

        return plan_meshes(self.layout)

    @property
    def inputs(self) -> list[Path]:
        """The files this compile read, which no output may overwrite."""
        return self.intent.input_paths()

    def to_json(self) -> dict[str, Any]:
        return {
            "generated_by": JSON_MARKER,  # first, so the output writer knows the file for its own
            "recipe": self.recipe,
            "layout": layout_json(self.layout),
            "estimate": self.estimate.to_json(),
            "alternatives": [{"layout": layout_json(c.layout), "estimate": c.estimate.to_json()}
                             for c in self.alternatives],
            "pruned": self.pruned,
            "considered": self.considered,
            "dropped": self.dropped_count,
            "feasible": self.feasible,
        }


def layout_json(layout: Layout) -> dict[str, Any]:
    """The layout's fields plus the sizes derived from them."""
    fields = {name: getattr(layout, name) for name in layout.__dataclass_fields__}
    derived = {"dp": layout.dp, "dp_shard": layout.dp_shard, "ep_shard": layout.ep_shard,
               "grad_accumulation": layout.grad_accumulation, "n_microbatches": layout.n_microbatches}
    return {**fields, **derived}


def model_id(intent: Intent, problem: Problem) -> str:
    """What the recipe loads: a local model's folder as an absolute path (AutoConfig.from_pretrained reads a
    folder, and the job runs in another working directory than the intent's), the intent's Hugging Face id,
    or the preset's Hugging Face id."""
    from automodel_dist.catalog.models import get_preset

    local = intent.local_model
    if local is not None:
        return str((local if local.is_dir() else local.parent).resolve())
    ref = intent.model_ref
    if isinstance(ref, Mapping):
        ref = ref.get("preset") or ref.get("_name_or_path")
    if not isinstance(ref, str):
        return problem.model.name
    if "/" in ref:
        return ref
    try:
        preset = get_preset(ref)
    except InputError:
        return ref
    return next((alias.id for alias in preset.aliases if "/" in alias.id), ref)


def problem_and_base(intent: Intent) -> tuple[Problem, Document | None]:
    """The intent's Problem and its base recipe (loaded once): the base's settings outside the layout
    (reduce dtype, loss, weight dtype, ...) are the estimates' starting point, as the merged recipe runs them."""
    from automodel_dist.cost.recipe import recipe_options

    _check_automodel_pins(intent)
    problem = resolve_intent(intent)
    if intent.base_recipe is None:
        return problem, None
    base = load_base(intent.base_recipe)
    return replace(problem, recipe_options=recipe_options(to_plain(base.data))), base


def _check_automodel_pins(intent: Intent) -> None:
    """A pin AutoModel has no use for is bad input, not silently dropped: its micro batch is the pipeline's
    (`distributed.pipeline.pp_microbatch_size`), so with pp pinned to 1 a micro_batch_size pin would do nothing
    (the Megatron-Bridge target reads it as `train.micro_batch_size`, the forward batch at any PP size)."""
    pins = intent.pins
    if pins.pp == (1,) and pins.micro_batch_size is not None:
        raise InputError("parallelism.micro_batch_size pins AutoModel's pipeline micro batch, but pp is pinned to 1",
                         where=intent.where("parallelism.micro_batch_size"),
                         hint="without a pipeline each forward pass takes the local batch: pin `local_batch_size` "
                              "instead, or unpin pp")


def compile_intent(source: Source, overrides: Iterable[str] = (), *, target: str = AUTOMODEL) -> CompileResult:
    """Compile an intent (path, YAML text or mapping) into an AutoModel recipe, or with
    `target="megatron-bridge"` into a Megatron-Bridge override set (a `MegatronCompileResult`).

    Raises InputError (exit 2) for a bad intent or target and InfeasibleError (exit 1) when nothing fits.
    """
    if check_target(target) == MEGATRON_BRIDGE:
        from automodel_dist.targets.megatron_bridge.compile import compile_megatron

        return compile_megatron(source, overrides)
    intent = load_intent(source, overrides)
    problem, base = problem_and_base(intent)
    checkpoint = model_id(intent, problem)
    reshape = reshaping(problem, checkpoint, intent.where("model"))  # before the search: a refusal costs nothing
    result = plan(problem)
    best = result.best
    yaml_text, recipe = emit_recipe(problem, best.layout, best.estimate, base=base,
                                    intent_where=intent.where, model_id=checkpoint, reshape=reshape)
    return CompileResult(yaml=yaml_text, recipe=recipe, layout=best.layout, estimate=best.estimate,
                         alternatives=result.alternatives, pruned=result.pruned, problem=problem, intent=intent,
                         considered=result.considered, feasible=result.feasible, reasons=result.reasons,
                         dropped_count=result.dropped_count)


def require_pins(problem: Problem, required: Iterable[str], intent: Intent | None) -> None:
    """Each named parallelism choice pinned to one value, else an InputError naming those still open."""
    open_pins = [name for name in required if not pinned_to_one(problem, name)]
    if open_pins:
        raise InputError(f"estimate needs each parallelism choice pinned to one value; still open: "
                         f"{', '.join(open_pins)}",
                         where=intent.where("parallelism") if intent else "parallelism",
                         hint="pin each to a single value under `parallelism:` (compile chooses them for you)")


def pinned_value(problem: Problem, name: str, default: Any) -> Any:
    """The one value the intent pins `name` to (`require_pins` has checked it), else `default`."""
    allowed = getattr(problem.pins, name)
    return allowed[0] if allowed else default


def pinned_layout(problem: Problem, intent: Intent | None = None) -> Layout:
    """The one layout an intent's pins fix; pins that leave a choice open are an InputError naming them."""
    pins = problem.pins
    required = ["strategy", "tp", "pp", "cp", "dp_replicate", "activation_checkpointing", "local_batch_size"]
    if problem.model.is_moe:
        required.append("ep")
    if pins.pp is not None and max(pins.pp) > 1:
        required += ["vpp", "micro_batch_size"]
    require_pins(problem, required, intent)

    def one(name: str, default: Any) -> Any:
        return pinned_value(problem, name, default)

    return make_layout(problem, strategy=one("strategy", "fsdp2"), tp=one("tp", 1), pp=one("pp", 1),
                       cp=one("cp", 1), ep=one("ep", 1), dp_replicate=one("dp_replicate", 1), vpp=one("vpp", 1),
                       activation_checkpointing=one("activation_checkpointing", "off"),
                       local_batch_size=one("local_batch_size", 1),
                       micro_batch_size=one("micro_batch_size", None) if one("pp", 1) > 1 else None)


def estimate(source: Source, overrides: Iterable[str] = (), *, target: str = AUTOMODEL) -> Estimate:
    """Memory and time of the layout the intent pins; never refuses for not fitting (`fits: false`).

    With `target="megatron-bridge"`, the Megatron layout the pins fix, judged by Megatron's rules and timed
    with the Megatron cost profile, as that target's compile would write it.
    """
    if check_target(target) == MEGATRON_BRIDGE:
        from automodel_dist.targets.megatron_bridge.compile import estimate_megatron

        return estimate_megatron(source, overrides)
    from automodel_dist.cost.model import estimate_layout
    from automodel_dist.rules import check_layout

    intent = load_intent(source, overrides)
    problem, _ = problem_and_base(intent)
    layout = pinned_layout(problem, intent)
    findings = check_layout(layout, model=problem.model, cluster=problem.cluster, training=problem.training)
    return judged_estimate(layout, findings, lambda: estimate_layout(problem, layout))


def judged_estimate(layout: Layout, findings: list[Finding], timed: Callable[[], Estimate]) -> Estimate:
    """`timed()`, unless the rules found errors in the pinned layout: then ValidationFailed listing them."""
    errors = [f for f in findings if f.severity == ERROR]
    if errors:
        listing = "\n".join(f"  {f.rule} ({f.path}): {f.message}" + (f"\n    hint: {f.hint}" if f.hint else "")
                            for f in errors)
        raise ValidationFailed(f"the pinned layout {layout.short()} breaks {len(errors)} rule(s):\n{listing}",
                               report=Report(findings=findings))
    return timed()



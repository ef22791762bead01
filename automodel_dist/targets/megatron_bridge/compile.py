"""Front door of the Megatron-Bridge target: intent -> plan -> override set, and validate an override set.

`compile_megatron` runs the shared planner over `MegatronSpace` with the Megatron rules and the Megatron
cost profile, then writes the override set for the model's recipe function (YAML with why-comments, and
the same pairs as a Hydra list). `validate_overrides` parses an override file and runs the same rules.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from automodel_dist import limits
from automodel_dist.catalog.fields import did_you_mean
from automodel_dist.catalog.hardware import resolve_gpu
from automodel_dist.catalog.models import resolve_model
from automodel_dist.catalog.specs import ClusterSpec, GpuSpec, ModelSpec, architecture_changes
from automodel_dist.compile_warnings import compile_warnings
from automodel_dist.compiler import (
    CompileResult,
    Source,
    TargetSetting,
    judged_estimate,
    pinned_value,
    require_pins,
)
from automodel_dist.cost.estimate import Estimate
from automodel_dist.cost.memory import RecipeOptions
from automodel_dist.cost.model import estimate_layout
from automodel_dist.errors import InputError
from automodel_dist.findings import ERROR, Finding, Report, locate_all
from automodel_dist.intent import Intent, load_intent, resolve_intent
from automodel_dist.output import WRITTEN_BY_MARKER
from automodel_dist.planner import Enumerator, memory_limit_gib, plan
from automodel_dist.problem import Problem, TrainingSpec
from automodel_dist.rules import registry as r
from automodel_dist.shell_syntax import script_syntax
from automodel_dist.targets import MEGATRON_BRIDGE
from automodel_dist.targets.megatron_bridge.choose import (
    cost_options,
    decide,
    dispatcher_of,
    env_vars,
    layout_dispatcher,
)
from automodel_dist.targets.megatron_bridge.emit import (
    hydra_overrides,
    hydra_value,
    override_pairs,
    override_yaml,
    reasons,
)
from automodel_dist.targets.megatron_bridge.fields import config_fields as recipe_fields
from automodel_dist.targets.megatron_bridge.fields import known_recipe, mixed_precision, recipe_values
from automodel_dist.targets.megatron_bridge.overrides import PRETRAINED_ENV, PRETRAINED_FROM_ENV, OverrideSet
from automodel_dist.targets.megatron_bridge.parse import (
    HydraOverride,
    flat_overrides,
    hydra_file,
    megatron_layout,
    parse_overrides,
    read_hydra,
)
from automodel_dist.targets.megatron_bridge.plan import (
    MegatronSpace,
    check_planned,
    estimate_planned,
    megatron_options,
    screen_planned,
)
from automodel_dist.targets.megatron_bridge.ranks import PROVENANCE, plan_ranks
from automodel_dist.targets.megatron_bridge.recipes import (
    IDENTIFIER,
    preset_for_recipe,
    recipe_for,
    recipe_function,
    recipe_task,
)
from automodel_dist.targets.megatron_bridge.rules import (
    RECIPE_HEADER,
    YAML_DUPLICATE,
    check_appends,
    check_keys,
    check_overrides,
    check_sbatch,
)
from automodel_dist.targets.megatron_bridge.script_overrides import check_script_overrides
from automodel_dist.textsafe import one_line
from automodel_dist.validate import duplicate_key_findings, header_recipe_at, memory_fit_finding, read_sbatch
from automodel_dist.verify.groups import MeshPlan
from automodel_dist.yamlio import Document, load_document, parse_document, source_text, to_plain

FRAMEWORK = "megatron"  # the cost profile this target's plans are estimated with
RUNNER = "scripts/training/run_recipe.py"  # Megatron-Bridge's recipe runner, relative to its checkout


@dataclass
class MegatronCompileResult(CompileResult):
    """A CompileResult whose recipe is a Megatron-Bridge override set (`yaml`, `hydra`) for `recipe_function`."""

    override: OverrideSet | None = None
    hydra: tuple[str, ...] = ()
    recipe_function: str = ""
    env: tuple[tuple[str, str, str], ...] = ()
    why: dict[str, str] = field(default_factory=dict)
    framework: str = FRAMEWORK  # the cost profile the plan was estimated with (explain's error band)

    target: ClassVar[str] = MEGATRON_BRIDGE
    stack: ClassVar[str] = "Megatron Core"
    rank_provenance: ClassVar[str] = PROVENANCE
    axis_names: ClassVar[Mapping[str, str]] = {"ep_shard": "expert data parallel"}
    layout_legend: ClassVar[str] = (
        "Layout labels in Megatron's terms: TP, PP, VPP (virtual stages per PP rank), CP, EP, ETP (expert tensor "
        "parallelism, shown above 1), DP the data-parallel size, EDP expert data parallelism (with EP), SP sequence "
        "parallelism, the recompute granularity when there is one, MBS the micro batch.")
    checkpointing_term: ClassVar[str] = "recompute"
    space: ClassVar[type[Enumerator]] = MegatronSpace
    # the distributed optimizer's gradient reduce-scatter and parameter all-gather run over DP (no FSDP here)
    part_names: ClassVar[Mapping[str, str]] = {"fsdp_comm": "dp_comm", "fsdp_gather": "dp_gather"}

    def to_json(self) -> dict[str, Any]:
        return {**super().to_json(), "recipe_function": self.recipe_function, "hydra": list(self.hydra),
                "env": {name: value for name, value, _ in self.env}}

    @property
    def writes(self) -> str:
        return f"Megatron-Bridge overrides for {self.recipe_function}"

    def settings(self) -> list[TargetSetting]:
        """Every key of the override set with its why-comment (the layout's sizes included)."""
        assert self.override is not None
        why = reasons(self.override.layout, self.why)
        return [TargetSetting(path, hydra_value(value), why.get(name, ""))
                for path, name, value in override_pairs(self.override)]

    def environment(self) -> list[TargetSetting]:
        return [TargetSetting(name, value, why) for name, value, why in self.env]

    def hydra_text(self) -> str:
        """`compile --format hydra`: the key=value list, one per line, under `#` lines naming the recipe and world
        (the recipe runner takes the lines as arguments; validate reads the file back)."""
        run = (f"# run: mapfile -t OVERRIDES < <(grep -v '^#' THIS_FILE); python {RUNNER} --recipe "
               f'{self.recipe_function} "${{OVERRIDES[@]}}"')
        header = [*_identity(self.problem, self.recipe_function, "compile --target megatron-bridge --format hydra"),
                  run]
        return "\n".join([*header, *self.hydra]) + "\n"

    def cost_options(self) -> RecipeOptions:
        return megatron_options(self.problem, self.layout)

    def rank_plan(self) -> MeshPlan:
        return plan_ranks(self.layout)


def model_for_recipe(recipe: str) -> ModelSpec | None:
    """The model preset a recipe function trains (None for a recipe the table does not know)."""
    preset = preset_for_recipe(recipe)
    return resolve_model(preset) if preset else None


# The Megatron model fields that change its architecture: an override set that sets one trains a reshaped model.
ARCHITECTURE_KEYS = frozenset(f"model.{key}" for key in (
    "num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_query_groups", "kv_channels",
    "num_moe_experts", "moe_ffn_hidden_size", "moe_shared_expert_intermediate_size", "moe_router_topk",
    "moe_layer_freq", "vocab_size", "q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim",
    "v_head_dim", "share_embeddings_and_output_weights", "mtp_num_layers"))


def refuse_another_model(model: ModelSpec, recipe: str, where: str, *, named: str = "the intent's model",
                         hint: str | None = None) -> None:
    """An override set trains the model its recipe function builds: a model that differs from it (a preset with
    architecture fields changed, another model) would be planned or judged as one model and run as another, so it
    is refused (InputError at `where`)."""
    built = model_for_recipe(recipe)
    if built is None:
        return
    changed = architecture_changes(model, built)
    if changed:
        raise InputError(f"{recipe} builds {one_line(built.name)} as Megatron-Bridge ships it, and {named} "
                         f"differs in {', '.join(changed)} (the recipe's in brackets): the override set would train "
                         "the recipe's model, not this one", where=where,
                         hint=hint or f"drop the changed fields from model: (compile {built.name} as it is), or "
                                      "compile for --target automodel, which builds the model from its config")


def _identity(problem: Problem, recipe: str, command: str) -> list[str]:
    """The opening lines of every override file: what it is, who wrote it, and the recipe and world it is for
    (`validate --target megatron-bridge` reads the last three when no flag gives them)."""
    cluster = problem.cluster
    return [f"# Megatron-Bridge overrides for {recipe} ({one_line(problem.model.name)}) on {cluster.nodes} x "
            f"{cluster.gpus_per_node} {one_line(cluster.gpu.name)}",
            f"# {WRITTEN_BY_MARKER} {command}",
            f"# recipe: {recipe}",
            f"# world: {cluster.nodes} x {cluster.gpus_per_node}",
            f"# gpu: {one_line(cluster.gpu.name)}"]


def _header(problem: Problem, override: OverrideSet, estimate: Estimate, recipe: str,
            env: Iterable[tuple[str, str, str]]) -> str:
    lay = override.layout
    lines = [
        *_identity(problem, recipe, "compile --target megatron-bridge"),
        f"# layout: {lay.short()}  (dp {lay.dp}, expert dp {lay.ep_shard}, minimum GPUs "
        f"{lay.pp * max(lay.tp * lay.cp, lay.ep * lay.etp)})",
        f"# predicted: {estimate.memory_gib:.1f} GiB peak of {memory_limit_gib(problem, estimate):.1f} GiB usable, "
        f"{estimate.tflops_per_gpu:.0f} TFLOP/s/GPU as its log counts them, {estimate.tokens_per_s_per_gpu:,.0f} "
        "tokens/s/GPU (Megatron cost profile)",
        *[f"# warning: {warning}" for warning in compile_warnings(problem, estimate, FRAMEWORK)],
        "# environment (the launch script exports these):",
        *[f"#   {name}={value}  # {why}" for name, value, why in env],
        *([f"#   {PRETRAINED_ENV}=<the Megatron checkpoint of the pretrained weights>  # yours to set: "
           "checkpoint.pretrained_checkpoint reads it"] if reads_checkpoint_env(override) else []),
        f"# run: python {RUNNER} --recipe {recipe} <compile --format hydra's key=value list>",
    ]
    return "\n".join(lines) + "\n"


def reads_checkpoint_env(override: OverrideSet) -> bool:
    """The override set loads its pretrained weights from the checkpoint the environment names."""
    return override.settings.pretrained_checkpoint == PRETRAINED_FROM_ENV


def write_override_set(problem: Problem, override: OverrideSet, why: dict[str, str], estimate: Estimate,
                       recipe: str) -> tuple[str, tuple[str, ...], tuple[tuple[str, str, str], ...]]:
    """(YAML text, Hydra list, env vars) of one override set."""
    env = tuple(env_vars(problem, override.layout, override.settings))
    text = override_yaml(override, reasons(override.layout, why), _header(problem, override, estimate, recipe, env))
    return text, tuple(hydra_overrides(override)), env


def _megatron_problem(source: Source, overrides: Iterable[str]) -> tuple[Intent, Problem]:
    """The intent and its problem, with the AutoModel-only pins refused (this target has neither)."""
    intent = load_intent(source, overrides)
    problem = resolve_intent(intent)
    for pin, allowed in (("strategy", None), ("dp_replicate", (1,))):
        value = getattr(problem.pins, pin)
        if value is not None and value != allowed:
            raise InputError(f"parallelism.{pin} is an AutoModel choice: the megatron-bridge target shards with "
                             "Megatron's distributed optimizer and has no FSDP strategy or HSDP replication",
                             where=intent.where(f"parallelism.{pin}"), hint=f"drop parallelism.{pin}")
    _refuse_other_packing(intent, problem)
    return intent, problem


def _refuse_other_packing(intent: Intent, problem: Problem) -> None:
    """A fine-tune packs exactly when its recipe function does (the override set keeps the recipe's dataset): an
    intent that asks otherwise, in so many words, is bad input rather than silently overruled."""
    training = problem.training
    recipe = recipe_for(problem.model, training.task) if training.task in ("sft", "peft") else None
    if recipe is None or not intent.written("training.packed_sequences") or training.packed_sequences == recipe.packs:
        return
    does = "packs sequences offline" if recipe.packs else "packs no sequences"
    raise InputError(f"training.packed_sequences is {str(training.packed_sequences).lower()}, but Megatron-Bridge's "
                     f"{recipe.function} {does}, and the override set keeps the recipe's dataset",
                     where=intent.where("training.packed_sequences"),
                     hint="drop training.packed_sequences (the recipe decides), or compile for --target automodel")


def estimate_megatron(source: Source, overrides: Iterable[str] = ()) -> Estimate:
    """`estimate(target="megatron-bridge")`: the Megatron layout the intent's pins fix (TP, PP, CP, EP for an
    MoE model, VPP with PP, recompute, micro batch), judged by Megatron's rules with the settings compile
    would write, timed with the Megatron cost profile."""
    intent, problem = _megatron_problem(source, overrides)
    pins, model = problem.pins, problem.model
    required = ["tp", "pp", "cp", "activation_checkpointing", "micro_batch_size"]
    required += ["ep"] if model.is_moe else []
    required += ["vpp"] if pins.pp is not None and max(pins.pp) > 1 else []
    require_pins(problem, required, intent)
    ep = pinned_value(problem, "ep", 1)
    tp = pinned_value(problem, "tp", 1)
    layout = megatron_layout(
        problem.cluster.world_size, tp=tp, pp=pinned_value(problem, "pp", 1), vpp=pinned_value(problem, "vpp", 1),
        cp=pinned_value(problem, "cp", 1), ep=ep, sequence_parallel=tp > 1,
        activation_checkpointing=pinned_value(problem, "activation_checkpointing", False),
        global_batch_size=problem.training.global_batch_size,
        micro_batch_size=pinned_value(problem, "micro_batch_size", 1),
        dispatcher=layout_dispatcher(*dispatcher_of(problem, ep)[:2]) if model.is_moe else None)
    findings = check_planned(layout, model=model, cluster=problem.cluster, training=problem.training)
    return judged_estimate(layout, findings, lambda: estimate_planned(problem, layout))


def compile_megatron(source: Source, overrides: Iterable[str] = ()) -> MegatronCompileResult:
    """Compile an intent into a Megatron-Bridge override set (InputError exit 2; InfeasibleError exit 1)."""
    intent, problem = _megatron_problem(source, overrides)
    if intent.base_recipe is not None:  # the override set applies to a recipe function, not to a recipe file
        raise InputError("base_recipe is an AutoModel recipe to merge into; the megatron-bridge target writes "
                         "overrides for a Megatron-Bridge recipe function, which has no file to merge",
                         where=intent.where("base_recipe"), hint="drop base_recipe, or compile for --target automodel")
    recipe = recipe_function(problem.model, problem.training.task, where=intent.where("model"))
    refuse_another_model(problem.model, recipe, intent.where("model"))
    result = plan(problem, check=check_planned, estimate=estimate_planned, screen=screen_planned, space=MegatronSpace)
    best = result.best
    settings, why = decide(problem, best.layout)
    override = OverrideSet(best.layout, settings)
    text, hydra, env = write_override_set(problem, override, why, best.estimate, recipe)
    return MegatronCompileResult(
        yaml=text, recipe=to_plain(load_document(text, what="overrides").data), layout=best.layout,
        estimate=best.estimate, alternatives=result.alternatives, pruned=result.pruned, problem=problem,
        intent=intent, considered=result.considered, feasible=result.feasible, reasons=result.reasons,
        dropped_count=result.dropped_count,
        override=override, hydra=hydra, recipe_function=recipe, env=env, why=why)


def validate_overrides(source: str | Path | Mapping[str, Any] | Sequence[str], *, recipe: str | None,
                       world_size: int, gpus_per_node: int = 8, model: Any = None, gpu: GpuSpec | str | None = None,
                       sbatch: str | Path | None = None) -> Report:
    """Every Megatron-Bridge rule on an override set for the recipe function `recipe` on `world_size` GPUs.

    `source` is the override file (a path, or its text: YAML, or the `key=value` lines `compile --format
    hydra` writes), a mapping, or a Hydra `key=value` list; `sbatch` the launch script (a path, or its
    text), judged with it. Bad input is an InputError (exit 2).
    """
    if not isinstance(recipe, str) or not IDENTIFIER.fullmatch(recipe):
        raise InputError(f"the recipe function (--recipe; recipe_function in the API) must be a Megatron-Bridge "
                         f"recipe name, got {recipe!r}",
                         hint="e.g. deepseek_v3_pretrain_config (the function the overrides apply to)")
    limits.check_world(world_size, gpus_per_node)
    sbatch_text, sbatch_file = read_sbatch(sbatch)
    read = _read_overrides(source, world_size, recipe_values(recipe))
    refuse_a_misspelled_recipe(recipe, f"{read.filename}:{read.header_line}:1" if read.written_for == recipe
                               else "--recipe")
    spec = resolve_model(model, where="--model") if model is not None else model_for_recipe(recipe)
    if model is not None and not ARCHITECTURE_KEYS & set(read.flat):
        refuse_another_model(spec, recipe, "--model", named=f"--model {one_line(str(model))}",
                             hint="drop --model: the recipe function's own model is judged (--model describes a model "
                                  "the overrides reshape with model.num_layers and the like, or a recipe this tool "
                                  "does not know)")
    gpu_spec = resolve_gpu(gpu, where="--gpu")
    cluster = None
    if gpu_spec is not None:
        nodes = max(1, -(-world_size // gpus_per_node))
        cluster = ClusterSpec(gpu_spec, nodes=nodes, gpus_per_node=gpus_per_node)
    known = known_recipe(recipe)
    findings = check_keys(read.flat, known, hydra=read.hydra is not None)
    if read.doc is not None:
        findings += duplicate_key_findings(read.doc, YAML_DUPLICATE, severity=ERROR, outcome=(
            "Megatron-Bridge's YAML loader refuses the file ('ConstructorError: while constructing a mapping ... "
            "found duplicate key')"))
    if read.written_for not in (None, recipe):
        findings.append(RECIPE_HEADER.finding(
            f"the file was written for {read.written_for} (its `# recipe:` line) and is judged against {recipe}",
            path="", hint=f"--recipe {read.written_for}, or leave --recipe out and the header names it"))
    if read.hydra is not None:
        findings += check_appends(read.hydra, known, read.lines)
    findings += check_overrides(read.override, model=spec, cluster=cluster, task=recipe_task(recipe))
    if spec is not None and cluster is not None and not any(f.severity == ERROR for f in findings):
        findings += _memory_fit(read.override, spec, cluster, recipe_task(recipe))
    if sbatch_text is not None:
        findings += check_sbatch(sbatch_text, gpus_per_node=gpus_per_node, multi_node=world_size > gpus_per_node,
                                 sbatch_file=sbatch_file, syntax=script_syntax(sbatch_text))
        findings += check_script_overrides(sbatch_text, read.flat, known, sbatch_file)
    if spec is None:
        unknown = ("is not one this tool knows" if recipe in recipe_fields().functions else
                   "is no recipe function Megatron-Bridge 0.6.2 exports (the run would fail looking it up)")
        findings.append(r.SKIPPED.finding(f"model rules skipped: recipe {recipe} {unknown}", path="",
                                          hint="pass --model"))
    if cluster is None:
        findings.append(r.SKIPPED.finding("GPU rules (flex dispatcher eligibility, NVLink domain, memory fit) skipped: "
                                          "no GPU", path="", hint="pass --gpu, e.g. --gpu gb200-nvl72"))
    return Report(findings=read.locate(findings), source=read.filename)


def refuse_a_misspelled_recipe(recipe: str, where: str) -> None:
    """A name Megatron-Bridge exports no recipe function by, but close to one it does, is a typo (InputError at
    `where`: the `# recipe:` line, or --recipe); one close to none stays a note (the model rules are skipped)."""
    functions = recipe_fields().functions
    close = did_you_mean(recipe, functions) if recipe not in functions else ""
    if close:
        raise InputError(f"Megatron-Bridge 0.6.2 has no recipe function {recipe!r}{close}", where=where,
                         hint="correct the name (--recipe, or the file's `# recipe:` line): the run would fail looking "
                              "it up in megatron.bridge.recipes")


def override_problem(override: OverrideSet, model: ModelSpec, cluster: ClusterSpec, task: str | None) -> Problem:
    """The job an override set describes, for the cost model: its sequence length, global batch, packing, LoRA
    rank and precision (FP8 where its mixed precision turns FP8 on), with no memory headroom."""
    s, lay = override.settings, override.layout
    training = TrainingSpec(task=task or "pretrain", seq_length=s.packed_sequence_size or s.seq_length,
                            global_batch_size=lay.global_batch_size,
                            packed_sequences=s.packed_sequence_size is not None,
                            precision="fp8" if mixed_precision(s).fp8 else "bf16",
                            peft_rank=s.peft_dim if task == "peft" else None)
    return Problem(model=model, cluster=cluster, training=training, memory_headroom=0.0)


def _memory_fit(override: OverrideSet, model: ModelSpec, cluster: ClusterSpec, task: str | None) -> list[Finding]:
    """Does the override set's estimated peak fit the GPU? (the Megatron cost profile on the set's own settings,
    the recipe's where the set leaves a key out: its recompute, EP overlap, gradient-buffer dtype, FP8 recipe)."""
    problem = override_problem(override, model, cluster, task)
    estimate = estimate_layout(problem, override.layout,
                               options=cost_options(problem, override.layout, override.settings))
    if estimate.fits:
        return []
    remedies = ["selective recompute (model.recompute_granularity=selective with model.recompute_modules)"] \
        if override.settings.recompute_granularity is None else []
    if mixed_precision(override.settings).grad_reduce_in_fp32:
        remedies.append("a bf16 gradient buffer (mixed_precision.grad_reduce_in_fp32=false, as the performance "
                        "recipes run)")
    remedies.append("shard more (TP, PP, CP, EP); `automodel-dist compile --target megatron-bridge` searches these")
    return [memory_fit_finding(estimate, cluster.gpu, remedies, path="")]


Locator = Callable[[list[Finding]], list[Finding]]


@dataclass(frozen=True)
class ReadOverrides:
    """An override set as validate reads it: the set on the recipe's values, its own {dotted key: value}, its
    Hydra items in order (None: a YAML file or mapping) with each one's line in its file (none for an API list),
    what places its findings at their lines, and the name of the file it came from."""

    override: OverrideSet
    flat: dict[str, Any]
    hydra: list[HydraOverride] | None
    lines: list[int] | None
    locate: Locator
    filename: str
    written_for: str | None = None  # the recipe function the file's `# recipe:` line names
    header_line: int | None = None  # that line's number
    doc: Document | None = None  # the YAML document it was read from (None: a Hydra list)


def _read_overrides(source: Any, world_size: int, base: Mapping[str, Any]) -> ReadOverrides:
    if isinstance(source, Sequence) and not isinstance(source, str):
        items = _hydra_list(source)
        return ReadOverrides(parse_overrides(items, world_size=world_size, base=base), flat_overrides(items),
                             read_hydra(items), None, list, "<overrides>")
    written_for = header_line = None
    if isinstance(source, Mapping):
        doc = load_document(source, what="overrides")
    else:
        text, filename = source_text(source, what="overrides")
        written_for, header_line = header_recipe_at(text) or (None, None)
        lines = hydra_file(text, filename)
        if lines is None:
            doc = parse_document(text, filename, what="overrides")
            refuse_dotted_keys(doc)
        else:
            numbers, items = [number for number, _ in lines], [item for _, item in lines]
            hydra = read_hydra(items)
            line_of = {item.key: number for number, item in zip(numbers, hydra, strict=True)}  # the last one wins

            def where(path: str) -> str:
                return f"{filename}:{line_of[path]}:1" if path in line_of else filename

            def locate(findings: list[Finding]) -> list[Finding]:
                return [f.located(line_of[f.path], 1) if f.line is None and f.path in line_of else f
                        for f in findings]

            override = parse_overrides(items, world_size=world_size, where=where, base=base)
            return ReadOverrides(override, flat_overrides(items), hydra, numbers, locate, filename, written_for,
                                 header_line)
    if "distributed" in doc.data:  # ConfigContainer has no such section (its own is `dist`)
        raise InputError("this is an AutoModel recipe (a distributed: section), not a Megatron-Bridge override set",
                         where=doc.where("distributed"), hint="validate it without --target megatron-bridge")
    return ReadOverrides(parse_overrides(doc, world_size=world_size, base=base), flat_overrides(doc), None, None,
                         lambda findings: locate_all(doc, findings), doc.filename, written_for, header_line, doc)


def refuse_dotted_keys(doc: Document) -> None:
    """A YAML override file nests its keys: Megatron-Bridge's merge (OmegaConf) takes a dotted key
    (`model.tensor_model_parallel_size: 2`) as one key no config field has, logs that it skips it, and trains
    without the value. (A mapping given to the API is read with dotted keys as nested ones.)"""
    def walk(data: Any, at: tuple[str, ...]) -> None:
        if not isinstance(data, Mapping):
            return
        for key, value in data.items():
            path = (*at, str(key))
            if "." in str(key):
                parts = [*at, *str(key).split(".")]
                nested = "".join(f"{part}: {{" for part in parts[:-1]) + f"{parts[-1]}: ..." + "}" * (len(parts) - 1)
                raise InputError(f"{key!r} is one key to Megatron-Bridge's YAML merge, not a dotted path: it finds "
                                 f"no field {key!r}, skips it ('Key '{key}' in overrides not found in config object "
                                 "...'), and trains without the value", where=doc.where(path),
                                 hint=f"nest it: {nested} (or use the Hydra key=value form)")
            walk(value, path)

    walk(doc.data, ())


def _hydra_list(items: Sequence[Any]) -> list[str]:
    """A Hydra override list as the API takes it: strings only (each a `key=value`, parsed by the reader)."""
    for i, item in enumerate(items):
        if not isinstance(item, str):
            raise InputError(f"a Hydra override must be a string, got {type(item).__name__}",
                             where=f"overrides[{i}]", hint="write key=value, e.g. model.tensor_model_parallel_size=2")
    return list(items)

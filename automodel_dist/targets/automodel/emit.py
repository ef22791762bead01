"""AutoModel target, writing side: a `Layout` (and its estimate) becomes a runnable recipe YAML.

Every value the planner chose carries a short end-of-line comment saying why; the header gives the
predicted peak memory and throughput and the `$schema` line for editors. With a base recipe the layout
is merged into it (ruamel round trip: its comments and key order stay); a base value that contradicts a
pin of the intent is an InputError naming both places. `parse_recipe(emit(layout)) == layout` is a test.

Recipe facts used here are in reference/automodel.md: §3 (`distributed:` keys per strategy, `pipeline:`
and `moe:` blocks, torch schedule names, `dp_size: null`), §6 (`model.backend`), §7 (batch keys),
§8.2/§10.13 (`dist_env.timeout_minutes` defaults to 1 minute).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ruamel.yaml.comments import CommentedMap

from automodel_dist.catalog.specs import ClusterSpec, architecture_changes
from automodel_dist.compile_warnings import compile_warnings
from automodel_dist.cost.estimate import Estimate
from automodel_dist.cost.memory import AUTOMODEL_DEFAULTS, BF16
from automodel_dist.cost.model import planned_options
from automodel_dist.dispatcher import capability_major, choose_dispatcher, ep_group_in_domain
from automodel_dist.errors import InputError
from automodel_dist.layout import FLEX_DISPATCHERS, Layout, ac_mode
from automodel_dist.output import RECIPE_MARKER
from automodel_dist.pipeline_stages import pipeline_split, stage_split
from automodel_dist.planner import MIN_CP_TOKENS, memory_limit_gib
from automodel_dist.problem import Problem
from automodel_dist.resources import RECIPE_SCHEMA
from automodel_dist.schema_check import load_schema
from automodel_dist.targets.automodel.config import (
    COMMON_KEYS,
    MOCK_DATASET_TARGET,
    RECIPE_SECTIONS,
    STRATEGY_KEYS,
    canonical_strategy,
    mesh_degree,
    normalize_activation_checkpointing,
    translate_value,
)
from automodel_dist.targets.automodel.model_classes import automodel_moe
from automodel_dist.targets.commented import Section as _Section
from automodel_dist.textsafe import one_line
from automodel_dist.yamlio import Document, dump_yaml, load_document, lookup, to_plain

RECIPE_CLASS = "TrainFinetuneRecipeForNextTokenPrediction"
MODEL_TARGET = "nemo_automodel.NeMoAutoModelForCausalLM.from_pretrained"
SCRATCH_TARGET = "nemo_automodel.NeMoAutoModelForCausalLM.from_config"  # random weights from the architecture
CONFIG_TARGET = "transformers.AutoConfig.from_pretrained"
BACKEND_TARGET = "nemo_automodel.components.models.common.BackendConfig"
MOCK_SAMPLES_TARGET = "nemo_automodel.components.datasets.llm.mock.build_unpacked_dataset"

# A base recipe's `distributed:` keeps its own keys only when the chosen strategy accepts them
# (COMMON_KEYS, STRATEGY_KEYS); these are the keys a layout owns.
# `defer_fsdp_grad_sync` is the compiler's too (cost.model.option_choices): its choice replaces the base's.
LAYOUT_KEYS = ("strategy", "dp_size", "tp_size", "pp_size", "cp_size", "ep_size", "dp_replicate_size",
               "sequence_parallel", "activation_checkpointing", "defer_fsdp_grad_sync", "pipeline", "moe")

# Where each intent pin lands in the recipe (for base-recipe contradictions).
PIN_PATHS = {
    "strategy": "distributed.strategy",
    "tp": "distributed.tp_size",
    "pp": "distributed.pp_size",
    "cp": "distributed.cp_size",
    "ep": "distributed.ep_size",
    "dp_replicate": "distributed.dp_replicate_size",
    "activation_checkpointing": "distributed.activation_checkpointing",
    "local_batch_size": "step_scheduler.local_batch_size",
    "micro_batch_size": "distributed.pipeline.pp_microbatch_size",
}
SIZE_PINS = ("tp", "pp", "cp", "ep", "dp_replicate")

IntentWhere = Callable[[str], str]  # file:line:col of a dotted intent key (Intent.where)
def pinned_to_one(problem: Problem, name: str) -> bool:
    """The intent pins `name` to a single value: the recipe comment says so, and `estimate` needs it."""
    allowed = getattr(problem.pins, name)
    return allowed is not None and len(allowed) == 1


def _why(problem: Problem, name: str, reason: str) -> str:
    return f"pinned by the intent; {reason}" if pinned_to_one(problem, name) else reason


# -- the sections -----------------------------------------------------------------------------------------
def timeout_minutes(problem: Problem, layout: Layout) -> tuple[int, str]:
    """dist_env.timeout_minutes: AutoModel's default of 1 minute is too short for real start-ups."""
    cluster, model = problem.cluster, problem.model
    if cluster.world_size >= 512:
        return 60, f"{cluster.world_size} ranks: start-up and first checkpoint load take long (default is 1)"
    if model.is_moe and cluster.nodes > 1:
        return 30, "multi-node MoE: expert all-to-all set-up and large checkpoint loads (default is 1)"
    if cluster.nodes > 1:
        return 20, "multi-node: rendezvous and checkpoint load across nodes (default is 1)"
    return 10, "single node; AutoModel's default of 1 minute is too short for checkpoint loading"


def _distributed(problem: Problem, layout: Layout) -> _Section:
    model, cluster = problem.model, problem.cluster
    d = _Section()
    d.put("strategy", layout.strategy, _why(problem, "strategy", {
        "fsdp2": "FSDP2: shards parameters, gradients and optimizer state; the only strategy with PP, EP and HSDP",
        "megatron_fsdp": "MegatronFSDP: sharded data parallel with TP/CP only",
        "ddp": "the model and its optimizer state fit replicated on every GPU: plain data parallel",
    }[layout.strategy]))
    d.put("dp_size", None, f"inferred by AutoModel as the ranks left over: dp = {layout.dp}")
    if layout.strategy == "ddp":
        _put_ac(problem, d, layout)
        return d
    d.put("tp_size", layout.tp, _why(problem, "tp", _tp_reason(layout, cluster.nvlink_domain, problem.objective)))
    if layout.strategy == "fsdp2":
        d.put("pp_size", layout.pp, _why(problem, "pp", _pp_reason(layout, model.num_layers)))
    d.put("cp_size", layout.cp, _why(problem, "cp", _cp_reason(problem, layout)))
    if layout.strategy == "fsdp2":
        if model.is_moe:
            d.put("ep_size", layout.ep, _why(problem, "ep", _ep_reason(layout, model.num_routed_experts,
                                                                           cluster)))
        d.put("dp_replicate_size", layout.dp_replicate, _why(problem, "dp_replicate", _hsdp_reason(layout)))
        d.put("sequence_parallel", layout.sequence_parallel, _sp_reason(layout, model.is_moe))
        options = planned_options(problem, layout)
        if not options.defer_grad_sync:
            grads = "bf16" if options.reduce_bytes == BF16 else "fp32"
            d.put("defer_fsdp_grad_sync", False, "reduce-scatter every micro batch: a deferred sync would keep "
                  f"unsharded {grads} gradients of every layer and not fit (AutoModel's 70B recipes do the same)")
    _put_ac(problem, d, layout)
    if layout.pp > 1:
        d.put("pipeline", _pipeline(problem, layout), "pipeline parallelism needs this block (AutoModel R6)")
    if layout.ep > 1:
        moe = _Section().put("reshard_after_forward", False,
                             "experts stay gathered between forward and backward (AutoModel's default)")
        d.put("moe", moe, "expert-parallel settings, read only when ep_size > 1")
    return d


# How each checkpointing mode is written (AutoModel reads true as "full") and why it was chosen.
_AC_VALUES: dict[str, bool | str] = {"full": True, "selective": "selective", "off": False}
_AC_REASONS = {
    "full": "recompute each layer from its input in backward, the least activation memory: needed to fit "
            "or the fastest that fits",
    "selective": "selective: keep attention, every other matmul and the collectives' outputs, recompute the "
                 "rest in backward (torch's op-level policy): less memory than none, less replay than full",
    "off": "activations fit without recompute, which is faster",
}


def _put_ac(problem: Problem, d: _Section, layout: Layout) -> None:
    mode = layout.activation_checkpointing
    d.put("activation_checkpointing", _AC_VALUES[mode], _why(problem, "activation_checkpointing", _AC_REASONS[mode]))


def _tp_reason(layout: Layout, nvlink: int, objective: str) -> str:
    if layout.tp == 1:
        better = "is faster" if objective == "throughput" else "needs less memory"
        return f"no tensor parallelism: no TP layout {better} by more than 1% (explain lists them)"
    where = ("inside" if ep_group_in_domain(layout.tp, nvlink, layout.world_size) else "across")
    return f"each layer split over {layout.tp} GPUs {where} the {nvlink}-GPU NVLink domain"


def _pp_reason(layout: Layout, num_layers: int) -> str:
    if layout.pp == 1:
        return "no pipeline: sharding alone fits the model"
    layers = [share.num_layers for share in pipeline_split(num_layers, layout.pp, layout.vpp, layout.pp_schedule)]
    low, high = min(layers), max(layers)
    share = f"{low}" if low == high else f"{low}-{high}"
    return f"{layout.pp} pipeline ranks, {share} of {num_layers} layers each"


def _cp_reason(problem: Problem, layout: Layout) -> str:
    """How CP splits the sequence; an unpinned CP shorter than MIN_CP_TOKENS per rank says why it was searched."""
    seq = problem.training.seq_length
    if layout.cp == 1:
        return f"the {seq}-token sequence is not split"
    reason = f"the {seq}-token sequence split over {layout.cp} GPUs ({seq // layout.cp} tokens each)"
    if problem.pins.cp is None and seq // layout.cp < MIN_CP_TOKENS:
        reason += f"; below {MIN_CP_TOKENS} tokens per rank: no layout with longer shards is legal and fits"
    return reason


def _ep_reason(layout: Layout, experts: int, cluster: ClusterSpec) -> str:
    if layout.ep == 1:
        return "no expert parallelism: experts are FSDP-sharded like the rest"
    where = ("inside" if ep_group_in_domain(layout.ep, cluster.nvlink_domain, cluster.world_size)
             else "across")
    return f"{experts // layout.ep} of {experts} experts per GPU; EP groups {where} the NVLink domain"


def _hsdp_reason(layout: Layout) -> str:
    if layout.dp_replicate == 1:
        return f"shard over all dp = {layout.dp} ranks"
    return (f"HSDP: shard over {layout.dp_shard} ranks inside a node or NVLink domain, "
            f"replicate {layout.dp_replicate}x across")


def _sp_reason(layout: Layout, is_moe: bool) -> str:
    if layout.sequence_parallel:
        return "shards norm and dropout activations over the TP group"
    if layout.tp > 1 and is_moe:
        return "not supported on AutoModel's MoE TP path (R27)"
    return "only useful with tp_size > 1"


def _pipeline(problem: Problem, layout: Layout) -> _Section:
    p = _Section()
    if layout.vpp > 1:
        p.put("pp_schedule", layout.pp_schedule,
              f"{layout.vpp} stages per rank interleave to shrink the pipeline bubble")
        stages = layout.pp * layout.vpp
        split = stage_split(problem.model.num_layers, stages, layout.pp)
        if split is None:  # the rules (pp-vpp-whole-layers) keep such a layout from the emitter
            raise ValueError(f"no layers_per_stage makes {stages} stages of {problem.model.num_layers} layers")
        lps, rounding = split
        p.put("layers_per_stage", lps, f"{problem.model.num_layers} layers -> {stages} stages = pp {layout.pp} x "
              f"{layout.vpp} per rank")
        if rounding is not None:
            p.put("round_virtual_stages_to_pp_multiple", rounding,
                  f"ceil({problem.model.num_layers} / {lps}) stages rounded {rounding} to a multiple of pp")
    else:
        p.put("pp_schedule", layout.pp_schedule, "one stage per pipeline rank")
    p.put("pp_microbatch_size", layout.micro_batch_size,
          _why(problem, "micro_batch_size", f"{layout.n_microbatches} micro batches per step (>= pp_size "
               f"{layout.pp})"))
    if automodel_moe(problem.model):
        p.put("patch_inner_model", False, "AutoModel's own MoE implementation (as its MoE examples)")
        p.put("patch_causal_lm_model", False, "AutoModel's own MoE implementation (as its MoE examples)")
    return p


def _model(problem: Problem, layout: Layout, model_id: str | None, reshape: Mapping[str, Any]) -> _Section:
    """The model section; `reshape`: the config keys that make the checkpoint's architecture the intent's
    (`reshape.reshaping`), passed to the config (from_scratch) or to from_pretrained, which hands them on."""
    model, cluster = problem.model, problem.cluster
    m = _Section()
    if problem.training.init == "from_scratch":
        m.put("_target_", SCRATCH_TARGET, "training.init from_scratch: random weights, the architecture only")
        config = _Section().put("_target_", CONFIG_TARGET)
        config.put("pretrained_model_name_or_path", model_id or model.name, "the intent's model (its config only)")
        for key, value in reshape.items():
            config.put(key, value, "the intent's architecture")
        m.put("config", config)
    else:
        m.put("_target_", MODEL_TARGET)
        m.put("pretrained_model_name_or_path", model_id or model.name, "the intent's model")
        for key, value in reshape.items():
            m.put(key, value, "the intent's architecture: the checkpoint's first layers")
    fp8 = runs_fp8(problem)
    if automodel_moe(model):
        b = _Section().put("_target_", BACKEND_TARGET)
        if layout.cp > 1 or fp8:
            b.put("attn", "te", "TE attention: CP on AutoModel's MoE models needs it (R20, R22)"
                  if layout.cp > 1 else "TE attention for FP8")
        if fp8:
            b.put("linear", "te", "FP8 runs through Transformer Engine linears")
        choice = choose_dispatcher(model, cluster, layout.ep)
        if fp8 and layout.dispatcher in FLEX_DISPATCHERS:
            b.put("experts", "te", "TE grouped experts run FP8 (with a DeepEP/HybridEP dispatcher)")
        else:
            b.put("experts", "torch_mm", "grouped GEMM through torch._grouped_mm; works with every dispatcher")
        reason = choice.reason if layout.dispatcher == choice.name else "the intent's dispatcher pin"
        b.put("dispatcher", layout.dispatcher, reason)
        if fp8:
            recipe = "mxfp8" if capability_major(cluster.gpu.compute_capability) == 10 else "current"
            b.put("te_fp8", CommentedMap({"recipe": recipe}), f"FP8 ({recipe} scaling) as the intent asks")
        m.put("backend", b, "AutoModel's MoE backend: kernels and token dispatcher")
    return m


def runs_fp8(problem: Problem) -> bool:
    """FP8 was asked for and the GPU has FP8 tensor cores (Ampere has none: the run stays bf16)."""
    return problem.training.precision == "fp8" and problem.cluster.gpu.supports_fp8


def _fp8_dense() -> _Section:
    s = _Section()
    s.put("enabled", True, "the intent asks for FP8 (torchao float8 training)")
    s.put("recipe_name", "tensorwise")
    s.put("enable_fsdp_float8_all_gather", True, "recommended with tensorwise scaling")
    s.put("precompute_float8_dynamic_scale_for_fsdp", True, "recommended with tensorwise scaling")
    return s


def _step_scheduler(problem: Problem, layout: Layout) -> _Section:
    s = _Section()
    s.put("global_batch_size", layout.global_batch_size, "the intent's global batch (sequences per step)")
    s.put("local_batch_size", layout.local_batch_size, _why(
        problem, "local_batch_size", f"per data-parallel rank; gradient accumulation = {layout.global_batch_size}"
        f" / ({layout.local_batch_size} x dp {layout.dp}) = {layout.grad_accumulation}"))
    s.put("max_steps", 1000, "placeholder: set your run length")
    s.put("ckpt_every_steps", 500, "placeholder: checkpoint cadence")
    return s


def _peft(problem: Problem) -> _Section:
    rank = problem.training.lora_rank
    s = _Section()
    s.put("_target_", "nemo_automodel.components._peft.lora.PeftConfig")
    s.put("match_all_linear", True, "LoRA adapters on every linear layer")
    s.put("dim", rank, "the intent's LoRA rank")
    s.put("alpha", 2 * rank, "2 x rank")
    s.put("dropout", 0.0)
    return s


def _placeholder_data(problem: Problem, layout: Layout) -> tuple[_Section, _Section]:
    """Synthetic data: fixed-length batches, or (packed) variable-length samples for the packer to fill."""
    model, training = problem.model, problem.training
    dataset, loader = _Section(), _Section()
    if training.packed_sequences:
        seq = training.seq_length
        dataset.put("_target_", MOCK_SAMPLES_TARGET)
        dataset.put("num_sentences", 20000).put("vocab_size", model.vocab_size)
        dataset.put("mean_len", float(seq // 4), "samples of about a quarter pack").put("std_len", float(seq // 16))
        dataset.put("max_sentence_len", seq)
        loader.put("_target_", "torchdata.stateful_dataloader.StatefulDataLoader")
        loader.put("shuffle", False, "the packer sets the collate function")
    else:
        dataset.put("_target_", MOCK_DATASET_TARGET)
        dataset.put("vocab_size", model.vocab_size).put("seq_len", training.seq_length)
        dataset.put("num_samples", 1000000).put("batch_size", layout.local_batch_size, "= local_batch_size")
        loader.put("_target_", "torch.utils.data.DataLoader")
        loader.put("batch_size", None, "the mock dataset yields whole batches")
    return dataset, loader


def build_recipe(problem: Problem, layout: Layout, model_id: str | None = None,
                 reshape: Mapping[str, Any] | None = None) -> CommentedMap:
    """The whole recipe as a commented mapping (no header)."""
    model, training = problem.model, problem.training
    r = _Section()
    r.put("recipe", RECIPE_CLASS)
    r.put("model", _model(problem, layout, model_id, reshape or {}))
    if training.is_peft:
        r.put("peft", _peft(problem), "task: peft")
    if runs_fp8(problem) and not automodel_moe(model):
        r.put("fp8", _fp8_dense(), "precision: fp8")
    r.put("distributed", _distributed(problem, layout))
    timeout, why = timeout_minutes(problem, layout)
    r.put("dist_env", _Section().put("backend", "nccl").put("timeout_minutes", timeout, why))
    r.put("step_scheduler", _step_scheduler(problem, layout))
    packed = training.seq_length if training.packed_sequences else 0
    r.put("packed_sequence", _Section().put(
        "packed_sequence_size", packed,
        f"samples packed into {packed}-token sequences" if packed else "packing off (intent: packed_sequences false)"))
    r.put("checkpoint", _Section().put("enabled", True).put("checkpoint_dir", "checkpoints/")
          .put("model_save_format", "safetensors"))
    r.put("loss_fn", _Section().put("_target_", "nemo_automodel.components.loss.masked_ce.MaskedCrossEntropy"))
    dataset, dataloader = _placeholder_data(problem, layout)
    r.put("dataset", dataset, "PLACEHOLDER: synthetic tokens so the recipe runs as is; replace with your data")
    r.put("dataloader", dataloader)
    lr = 1.0e-4 if training.is_peft else (3.0e-4 if training.task == "pretrain" else 1.0e-5)
    r.put("optimizer", _Section().put("_target_", "torch.optim.AdamW").put("lr", lr, "placeholder: tune")
          .put("betas", [0.9, 0.95]).put("weight_decay", 0.01))
    data = r.finish()
    for key in list(data)[1:]:
        data.yaml_set_comment_before_after_key(key, before="\n")
    return data


def header(problem: Problem, layout: Layout, estimate: Estimate) -> str:
    """The comment block above the recipe. It names the schema by its `$id`, not by a path: a path would
    break as soon as the recipe is copied, and editors map the id to the installed file (README, Editors)."""
    model, cluster, training = problem.model, problem.cluster, problem.training
    kind = (f"MoE, {model.num_routed_experts} experts top-{model.experts_per_token}" if model.is_moe
            else "dense")
    limit = memory_limit_gib(problem, estimate)
    gpu = one_line(cluster.gpu.name)  # user text in a comment: escaped onto its line (textsafe)
    framework = (problem.recipe_options or AUTOMODEL_DEFAULTS).framework  # `planned_options` changes only the sync
    return "\n".join([
        f"{RECIPE_MARKER}: {one_line(model.name)} ({kind}, {model.num_layers} layers)",
        f"on {cluster.nodes} node(s) x {cluster.gpus_per_node} {gpu} ({cluster.world_size} GPUs); "
        f"task {training.task}, seq {training.seq_length}, global batch {training.global_batch_size}, "
        f"{training.precision}",
        f"world: {cluster.nodes} x {cluster.gpus_per_node}",
        f"gpu: {gpu}",
        f"layout: {layout.short()}",
        f"predicted peak memory: {estimate.memory_gib:.1f} GiB of {estimate.hbm_gib:g} GiB on the most loaded "
        f"rank (limit {limit:.1f} GiB with {problem.memory_headroom:.0%} headroom)",
        *[f"warning: {warning}" for warning in compile_warnings(problem, estimate, framework)],
        f"predicted throughput: {estimate.tokens_per_s_per_gpu:,.0f} tokens/s/GPU, {estimate.tflops_per_gpu:.0f} "
        f"TFLOP/s/GPU (MFU {estimate.mfu:.0%}), step {estimate.step_time_s:.2f} s, bound by {estimate.bound}",
        "values the compiler chose carry a comment saying why; PLACEHOLDER sections are yours to replace",
        f"schema: {load_schema(RECIPE_SCHEMA)['$id']} (`automodel-dist schema --write DIR` for editors)",
    ])


# -- merging into a base recipe ---------------------------------------------------------------------------
def _normalized_pin_value(name: str, value: Any) -> Any:
    """A base recipe's value as the pin would say it (null sizes are 1, strategy aliases, AC spellings)."""
    if name in SIZE_PINS:
        return mesh_degree(value)
    if name == "strategy":
        return canonical_strategy(value) or value
    if name == "activation_checkpointing":
        try:
            return ac_mode(normalize_activation_checkpointing(value))
        except ValueError:
            return value
    return value


def check_base_is_recipe(base: Document) -> None:
    """A base recipe is a mapping with at least one of AutoModel's recipe sections. The message names no
    key or value of the file: a file that is not a recipe may hold secrets, and errors end up in CI logs."""
    if not any(isinstance(key, str) and key in RECIPE_SECTIONS for key in base.data):
        raise InputError("the base recipe is not an AutoModel recipe: its top level has none of the recipe "
                         "sections (" + ", ".join(sorted(RECIPE_SECTIONS)[:12]) + ", ...)", where=base.filename,
                         hint="base_recipe names an AutoModel recipe YAML to merge the layout into; remove it "
                              "to compile a recipe from scratch")


def load_base(base: Any) -> Document:
    """The base recipe (a path, YAML text, mapping or an already loaded Document), checked to be one."""
    doc = base if isinstance(base, Document) else load_document(base, what="base recipe", comments=True)
    check_base_is_recipe(doc)
    return doc


def check_base_against_pins(problem: Problem, base: Document, intent_where: IntentWhere | None) -> None:
    """A base value the intent's pins exclude is an InputError naming both places."""
    for name, path in PIN_PATHS.items():
        allowed = getattr(problem.pins, name)
        present, raw = lookup(base.data, path)
        if allowed is None or not present:
            continue
        value = _normalized_pin_value(name, translate_value(to_plain(raw)))
        if value not in allowed:
            pinned = ", ".join(str(v).lower() if isinstance(v, bool) else str(v) for v in allowed)
            where_pin = intent_where(f"parallelism.{name}") if intent_where else f"parallelism.{name}"
            raise InputError(
                f"base recipe sets {path}: {to_plain(raw)}, but the intent pins parallelism.{name} to {pinned} "
                f"(at {where_pin})",
                where=base.where(path),
                hint=f"make them agree: change {path} in the base recipe or parallelism.{name} in the intent")


def check_base_against_intent(problem: Problem, base: Document, intent_where: IntentWhere | None) -> None:
    """What the base recipe trains must be what the intent describes (the plan and its estimates are for the
    intent): a base that loads another model, starts from the other initialisation, trains LoRA adapters for
    another task or turns FP8 on for a bf16 intent is an InputError naming both places. The merge keeps these
    base keys, so without this check the recipe would run one job and be planned for another."""
    for base_path, base_says, intent_key, intent_says in _base_clashes(problem, base.data):
        where_intent = intent_where(intent_key) if intent_where else intent_key
        raise InputError(
            f"base recipe {base_says} ({base_path}), but the intent {intent_says} ({intent_key} at {where_intent}): "
            "the recipe would run one job and be planned for the other",
            where=base.where(base_path),
            hint=f"make them agree: change {base_path} in the base recipe or {intent_key} in the intent")


def _base_clashes(problem: Problem, data: Any) -> list[tuple[str, str, str, str]]:
    """(base path, what the base does, intent key, what the intent says) for each disagreement."""
    training, clashes = problem.training, []
    _, target = lookup(data, "model._target_")
    scratch = training.init == "from_scratch"
    if target in (MODEL_TARGET, SCRATCH_TARGET) and (target == SCRATCH_TARGET) != scratch:
        base_init = "from_scratch (random weights)" if target == SCRATCH_TARGET else "pretrained (from_pretrained)"
        clashes.append(("model._target_", f"starts {base_init}", "training.init", f"says {training.init}"))
    from automodel_dist.targets.automodel.recipe_model import recipe_model  # only a compile with a base reads one

    built = recipe_model(data)  # the base's model as AutoModel builds it: its id or path, reshaped by its keys
    changed = architecture_changes(built.spec, problem.model) if built.spec is not None else []
    if changed:
        clashes.append((built.path, f"builds {one_line(built.spec.name)}, which differs in {', '.join(changed)} (the "
                        "intent's in brackets)", "model", f"is {one_line(problem.model.name)}"))
    if lookup(data, "peft")[1] and not training.is_peft:
        clashes.append(("peft", "trains LoRA adapters", "training.task", f"says {training.task}"))
    _, dim = lookup(data, "peft.dim")
    if training.is_peft and isinstance(dim, int) and dim != training.lora_rank:
        clashes.append(("peft.dim", f"trains rank-{dim} adapters", "training.peft.rank",
                        f"asks for rank {training.lora_rank}"))
    if training.precision != "fp8":
        for path in ("fp8.enabled", "model.backend.te_fp8"):
            if lookup(data, path)[1]:
                clashes.append((path, "turns FP8 on", "training.precision", f"says {training.precision}"))
    return clashes


def _merge_section(base: CommentedMap, ours: CommentedMap, key: str) -> None:
    """Put ours[key] (value and comment) into base, in place when the key exists."""
    value = ours[key]
    base[key] = value
    comment = ours.ca.items.get(key)
    if comment is not None:
        base.ca.items[key] = comment


def _merge_distributed(base: CommentedMap, ours: CommentedMap, strategy: str) -> None:
    """Layout keys come from ours; the base keeps its other keys that the chosen strategy accepts."""
    accepted = set(COMMON_KEYS) | set(STRATEGY_KEYS[strategy])
    for key in list(base):
        if key not in accepted or (key in LAYOUT_KEYS and key not in ours):
            del base[key]
    for key in ours:
        _merge_section(base, ours, key)


def merge_into_base(base: CommentedMap, ours: CommentedMap, layout: Layout) -> CommentedMap:
    """The layout-bearing values of `ours` overwrite the base; sections the base lacks are added."""
    own_data = "dataset" in base or "dataloader" in base  # the base's data: our placeholders stay out
    for section in ours:
        if section in ("dataset", "dataloader") and own_data and section not in base:
            continue
        if section not in base or not isinstance(base[section], CommentedMap):
            _merge_section(base, ours, section)
            continue
        target, source = base[section], ours[section]
        if section == "distributed":
            _merge_distributed(target, source, layout.strategy)
        elif section == "model":
            if "backend" in source:
                if isinstance(target.get("backend"), CommentedMap):
                    for key in source["backend"]:
                        _merge_section(target["backend"], source["backend"], key)
                else:
                    _merge_section(target, source, "backend")
        elif section in ("step_scheduler", "packed_sequence", "fp8"):
            for key in ("global_batch_size", "local_batch_size", "packed_sequence_size", "enabled"):
                if key in source:
                    _merge_section(target, source, key)
        elif section == "dist_env":
            if not isinstance(target.get("timeout_minutes"), int) or target["timeout_minutes"] < source[
                    "timeout_minutes"]:
                _merge_section(target, source, "timeout_minutes")
        elif section == "peft":  # the base's adapters at the intent's rank (AutoModel's PeftConfig defaults to 8)
            for key in ("dim", "alpha"):
                if key not in target:
                    _merge_section(target, source, key)
        elif section == "dataset" and "batch_size" in source and (
                "batch_size" in target or target.get("_target_") == MOCK_DATASET_TARGET):
            _merge_section(target, source, "batch_size")  # the mock's batches are the local batch
    return base


def emit_recipe(problem: Problem, layout: Layout, estimate: Estimate, base: Any = None, *,
                intent_where: IntentWhere | None = None,
                model_id: str | None = None, reshape: Mapping[str, Any] | None = None) -> tuple[str, dict]:
    """(recipe YAML text, the same recipe as a plain mapping).

    `base`: a path, YAML text, mapping or Document to merge into; `intent_where(dotted)` locates an intent key;
    `model_id`: what `pretrained_model_name_or_path` loads (default: the model's name); `reshape`: the config keys
    that make it the intent's architecture (`reshape.reshaping`).
    """
    ours = build_recipe(problem, layout, model_id, reshape)
    if base is not None:
        doc = load_base(base)
        check_base_against_pins(problem, doc, intent_where)
        check_base_against_intent(problem, doc, intent_where)
        data = doc.data if isinstance(doc.data, CommentedMap) else CommentedMap(doc.data)
        data = merge_into_base(data, ours, layout)
    else:
        data = ours
    text = dump_yaml(data, explicit_null=True)
    head = "".join(f"# {line}\n" for line in header(problem, layout, estimate).splitlines())
    return head + text, to_plain(data)

"""Layout rules: what can be judged from a Layout, the world size and (when known) model, cluster, training.

The planner calls `check_layout` on thousands of layouts, so the checks are straight-line integer
arithmetic and build message or hint strings only when a rule fires.
"""

from __future__ import annotations

from math import gcd

from automodel_dist.catalog.specs import ClusterSpec, ModelSpec
from automodel_dist.dispatcher import capability_major, dispatcher_runs_on, ep_group_in_domain
from automodel_dist.findings import ERROR, Finding
from automodel_dist.layout import (
    INTER_NODE_DISPATCHERS,
    SINGLE_STAGE_SCHEDULES,
    V_SCHEDULES,
    Layout,
    is_multi_stage,
)
from automodel_dist.pipeline_stages import stage_split, virtual_stage_options
from automodel_dist.problem import TrainingSpec
from automodel_dist.rules import registry as r
from automodel_dist.rules.registry import divisors, listing
from automodel_dist.targets.automodel.model_classes import (
    MODEL_CLASSES,
    ep_moe_message,
    mfsdp_moe_message,
    model_class,
    tp_plan_message,
)

# Model families AutoModel runs with its own implementation (BackendConfig, TE attention by default),
# which is what packed sequences with context parallelism need (AutoModel `supports_cp_with_sequence_packing`:
# TE, Magi or THD-native tilelang attention). Hugging Face code (e.g. mixtral) has it only with
# `model.attn_implementation: te`.
PACKED_CP_FAMILIES = frozenset(family for family, cls in MODEL_CLASSES.items() if cls.custom)
_PACKED_CP_ATTN = frozenset({"te", "magi", "tilelang"})
# The parallelisms a strategy other than fsdp2 lacks (Layout size field, its name in AutoModel's message).
UNSUPPORTED_FEATURES = {
    "ddp": (("tp", "tensor parallelism"), ("pp", "pipeline parallelism"), ("cp", "context parallelism"),
            ("ep", "expert parallelism")),
    "megatron_fsdp": (("pp", "pipeline parallelism"), ("ep", "expert parallelism")),
}


def check_layout(layout: Layout, *, model: ModelSpec | None = None, cluster: ClusterSpec | None = None,
                 training: TrainingSpec | None = None, warnings: bool = True,
                 first_error: bool = False) -> list[Finding]:
    """Every layout rule that fires on `layout`, in AutoModel's start-up order. Pure and fast.

    `warnings=False` skips the checks that can only warn (where TP and EP groups land, the dispatcher's
    package, idle stages, CP padding): the planner, which keeps only errors, would otherwise build and
    discard thousands of them per compile. `first_error` stops after the first group of checks that finds an
    error: enough for a search that only asks whether a layout is legal (the remedy search's re-plans, which
    otherwise spent most of their time judging the model rules of layouts the mesh or pipeline already broke).
    """
    out: list[Finding] = []
    mesh_sound = _check_mesh(layout, out, warnings)
    if layout.strategy == "fsdp2" and layout.pp > 1:
        _check_pipeline(layout, out, warnings)
    if first_error and _has_error(out):
        return out
    if mesh_sound:
        _check_batch(layout, out)
    if model is not None and not (first_error and _has_error(out)):
        _check_model(layout, model, out)
    if training is not None and layout.cp > 1:
        if training.packed_sequences:
            check_cp_packing(layout, model, training, out)
        elif warnings:
            check_cp_padding(layout, training, out)
    if layout.dispatcher is not None:
        _check_dispatcher(layout, out, warnings)
    if warnings and cluster is not None and layout.world_size > 1:
        _check_topology(layout, cluster, model, out)
    return out


def _has_error(findings: list[Finding]) -> bool:
    return any(f.severity == ERROR for f in findings)


def _check_mesh(layout: Layout, out: list[Finding], warnings: bool = True) -> bool:
    """Strategy support and mesh arithmetic (AutoModel `_create_device_meshes`); True if dp is sound."""
    strategy, world = layout.strategy, layout.world_size
    tp, pp, cp, ep, dpr = layout.tp, layout.pp, layout.cp, layout.ep, layout.dp_replicate
    if dpr > 1 and strategy != "fsdp2":
        out.append(r.HSDP_NEEDS_FSDP2.finding(
            f"dp_replicate_size={dpr} (HSDP) needs strategy fsdp2, not {strategy}",
            hint="set distributed.strategy: fsdp2, or dp_replicate_size: 1",
            automodel_message="dp_replicate_size is only supported with FSDP2Config"))
    if layout.sequence_parallel and strategy != "fsdp2":
        out.append(r.UNKNOWN_OPTION.finding(
            f"sequence_parallel is an fsdp2 option; strategy {strategy} rejects the key",
            path="distributed.sequence_parallel", hint="remove distributed.sequence_parallel (even `false`)",
            automodel_message=f"Unknown options for strategy '{strategy}': ['sequence_parallel']"))
    for size_name, feature in UNSUPPORTED_FEATURES.get(strategy, ()):
        if getattr(layout, size_name) > 1:
            out.append(_strategy_feature(strategy, feature, f"{size_name}_size", getattr(layout, size_name)))
    if layout.activation_checkpointing == "selective" and strategy not in ("fsdp2", "ddp"):
        out.append(r.SELECTIVE_AC.finding(
            f"selective activation checkpointing with strategy {strategy}",
            hint="use activation_checkpointing: true (full), or strategy fsdp2",
            automodel_message="selective activation checkpointing is supported only for FSDP2 and DDP configs."))
    if strategy == "ddp":
        return True
    if strategy == "megatron_fsdp":
        if warnings and layout.activation_checkpointing == "full" and world > 1:
            out.append(r.MFSDP_AC_SKIPPED.finding(
                "activation checkpointing is silently skipped by MegatronFSDP on more than one GPU",
                hint="use strategy fsdp2 to checkpoint activations, or set activation_checkpointing: false",
                automodel_message="Activation checkpointing is not yet supported with MegatronFSDP. Skipping."))
        denom = tp * cp
    else:
        denom = tp * cp * pp

    sound = True
    if layout.dp_size is None:
        if world % denom:
            out.append(_world_divisible(layout, denom))
            return False
        dp = world // denom
    else:
        dp = layout.dp_size
        if dp * denom != world:
            out.append(_world_product(layout, dp, denom))
            sound = False
    if warnings and strategy == "megatron_fsdp" and dp * cp == 1 and world > 1:
        out.append(r.MFSDP_NO_DP_SHARD.finding(
            f"MegatronFSDP with dp·cp = 1 on {world} GPUs shards nothing: the model is only tensor-parallel",
            hint="lower tp_size so that dp > 1, or use strategy fsdp2",
            automodel_message="MegatronFSDP DP shard group size is 1; skipping MegatronFSDP wrapping and returning "
                              "the TP-parallelized model. To enable MegatronFSDP sharding, use dp_size>1 (e.g., "
                              "tp_size=1 for world_size=2)."))
    if strategy == "fsdp2":
        if dp % dpr:
            out.append(r.DP_REPLICATE_MULTIPLE.finding(
                f"dp={dp} is not a multiple of dp_replicate_size={dpr}",
                hint=f"dp_replicate_size must divide dp={dp} and be below it: {_replicate_choices(dp)}",
                automodel_message="dp_size must be a multiple of dp_replicate_size"))
        if dpr >= dp and dpr != 1:
            out.append(r.DP_REPLICATE_BELOW_DP.finding(
                f"dp_replicate_size={dpr} leaves nothing to shard (dp={dp}); FSDP2 does not do pure replication",
                hint=f"use dp_replicate_size in {{{_replicate_choices(dp)}}}, or strategy ddp for pure replication",
                automodel_message=f"dp_replicate_size={dpr} must be less than dp_size={dp} since DDP usecase is "
                                  "not supported by FSDP2"))
        non_pp = dp * cp * tp
        if non_pp % ep:
            out.append(r.EP_DIVIDES_NON_PP.finding(
                f"ep_size={ep} does not divide the {non_pp} ranks of a pipeline stage (dp·cp·tp = {dp}·{cp}·{tp})",
                hint=f"valid ep_size values here: {listing(divisors(non_pp))}",
                automodel_message=f"non_pp_size={non_pp} must be a multiple of ep_size={ep}"))
        if layout.sequence_parallel and ep > 1 and tp > 1:
            out.append(r.MOE_TP_SEQUENCE_PARALLEL.finding(
                f"sequence_parallel with ep_size={ep} and tp_size={tp}: the MoE TP path does not support it",
                hint="set distributed.sequence_parallel: false",
                automodel_message="sequence_parallel=True is not supported by the custom MoE TP path yet; use "
                                  "sequence_parallel=False so replicated router/attention activations remain correct."))
    return sound


def _strategy_feature(strategy: str, feature: str, key: str, size: int) -> Finding:
    return r.STRATEGY_FEATURE.finding(
        f"{strategy} does not support {feature} ({key}={size})", path=f"distributed.{key}",
        hint=f"set {key}: 1, or use strategy fsdp2",
        automodel_message=f"{strategy} does not support {feature}")


def _world_divisible(layout: Layout, denom: int) -> Finding:
    """`denom` is the product of the sizes the strategy's mesh divides the world by (MegatronFSDP has no pp)."""
    world = layout.world_size
    names = ("tp", "cp") if layout.strategy == "megatron_fsdp" else ("tp", "cp", "pp")
    expression = " * ".join(f"{name}_size" for name in names)
    factors = " * ".join(str(getattr(layout, name)) for name in names)
    return r.WORLD_DIVISIBLE.finding(
        f"world size {world} is not divisible by {'·'.join(names)} = {denom}",
        hint=f"choose sizes whose product divides {world}: {listing(divisors(world))}",
        automodel_message=f"world_size ({world}) must be divisible by ({expression}) ({factors} = {denom})")


def _world_product(layout: Layout, dp: int, denom: int) -> Finding:
    world, covered = layout.world_size, dp * denom
    what = "pp·dp·cp·tp" if layout.strategy == "fsdp2" else "dp·cp·tp"
    if world % denom == 0:
        hint = f"set dp_size: null (inferred as {world // denom}) or dp_size: {world // denom}"
    else:
        hint = f"no dp_size fits: also make the other sizes' product ({denom}) divide {world}"
    if covered > world:
        message = f"the mesh needs {what} = {covered} ranks but the world has {world}"
        automodel = f"Mesh should not be bigger than default world size {world}, but found {covered} ranks!"
    else:
        message = (f"{what} = {covered} covers only {covered} of {world} ranks; AutoModel builds the smaller mesh "
                   "and leaves the other ranks out without an error")
        automodel = None
    return r.WORLD_PRODUCT.finding(message, hint=hint, automodel_message=automodel)


def _replicate_choices(dp: int) -> str:
    return listing([d for d in divisors(dp) if d < dp or d == 1])


def _check_pipeline(layout: Layout, out: list[Finding], warnings: bool = True) -> None:
    """PP micro-batch arithmetic and stages per rank (AutoModel recipe setup, AutoPipeline, stage split)."""
    pp, lbs, mbs, vpp = layout.pp, layout.local_batch_size, layout.micro_batch_size, layout.vpp
    if mbs > 0 and lbs > 0:
        if lbs % mbs:
            out.append(r.LBS_DIVISIBLE_BY_MBS.finding(
                f"local_batch_size={lbs} is not divisible by pp_microbatch_size={mbs}",
                hint=f"pp_microbatch_size must divide {lbs}: {listing(divisors(lbs))}",
                automodel_message="local_batch_size must be divisible by microbatch_size"))
        n_micro = lbs // mbs
        if n_micro < pp:
            out.append(r.PP_MICROBATCHES.finding(
                f"{lbs} // {mbs} = {n_micro} pipeline micro batches per step, fewer than pp_size={pp}",
                hint=f"raise step_scheduler.local_batch_size to at least {pp * mbs} (pp · pp_microbatch_size), "
                     "or lower pp_microbatch_size",
                automodel_message=f"pp_batch_size {lbs} // pp_microbatch_size {mbs} must be >= pp_size {pp}"))
        else:
            if warnings and n_micro < vpp:
                out.append(r.MICROBATCHES_BELOW_STAGES.finding(
                    f"{n_micro} micro batches per step but {vpp} stages per rank: some stages idle",
                    hint=f"use at least {vpp} micro batches (local_batch_size >= {vpp * mbs})",
                    automodel_message=f"Number of microbatches ({n_micro}) is less than the total number of stages "
                                      f"({vpp}) which may result in a bubble in the pipeline."))
            _check_schedule_microbatches(layout.pp_schedule, n_micro, pp, vpp, mbs, out)
    schedule = layout.pp_schedule
    if schedule is None:  # an unknown or missing name is the recipe rule am-r32-schedule-name
        return
    if is_multi_stage(schedule) and vpp < 2:
        out.append(r.STAGES_PER_RANK.finding(
            f"multi-stage schedule {schedule} needs at least 2 stages per rank, got {vpp}",
            hint="lower layers_per_stage (or leave it null for 2 stages per rank), or use pp_schedule: 1f1b",
            automodel_message=f"Multi-stage schedule requires at least 2 stages per rank, but got {vpp} "
                              "stages per rank."))
    elif schedule in V_SCHEDULES and vpp != 2:
        # AutoModel asserts it while assigning ZBV stages; torch's DualPipeV constructor raises it.
        said = (f"v schedules assume 2 stages per rank, got {vpp}" if schedule == "zbvzerobubble"
                else f"ZBV requires exactly 2 stages per rank, but got {vpp}.")
        out.append(r.STAGES_PER_RANK.finding(
            f"schedule {schedule} is a V schedule and needs exactly 2 stages per rank, got {vpp}",
            hint="set layers_per_stage so that num_layers / layers_per_stage = 2·pp, or leave it null",
            automodel_message=said))
    elif schedule in SINGLE_STAGE_SCHEDULES and vpp != 1:
        out.append(r.STAGES_PER_RANK.finding(
            f"single-stage schedule {schedule} needs exactly 1 stage per rank, got {vpp}",
            hint="raise layers_per_stage to num_layers / pp (or leave it null), or use pp_schedule: interleaved1f1b",
            automodel_message=f"Single stage schedule requires exactly 1 stage per rank, but got {vpp} stages "
                              "per rank."))


def _check_schedule_microbatches(schedule: str | None, n_micro: int, pp: int, vpp: int, mbs: int,
                                 out: list[Finding]) -> None:
    """What torch's schedule constructors check on the micro-batch count (AutoModel passes lbs // mbs)."""
    if schedule in ("interleaved1f1b", "interleavedzerobubble"):
        rounds = max(1, n_micro // pp)
        if n_micro % rounds:
            name = "Interleaved 1F1B" if schedule == "interleaved1f1b" else "Zero bubble"
            good = [n for n in range(pp, 4 * pp + 1) if n % max(1, n // pp) == 0][:6]
            out.append(r.SCHEDULE_MICROBATCHES.finding(
                f"{n_micro} micro batches do not split into {rounds} whole rounds of the {schedule} schedule",
                hint=f"use a micro-batch count (local_batch_size / {mbs}) such as {listing(good)} (a multiple of "
                     f"pp={pp} always works)",
                automodel_message=f"{name} requires the number of microbatches to be a multiple of the number of "
                                  f"rounds ({rounds}), but got {n_micro}."))
    elif schedule == "dualpipev" and n_micro < pp * vpp:
        out.append(r.SCHEDULE_MICROBATCHES.finding(
            f"{n_micro} micro batches but {pp * vpp} pipeline stages: DualPipeV needs at least one per stage",
            hint=f"raise local_batch_size to at least {pp * vpp * mbs}",
            automodel_message=f"DualPipeV requires at least as many microbatches as stages, but got {n_micro} "
                              f"microbatches and {pp * vpp} stages."))


def _check_batch(layout: Layout, out: list[Finding]) -> None:
    """StepScheduler: GBS = LBS · dp · grad_accumulation (dp excludes cp, tp, pp)."""
    gbs, lbs = layout.global_batch_size, layout.local_batch_size
    dp = layout.world_size if layout.strategy == "ddp" else layout.dp
    if gbs <= 0 or lbs <= 0 or dp <= 0:
        return
    if gbs % (lbs * dp):
        step = lbs * dp
        lower = max(gbs // step, 1) * step
        choices = [d for d in divisors(gbs // dp) if d <= 64] if gbs % dp == 0 else []
        hint = f"global_batch_size must be a multiple of {lbs}·{dp} = {step} (e.g. {lower} or {lower + step})"
        if choices:
            hint += f"; or keep it and use local_batch_size in {{{listing(choices)}}}"
        out.append(r.GBS_DIVISIBLE.finding(
            f"global_batch_size={gbs} is not divisible by local_batch_size · dp = {lbs} · {dp} = {step}",
            hint=hint,
            automodel_message=f"global_batch_size ({gbs}) must be divisible by local_batch_size * dp_size "
                              f"({lbs} * {dp})"))


def _check_model(layout: Layout, model: ModelSpec, out: list[Finding]) -> None:
    """Sizes against the architecture and the class AutoModel builds for it: heads, TP plan, experts,
    layers, tied embeddings."""
    tp, ep, pp = layout.tp, layout.ep, layout.pp
    cls = model_class(model.family)
    if tp > 1 and layout.strategy != "ddp":
        heads, kv = model.num_attention_heads, model.num_key_value_heads
        if kv % tp or heads % tp:
            hint = f"tp_size must divide both {heads} attention and {kv} KV heads: {listing(divisors(gcd(heads, kv)))}"
            for count, what, field in ((kv, "key/value heads", "num_key_value_heads"),
                                       (heads, "attention heads", "num_attention_heads")):
                if count % tp:
                    out.append(r.TP_DIVIDES_HEADS.finding(
                        f"tp_size={tp} does not divide {model.name}'s {count} {what}", hint=hint,
                        automodel_message=f"{field} ({count}) must be divisible by TP size ({tp})"))
        if cls is not None and not cls.tp_plan:
            out.append(r.TP_PLAN.finding(
                f"tp_size={tp} but AutoModel builds {model.name} as {cls.name}, which has no tensor-parallel plan",
                hint="set distributed.tp_size: 1 and shard with FSDP2, ep_size, pp_size or cp_size instead",
                automodel_message=tp_plan_message(tp, cls.name)))
    if layout.strategy == "megatron_fsdp" and model.is_moe and layout.dp * layout.cp > 1:  # else it does not wrap
        out.append(r.MFSDP_MOE.finding(
            f"{model.name} is an MoE model: MegatronFSDP cannot wrap its experts in AutoModel 0.7.0 "
            "(megatron-fsdp 0.5.0 puts every `.experts.` weight in an expert data-parallel group, which AutoModel "
            "does not build)", hint="use strategy fsdp2 (with ep_size on AutoModel's own MoE classes)",
            automodel_message=mfsdp_moe_message(cls)))
    if ep > 1 and layout.strategy == "fsdp2":
        ep_capable = cls.moe_mixin if cls is not None else model.is_moe
        if not ep_capable:
            what = "is a dense model with no experts" if not model.is_moe else (
                f"runs on Hugging Face's {cls.name if cls else 'class'}, which AutoModel cannot expert-shard")
            out.append(r.EP_NEEDS_MOE.finding(
                f"ep_size={ep} but {model.name} {what}",
                hint="set distributed.ep_size: 1 (the experts are then FSDP-sharded like the other weights)",
                automodel_message=ep_moe_message(ep, cls.name if cls else model.name)))
        elif model.num_routed_experts % ep:
            n = model.num_routed_experts
            out.append(r.EP_DIVIDES_EXPERTS.finding(
                f"ep_size={ep} does not divide {model.name}'s {n} routed experts",
                hint=f"ep_size must divide {n}: {listing([d for d in divisors(n) if d > 1])}",
                automodel_message=f"n_routed_experts {n} must be divisible by expert_parallel_degree {ep}"))
        else:
            out.extend(_expert_shard_even(layout, model))
    if pp > 1 and layout.strategy == "fsdp2":
        stages = pp * layout.vpp
        if stages > model.num_layers:
            out.append(r.STAGES_EXCEED_LAYERS.finding(
                f"{pp}·{layout.vpp} = {stages} pipeline stages for {model.num_layers} layers",
                hint=f"keep pp · stages per rank <= {model.num_layers}",
                automodel_message=f"Number of stages ({stages}) cannot exceed number of layers ({model.num_layers})"))
        elif layout.vpp > 1 and stage_split(model.num_layers, stages, pp) is None:
            options = virtual_stage_options(model.num_layers, pp, model.num_layers // pp)
            out.append(r.VPP_WHOLE_LAYERS.finding(
                f"{pp}·{layout.vpp} = {stages} stages: no layers_per_stage splits {model.num_layers} layers into "
                f"exactly {stages} stages (AutoModel makes ceil({model.num_layers} / layers_per_stage) stages, "
                "rounded to a multiple of pp if asked)",
                hint=f"stages per rank that whole layers make with pp {pp}: {listing(options)}"))
        if model.tie_word_embeddings:
            out.append(r.PP_TIED_EMBEDDINGS.finding(
                f"{model.name} ties its input and output embeddings, which pipeline parallelism cannot split",
                hint="set pp_size: 1 (use tp, cp or more data parallelism instead)",
                automodel_message=f"Model '{model.name}' is not compatible with pipeline parallelism:\n\n1. Pipeline "
                                  "parallelism does not support tie_word_embeddings=True, and overriding it to "
                                  "tie_word_embeddings=False is not supported either. Train this model with another "
                                  "supported parallelism strategy (e.g., FSDP2) instead."))


def supports_packed_cp(model: ModelSpec, backend_attn: str | None = None, hf_attn: str | None = None) -> bool:
    """AutoModel's `supports_cp_with_sequence_packing`: TE (or Magi, or THD-native tilelang) attention.

    AutoModel's own implementations take it from `model.backend.attn` (default te); Hugging Face code
    only has it when `model.attn_implementation: te` injects TE attention.
    """
    if model.family in PACKED_CP_FAMILIES:
        return backend_attn is None or backend_attn in _PACKED_CP_ATTN
    return hf_attn in _PACKED_CP_ATTN


# The attention backends AutoModel 0.7.0 knows that its own attention-only classes cannot run context parallelism
# with (capabilities.supports_cp takes TE, or MagiAttention's own CP dispatch); hybrids and classes that ship their
# own CP attention take more and are left out, as are names newer than 0.7.0's list.
_NO_CP_ATTN = frozenset({"sdpa", "flex", "eager", "tilelang", "cudnn", "torch"})


def check_cp_attention(layout: Layout, model: ModelSpec, backend_attn: str | None, out: list[Finding]) -> None:
    """cp > 1 on one of AutoModel's own attention-only classes with another backend.attn than te (or magi):
    `validate_for_mesh` refuses it at model build (R22), packed sequences or not. An unset attn is TE on a GPU
    with Transformer Engine (BackendConfig's default)."""
    cls = model_class(model.family)
    if cls is None or not cls.custom or model.linear_attention_layers or backend_attn not in _NO_CP_ATTN:
        return
    out.append(r.CP_ATTENTION.finding(
        f"context parallelism (cp_size={layout.cp}) for {cls.name} needs the TE attention backend, and "
        f"model.backend.attn is {backend_attn!r}", path="model.backend.attn",
        hint="set model.backend.attn: te, or cp_size: 1",
        automodel_message=f"Context parallelism (cp_size={layout.cp}) for {cls.name} requires the TE attention "
                          "backend (backend.attn='te')"))


def check_cp_packing(layout: Layout, model: ModelSpec | None, training: TrainingSpec, out: list[Finding],
                     backend_attn: str | None = None, hf_attn: str | None = None) -> None:
    """Packed sequences with cp > 1: the pack length and model support (attention settings from the recipe)."""
    cp, seq = layout.cp, training.seq_length
    if seq % (2 * cp):
        up = -(-seq // (2 * cp)) * 2 * cp
        out.append(r.PACK_DIVISIBLE_BY_2CP.finding(
            f"packed_sequence_size={seq} is not divisible by 2·cp = {2 * cp}",
            hint=f"use packed_sequence_size {up} (a multiple of {2 * cp})"))
    if model is not None and not supports_packed_cp(model, backend_attn, hf_attn):
        custom = model.family in PACKED_CP_FAMILIES
        why = f"attention backend {backend_attn!r}" if custom else f"{model.name} (Hugging Face attention)"
        fix = "model.backend.attn: te" if custom else "model.attn_implementation: te"
        out.append(r.CP_PACKING_SUPPORT.finding(
            f"context parallelism (cp_size={cp}) with packed sequences is not supported with {why}",
            hint=f"set {fix}, or packed_sequence.packed_sequence_size: 0, or cp_size: 1",
            automodel_message=f"Context parallelism (cp_size={cp}) with packed sequences is not supported for "
                              f"{model.name}."))


def check_cp_padding(layout: Layout, training: TrainingSpec, out: list[Finding]) -> None:
    """Unpacked sequences with cp > 1: AutoModel pads each batch's sequence to a multiple of 2·cp
    (`context_parallel/sharder.py`, `_pad_cp_buffers_to_divisor`, cp_divisor = 2·cp) and computes the pad."""
    cp, seq = layout.cp, training.seq_length
    if seq > 0 and seq % (2 * cp):
        up = -(-seq // (2 * cp)) * 2 * cp
        out.append(r.CP_SEQ_PADDED.finding(
            f"seq_length {seq} is not a multiple of 2·cp = {2 * cp}: AutoModel pads every sequence to {up} tokens",
            hint=f"use a sequence length that is a multiple of {2 * cp} (e.g. {up - 2 * cp} or {up})"))


def _check_dispatcher(layout: Layout, out: list[Finding], warnings: bool = True) -> None:
    """The MoE token dispatcher against the world size (AutoModel `MoE.__init__`) and its package."""
    world = layout.world_size
    if warnings and layout.dispatcher in ("deepep", "hybridep") and world > 1 and layout.ep > 1:
        out.append(r.DISPATCHER_PACKAGE.finding(
            f"dispatcher {layout.dispatcher} runs on the deep_ep package (DeepEP; HybridEP is its hybrid-ep "
            "build), which `pip install nemo-automodel` does not install",
            hint="use a container that has it (NeMo AutoModel's), or install nemo-automodel[moe]; without it set "
                 "model.backend.dispatcher: torch"))
    if layout.dispatcher == "mok" and world % 4:
        out.append(r.MOK_WORLD.finding(
            f"dispatcher mok needs a world size divisible by 4, got {world}",
            hint="use dispatcher deepep or torch, or a world size divisible by 4",
            automodel_message=f"dispatcher='mok' requires world size to be divisible by 4; got {world}"))
    elif warnings and layout.dispatcher in INTER_NODE_DISPATCHERS and world == 1:
        out.append(r.FLEX_DISPATCHER_ONE_GPU.finding(
            f"dispatcher {layout.dispatcher} on one GPU: AutoModel falls back to standard grouped experts",
            hint="set model.backend.dispatcher: torch for single-GPU runs",
            automodel_message=f"'{layout.dispatcher}' dispatcher is enabled in config, but world size is 1. Expert "
                              "parallelism requires multiple GPUs. Falling back to standard GroupedExperts."))


def _check_topology(layout: Layout, cluster: ClusterSpec, model: ModelSpec | None, out: list[Finding]) -> None:
    """Where the groups land: TP inside a node, EP inside an NVLink domain, the dispatcher on this GPU."""
    world, tp, ep = layout.world_size, layout.tp, layout.ep
    node = cluster.gpus_per_node
    if tp > 1 and layout.strategy != "ddp" and not ep_group_in_domain(tp, node, world):
        out.append(r.TP_CROSSES_NODE.finding(
            f"tensor-parallel groups of {tp} consecutive ranks cross the {node}-GPU node boundary",
            hint=f"keep tp_size a divisor of {node}: {listing(divisors(node))}"))
    domain = cluster.nvlink_domain
    if ep > 1 and layout.strategy == "fsdp2" and not ep_group_in_domain(ep, domain, world):
        out.append(r.EP_LEAVES_NVLINK.finding(
            f"expert-parallel groups of {ep} consecutive ranks leave the {domain}-GPU NVLink domain; the "
            "all-to-all then runs over the inter-node network",
            hint=_ep_domain_hint(layout, domain, model)))
    gpu = cluster.gpu
    # A GPU without a compute capability is validate's nominal one (no --gpu): nothing to judge DeepEP by.
    known_gpu = capability_major(gpu.compute_capability) > 0
    if (layout.ep > 1 and layout.dispatcher == "deepep" and known_gpu
            and not dispatcher_runs_on("deepep", gpu)):
        out.append(r.DISPATCHER_GPU.finding(
            f"dispatcher deepep on {gpu.name}: DeepEP's kernels do not run on NVL{gpu.nvlink_domain} racks",
            hint="set model.backend.dispatcher: hybridep (the rack-scale NVLink dispatcher)"))


def _expert_shard_even(layout: Layout, model: ModelSpec) -> list[Finding]:
    """AutoModel FSDP-shards its grouped experts over the expert data-parallel ranks on dim 1, since there may be
    more shards than local experts (`moe/parallelizer.py` `_moe_shard_placement`: gate_and_up [experts, hidden,
    2·width], down [experts, width, hidden]), and FSDP2 refuses an uneven split on a dim other than 0
    (`_fsdp_param.py`): hidden and the expert width must both divide by it."""
    shards, hidden, width = layout.ep_shard, model.hidden_size, model.moe_intermediate_size
    if shards <= 1 or not width or (hidden % shards == 0 and width % shards == 0):
        return []
    local = model.num_routed_experts // layout.ep
    shape = [local, hidden, 2 * width] if hidden % shards else [local, width, hidden]
    common = gcd(hidden, width)
    good = [e for e in divisors(gcd(layout.non_pp_size, model.num_routed_experts))
            if e > 1 and common % (layout.non_pp_size // e) == 0]
    uneven = " and ".join(f"{name} {size}" for name, size in (("hidden size", hidden), ("expert width", width))
                          if size % shards)
    return [r.EXPERT_SHARD_EVEN.finding(
        f"ep_size={layout.ep} leaves {shards} expert data-parallel ranks, which do not divide {model.name}'s {uneven}",
        hint=f"ep_size values whose expert data parallelism divides {common}: {listing(good)}" if good else
        "use fewer ranks per pipeline stage (more pp) or ep_size equal to the stage's ranks",
        automodel_message=f"FSDP does not support uneven sharding on dim 1: torch.Size({shape}) "
                          f"(world size: {shards})")]


def _ep_domain_hint(layout: Layout, domain: int, model: ModelSpec | None) -> str:
    """EP sizes that stay in the domain and that the recipe could use: they divide the stage's ranks and the
    experts too (a GB200 rack's 72 GPUs alone would suggest 3 or 9, which divide neither 256 experts nor ranks)."""
    common = gcd(domain, layout.non_pp_size)
    if model is not None and model.num_routed_experts:
        common = gcd(common, model.num_routed_experts)
    inside = f"ep_size values inside the domain: {listing([d for d in divisors(common) if d > 1])}"
    if layout.dispatcher in INTER_NODE_DISPATCHERS:
        return f"{layout.dispatcher} handles inter-node all-to-all; if it is the bottleneck, use {inside}"
    return f"use {inside}, or an inter-node dispatcher (model.backend.dispatcher: deepep or hybridep)"


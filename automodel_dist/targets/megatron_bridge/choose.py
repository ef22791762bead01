"""What a Megatron-Bridge override set says beyond the layout, and why (one function serves planner and emitter).

`decide(problem, layout)` returns the `MegatronSettings` the compiler writes for a planned layout, with a
reason per field (the emitter's end-of-line comments). The planner judges each candidate layout with
these same settings, so what it ranks is what gets written.

Sources, reference/megatron-bridge.md: §0.6 (full-iteration graphs), §1/§2 (EP overlap prerequisites;
delayed wgrad gave no independent win, 31.31 -> 31.20 s), §3 (precision ladder: blockwise FP8 on Hopper,
MXFP8 on Blackwell), §5 (tuned rows: TE graphs `moe_router`+`moe_preprocess`, with `attn` on GB200/GB300;
the env vars), §6 (HCP only when CP must exceed the KV heads per TP rank and spans NVLink domains; `a2a`
when CP fits the heads), §7 (dispatcher by GPU and EP span; `NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN`),
§9 (graphs need both TE RNG trackers; expandable segments need NCCL_GRAPH_REGISTER=0; CUDA_DEVICE_MAX_
CONNECTIONS=32 with EP overlap and graphs), §10 (narrowest recompute first by architecture), A2
(expandable segments first).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from automodel_dist.catalog.specs import ModelSpec
from automodel_dist.cost.host import graphed_modules
from automodel_dist.cost.memory import RecipeOptions
from automodel_dist.cost.model import memory_limit_gib, peak_gib, recompute_ladder, with_recompute_modules
from automodel_dist.cost.throughput import generation
from automodel_dist.dispatcher import capability_major, choose_dispatcher, ep_group_in_domain
from automodel_dist.layout import Layout
from automodel_dist.problem import Problem
from automodel_dist.targets.megatron_bridge.fields import config_fields, mixed_precision, recipe_values
from automodel_dist.targets.megatron_bridge.overrides import PRETRAINED_ENV, PRETRAINED_FROM_ENV, MegatronSettings
from automodel_dist.targets.megatron_bridge.recipes import recipe_for


def comm_overlap_class() -> str:
    """What a `comm_overlap._target_` names: Megatron-Bridge's CommOverlapConfig (its path, from the fields data)."""
    return config_fields().target("CommOverlapConfig")


def dispatcher_of(problem: Problem, ep: int) -> tuple[str, str | None, str]:
    """(moe_token_dispatcher_type, moe_flex_dispatcher_backend, why) for an MoE model at this EP size."""
    choice = choose_dispatcher(problem.model, problem.cluster, ep)
    if choice.name in ("deepep", "hybridep"):
        return "flex", choice.name, f"flex + {choice.name}: {choice.reason}"
    if ep <= 1:
        return "alltoall", None, "no expert parallelism: alltoall is MCore's plain path"
    return "alltoall", None, f"alltoall: {choice.reason}"


def layout_dispatcher(dispatcher_type: str, flex_backend: str | None) -> str:
    """Layout.dispatcher of a Megatron layout: the flex backend, or the dispatcher type."""
    return flex_backend if dispatcher_type == "flex" and flex_backend else dispatcher_type


def recompute_candidates(model: ModelSpec) -> tuple[str, ...]:
    """The `recompute_modules` labels the planner may write for the architecture, within the rules
    (megatron-bridge.md §10): `mla_up_proj` only with MLA; `layernorm` where a norm is a module of its own (MLA's
    input norm, an MoE layer's pre-MLP norm: the cost model knows when the graph keeps MCore from recomputing the
    latter); `moe_act` and `shared_experts` where the layers have them; `mlp` where dense layers do. Never whole
    `moe`: the moe_router TE graph every MoE plan captures and EP overlap both refuse it
    (mb-cuda-graph-moe-recompute, mb-ep-overlap-moe-recompute)."""
    out = ["core_attn"]
    if model.uses_mla:
        out.append("mla_up_proj")
    if model.uses_mla or model.is_moe:
        out.append("layernorm")
    if model.is_moe:
        out.append("moe_act")
    if model.is_moe and model.num_shared_experts:
        out.append("shared_experts")
    if model.dense_layers:
        out.append("mlp")
    return tuple(out)


def recompute_modules(problem: Problem, layout: Layout) -> tuple[tuple[str, ...], str]:
    """The narrowest module set that fits, and why (megatron-bridge.md §10: narrowest first, one label at a
    time). Labels join in the order of the peak memory each frees per second of forward it replays
    (`cost.model.recompute_ladder`); the first set whose estimate fits is written, else the widest."""
    options = cost_options(problem, layout, MegatronSettings(recompute_granularity="selective",
                                                             **precision(problem)[0]))
    peaks: dict[tuple[str, ...], float] = {}  # the ladder's measures: no recompute, and each label alone
    ladder = recompute_ladder(problem, layout, options, recompute_candidates(problem.model), peaks)
    if not ladder:
        return (), "no module frees memory on the most loaded rank: the matched no-recompute control ([])"

    def peak_of(modules: tuple[str, ...]) -> float:
        if modules not in peaks:
            peaks[modules] = peak_gib(problem, layout, with_recompute_modules(options, modules))
        return peaks[modules]

    limit = memory_limit_gib(problem)
    base = peak_of(options.recompute_modules)
    for modules in ladder:
        peak = peak_of(modules)
        if peak <= limit:
            break
    over = peak - limit
    verdict = "the narrowest set that fits" if over <= 0 else f"the widest set the rules allow ({over:.1f} GiB over)"
    return modules, (f"{verdict}: frees {base - peak:.1f} GiB of the peak; labels join by memory freed per second "
                     f"replayed ({' > '.join(ladder[-1])})")


def hcp_sizes(cp: int, tp: int, domain: int) -> tuple[int, int]:
    """[a2a inner, p2p outer]: the largest inner CP group that stays in the NVLink domain with its TP."""
    inner = max(d for d in range(1, cp + 1) if cp % d == 0 and d * tp <= domain)
    return inner, cp // inner


def cp_comm(problem: Problem, layout: Layout) -> tuple[str, tuple[int, ...] | None, str]:
    """cp_comm_type and hierarchical sizes (megatron-bridge.md §6)."""
    if layout.cp <= 1:
        return "p2p", None, "no context parallelism (MCore's default)"
    domain, world = problem.cluster.nvlink_domain, layout.world_size
    heads_per_tp = problem.model.num_key_value_heads // max(layout.tp, 1)
    if ep_group_in_domain(layout.tp * layout.cp, domain, world):
        return "p2p", None, f"CP={layout.cp} stays in the NVLink domain: ring P2P overlaps attention"
    if layout.cp <= heads_per_tp:
        return "a2a", None, (f"CP={layout.cp} spans NVLink domains and fits {heads_per_tp} KV heads per TP rank: "
                             "Ulysses a2a")
    inner, outer = hcp_sizes(layout.cp, layout.tp, domain)
    return "a2a+p2p", (inner, outer), (f"CP={layout.cp} spans NVLink domains and exceeds {heads_per_tp} KV heads "
                                       f"per TP rank: a2a inside the domain ({inner}), p2p across ({outer})")


def _stage(layers: int, prefix: str = "") -> str:
    return prefix + ("t" * layers if layers <= 2 else f"t*{layers}")


def pipeline_layout(num_layers: int, pp: int, vpp: int, mtp: int | None) -> str | None:
    """A `pipeline_model_parallel_layout` when the layers do not split evenly over the stages.

    The loss gets a stage of its own, and the MTP layer one before it; the other stages share the layers,
    the first ones one more (DeepSeek-V3 PP8 VPP4: `Et*3|(tt|)*29m|L`, megatron-bridge.md §5). An even split
    needs none, MTP or not: Megatron-Core then runs the MTP layer on the last stage, as Qwen3-Next's pretrain
    recipe does (PP4, mtp_num_layers 1, no layout).
    """
    stages = pp * vpp
    if pp <= 1 or num_layers % stages == 0:
        return None
    bodies = stages - 1 - (1 if mtp else 0)
    if bodies < 1 or num_layers < bodies:
        return None
    base, extra = divmod(num_layers, bodies)
    parts = [_stage(base + (i < extra), "E" if i == 0 else "") for i in range(bodies)]
    parts += ["m"] * (1 if mtp else 0) + ["L"]
    out, i = "", 0
    while i < len(parts):
        run = 1
        while i + run < len(parts) and parts[i + run] == parts[i]:
            run += 1
        out += f"({parts[i]}|)*{run}" if run > 1 else parts[i] + ("|" if i < len(parts) - 1 else "")
        i += run
    return out


def finetune(problem: Problem, layout: Layout, s: MegatronSettings,
             packs: bool) -> tuple[MegatronSettings, dict[str, str]]:
    """The sft/peft recipes' keys: packing (padded for CP) where the recipe packs (`packs`: one that leaves
    `dataset.offline_packing_specs` None refuses the keys), the loss averaging Megatron-Bridge demands when
    fine-tuning with CP ("When finetuning with CP>1, calculate_per_token_loss must be True" / "average_in_
    collective must be False"), the checkpoint the weights load from ("PEFT requires a pretrained checkpoint
    path"), and the LoRA adapter's rank (alpha 2 x rank, as the AutoModel target writes)."""
    training, cp = problem.training, layout.cp
    why: dict[str, str] = {}
    if packs:
        s = s.with_(packed_sequence_size=training.seq_length, pad_seq_to_mult=2 * cp if cp > 1 else 1)
        why["packed_sequence_size"] = "the sft/peft recipes pack sequences: one packed sequence of seq_length"
        why["pad_seq_to_mult"] = (f"CP={cp} splits each packed sequence into 2 x CP chunks: pad to a multiple of "
                                  f"{2 * cp}" if cp > 1 else "no CP: no padding (the recipe pads for its own CP)")
    if cp > 1:
        s = s.with_(per_token_loss=True, average_in_collective=False)
        why["per_token_loss"] = "fine-tuning with CP: ranks whose tokens are all masked would divide by zero"
        why["average_in_collective"] = "fine-tuning with CP: per-token loss, so gradients are summed, not averaged"
    if training.init == "pretrained":
        s = s.with_(pretrained_checkpoint=PRETRAINED_FROM_ENV)
        why["pretrained_checkpoint"] = (f"the Megatron checkpoint of the pretrained weights (AutoBridge import), "
                                        f"from ${PRETRAINED_ENV} when the config is resolved")
    if training.is_peft:
        rank = training.lora_rank
        s = s.with_(peft_dim=rank, peft_alpha=2 * rank)
        why["peft_dim"] = "the intent's LoRA rank"
        why["peft_alpha"] = "2 x rank (the AutoModel target's scaling)"
    return s, why


# BF16 runs take the optimizer Megatron-Bridge's performance scripts run every BF16 job with
PRECISION_AWARE_WHY = ("BF16 with Adam: fp32 main weights kept as the 16 bits bf16 lacks, bf16 gradients read in place "
                       "(Megatron-Bridge's performance scripts run every BF16 job with it)")


def precision(problem: Problem) -> tuple[dict[str, object], dict[str, str]]:
    """The mixed-precision settings written, and why (one answer for the written set and the recompute ladder that
    prices it). FP8 names the generation's recipe. BF16 keeps a recipe function's own bf16 MixedPrecisionConfig
    that reduces gradients in bf16 (7 of 49: DeepSeek-V3, Qwen3-30B-A3B and Qwen3-8B pretrain, Llama-3.1-405B
    sft/peft, Moonlight pretrain/sft), naming its gradient dtype: `bf16_mixed` would replace the object and reset
    the gradient buffer to fp32 (2 more bytes per local weight); elsewhere it names `bf16_mixed`; both with the
    precision-aware optimizer."""
    major = capability_major(problem.cluster.gpu.compute_capability)
    if problem.training.precision == "fp8" and problem.cluster.gpu.supports_fp8:
        if major >= 10:
            return {"precision": "bf16_with_mxfp8_mixed"}, {"precision": "fp8 on Blackwell: MXFP8 (1x32 blocks)"}
        return ({"precision": "bf16_with_fp8_subchannel_scaling_mixed"},
                {"precision": "fp8 on Hopper: blockwise (128x128) FP8"})
    why = {"precision_aware_optimizer": PRECISION_AWARE_WHY}
    if recipe_value(problem, "mixed_precision.grad_reduce_in_fp32") is False \
            and recipe_value(problem, "mixed_precision.fp8") is None:
        return {"precision": None, "grad_reduce_in_fp32": False, "precision_aware_optimizer": True}, {
            "grad_reduce_in_fp32": "bf16 with the recipe's own MixedPrecisionConfig, gradients reduced in bf16 as its "
                                   "authors set it (naming bf16_mixed would replace it and reset the gradient buffer "
                                   "to fp32)", **why}
    return ({"precision": "bf16_mixed", "precision_aware_optimizer": True},
            {"precision": "bf16 (the stable baseline the precision ladder starts from)", **why})


def ep_overlap_blockers(model: ModelSpec, layout: Layout, s: MegatronSettings) -> list[str]:
    """Why EP overlap cannot be on with these settings (empty: every prerequisite holds)."""
    out = []
    if not model.is_moe or model.num_routed_experts <= 1:
        out.append("a dense model")
    if layout.ep <= 1:
        out.append("EP=1")
    if s.dispatcher_type not in ("alltoall", "flex"):
        out.append(f"dispatcher {s.dispatcher_type}")
    if layout.pp > 1 and layout.vpp <= 1:
        out.append("PP without VPP")
    if s.recompute_granularity == "full" or s.recompute_method or s.recompute_num_layers:
        out.append("full recompute")
    if "moe" in (s.recompute_modules or ()):
        out.append("moe recompute")
    if s.shared_expert_overlap:
        out.append("shared-expert overlap")
    if (s.mtp_num_layers or 0) > 1:
        out.append("more than one MTP layer")
    return out


def decide(problem: Problem, layout: Layout) -> tuple[MegatronSettings, dict[str, str]]:
    """The settings written for `layout`, and the reason for each (keys: MegatronSettings / Layout fields).

    The planner asks twice per layout (its rules, then its estimate), and the recompute ladder inside costs
    a memory estimate per module set: the answer is kept for the last layouts asked about."""
    settings, why = _decided(problem, layout)
    return settings, dict(why)


@lru_cache(maxsize=4096)
def _decided(problem: Problem, layout: Layout) -> tuple[MegatronSettings, dict[str, str]]:
    selective = layout.activation_checkpointing == "selective"
    return _settled(problem, layout, recompute_modules(problem, layout) if selective else None)


# The recompute set a selective layout is judged with by the rules: no module recomputed (a set the ladder writes
# when no label frees memory). No rule's verdict depends on which of the ladder's sets is written: every label
# `recompute_candidates` offers is one MCore accepts for the architecture, no set holds `moe`, and the only other
# field a set reaches, attention in a Blackwell graph scope, is read by rules on packed sequences (never graphed
# with attention) and on delayed weight gradients (never written). tests/test_megatron_plan.py checks it on every
# layout of several searches.
RULES_RECOMPUTE_SET: tuple[tuple[str, ...], str] = ((), "")


def settings_for_rules(problem: Problem, layout: Layout) -> MegatronSettings:
    """The settings `decide` writes for `layout`, but for a selective layout's recompute modules (RULES_RECOMPUTE_SET):
    what the planner's rules judge without running the recompute ladder on every layout of the search."""
    selective = layout.activation_checkpointing == "selective"
    return _settled(problem, layout, RULES_RECOMPUTE_SET if selective else None)[0]


def _settled(problem: Problem, layout: Layout, recompute: tuple[tuple[str, ...], str] | None
             ) -> tuple[MegatronSettings, dict[str, str]]:
    """The settings for `layout` with `recompute` (a selective layout's modules and why; None otherwise)."""
    model, cluster = problem.model, problem.cluster
    why: dict[str, str] = {}
    recipe = recipe_for(model, problem.training.task)
    s = MegatronSettings(seq_length=problem.training.seq_length, mtp_num_layers=provider_mtp_layers(problem),
                         comm_overlap=True)
    if recipe is not None and not recipe.comm_overlap:
        s = s.with_(comm_overlap_target=comm_overlap_class())
        why["comm_overlap_target"] = (f"{recipe.function} leaves comm_overlap None: the overrides build the "
                                      "CommOverlapConfig they set")
    why["seq_length"] = why["dataset_seq_length"] = "the intent's sequence length"
    if problem.training.task in ("sft", "peft"):
        s, finetune_why = finetune(problem, layout, s, packs=recipe is None or recipe.packs)
        why.update(finetune_why)
    if s.mtp_num_layers:
        why["mtp_num_layers"] = "the model's multi-token-prediction layer (Megatron-Bridge's provider)"
    # the fields decided below are gathered and set at once (a settings copy per field is most of what deciding
    # a layout without recompute costs, and the planner decides tens of thousands)
    cp_type, hcp, why["cp_comm_type"] = cp_comm(problem, layout)
    changes: dict[str, object] = {"cp_comm_type": cp_type, "hierarchical_cp_sizes": hcp}
    if hcp:
        why["hierarchical_cp_sizes"] = "a2a+p2p needs the sizes (else CP silently does nothing); product = CP"
    changes["pipeline_layout"] = pipeline_layout(model.num_layers, layout.pp, layout.vpp, s.mtp_num_layers)
    if changes["pipeline_layout"]:
        why["pipeline_layout"] = ("layers do not split evenly over PP x VPP stages: the loss (and MTP) get "
                                  "their own stage, the first stages one layer more")
    if model.is_moe:
        dtype, backend, why["dispatcher_type"] = dispatcher_of(problem, layout.ep)
        changes.update(dispatcher_type=dtype, flex_backend=backend)
        why["flex_backend"] = "the flex backend" if backend else "no flex backend (alltoall)"
        why["shared_expert_overlap"] = "off: exclusive with EP overlap and forced off by the flex dispatcher"
    if recompute is not None:
        modules, why["recompute_modules"] = recompute
        changes.update(recompute_granularity="selective", recompute_modules=modules)
        why["recompute_granularity"] = "selective before full: the layout does not fit without recompute"
    elif layout.activation_checkpointing == "full":
        changes.update(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1)
        why["recompute_granularity"] = "full recompute, as the intent pins it (selective is the narrower choice)"
        why["recompute_method"] = why["recompute_num_layers"] = "every layer recomputed from its input"
    s = s.with_(**changes)
    blockers = ep_overlap_blockers(model, layout, s)
    changes = {}
    if model.is_moe:
        changes["ep_overlap"] = not blockers
        why["ep_overlap"] = ("every prerequisite holds: hides dispatch/combine behind expert compute "
                             "(16xH100 Qwen3-30B: +17.7%)") if not blockers else "off: " + ", ".join(blockers)
        why["delay_wgrad"] = "off: no independent win measured (31.31 -> 31.20 s); a separate A/B"
    if layout.tp > 1:
        changes["tp_comm_overlap"] = True
        why["tp_comm_overlap"] = "TP with sequence parallelism: hide TP collectives behind the GEMMs"
    why["overlap_grad_reduce"] = "distributed optimizer: reduce-scatter gradients behind the backward"
    why["overlap_param_gather"] = "distributed optimizer: all-gather parameters behind the forward"
    if model.is_moe and s.recompute_granularity == "full":
        why["cuda_graph_impl"] = ("none: full recompute runs only under full-iteration graphs, which dropless MoE "
                                  "cannot capture (Megatron-Bridge's own full-recompute MoE presets run ungraphed)")
    elif model.is_moe:
        blackwell = generation(cluster.gpu.compute_capability) == "blackwell"
        scope = ("moe_router", "moe_preprocess")
        # attention stays out of the graphs when it is recomputed (full recompute, or core_attn among the modules;
        # the Blackwell DeepSeek-V3 presets graph it beside mla_up_proj / mlp recompute) or packed (padded
        # cu_seqlens needed)
        attention_recomputed = s.recompute_granularity == "full" or "core_attn" in recomputed_modules(s)
        if blackwell and not attention_recomputed and s.packed_sequence_size is None:
            scope = ("attn", *scope)
        changes.update(cuda_graph_impl="transformer_engine", cuda_graph_scope=scope, te_rng_tracker=True)
        why["cuda_graph_impl"] = "TE per-layer graphs: dropless MoE graphs only the router and preprocess"
        why["cuda_graph_scope"] = ("narrowest dropless-MoE scope" + (
            ", plus attn on Blackwell, where host launches bind first (Megatron-Bridge's B200/B300/GB200/GB300 MoE "
            "presets graph it; with the router alone the measured runs kept their host time)" if "attn" in scope
            else ""))
        why["te_rng_tracker"] = "CUDA graphs need Transformer Engine's RNG tracker"
    written, precision_why = precision(problem)
    changes.update(written)
    why.update(precision_why)
    return s.with_(**changes), why


# Megatron-Bridge's fp8_recipe -> the cost model's FP8 scaling (delayed scaling is per-tensor, like current scaling)
COST_FP8_RECIPES = {"tensorwise": "tensorwise", "delayed": "tensorwise", "blockwise": "blockwise", "mxfp8": "mxfp8"}


def cost_options(problem: Problem, layout: Layout, s: MegatronSettings) -> RecipeOptions:
    """How the override set runs, for the cost model: Megatron's profile, fp32 master weights, gradients
    accumulated in the DDP buffer and reduced once per step (behind the last backward), TP communication
    overlapped, the layout's recompute with the settings' modules, EP overlap where the settings turn it on, the
    settings' mixed precision (its FP8 recipe, gradient-buffer dtype and FP8 weights), the CUDA graphs the settings
    capture (as benchmarks/calibration_data.py describes Megatron-Bridge rows), the MTP depths the run trains (the
    settings', else the recipe function's own `model.mtp_num_layers`), the recipe's loss kernel (the bytes per
    logit) and its optimizer's precision (BF16 only: with FP8 weights Megatron-Core hands the main weights to
    Transformer Engine)."""
    mp = mixed_precision(s)
    return RecipeOptions(framework="megatron", master_weights="fp32", defer_grad_sync=True,
                         async_tp=layout.tp > 1, ep_overlap=s.ep_overlap,
                         fp8_recipe=COST_FP8_RECIPES.get(mp.fp8_recipe, "tensorwise"),
                         reduce_dtype="float32" if mp.grad_reduce_in_fp32 else "bfloat16",
                         recompute_modules=recomputed_modules(s),
                         cuda_graphs=graphed_modules(s.cuda_graph_impl, s.cuda_graph_scope),
                         mtp_layers=trained_mtp_layers(problem, s), logit_bytes=loss_logit_bytes(problem),
                         precision_aware=mp.fp8 is None and precision_aware_optimizer(problem, s),
                         fp8_primary_weights=mp.fp8_primary_weights)


# Bytes per logit alive at the loss with Megatron-Core's loss kernels (`LanguageModule.compute_language_model_loss`):
# Transformer Engine's parallel cross entropy writes the logits' gradient into the bf16 logits (TE 2.17, which
# Megatron-Bridge 0.6.x locks; from TE 2.18, "Fix the numerical issue with the Fused CE loss", it allocates the
# gradient in fp32 beside them: 4 bytes held, 6 at the loss, for a target on a later release); the native fused
# kernel and the unfused `vocab_parallel_cross_entropy` keep an fp32 copy, exponentiated in place, beside the bf16
# logits (megatron/core/fusions/fused_cross_entropy.py, tensor_parallel/cross_entropy.py)
TE_LOSS_LOGIT_BYTES = 2.0
MCORE_LOSS_LOGIT_BYTES = 6.0


def loss_logit_bytes(problem: Problem) -> float:
    """The bytes per logit the recipe function's loss keeps: TE's kernel where it fuses the loss with it (18 of 49
    recipes, the pretraining ones mostly), else Megatron-Core's (Megatron-Bridge's provider fuses by default)."""
    fused = recipe_value(problem, "model.cross_entropy_loss_fusion") is not False
    te = fused and recipe_value(problem, "model.cross_entropy_fusion_impl") == "te"
    return TE_LOSS_LOGIT_BYTES if te else MCORE_LOSS_LOGIT_BYTES


def precision_aware_optimizer(problem: Problem, s: MegatronSettings) -> bool:
    """The override set runs the precision-aware optimizer: its own `optimizer.use_precision_aware_optimizer`, else
    the recipe function's (Moonlight's and the H100 BF16 recipes' true; most recipes' false)."""
    if s.precision_aware_optimizer is not None:
        return s.precision_aware_optimizer
    return recipe_value(problem, "optimizer.use_precision_aware_optimizer") is True


def provider_mtp_layers(problem: Problem) -> int | None:
    """The multi-token-prediction depths the recipe function's model provider trains (None: none). The bridges
    read them from the checkpoint's config (`num_nextn_predict_layers`): DeepSeek-V3's 1, Moonlight's 0 though
    both are DeepSeek-V3 architectures; Qwen3-Next's pretrain recipe keeps 1, its SFT recipe none (fields data)."""
    return int(recipe_value(problem, "model.mtp_num_layers") or 0) or None


def trained_mtp_layers(problem: Problem, s: MegatronSettings) -> int:
    """The multi-token-prediction depths the override set trains: its own `mtp_num_layers`, else the recipe
    function's (`provider_mtp_layers`)."""
    if s.mtp_num_layers is not None:
        return s.mtp_num_layers
    return provider_mtp_layers(problem) or 0


def recipe_value(problem: Problem, path: str) -> Any:
    """The value at `path` of the recipe function the problem's model and task compile for (fields data; None
    where the data has none): what a key the override set leaves out runs with."""
    return _recipe_fields(problem.model, problem.training.task).get(path)


@lru_cache(maxsize=64)
def _recipe_fields(model: ModelSpec, task: str) -> Mapping[str, Any]:
    """The recipe function's values, found once per model and task (the cost options of every layout a compile
    decides read several of them)."""
    recipe = recipe_for(model, task)
    return recipe_values(recipe.function if recipe else None)


def recomputed_modules(s: MegatronSettings) -> tuple[str, ...]:
    """The modules Megatron-Core recomputes under these settings: the labels with selective granularity (unset:
    MCore's default, core_attn), none otherwise."""
    if s.recompute_granularity != "selective":
        return ()
    return ("core_attn",) if s.recompute_modules is None else s.recompute_modules


def env_vars(problem: Problem, layout: Layout, s: MegatronSettings) -> list[tuple[str, str, str]]:
    """(name, value, why) for the launch environment the cards name."""
    graphs = s.cuda_graph_impl != "none"
    out = [("CUDA_DEVICE_MAX_CONNECTIONS", "32" if graphs and s.ep_overlap else "1",
            "32 with EP overlap and CUDA graphs, else 1 (TP/DP overlap ordering)"),
           ("NVTE_ALLOW_NONDETERMINISTIC_ALGO", "1", "the multi-node card's training environment"),
           ("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True", "first fix for fragmentation, zero cost")]
    if graphs:
        out.append(("NCCL_GRAPH_REGISTER", "0", "expandable segments with CUDA graphs need it"))
    if s.flex_backend == "hybridep":
        out.append(("NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN", str(problem.cluster.nvlink_domain),
                    "HybridEP must know the real NVLink domain size"))
    return out

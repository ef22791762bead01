"""Peak memory of the most loaded rank, as a breakdown in GiB (pure functions, no torch).

Model states. AutoModel loads models with `torch_dtype: bf16` and FSDP2's default
`MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=float32)` then has nothing to cast: the sharded
parameters are bf16 (2 B), their gradients bf16 (2 B, reduced in fp32), and `torch.optim.Adam`/`AdamW`
keeps m and v in the parameter's dtype (4 B): 8 B per trained parameter, divided by the FSDP shard
group (dp_shard·cp for dense weights, ep_shard for routed experts; HSDP's dp_replicate copies do not
divide it). `RecipeOptions(master_weights="fp32")` gives the fp32-master stack (torchtitan, or AutoModel
with fp32 weights): 4 + 4 + 8 = 16 B. (Evidence for bf16 by default: AutoModel's Qwen3-30B-A3B
benchmark ran on 8×H100 80 GB; at 16 B its model states alone would take 57 GiB of the 80.)
PEFT keeps the frozen base in bf16 (2 B, no gradient, no optimizer state) and trains LoRA adapters.

On top of the shards: the FSDP all-gather working set (bf16 unsharded weights of the layers in flight;
the whole stage under PP, since PP layers are not resharded after forward; routed experts kept gathered
as `moe.reshard_after_forward` defaults to false), the unsharded fp32 gradients FSDP2 accumulates while
the gradient sync is deferred over several micro batches (AutoModel's `defer_fsdp_grad_sync: true`
default, and always under PP; AutoModel's 70B recipes turn it off because of this term), activations of
the micro batches in flight under the pipeline schedule, the logits and loss buffers on the last stage,
a fragmentation allowance and the runtime (CUDA context, NCCL communicators, DeepEP buffers).

The calibrated constants below were fitted by `benchmarks/calibration.py` to the torchtitan FSDP2
rows of reference/peers.md §6 (peak reserved memory), keeping every AutoModel row of
reference/calibration.md predicted to fit on 80 GB.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

from automodel_dist.cost.profiles import STACKS
from automodel_dist.cost.recompute import is_module_level, modules_cost, recomputes_pre_mlp_norm
from automodel_dist.cost.shape import ModelShape
from automodel_dist.layout import FLEX_DISPATCHERS, Layout, is_multi_stage
from automodel_dist.pipeline_stages import pipeline_split
from automodel_dist.problem import TrainingSpec

GIB = float(1 << 30)
BF16 = 2
FP32 = 4

# Bytes per logit element alive at the loss: bf16 logits, the fp32 log-softmax kept for backward, and
# in backward its fp32 gradient and the bf16 cast (fit: torchtitan Llama 3.1 8B rows, peers.md §6 rows 1-3).
LOGIT_BYTES = 8.0
# Op-level selective checkpointing keeps about this share of the no-checkpointing activations: the outputs
# of attention, of every other matmul (and grouped expert GEMM), of top-k and of all-to-all/reduce-scatter
# collectives, recomputing the rest (norms, activations, rotary, residual adds). AutoModel 0.7.0's
# `activation_checkpointing: selective` is this very policy, ported from torchtitan (`components/distributed/
# activation_checkpointing.py`: the same save set and matmul alternation, whole decoder blocks wrapped, on the
# dense and the MoE path), so torchtitan's measured rows fit it (peers.md §6 rows 1-2).
SELECTIVE_AC_KEEP = 0.55
# The same policy with the blocks compiled (torchtitan's `--training.compile`, AutoModel's
# `distributed.enable_compile`, which compiles each checkpointed block so the partitioner honours the policy):
# fused kernels keep fewer of the cheap ops' intermediates. Fit over the five compiled selective rows with
# measured memory (peers.md §6: torchtitan's 8B compile rows at 8 and 128 H100, eager 82.4 -> 77.0 GiB and
# 67.0 -> 62.0 GiB at the same shape, and its two 2025-06 H200 rows, whose op list also no longer saves the
# `abs` of Float8's scale; calibration.py prints each row's error).
SELECTIVE_AC_KEEP_FUSED = 0.44
# Layers' worth of full activations alive while one checkpointed layer is recomputed and back-propagated
# (the recomputed activations and their gradients; fit: peers.md §6 rows 3-4).
RECOMPUTE_WORKING_LAYERS = 4.0
# Caching-allocator fragmentation as a share of the transient memory (activations, logits, gathered
# weights): reserved minus allocated (fit: peers.md §6 rows 1-6, which report reserved memory).
FRAGMENTATION = 0.15
# CUDA context, cuBLAS/cuDNN workspaces and NCCL communicator buffers, GiB per rank (outside the
# caching allocator; nvidia-smi shows it, torch.cuda.max_memory_reserved does not).
RUNTIME_GIB = 1.5
# DeepEP/HybridEP dispatch buffers, GiB per rank (intra-node; doubled when EP leaves the NVLink domain).
EP_BUFFER_GIB = 1.0

PARTS = (
    "parameters", "gradients", "optimizer", "fsdp_gather", "activations", "logits", "fragmentation", "runtime",
)

NOT_MODELED = (
    "uneven routing (force-balanced tokens assumed: hot experts need more activation memory)",
    "Megatron-Core's own activation bytes (a share of the shared count by precision, 0.85 for BF16 and 0.5 for "
    "FP8, the middle of what its measured peaks and the runs that ran allow: MEGATRON_ACTIVATION_SHARE)",
    "seq² attention scores (flash/TE attention assumed; SDPA math or eager attention needs far more)",
    "CUDA graphs' private pools and static buffers",
    "optimizer CPU offload and activation offload",
    "fp8 weight transpose caches and scaling tensors (fp8 changes memory by <1% in torchtitan's runs)",
    "torch.compile fusions (they save 5-7% in torchtitan's runs)",
    "pipeline-parallel send/receive buffers and custom stage layouts (AutoModel's layers_per_stage split only)",
    "optimizers keeping fp32 states for bf16 weights (TE FusedAdam: 12 B per parameter instead of 8)",
    "MTP layers' memory (their time is counted) and vision towers",
    "selective checkpointing granularities other than torchtitan's op-level policy (AutoModel's selective) and "
    "Megatron-Core's recompute_modules (cost/recompute.py), and AutoModel's fallback to per-module checkpointing "
    "for KV-shared models",
    "Megatron's moe_router CUDA graph is assumed captured with a flex dispatcher, not with alltoall (it decides "
    "whether `layernorm` recompute reaches the pre-MLP norm)",
)

_CHECKPOINTING = ("none", "full", "selective")


class RankLoad(NamedTuple):
    """One pp rank's load: its decoder layers (dense, MoE), stage count, and whether it holds the
    embedding (first stage) and the final norm + LM head (last stage)."""

    rank: int
    dense: int
    moe: int
    stages: int
    embedding: bool
    head: bool


def rank_loads(shape: ModelShape, layout: Layout) -> tuple[RankLoad, ...]:
    """The pp ranks that can be the most loaded one, with what each holds under AutoModel's split.

    Every rank is judged (`pipeline_split`), then those another rank provably outweighs are dropped: memory
    and compute grow with each of dense layers, MoE layers, embedding and head, and the activations in
    flight shrink with the rank, so a rank no larger in any of them than a lower rank never peaks above it.
    """
    return split_loads(shape.num_layers, shape.dense_layers, layout.pp or 1, layout.vpp or 1, layout.pp_schedule)


def every_rank_load(shape: ModelShape, layout: Layout) -> tuple[RankLoad, ...]:
    """Every pp rank's load, in rank order (what a per-stage view draws; `rank_loads` prunes it)."""
    return _every_rank_load(shape.num_layers, shape.dense_layers, layout.pp or 1, layout.vpp or 1,
                            layout.pp_schedule)


@lru_cache(maxsize=4096)
def _every_rank_load(num_layers: int, dense_layers: int, pp: int, vpp: int,
                     schedule: str | None) -> tuple[RankLoad, ...]:
    loads = []
    for share in pipeline_split(num_layers, pp, vpp if pp > 1 else 1, schedule):
        dense = share.layers_below(dense_layers)
        loads.append(RankLoad(share.rank, dense, share.num_layers - dense, len(share.stages), share.embedding,
                              share.head))
    return tuple(loads)


@lru_cache(maxsize=4096)
def split_loads(num_layers: int, dense_layers: int, pp: int, vpp: int,
                schedule: str | None) -> tuple[RankLoad, ...]:
    """`rank_loads` of a split given by its sizes (cached)."""
    loads: list[RankLoad] = []
    for load in _every_rank_load(num_layers, dense_layers, pp, vpp, schedule):
        if not any(_outweighs(kept, load) for kept in loads):
            loads.append(load)
    return tuple(loads)


def _outweighs(a: RankLoad, b: RankLoad) -> bool:
    """`a` (a lower rank) holds at least what `b` holds, part by part."""
    return a.dense >= b.dense and a.moe >= b.moe and a.embedding >= b.embedding and a.head >= b.head


def chunks_in_flight(layout: Layout, rank: int) -> float:
    """Micro-batch chunks (one micro batch through one local stage) whose activations rank `rank` holds.

    1F1B: pp - rank micro batches; interleaved (Megatron's warm-up count): 2(pp-rank-1) + (vpp-1)pp + 1
    chunks, which for rank 0 is pp·vpp·(1 + (pp-1)/(pp·vpp)); GPipe and looped BFS keep every micro batch.
    Without a schedule the stage count decides: several stages per rank count as interleaved.
    """
    pp, vpp, n_micro = layout.pp, layout.vpp, layout.n_microbatches or 1
    if pp <= 1:
        return 1.0
    schedule = layout.pp_schedule
    if schedule in ("gpipe", "loopedbfs"):
        return float(n_micro * vpp)
    if is_multi_stage(schedule) or vpp > 1:
        return float(min(2 * (pp - rank - 1) + (vpp - 1) * pp + 1, n_micro * vpp))
    return float(min(pp - rank, n_micro))


def micro_batch_tokens(layout: Layout, seq_length: int) -> float:
    """Tokens of one micro batch on one GPU's sequence shard (a pipeline micro batch, else the local batch)."""
    samples = max(layout.micro_batch_size if layout.pp > 1 else layout.local_batch_size, 1)
    return samples * seq_length / (layout.cp or 1)


def micro_batches_per_step(layout: Layout) -> int:
    """Forward/backward passes per optimizer step: accumulation steps times pipeline micro batches."""
    return (layout.grad_accumulation or 1) * ((layout.n_microbatches or 1) if layout.pp > 1 else 1)


@dataclass(frozen=True)
class RecipeOptions:
    """Recipe settings the Layout does not carry, with AutoModel's defaults (memory and time use them).

    `checkpointing`: None follows the layout's mode (as AutoModel applies it); "none", "full" or "selective"
    (torchtitan's op-level policy, which AutoModel's selective is) override it for runs described elsewhere.
    `master_weights`: "bf16" (AutoModel
    loads bf16 weights) or "fp32" (fp32 master weights, fp32 gradients and Adam states). `logit_bytes`:
    bytes per logit alive at the loss (None: LOGIT_BYTES, the fp32-upcast cross entropy; 4 for a bf16
    one; 0 for a fused linear cross entropy that never materializes them). `defer_grad_sync`: FSDP2 keeps
    unsharded gradients across micro batches (AutoModel's `defer_fsdp_grad_sync`, default true).
    `reduce_dtype`: `mp_policy.reduce_dtype`, the dtype of gradient reduction and of the unsharded
    gradients FSDP2 accumulates ("float32" by default, "bfloat16" halves both). `async_tp`:
    `enable_async_tensor_parallel` (time only: it hides most TP collectives behind the GEMMs).
    `framework`: the training stack whose profile times the layout ("automodel", "megatron", "torchtitan";
    cost/profiles.py). `fp8_recipe`: the FP8 scaling with `precision: fp8` ("tensorwise" current scaling,
    "rowwise", "blockwise", "mxfp8"). `balanced_gate`: AutoModel's `model.backend.fake_balanced_gate`, the
    benchmark router that gives token i the top_k consecutive experts from i·top_k: it decides how many EP
    ranks and NVLink domains each token is dispatched to, and keeps no router activations. `ep_overlap`: the
    recipe turns on the stack's EP overlap (Megatron's `overlap_moe_expert_parallel_comm`, which its target
    writes only where every prerequisite holds). `attention`: the attention kernel the recipe names
    (AutoModel's `model.backend.attn`: "te", "sdpa", "flex"); None: what the stack runs by default
    (`throughput.attention_kernel`). `fsdp_optimizations`: AutoModel's `model.backend.enable_fsdp_optimizations`
    (default false), which keeps an MoE model's weights unsharded across the micro batches of a deferred
    gradient sync (`weights_stay_gathered`). `preserve_fp32_weights`, `grad_reduce_in_fp32`:
    MegatronFSDP's keys (`distributed.*` with `strategy: megatron_fsdp`): an fp32 main-weight buffer beside
    the bf16 one (AdamW then keeps fp32 states), and an fp32 main-gradient buffer. `compiled`: the memory-bound
    ops run fused (torch.compile, or the stack's fused kernels) or eager, one kernel per op; None takes the
    stack's default (`runs_fused`); under op-level selective checkpointing fused blocks keep fewer activations.
    `recompute_modules`: Megatron-Core's selective recompute labels (cost/recompute.py); with the Megatron
    framework, "selective" checkpoints these modules (none: MCore's `[]`) instead of AutoModel's op-level policy.
    `cuda_graphs`: what the run captures in CUDA graphs (`host.graphed_modules`: () none, ("full_iteration",)
    whole layers or iterations, else the scopes, e.g. AutoModel's `backend.cuda_graph.modules` or Megatron's
    `cuda_graph_scope`): the MoE host time it removes.
    `mtp_layers`: multi-token-prediction depths the run trains (Megatron's `mtp_num_layers`; AutoModel trains
    none): time only, each a copy of the last decoder layer with an output head of its own (`ModelShape.mtp_gemms`).
    `moment_dtype`: the dtype of AdamW's two moments; None: the master weights' (torch's AdamW), "bfloat16":
    Megatron's precision-aware optimizer with `exp_avg_dtype`/`exp_avg_sq_dtype` bf16 beside fp32 main weights.
    `precision_aware`: Megatron's `optimizer.use_precision_aware_optimizer` with bf16 weights (its performance
    recipes turn it on for BF16 runs): Transformer Engine's FusedAdam keeps the fp32 main weights as the 16 bits
    the bf16 weights lack (`store_param_remainders`, Megatron-Core's default, TE >= 2.1) and reads the bf16
    gradient buffer in place (`decoupled_grad`: no fp32 copy at the step).
    `fp8_primary_weights`: the layers' GEMM weights live in FP8 and the distributed optimizer's step casts the fp32
    master shards into them through Transformer Engine's `cast_master_weights_to_fp8` (Megatron's `fp8_param_gather`
    with per-tensor or blockwise scaling; MXFP8's `reuse_grad_buf_for_mxfp8_param_ag` stages them in the gradient
    buffer instead): a bf16 copy of every cast shard, all held until the cast ends (`step_grad_copy`).
    """

    checkpointing: str | None = None
    master_weights: str = "bf16"
    logit_bytes: float | None = None
    defer_grad_sync: bool = True
    reduce_dtype: str = "float32"
    async_tp: bool = False
    framework: str = "automodel"
    fp8_recipe: str = "tensorwise"
    balanced_gate: bool = False
    ep_overlap: bool = True
    attention: str | None = None
    fsdp_optimizations: bool = False
    preserve_fp32_weights: bool = False
    grad_reduce_in_fp32: bool = False
    compiled: bool | None = None
    recompute_modules: tuple[str, ...] = ()
    cuda_graphs: tuple[str, ...] = ()
    mtp_layers: int = 0
    moment_dtype: str | None = None
    precision_aware: bool = False
    fp8_primary_weights: bool = False

    @property
    def reduce_bytes(self) -> int:
        return dtype_bytes(self.reduce_dtype)


def dtype_bytes(dtype: str) -> int:
    """Bytes per element of a dtype as the options name it: 2 for "bfloat16" or "bf16", else 4 (fp32)."""
    return BF16 if dtype in ("bfloat16", "bf16") else FP32


AUTOMODEL_DEFAULTS = RecipeOptions()


def checkpointing_mode(layout: Layout, options: RecipeOptions = AUTOMODEL_DEFAULTS) -> str:
    """The checkpointing in effect ("none", "full" or "selective").

    The options' override, else the layout's mode as AutoModel applies it: MegatronFSDP skips it on more
    than one GPU ("Activation checkpointing is not yet supported with MegatronFSDP. Skipping.",
    automodel.md §3.3).
    """
    if options.checkpointing:
        return options.checkpointing
    skipped = layout.strategy == "megatron_fsdp" and layout.world_size > 1
    return "none" if skipped or not layout.checkpointed else layout.activation_checkpointing


def weights_stay_gathered(shape: ModelShape, layout: Layout, options: RecipeOptions, deferred: bool) -> bool:
    """FSDP keeps the unsharded weights from one micro batch's backward to the next (so the whole stage's bf16
    weights are resident at the end of a backward, and the next forward gathers nothing).

    Under PP torch's stage does (`backward_maybe_with_nosync` sets `reshard_after_backward(False)` before every
    backward but the last). Without PP, AutoModel's deferred sync only turns the gradient sync off
    (`get_sync_ctx`: `set_requires_gradient_sync`), so FSDP2 still reshards after each backward; only its MoE
    classes (MoEFSDPSyncMixin.prepare_for_grad_accumulation) also stop resharding, and only with
    `backend.enable_fsdp_optimizations`; its dense and Hugging Face classes reshard. Other stacks' deferred syncs
    (torchtitan's and MegatronFSDP's gradient accumulation) are taken to keep them.
    """
    if layout.strategy == "ddp":
        return False
    if (layout.pp or 1) > 1:
        return True
    if options.framework == "automodel":
        return deferred and shape.automodel_class and shape.moe_layers > 0 and options.fsdp_optimizations
    return deferred


# AutoModel's `_EXPERT_MLP_CHUNK_BYTES` (components/moe/experts.py): the gate/up output size past which a biased
# expert MLP is checkpointed in row chunks
EXPERT_MLP_CHUNK_BYTES = 512 * 2**20


def expert_mlp_checkpointed(shape: ModelShape, layout: Layout, training: TrainingSpec,
                            options: RecipeOptions) -> bool:
    """AutoModel runs a biased expert MLP (GPT-OSS) under activation checkpointing, in 4096-row chunks, once the
    bf16 gate/up output on a rank passes EXPERT_MLP_CHUNK_BYTES (GroupedExpertsDeepEP.forward, the flex
    dispatchers' path; not with torchao's MXFP8 grouped GEMMs): a rank receives every micro-batch token's top_k
    copies over its EP group, each 2 x expert width wide. Then only the dispatched copies are kept for backward,
    which replays the chunks' two grouped GEMMs."""
    if options.framework != "automodel" or not shape.expert_bias or layout.dispatcher not in FLEX_DISPATCHERS:
        return False
    if training.precision == "fp8" and options.fp8_recipe == "mxfp8":
        return False
    rows = micro_batch_tokens(layout, training.seq_length) * shape.top_k
    return rows * 2 * shape.expert_width * BF16 > EXPERT_MLP_CHUNK_BYTES


# The share of the shared activation count Megatron-Core holds, by precision, each the middle of the interval its
# runs allow (benchmarks/calibration.py: the measured peaks within +-10% below, the runs that ran predicted to fit
# above):
# - BF16, 0.85 of [0.78, 0.91]: the two force-balanced BF16 MoE peaks (Qwen3-30B-A3B on 16 H100, PP1, HybridEP and
#   alltoall) need 0.78; above 0.91 a DeepSeek-V3 BF16 run of the 25.11 table (256 GB200, PP4 VPP4) is called unfit.
#   That bound counts the run's allocator fragmentation (15.9 GiB): expandable segments would all but remove it and lift
#   the bound to ~1.05, but the 25.11 performance scripts set them only for Llama-3.1-405B FP8 on GB200
#   (scripts/performance/perf_plugins.py at Megatron-Bridge 06a9d1d9). At 0.85 the two peaks come within -6% and -5%.
#   Moonlight's six (8 H100, one micro batch) are 16-18% low by a near-constant ~5.5 GiB. Their peaks show a floor:
#   `mla_up_proj` and `moe_act` each lower the no-recompute peak by ~0.7 GB, and adding `mlp` or `layernorm` lowers it
#   no further (+15 and +8 MB, where the model frees 0.1-0.4 GiB more): all four sit at 35.90-35.95 GB. Once ~0.7 GB of
#   activations is recomputed, the peak is set at a moment no recompute set moves (the optimizer step, or the end of
#   backward), 33.4 GiB: 12.7 GiB above the model states counted here (20.8 GiB). So the measured deltas only bound
#   what the sets free from below (they do not rule out a hot EP rank), and the gap is in the model states or in a
#   transient outside the forward and backward; neither has a term yet. Taken together, the Qwen3 and Moonlight peaks
#   read as a share of ~0.75 plus ~6 GiB that no recompute set moves; the one size the two runs share is ~1.8B local
#   expert weights at expert DP 1. Not a reference cycle kept until `manual_gc` collects: Megatron-Core 0.19.2's
#   local-spec MLA + MoE layers (allgather dispatcher) on CPU, garbage collection off, leave nothing for a collection
#   to free after backward; Transformer Engine's layers could not be run there.
# - FP8, 0.5: at 0.6 a Llama-3 70B FP8 run (25.11, 64 GB200, PP4 VPP5) that ran is called unfit; the seven peaks of
#   Megatron-Bridge's Llama-3 70B FP8 study (interleaved PP, TP4 and TP8) come within -3% to +5% at 0.5 (three of
#   them peak at the optimizer step: `step_grad_copy`). Part of the gap to BF16 is Transformer Engine keeping FP8
#   GEMM inputs quantized (one byte: ~13% of a Llama layer, more of an expert path); the rest has no term yet.
# What would replace both with a count: one model's BF16 and FP8 peaks, PP1 and interleaved, per rank.
MEGATRON_ACTIVATION_SHARE = {"bf16": 0.85, "fp8": 0.5}


def activation_share(options: RecipeOptions, precision: str) -> float:
    """The share of the shared activation count the options' stack holds at `precision` ("bf16" or "fp8")."""
    if options.framework != "megatron":
        return 1.0
    return MEGATRON_ACTIVATION_SHARE["fp8" if precision == "fp8" else "bf16"]


def kept_activation_share(mode: str, fused: bool = False) -> float:
    """Share of a layer's no-checkpointing activations kept until backward without "full" checkpointing
    (which keeps only each layer's input: `_rank_parts`): all of them, or selective's saved op outputs (fewer
    when the blocks are compiled)."""
    if mode != "selective":
        return 1.0
    return SELECTIVE_AC_KEEP_FUSED if fused else SELECTIVE_AC_KEEP


def runs_fused(options: RecipeOptions) -> bool:
    """Whether the run's memory-bound ops are fused kernels: the recipe's say (torch.compile on or off), else
    its stack's default (`profiles.STACKS`)."""
    if options.compiled is not None:
        return options.compiled
    return STACKS[options.framework].fused_elementwise


class ModelStates(NamedTuple):
    """One pp rank's model states in bytes (sharded as FSDP2 / EP / TP hold them, padding aside), and the
    weights behind them before FSDP sharding: `dense_w` (TP-split), `experts_w` (this EP rank's experts), the
    trained weights whose FSDP group has several ranks (`trained_unsharded`, their gradients unsharded) and the
    part of `dense_w` that is the layers' GEMM weights (`dense_gemm_w`: what an FP8 recipe quantizes, beside every
    expert; not the norms, routers, embedding or head)."""

    params: float
    grads: float
    optimizer: float
    dense_w: float
    experts_w: float
    trained_unsharded: float
    dense_gemm_w: float


def shard_groups(layout: Layout) -> tuple[int, int]:
    """Ranks the model states are sharded over: (dense weights, routed experts); DDP shards nothing."""
    if layout.strategy == "ddp":
        return 1, 1
    fsdp = (layout.dp_shard or 1) * (layout.cp or 1)
    return fsdp, (layout.ep_shard if (layout.ep or 1) > 1 else fsdp)


def expert_share(shape: ModelShape, layout: Layout, expert_shard: int, options: RecipeOptions) -> float:
    """The share of this rank's routed-expert weights its FSDP2 shard holds. FSDP2 splits a tensor on dim 0 in
    chunks of ceil(rows / ranks), padded to that size on every rank: without EP the experts are one
    [experts, ...] tensor (Hugging Face's fused MoE classes such as Mixtral's, and AutoModel's own), so a group
    larger than the expert count leaves each rank a whole expert's rows, not 1/group (Mixtral-8x7B on 32 GPUs:
    1/8 of the experts per rank, 4x the even split). With EP, AutoModel shards its experts on dim 1
    (am-expert-shard-even); Megatron's and MegatronFSDP's flat buffers split evenly."""
    rows = shape.num_experts
    if not rows or layout.strategy != "fsdp2" or (layout.ep or 1) > 1 or options.framework == "megatron":
        return 1 / expert_shard
    return -(-rows // expert_shard) / rows


def model_states(shape: ModelShape, layout: Layout, training: TrainingSpec, load: RankLoad,
                 options: RecipeOptions = AUTOMODEL_DEFAULTS) -> ModelStates:
    """Parameter, gradient and optimizer bytes of the pp rank `load` describes (tests/test_memory_grounding.py
    checks them against what AutoModel's own build allocates on every catalog architecture)."""
    tp, pp, ep = layout.tp or 1, layout.pp or 1, layout.ep or 1
    fsdp, expert_shard = shard_groups(layout)
    weight_bytes = FP32 if options.master_weights == "fp32" else BF16
    head = (shape.lm_head_params or (shape.embedding_params if pp > 1 else 0)) + shape.final_norm_params
    # weights this rank holds before FSDP sharding (TP-split but for norms and routers), then its shards
    outer = (shape.embedding_params if load.embedding else 0) + (head if load.head else 0)
    whole = load.dense * shape.dense_layer_tp_whole + load.moe * shape.moe_layer_tp_whole + (
        shape.final_norm_params if load.head else 0)
    dense_w = (load.dense * shape.dense_layer_params + load.moe * shape.moe_layer_params + outer - whole) / tp + whole
    dense_gemm_w = (load.dense * (shape.dense_layer_params - shape.dense_layer_tp_whole)
                    + load.moe * (shape.moe_layer_params - shape.moe_layer_tp_whole)) / tp
    # routed experts are split by EP (and Megatron's expert TP) only: AutoModel's TP plans leave them whole
    # (its own MoE classes take no TP; Mixtral's Hugging Face class falls back to a plan without them)
    experts_w = load.moe * shape.num_experts / ep / max(layout.etp, 1) * shape.expert_params
    sharded_w = dense_w / fsdp + experts_w * expert_share(shape, layout, expert_shard, options)
    # bytes beyond `weight_bytes` of the weights kept in fp32 (their gradients and AdamW states are fp32 too)
    fp32_extra = (load.dense + load.moe) * shape.fp32_layer_params / fsdp * (FP32 - weight_bytes)
    if training.is_peft:
        trained = (load.dense * shape.dense_layer_adapter + load.moe * shape.moe_layer_adapter) / tp / fsdp
        return ModelStates(sharded_w * BF16 + fp32_extra + trained * FP32, trained * FP32, trained * 2 * FP32,
                           dense_w, experts_w, trained * fsdp, 0.0)
    # weights whose FSDP group has more than one rank get separate unsharded gradients
    trained_unsharded = (dense_w if fsdp > 1 else 0.0) + (experts_w if expert_shard > 1 else 0.0)
    weights = grads = main = sharded_w * weight_bytes + fp32_extra
    if layout.strategy == "distributed_optimizer":
        # Megatron-Core's DDP keeps one gradient buffer of every local weight for the whole step, in fp32 with
        # `grad_reduce_in_fp32` else in the weights' bf16 (`_ParamAndGradBuffer`: grad_dtype); the distributed
        # optimizer's fp32 main-gradient shard is a view into an fp32 buffer, or a `.float()` copy made at the
        # step (DistributedOptimizer._copy_model_grads_to_main_grads): no shard of its own beside the buffer
        grads = (dense_w + experts_w) * options.reduce_bytes + fp32_extra
    elif layout.strategy == "megatron_fsdp":  # its flat buffers (tests/test_model_oracle.py measures them)
        if options.preserve_fp32_weights:
            main = sharded_w * FP32 + fp32_extra
            weights += main
        if options.grad_reduce_in_fp32:
            grads = sharded_w * FP32 + fp32_extra
    moments = main if options.moment_dtype is None else sharded_w * dtype_bytes(options.moment_dtype)
    if layout.strategy == "distributed_optimizer" and options.precision_aware and weight_bytes == FP32:
        weights = sharded_w * (FP32 - BF16) + fp32_extra  # the remainders beside the bf16 weights
    return ModelStates(weights, grads, moments * 2, dense_w, experts_w, trained_unsharded, dense_gemm_w)


def step_grad_copy(states: ModelStates, layout: Layout, options: RecipeOptions, transient: float) -> float:
    """Bytes the distributed optimizer's step adds to the forward/backward peak, once the backward has freed the
    `transient` memory (activations, logits): only what exceeds them raises the peak. Two copies are alive together
    when it casts the master weights back (Megatron-Core's `step_with_ready_grads`):
    - with a bf16 gradient buffer, its shard of the gradients in fp32 (`shard_model_grad.float()`, kept until the
      next `zero_grad`); an fp32 buffer is viewed in place, and the precision-aware optimizer reads the bf16 shard
      as it is;
    - with FP8 primary weights (`fp8_primary_weights`), a bf16 copy of every master shard Transformer Engine's
      `cast_master_weights_to_fp8` casts (`master_weight.to(model_weight.dtype)`, listed before any is cast)."""
    if options.precision_aware:
        return 0.0
    fsdp, expert_shard = shard_groups(layout)
    grads = 0.0 if options.reduce_bytes >= FP32 else (states.dense_w / fsdp + states.experts_w / expert_shard) * FP32
    cast = (states.dense_gemm_w / fsdp + states.experts_w / expert_shard) * BF16 if options.fp8_primary_weights else 0.0
    return max(0.0, grads + cast - transient)


def memory_breakdown(
    shape: ModelShape,
    layout: Layout,
    training: TrainingSpec,
    *,
    nvlink_domain: int = 8,
    options: RecipeOptions = AUTOMODEL_DEFAULTS,
) -> dict[str, float]:
    """Peak memory (GiB) of the most loaded pipeline rank, with the layers AutoModel's split gives it.

    Only the ranks that can peak are judged (`rank_loads`). DeepSeek-V3's first ranks hold its three dense
    layers, so a middle rank with MoE layers only is often the one that peaks.
    """
    by_rank = _rank_parts(shape, layout, training, rank_loads(shape, layout), nvlink_domain, options)
    best = max(by_rank, key=lambda parts: sum(parts[:-1]))  # the runtime is the same on every rank
    return {name: value / GIB for name, value in zip(PARTS, best, strict=True)}


def memory_by_pp_rank(
    shape: ModelShape,
    layout: Layout,
    training: TrainingSpec,
    *,
    nvlink_domain: int = 8,
    options: RecipeOptions = AUTOMODEL_DEFAULTS,
) -> list[tuple[RankLoad, dict[str, float]]]:
    """Every pp rank's load and memory breakdown (GiB), in rank order; the largest is `memory_breakdown`'s."""
    loads = every_rank_load(shape, layout)
    by_rank = _rank_parts(shape, layout, training, loads, nvlink_domain, options)
    return [(load, {name: value / GIB for name, value in zip(PARTS, parts, strict=True)})
            for load, parts in zip(loads, by_rank, strict=True)]


def _rank_parts(shape: ModelShape, layout: Layout, training: TrainingSpec, loads: tuple[RankLoad, ...],
                nvlink_domain: int, options: RecipeOptions) -> list[tuple[float, ...]]:
    """Each load's memory parts in bytes, in PARTS order. Rank-independent sizes are computed once; only
    the dense and MoE layers, embedding/head and micro batches in flight differ between ranks."""
    mode = checkpointing_mode(layout, options)
    if mode not in _CHECKPOINTING:
        raise ValueError(f"checkpointing must be one of {_CHECKPOINTING}, got {mode!r}")
    tp, pp, ep = layout.tp or 1, layout.pp or 1, layout.ep or 1
    peft = training.is_peft
    ddp = layout.strategy == "ddp"
    fsdp, expert_shard = shard_groups(layout)
    fp32_master = options.master_weights == "fp32"
    reduce_bytes = options.reduce_bytes
    head = shape.lm_head_params or (shape.embedding_params if pp > 1 else 0)
    # Megatron's DDP with the distributed optimizer keeps every local weight in bf16 and a full gradient
    # buffer for the whole step, however many micro batches it runs
    persistent = layout.strategy == "distributed_optimizer"
    deferred = persistent or ((options.defer_grad_sync or pp > 1) and micro_batches_per_step(layout) > 1)
    keep_gathered = weights_stay_gathered(shape, layout, options, deferred)  # no reshard until the last backward

    tokens = micro_batch_tokens(layout, training.seq_length)
    rep_div = tp if layout.sequence_parallel else 1
    dense_act = shape.dense_act_rep / rep_div + shape.dense_act_tp / tp
    moe_rep = shape.moe_act_rep - (shape.moe_act_router if options.balanced_gate else 0.0)
    moe_expert = (shape.top_k * shape.hidden if expert_mlp_checkpointed(shape, layout, training, options)
                  else shape.moe_act_expert) + (shape.moe_act_output if options.framework == "megatron" else 0.0)
    moe_act = (moe_rep + moe_expert) / rep_div + shape.moe_act_tp / tp  # SP: tokens split
    module_level = is_module_level(mode, options.framework)
    kept = 1.0 if module_level else kept_activation_share(mode, runs_fused(options))  # without full checkpointing
    if module_level:  # Megatron's selective recompute: what its modules free (cost/recompute.py)
        freed = modules_cost(shape, options.recompute_modules,
                             pre_mlp_norm=recomputes_pre_mlp_norm(layout.dispatcher)).freed
        dense_act = max(0.0, dense_act - freed.dense_rep / rep_div - freed.dense_tp / tp)
        moe_act = max(0.0, moe_act - (freed.moe_rep + freed.moe_expert) / rep_div - freed.moe_tp / tp)
    logit_bytes = LOGIT_BYTES if options.logit_bytes is None else options.logit_bytes
    held = activation_share(options, training.precision)
    runtime = RUNTIME_GIB * GIB
    if ep > 1 and layout.dispatcher in FLEX_DISPATCHERS:
        runtime += EP_BUFFER_GIB * GIB * (2 if ep > nvlink_domain else 1)

    by_rank: list[tuple[float, ...]] = []
    for load in loads:
        rank, dense_n, moe_n, n_stages, has_embedding, has_head = load
        states = model_states(shape, layout, training, load, options)
        dense_w, experts_w, trained_unsharded = states.dense_w, states.experts_w, states.trained_unsharded
        params, grads, optim = states.params, states.grads, states.optimizer

        # FSDP all-gather working set: bf16 weights in a one-rank group are used in place
        gathered_dense = dense_w if (fsdp > 1 or fp32_master) else 0.0
        gathered_experts = experts_w if (expert_shard > 1 or fp32_master) else 0.0
        if ddp:
            gather = 0.0
        elif keep_gathered:
            gather = (gathered_dense + gathered_experts) * BF16
        else:
            layer_w = max(
                shape.dense_layer_params / tp if dense_n else 0,
                shape.moe_layer_params / tp + (0 if ep > 1 else shape.num_experts * shape.expert_params)
                if moe_n else 0,
            )
            # the layer in use and the prefetched one, the head for the loss, experts kept gathered
            gather = (2 * layer_w + (head / tp if has_head else 0.0)) * BF16 if gathered_dense else 0.0
            if ep > 1:
                gather += gathered_experts * BF16
            if not deferred and trained_unsharded and not peft:
                grads += layer_w * reduce_bytes  # one layer's gradients waiting for reduce-scatter
        if deferred and not persistent:  # every layer's unsharded gradients, accumulated until the sync (DDP
            grads += trained_unsharded * reduce_bytes  # has none; the distributed optimizer's buffer: `model_states`)

        # activations of the micro-batch chunks in flight
        layers = dense_n + moe_n
        if layers == 0:
            act_elems = 0.0
        elif mode == "full":
            # each layer keeps its input; the layer being recomputed holds its activations and grads
            act_elems = chunks_in_flight(layout, rank) * layers / n_stages * shape.hidden / rep_div
            act_elems += RECOMPUTE_WORKING_LAYERS * max(dense_act if dense_n else 0.0, moe_act if moe_n else 0.0)
        else:
            act_elems = kept * chunks_in_flight(layout, rank) / n_stages * (
                dense_n * dense_act + moe_n * moe_act)
        activations = (act_elems + (shape.hidden if has_embedding else 0.0)) * tokens * BF16 * held
        logits = tokens * shape.vocab / tp * logit_bytes if has_head else 0.0
        # the distributed optimizer's bf16 weights live in one buffer allocated at build (`_ParamAndGradBuffer`
        # param_data), not in the caching allocator's churn
        fragmentation = FRAGMENTATION * (activations + logits + (0.0 if persistent else gather))
        if persistent:
            grads += step_grad_copy(states, layout, options, activations + logits + fragmentation)
        by_rank.append((params, grads, optim, gather, activations, logits, fragmentation, runtime))
    return by_rank


def peak_floor_gib(shape: ModelShape, world_size: int) -> float:
    """No layout of `world_size` GPUs peaks below this (GiB): every rank holds the runtime, every other part is
    non-negative, and the most loaded rank holds at least its share of the model's bf16 weights (the weights
    split over tp·pp and FSDP-sharded over at most dp·cp; experts over ep and ep_shard, at most the same ranks).
    The remedy search skips a variation whose limit is below it (tests/test_planner.py checks the premise)."""
    weights = (shape.dense_layers * shape.dense_layer_params + shape.moe_layers * (
        shape.moe_layer_params + shape.num_experts * shape.expert_params) + shape.embedding_params
               + shape.lm_head_params + shape.final_norm_params)
    return RUNTIME_GIB + weights * BF16 / max(world_size, 1) / GIB

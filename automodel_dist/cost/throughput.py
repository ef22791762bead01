"""Step time of one layout, as a breakdown in seconds (pure functions, no torch).

Compute is the model's FLOPs (6 per weight per token for linear layers, causal attention with the real
query/key/value widths, Gated DeltaNet's delta rule at its kernels' measured rate, only the top-k routed experts,
the MTP depths Megatron trains, 4 instead of 6 for LoRA's frozen base) plus the
forward activation checkpointing replays (all of it under full checkpointing; under AutoModel's selective, half
the GEMMs and the elementwise ops, no attention: `replayed_forward`; under Megatron's selective, what its
`recompute_modules` replay: `module_replay`), over the GPU's peak times an achievable
efficiency. Communication is charged where it is exposed: FSDP all-gather/reduce-scatter only beyond
the compute it overlaps with (a sync deferred to the last micro batch only behind that micro batch's
backward); TP collectives (DTensor's, unless async TP) and EP dispatch/combine on the critical path
(AutoModel does not overlap them); CP's ring exchange beyond the part of the attention that hides it,
plus its per-step latency and softmax correction; for torch.distributed.pipelining (AutoModel,
torchtitan) the schedule replayed on a clock with AutoModel's stage split (cost/pipeline.py): its idle time
is the bubble, the send/receive hops on its critical path the exposed pipeline communication; Megatron's
schedules take the textbook bubble and hide their sends. MoE layers add the host time their dispatcher's
copy of the expert counts exposes, less what the run's CUDA graphs capture (cost/host.py).

The same physics scores other stacks through `RecipeOptions.framework`: each stack's profile
(cost/profiles.py) says how efficient its kernels are, how much of the EP dispatch and TP traffic it
hides and whether it runs torch's pipeline runtime.

Model TFLOP/s/GPU follows the calibration tables' convention (AutoModel's performance summary): model
FLOPs without recompute, LoRA counted at 4 per weight, causal attention.

The free parameters are fitted by `benchmarks/calibration.py --fit` to the measurement set and read from
cost/fitted_parameters.json; the constants below are priors with their sources.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import NamedTuple

from automodel_dist.catalog.specs import GpuSpec
from automodel_dist.cost.host import host_seconds
from automodel_dist.cost.memory import (
    AUTOMODEL_DEFAULTS,
    RecipeOptions,
    checkpointing_mode,
    expert_mlp_checkpointed,
    micro_batch_tokens,
    micro_batches_per_step,
    runs_fused,
    split_loads,
    weights_stay_gathered,
)
from automodel_dist.cost.pipeline import SIMULATED_SCHEDULES, ScheduleReplay, idle_lower_bound, replay
from automodel_dist.cost.profiles import Parameters, Physics, parameters
from automodel_dist.cost.recompute import is_module_level, modules_cost, recomputes_pre_mlp_norm
from automodel_dist.cost.shape import ModelShape
from automodel_dist.dispatcher import capability_major
from automodel_dist.layout import FLEX_DISPATCHERS, V_SCHEDULES, Layout
from automodel_dist.pipeline_stages import stage_layer_counts
from automodel_dist.problem import TrainingSpec

# The efficiency of GEMMs, attention, FP8, GPUs and each stack's overlap are fitted parameters
# (cost/profiles.py, cost/fitted_parameters.json). What follows are physical priors the measurements cannot
# pin down, each with its source.
# Achievable share of the link bandwidth for ring collectives. The presets store NVLink per GPU one way
# (H100: 450 GB/s of the 900 quoted for both directions; data/presets/hardware/README.md); a ring sends one
# way, and NCCL's measured bus bandwidth for all-gather/reduce-scatter on 8xH100 NVSwitch is about 360 GB/s
# (nccl-tests), so 0.8 of the stored figure. The network figure is one direction too (400 Gb/s NIC per GPU).
NVLINK_EFFICIENCY = 0.8
INTERNODE_EFFICIENCY = 0.8
# AutoModel's tensor parallelism is DTensor's (torch ColwiseParallel/RowwiseParallel plans): its
# all-gathers and reduce-scatters run on the critical path. `enable_async_tensor_parallel` (torch's
# micro-pipelined async TP) and Megatron's TP comm overlap hide most of them behind the GEMMs; the share
# left exposed is each profile's `tp_exposed`.
# Context parallelism (TE's P2P ring attention, `cp_comm_type: p2p`): each of the cp-1 ring steps
# exchanges a K/V chunk while attending to the previous one. Only part of the attention time hides the
# exchange (the copy engines and the attention kernel share SMs and HBM), each step pays a P2P
# launch/synchronization latency, and every step after the first rescales the running output with the
# new softmax statistics in fp32: memory-bound work worth CP_CORRECTION_TOKENS / chunk of the step's
# attention (H100: ~3.35 TB/s HBM against ~500 TFLOP/s of attention, ~12 bytes per output element
# against 4·chunk FLOPs). At a few thousand tokens per rank none of this hides, which is why
# Megatron-Bridge adds CP only from 8K-16K tokens (megatron-bridge.md §4, A1).
CP_OVERLAP = 0.5
CP_STEP_LATENCY_S = 30e-6
CP_CORRECTION_TOKENS = 440.0
# Fused attention reaches its efficiency only on long blocks: the share of it one kernel call reaches is
# chunk / (chunk + ATTENTION_BLOCK_TOKENS) (FlashAttention-2/3 papers: 512-token sequences run at about
# half the 16K-token rate). A call covers the whole sequence without CP and, under CP's load-balanced
# causal split, a block of seq / (2·cp) tokens.
ATTENTION_BLOCK_TOKENS = 512.0
# Achievable share of the link bandwidth for the MoE dispatch/combine. The flex dispatchers (DeepEP,
# HybridEP, UCCL-EP, MoK) run all-to-all kernels and send a token once per remote NVLink domain, then
# forward it inside the domain; torch's path moves tokens with DTensor all-gather/reduce-scatter.
FLEX_DISPATCH_EFFICIENCY = 0.9
TORCH_DISPATCH_EFFICIENCY = 0.25
# Share of the FSDP traffic that stays exposed even when compute could hide it (first all-gather,
# last reduce-scatter of each step).
FSDP_EXPOSED = 0.05
# Zero-bubble schedules split the weight-gradient pass to fill most of the bubble (not replayed).
ZERO_BUBBLE_FACTOR = 1.0 / 3.0
# Gated DeltaNet's chunked delta rule runs flash-linear-attention's Triton kernels (`chunk_gated_delta_rule`,
# which Megatron-Core's GatedDeltaNet and Hugging Face's Qwen3-Next call), far from a GEMM's rate. Measured forward
# plus backward on one GB200 (fla-org/flash-linear-attention README.md@bc3b101dcb71, "Benchmarks":
# `benchmarks.ops.run --op chunk_gdn`, triton do_bench medians; B x T x heads x head dim -> ms):
# 1x8192x96x128 4.738, 2x16384x16x128 3.616, 4x2048x16x128 2.085, 4x4096x64x128 5.964, 8x1024x8x64 1.974,
# 8x2048x32x256 8.644. A least-squares line through the six in the FLOPs both the cost model and Megatron count
# (24 x key dim x value dim per head and token) is a fixed 1.95 ms per call plus 118 TFLOP/s, 0.047 of the GB200's
# 2,500 TFLOP/s bf16 peak (each shape within 14%). The rate scales with a GPU's bf16 peak; the fixed part (kernel
# launches, short sequences) does not.
LINEAR_ATTENTION_PEAK_SHARE = 118.0 / 2500.0
LINEAR_ATTENTION_CALL_S = 1.95e-3

PARTS = (
    "compute", "recompute", "host", "pipeline_bubble", "tp_comm", "ep_comm", "cp_comm", "pp_comm", "fsdp_comm",
)

NOT_MODELED = (
    "host overhead of dense layers (hidden while the CPU runs ahead), kernel launch gaps and data loading",
    "the optimizer step (memory-bandwidth bound, small when sharded)",
    "stragglers, network contention and routing imbalance",
)


def model_flops_per_token(shape: ModelShape) -> float:
    """The model FLOPs of one trained token (forward + backward), the calibration tables' convention."""
    per_token = (
        shape.dense_layers * shape.dense_layer_flops
        + shape.moe_layers * (shape.moe_layer_flops + shape.moe_expert_flops)
        + shape.attention_flops + shape.linear_attention_flops
        + shape.lm_head_flops
    )
    return per_token * shape.flops_scale


def generation(compute_capability: str) -> str:
    """The GPU generation whose FP8 speed-ups apply: ampere (none), hopper, blackwell."""
    major = capability_major(compute_capability)
    return "blackwell" if major >= 10 else "hopper" if major == 9 else "ampere"


def gemm_efficiency(physics: Physics, tokens: float, width: float) -> float:
    """Share of the stack's large-GEMM efficiency an (tokens x k) @ (k x width) GEMM reaches."""
    return tokens / (tokens + physics.gemm_tokens) * width / (width + physics.gemm_width)


def fp8_time_factor(physics: Physics, gpu: GpuSpec, recipe: str, width: float) -> float:
    """Time of an FP8 linear layer of output width `width` relative to bf16: 1/speed-up plus the casts.

    Quantizing costs memory-bound work per element, so relative to the GEMM it grows as 1/width.
    """
    family = generation(gpu.compute_capability)
    # a recipe no run measured on this generation (blockwise FP8 on Blackwell, which only a hand-written set
    # names) is timed as the generation's per-tensor FP8; the planner never picks one
    speedup = physics.fp8_speedup.get(f"{family}/{recipe}", physics.fp8_speedup.get(f"{family}/tensorwise"))
    if speedup is None:
        raise ValueError(f"no FP8 speed-up for recipe {recipe!r} on {gpu.name}")
    return 1.0 / speedup + physics.fp8_overhead_width / width


# HBM bandwidth of a GPU whose preset does not give it: its bf16 peak over this many FLOP per byte (H100:
# 989 TFLOP/s over 3.35 TB/s; B200/GB200/GB300: 2,250-2,500 over 8 TB/s).
FLOPS_PER_HBM_BYTE = 300.0


def hbm_bytes_per_s(gpu: GpuSpec) -> float:
    return gpu.hbm_tbps * 1e12 if gpu.hbm_tbps else gpu.tflops_bf16 * 1e12 / FLOPS_PER_HBM_BYTE


def elementwise_bytes(shape: ModelShape, layout: Layout, physics: Physics, *, fused: bool = True) -> float:
    """HBM bytes of memory-bound work (norms, rotary, activations, MoE permutes, residuals) per token of a
    GPU's share: the activation elements each layer writes and reads back, at the fitted bytes per element,
    fused (`physics.elementwise_bytes`) or one eager kernel per op (`physics.eager_elementwise_bytes`).

    With TP every rank streams its group's tokens through the tensors TP does not split (unless sequence
    parallelism splits them); routed-expert tensors hold top-k copies of each token.
    """
    tp = layout.tp or 1
    rep = tp if not layout.sequence_parallel else 1  # replicated tensors: every TP rank streams them whole
    dense = shape.dense_act_rep * rep + shape.dense_act_tp
    moe = (shape.moe_act_rep + shape.moe_act_expert) * rep + shape.moe_act_tp
    per_element = physics.elementwise_bytes if fused else physics.eager_elementwise_bytes
    return (shape.dense_layers * dense + shape.moe_layers * moe) * per_element


def _bandwidth(gpu: GpuSpec, group: int, span: int, nvlink_domain: int, *, aggregate: bool = True) -> float:
    """Bytes/s per GPU for a ring collective over `group` ranks spread evenly over `span` consecutive ranks.

    Inside the NVLink domain: NVLink. Across domains each rank of the group drives its own NIC, so for
    large bulk transfers (FSDP, HSDP) a domain's ranks in the group share the ring's inter-node hop:
    min(NVLink, ranks per domain x NIC). The per-layer TP and CP exchanges on the critical path are
    charged one NIC (`aggregate=False`): they are latency-bound and rarely reach the aggregate.
    """
    nvlink = gpu.nvlink_gbps * 1e9 * NVLINK_EFFICIENCY
    if span <= nvlink_domain:
        return nvlink
    per_domain = max(1.0, group * nvlink_domain / span) if aggregate else 1.0
    return min(nvlink, per_domain * gpu.internode_gbps * 1e9 * INTERNODE_EFFICIENCY)


@lru_cache(maxsize=1024)
def routing_spread(experts: int, top_k: int, ep: int, local_ranks: int, balanced_gate: bool) -> tuple[float, float]:
    """(EP ranks, groups of `local_ranks` consecutive EP ranks) one token's top_k experts land on, on average.

    Experts sit in contiguous blocks of experts/ep per EP rank (AutoModel's and Megatron's placement). A
    learned router (or Megatron's forced load balancing) picks top_k distinct experts at random: a block is
    missed with probability C(E - block, k) / C(E, k). AutoModel's `fake_balanced_gate` gives token i the
    experts i·k .. i·k + k - 1 (mod E), one contiguous run: it touches ceil((offset + k) / block) blocks.
    """
    def spread(block: float) -> float:
        if balanced_gate:
            starts = [(i * top_k) % experts for i in range(experts)]
            return sum(math.ceil((s % block + top_k) / block) for s in starts) / len(starts)
        missed = 1.0
        for j in range(top_k):  # C(E - block, k) / C(E, k) as a running product
            missed *= max(0.0, (experts - block - j) / (experts - j))
        return experts / block * (1.0 - missed)

    per_rank = experts / ep
    return min(spread(per_rank), ep), min(spread(per_rank * local_ranks), ep / local_ranks)



def dispatched_tokens(layout: Layout, mb_tokens: float) -> float:
    """Tokens one rank routes per micro batch: sequence parallelism leaves each TP rank its 1/tp share."""
    return mb_tokens / (layout.tp or 1) if layout.sequence_parallel else mb_tokens


def _dispatch_rate(physics: Physics, dispatcher: str | None) -> float:
    """Achieved share of the link bandwidth of a dispatcher: flex kernels, Megatron's NCCL all-to-all
    (fitted), or torch's DTensor path."""
    if dispatcher in FLEX_DISPATCHERS:
        return FLEX_DISPATCH_EFFICIENCY
    if dispatcher == "alltoall":
        return physics.alltoall_efficiency
    return TORCH_DISPATCH_EFFICIENCY


def _dispatch_seconds(shape: ModelShape, layout: Layout, gpu: GpuSpec, tokens: float, domain: int,
                      balanced_gate: bool, physics: Physics) -> float:
    """Seconds of one MoE dispatch (or combine) of `tokens` tokens per GPU over `layout.ep` ranks.

    The flex dispatchers (DeepEP, HybridEP, ...) send a token once per destination rank inside the NVLink
    domain and once per destination domain across the network (then forward it over NVLink): the copies
    are the distinct ranks and domains its experts sit on (`routing_spread`). Torch's path moves one copy
    per routed expert.
    """
    ep, k = layout.ep, shape.top_k
    token_bytes = shape.hidden * 2
    flex = layout.dispatcher in FLEX_DISPATCHERS
    rate = _dispatch_rate(physics, layout.dispatcher)
    local_ranks = min(ep, domain)
    local_copies = k * (local_ranks - 1) / ep
    remote_copies = k * (ep - local_ranks) / ep
    if flex:
        ranks_hit, domains_hit = routing_spread(shape.num_experts, k, ep, local_ranks, balanced_gate)
        domains = ep / local_ranks
        local_copies = ranks_hit * (local_ranks - 1) / ep
        remote_copies = domains_hit * (domains - 1) / domains
    nvlink = tokens * local_copies * token_bytes / (gpu.nvlink_gbps * 1e9 * rate)
    network = tokens * remote_copies * token_bytes / (gpu.internode_gbps * 1e9 * rate) if remote_copies else 0.0
    return max(nvlink, network)


def _bubble_fraction(layout: Layout, n_micro: int) -> float:
    """Idle share of a pipeline step by the textbook: (pp-1)/(stages per rank x micro batches), less for
    zero-bubble schedules (Megatron's schedules, and torch's schedules `pipeline.replay` does not cover)."""
    stages_per_rank = 2 if layout.pp_schedule in V_SCHEDULES else (layout.vpp or 1)
    fraction = (layout.pp - 1) / (n_micro * stages_per_rank)
    if layout.pp_schedule in ("interleavedzerobubble", "zbvzerobubble", "dualpipev"):
        fraction *= ZERO_BUBBLE_FACTOR
    return fraction


def _layer_work(shape: ModelShape) -> tuple[float, float]:
    """Model FLOPs per token of one dense and one MoE decoder layer, attention included."""
    attention = (shape.attention_flops + shape.linear_attention_flops) / max(shape.num_layers, 1)
    return shape.dense_layer_flops + attention, shape.moe_layer_flops + shape.moe_expert_flops + attention


@lru_cache(maxsize=1024)
def _stage_forward(shape: ModelShape, num_stages: int) -> tuple[float, ...]:
    """Each stage's forward work per token in model FLOPs (AutoModel's split; the LM head on the last)."""
    dense, moe = _layer_work(shape)
    work, start = [], 0
    for count in stage_layer_counts(shape.num_layers, num_stages):
        dense_here = max(0, min(start + count, shape.dense_layers) - start)
        work.append(dense_here * dense + (count - dense_here) * moe)
        start += count
    work[-1] += shape.lm_head_flops
    return tuple(work)


def _replay_inputs(shape: ModelShape, layout: Layout, mode: str) -> tuple | None:
    """`replay`'s arguments for torch's schedule of `layout` (None without PP or for a schedule the replay
    does not cover)."""
    vpp, n_micro = layout.vpp or 1, layout.n_microbatches or 1
    schedule = layout.pp_schedule or ("interleaved1f1b" if vpp > 1 else "1f1b")
    if (layout.pp or 1) <= 1 or schedule not in SIMULATED_SCHEDULES or (schedule == "interleaved1f1b") != (vpp > 1):
        return None  # no pipeline, a schedule not replayed, or a stage count torch refuses (the rules say so)
    return (layout.pp, vpp, max(n_micro, 1), schedule, _stage_forward(shape, layout.pp * vpp),
            2.0 + _replayed_share(shape, replayed_forward(mode, layout)))


def _replayed_share(shape: ModelShape, replayed: Replay) -> float:
    """The share of a layer's forward FLOPs that checkpointing replays (attention and GEMMs by their work)."""
    attention = (shape.attention_flops + shape.linear_attention_flops) / max(shape.num_layers, 1)
    linear = (shape.dense_layers * shape.dense_layer_flops + shape.moe_layers * (
        shape.moe_layer_flops + shape.moe_expert_flops)) / max(shape.num_layers, 1)
    experts = shape.moe_layers * shape.moe_expert_flops / max(shape.num_layers, 1)
    total = attention + linear
    return (replayed.attention * attention + replayed.gemm * linear + (replayed.expert - replayed.gemm) * experts
            ) / total if total > 0 else replayed.gemm


def schedule_replay(shape: ModelShape, layout: Layout, mode: str) -> ScheduleReplay | None:
    """torch's schedule of `layout` replayed (None without PP or for a schedule the replay does not cover)."""
    inputs = _replay_inputs(shape, layout, mode)
    return replay(*inputs) if inputs else None


def _bubble_share(shape: ModelShape, layout: Layout, mode: str, torch_pipeline: bool, *,
                  lower_bound: bool = False) -> float:
    """The bubble as a share of the busiest rank's work: the replay's idle time under torch's runtime (with
    `lower_bound`, a bound on it that needs no replay), the textbook share otherwise."""
    inputs = _replay_inputs(shape, layout, mode) if torch_pipeline else None
    if inputs is None:
        return _bubble_fraction(layout, layout.n_microbatches or 1)
    pp, vpp, n_micro, _, forward, ratio = inputs
    return idle_lower_bound(pp, vpp, n_micro, forward, ratio) if lower_bound else replay(*inputs).idle_share


def stage_imbalance(shape: ModelShape, layout: Layout) -> float:
    """How much longer the busiest pipeline rank works than the average one (1.0 without PP).

    A pipeline runs at the pace of its slowest rank. AutoModel splits by `layers_per_stage` only
    (`pipeline_split`): the first num_layers % stages stages get one layer more, the last one also runs
    the LM head and the loss, with no way to move a layer off it (Megatron's `pp_layout`, e.g.
    DeepSeek-V3's `Et*3|(tt|)*29m|L`, gives the embedding and the loss stages of their own;
    megatron-bridge.md §5), and a model's leading dense layers make its first ranks lighter than the
    MoE-only ones. Work is counted in model FLOPs: each layer's linear and attention FLOPs, the head's on
    the rank holding it.
    """
    if layout.pp <= 1:
        return 1.0
    return _stage_imbalance(shape, layout.pp or 1, layout.vpp or 1, layout.pp_schedule)


@lru_cache(maxsize=1024)
def _stage_imbalance(shape: ModelShape, pp: int, vpp: int, schedule: str | None) -> float:
    """`stage_imbalance` of a split (cached: the planner asks for the same few splits thousands of times)."""
    dense, moe = _layer_work(shape)
    total = model_flops_per_token(shape) / shape.flops_scale  # every rank's work together, unscaled like theirs
    busiest = max(load.dense * dense + load.moe * moe + (shape.lm_head_flops if load.head else 0.0)
                  for load in split_loads(shape.num_layers, shape.dense_layers, pp, vpp, schedule))
    return max(1.0, busiest * pp / total) if total > 0 else 1.0


def attention_kernel(shape: ModelShape, options: RecipeOptions) -> str:
    """The attention kernel family a run uses: "te" (Transformer Engine's DotProductAttention, cuDNN fused or
    flash) or PyTorch's ("sdpa", "flex").

    The recipe may name it (`options.attention`). Otherwise Megatron runs TE's; AutoModel runs TE's on its own
    model classes (BackendConfig.attn defaults to "te" where TE is installed, automodel.md §6) and PyTorch's
    SDPA on Hugging Face's classes; torchtitan runs PyTorch's.
    """
    if options.attention:
        return options.attention
    if options.framework == "megatron" or (options.framework == "automodel" and shape.automodel_class):
        return "te"
    return "sdpa"


def attention_efficiency(params: Parameters, shape: ModelShape, options: RecipeOptions) -> float:
    """The attention kernel's share of the GEMMs' rate: its family's fitted value, Transformer Engine's ("te")
    or PyTorch's ("torch": SDPA's flash kernel, FlexAttention)."""
    family = "te" if attention_kernel(shape, options) == "te" else "torch"
    return params.physics.attention_efficiency[family]


def dense_gemm_seconds(shape: ModelShape, physics: Physics, gpu: GpuSpec, peak: float, mb_tokens: float, tp: int,
                       fp8_recipe: str | None, gemms: tuple[tuple[float, int], ...] | None = None) -> float:
    """Seconds per token of the linear layers outside the routed experts at `peak` FLOP/s: each at the
    efficiency its own TP-split width allows (a TP8 split leaves attention projections 1/8 of the query
    width but the MLP 1/8 of its several times wider FFN), and in FP8 (`fp8_recipe`) at its speed-up less
    the casts, which cost more the narrower the GEMM. `gemms` replaces the model's (`shape.dense_gemms`)."""
    seconds = 0.0
    for flops, width in shape.dense_gemms if gemms is None else gemms:
        split = width / tp
        gemm = flops / (peak * gemm_efficiency(physics, mb_tokens, split))
        seconds += gemm * fp8_time_factor(physics, gpu, fp8_recipe, split) if fp8_recipe else gemm
    return seconds


def compute_seconds(shape: ModelShape, layout: Layout, training: TrainingSpec, gpu: GpuSpec, *,
                    options: RecipeOptions = AUTOMODEL_DEFAULTS, params: Parameters | None = None
                    ) -> tuple[float, float, float]:
    """(compute, recompute, attention) seconds per step on one GPU: each GEMM at the efficiency its shape
    allows, the busiest pipeline rank's share, the forward replayed by checkpointing. `attention` (part of
    compute) is what CP's ring exchange can hide behind."""
    params = params or parameters()
    physics, profile = params.physics, params.profile(options.framework)
    tp, cp, ep, etp = layout.tp or 1, layout.cp or 1, layout.ep or 1, max(layout.etp, 1)
    seq = training.seq_length
    tokens_per_gpu = training.global_batch_size * seq / (layout.world_size or 1)
    mb_tokens = micro_batch_tokens(layout, seq)
    peak = gpu.tflops_bf16 * 1e12 * physics.kernel_efficiency * physics.gpu_efficiency.get(gpu.name, 1.0)
    if training.is_peft:
        peak *= profile.peft_efficiency
    scale = shape.flops_scale
    attention = shape.attention_flops * scale
    experts = shape.moe_layers * shape.moe_expert_flops * scale
    fp8 = training.precision == "fp8" and gpu.supports_fp8  # no FP8 tensor cores: runs as bf16
    linear_time = dense_gemm_seconds(shape, physics, gpu, peak, mb_tokens, tp,
                                     options.fp8_recipe if fp8 else None) * scale
    expert_time = 0.0
    if experts:
        # grouped GEMMs: each local expert sees the tokens its EP x ETP group dispatches to it: every rank of
        # the group dispatches its own micro-batch share (a TP rank's 1/tp of it under sequence parallelism)
        expert_tokens = dispatched_tokens(layout, mb_tokens) * shape.top_k * ep * etp / shape.num_experts
        # routed experts are split by EP (and Megatron's expert TP) only; AutoModel's TP leaves them whole and
        # every TP rank runs them on the TP group's tokens (cost/memory.model_states)
        expert_width = shape.expert_width / etp
        expert_rate = peak * physics.grouped_gemm_efficiency * gemm_efficiency(physics, expert_tokens, expert_width)
        expert_time = experts / expert_rate * (tp if options.framework == "automodel" else 1)
        if fp8:
            expert_time *= fp8_time_factor(physics, gpu, options.fp8_recipe, expert_width)
    block = seq / (2 * cp) if cp > 1 else seq  # tokens per side of one attention kernel call
    attention_rate = (peak * attention_efficiency(params, shape, options) * block
                      / (block + ATTENTION_BLOCK_TOKENS))
    attention_time = tokens_per_gpu * attention / attention_rate
    linear_attention_time = linear_attention_seconds(shape, layout, gpu, tokens_per_gpu)
    streamed = (tokens_per_gpu * elementwise_bytes(shape, layout, physics, fused=runs_fused(options))
                / hbm_bytes_per_s(gpu))
    imbalance = stage_imbalance(shape, layout)
    gemm_time = tokens_per_gpu * (linear_time + expert_time)
    if options.mtp_layers:  # each MTP depth: one more MoE (or dense) layer with softmax attention, and a head
        per_layer_experts = expert_time / shape.moe_layers if shape.moe_layers else 0.0
        gemm_time += tokens_per_gpu * options.mtp_layers * (per_layer_experts + dense_gemm_seconds(
            shape, physics, gpu, peak, mb_tokens, tp, options.fp8_recipe if fp8 else None, shape.mtp_gemms) * scale)
        attention_time += tokens_per_gpu * options.mtp_layers * shape.mtp_attention_flops * scale / attention_rate
    compute = (attention_time + linear_attention_time + gemm_time + streamed) * imbalance
    # checkpointing replays (part of) the forward: 2 of the 6 FLOPs per weight (2 of 4 for LoRA)
    replayed = replay_of(shape, layout, options)
    # a checkpointed biased expert MLP (`expert_mlp_checkpointed`) replays its grouped GEMMs' forward once more
    expert_replay = tokens_per_gpu * expert_time if expert_mlp_checkpointed(shape, layout, training, options) else 0.0
    recompute = (replayed.attention * (attention_time + linear_attention_time) + expert_replay
                 + tokens_per_gpu * (replayed.gemm * linear_time + replayed.expert * expert_time)
                 + replayed.elementwise * streamed) * imbalance * (1.0 / 3.0) / scale

    return compute, recompute, attention_time


def linear_attention_seconds(shape: ModelShape, layout: Layout, gpu: GpuSpec, tokens_per_gpu: float) -> float:
    """Seconds per step on one GPU of Gated DeltaNet's chunked delta-rule kernels (forward and backward): its
    FLOPs at flash-linear-attention's measured rate, plus a fixed time for each call (each linear-attention layer
    on the GPU's pipeline stage, once per micro batch)."""
    if not shape.linear_attention_layers:
        return 0.0
    calls = shape.linear_attention_layers / (layout.pp or 1) * micro_batches_per_step(layout)
    return delta_rule_seconds(tokens_per_gpu * shape.linear_attention_flops * shape.flops_scale, calls, gpu)


def delta_rule_seconds(flops: float, calls: float, gpu: GpuSpec) -> float:
    """Forward and backward seconds of `calls` chunked delta-rule kernel calls doing `flops` (counted as Megatron
    counts them) on `gpu`."""
    return flops / (gpu.tflops_bf16 * 1e12 * LINEAR_ATTENTION_PEAK_SHARE) + calls * LINEAR_ATTENTION_CALL_S


class Replay(NamedTuple):
    """Share of each forward part that backward replays: attention kernels, the dense GEMMs (all but the routed
    experts'), memory-bound elementwise ops, the forward collectives of TP, EP and CP, and the routed experts'
    grouped GEMMs."""

    attention: float
    gemm: float
    elementwise: float
    tp: float
    ep: float
    cp: float
    expert: float


# Full checkpointing replays each layer's whole forward, collectives included.
_FULL_REPLAY = Replay(1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0)
_NO_REPLAY = Replay(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
# AutoModel's selective policy (`components/distributed/activation_checkpointing.py`, torchtitan's): attention
# outputs (SDPA/flash/TE, CP's ring attention inside them) are saved, so no attention and no CP exchange is
# replayed; mm/linear/grouped-mm alternate save and recompute, so half the GEMMs are; every elementwise op is.
# Of the collectives only all-to-all and reduce-scatter outputs are saved: a TP block's all-gather (with SP)
# or all-reduce (without) is replayed, its reduce-scatter is not (half of SP's collectives, all of plain
# TP's); the flex dispatchers' dispatch/combine (DeepEP, HybridEP ops) are saved, torch's all-gather
# dispatch is replayed and its reduce-scatter combine is not.
_SELECTIVE_GEMM_REPLAYED = 0.5


def replayed_forward(mode: str, layout: Layout) -> Replay:
    """What backward replays of the forward under checkpointing `mode` ("none", "full", "selective"); the
    collectives' shares depend on the layout's sequence parallelism and dispatcher."""
    if mode == "full":
        return _FULL_REPLAY
    if mode != "selective":
        return _NO_REPLAY
    return Replay(attention=0.0, gemm=_SELECTIVE_GEMM_REPLAYED, elementwise=1.0,
                  tp=0.5 if layout.sequence_parallel else 1.0,
                  ep=0.0 if layout.dispatcher in FLEX_DISPATCHERS else 0.5, cp=0.0, expert=_SELECTIVE_GEMM_REPLAYED)


def replay_of(shape: ModelShape, layout: Layout, options: RecipeOptions) -> Replay:
    """What backward replays under the options' checkpointing: Megatron's selective recompute by its modules
    (`module_replay`), every other mode as `replayed_forward` says."""
    mode = checkpointing_mode(layout, options)
    if is_module_level(mode, options.framework):
        return module_replay(shape, options.recompute_modules, recomputes_pre_mlp_norm(layout.dispatcher))
    return replayed_forward(mode, layout)


@lru_cache(maxsize=1024)
def module_replay(shape: ModelShape, modules: tuple[str, ...], pre_mlp_norm: bool = True) -> Replay:
    """Megatron's selective recompute of `modules` as shares of the forward (cost/recompute.py): its replayed
    non-expert GEMM FLOPs over all of them, its streamed activation elements over all a step's layers stream."""
    cost = modules_cost(shape, modules, pre_mlp_norm=pre_mlp_norm)
    linear = (shape.dense_layers * shape.dense_layer_flops + shape.moe_layers * shape.moe_layer_flops
              + shape.lm_head_flops)
    elements = shape.dense_layers * (shape.dense_act_rep + shape.dense_act_tp) + shape.moe_layers * (
        shape.moe_act_rep + shape.moe_act_expert + shape.moe_act_output + shape.moe_act_tp)
    return Replay(attention=cost.attention, gemm=min(1.0, cost.linear_flops / linear) if linear else 0.0,
                  elementwise=min(1.0, cost.elementwise / elements) if elements else 0.0,
                  tp=cost.tp, ep=cost.ep, cp=cost.cp, expert=cost.expert)


def step_time_floor(shape: ModelShape, layout: Layout, training: TrainingSpec, gpu: GpuSpec, *,
                    options: RecipeOptions = AUTOMODEL_DEFAULTS, params: Parameters | None = None) -> float:
    """A lower bound on the step time `time_breakdown` gives under any `defer_grad_sync`: compute,
    recompute, the host time MoE layers expose, and the pipeline bubble they alone cause (every other part is
    non-negative, and only FSDP's part depends on the sync option). The planner skips timing a layout this bound
    says cannot place."""
    params = params or parameters()
    compute, recompute, _ = compute_seconds(shape, layout, training, gpu, options=options, params=params)
    busy = compute + recompute + host_seconds(shape, layout, options, params.physics)
    if (layout.pp or 1) <= 1:
        return busy
    torch_pipeline = params.profile(options.framework).torch_pipeline
    return busy + busy * _bubble_share(shape, layout, checkpointing_mode(layout, options), torch_pipeline,
                                       lower_bound=True)


def time_breakdown(
    shape: ModelShape,
    layout: Layout,
    training: TrainingSpec,
    gpu: GpuSpec,
    *,
    nvlink_domain: int = 8,
    options: RecipeOptions = AUTOMODEL_DEFAULTS,
    params: Parameters | None = None,
) -> dict[str, float]:
    """Seconds per optimizer step on one GPU, by part; the parts sum to the step time.

    With `options.defer_grad_sync` (AutoModel's `defer_fsdp_grad_sync`, default true) FSDP reduce-scatters
    once per step instead of once per micro batch; `options.checkpointing` may ask for selective recompute.
    """
    params = params or parameters()
    profile = params.profile(options.framework)
    world = layout.world_size or 1
    tp, cp, pp, ep = layout.tp or 1, layout.cp or 1, layout.pp or 1, layout.ep or 1
    seq = training.seq_length
    mb_tokens = micro_batch_tokens(layout, seq)
    compute, recompute, attention_time = compute_seconds(shape, layout, training, gpu, options=options,
                                                         params=params)
    replayed = replay_of(shape, layout, options)
    block = seq / (2 * cp) if cp > 1 else seq  # tokens per side of one attention kernel call

    # --- per-micro-batch collectives on the critical path ---
    ga = layout.grad_accumulation or 1
    micro_batches = micro_batches_per_step(layout)
    layers_here = shape.num_layers / pp
    tp_comm = 0.0
    if tp > 1:
        volume = mb_tokens * shape.hidden * 2 * 2 * (tp - 1) / tp  # ring all-reduce bytes per GPU
        collectives = 2 * (2 + replayed.tp) * layers_here  # two per block, forward, replay and backward
        tp_comm = micro_batches * collectives * volume / _bandwidth(gpu, tp, tp, nvlink_domain, aggregate=False)
        if options.async_tp:
            tp_comm *= profile.tp_exposed

    ep_comm = 0.0
    if ep > 1 and shape.moe_layers:
        dispatched = dispatched_tokens(layout, mb_tokens)
        per_pass = _dispatch_seconds(shape, layout, gpu, dispatched, nvlink_domain, options.balanced_gate,
                                     params.physics)
        etp = max(layout.etp, 1)
        if etp > 1:  # the ETP group all-gathers the dispatched copies and reduce-scatters the expert outputs
            copies = dispatched * shape.top_k * shape.hidden * 2 * (etp - 1)
            per_pass += copies / _bandwidth(gpu, etp, etp, nvlink_domain, aggregate=False)
        ep_comm = micro_batches * 2 * (2 + replayed.ep) * shape.moe_layers / pp * per_pass
        # With EP overlap on (Megatron's prerequisites, e.g. VPP under PP, are the target's rules: `choose.decide`
        # sets the option) one micro batch's dispatch/combine runs during another's compute: it hides behind up to
        # the profile's share of the compute, and what exceeds that stays exposed.
        if options.ep_overlap:
            ep_comm = max(0.0, ep_comm - profile.ep_overlap * (compute + recompute))

    cp_comm = 0.0
    if cp > 1:
        volume = (cp - 1) * mb_tokens * shape.kv_dim * 2
        exchanges = (3 + replayed.cp) * layers_here  # backward sends K/V and their gradients
        ring = micro_batches * exchanges * volume / _bandwidth(gpu, cp, cp * tp, nvlink_domain, aggregate=False)
        latency = micro_batches * exchanges * (cp - 1) * CP_STEP_LATENCY_S
        correction = attention_time * (cp - 1) / cp * CP_CORRECTION_TOKENS / block
        cp_comm = max(0.0, ring - CP_OVERLAP * attention_time) + latency + correction

    pp_comm = 0.0
    if pp > 1 and profile.torch_pipeline:  # Megatron overlaps its send/receive with compute
        volume = mb_tokens * shape.hidden * 2 / (tp if layout.sequence_parallel else 1)
        # torch.distributed.pipelining blocks on each receive right before the action that needs it: the
        # transfers on the schedule's critical path are exposed (all of them where it is not replayed), and
        # once the stages span NVLink domains the slowest hop crosses the network on one NIC
        run = schedule_replay(shape, layout, checkpointing_mode(layout, options))
        hops = ga * run.hops if run else 2 * (layout.vpp or 1) * micro_batches
        pp_comm = hops * volume / _bandwidth(gpu, 1, world, nvlink_domain, aggregate=False)

    # --- FSDP / HSDP / DDP, overlapped with compute ---
    # Gathers overlap the whole step's compute. A gradient sync deferred to the last micro batch (DDP's
    # no_sync, AutoModel's defer_fsdp_grad_sync, always under PP) overlaps only that micro batch's backward
    # (two thirds of its compute): the rest of the step has already run.
    busy = compute + recompute
    last_backward = busy * 2.0 / 3.0 / micro_batches
    gather_s = sync_s = 0.0
    deferred = layout.strategy == "ddp" or options.defer_grad_sync or pp > 1
    if layout.strategy == "ddp" and world > 1 and not training.is_peft:
        # one all-reduce of the bf16 gradients per step (no_sync over the accumulation micro batches)
        weights = (shape.dense_layers * shape.dense_layer_params + shape.moe_layers * (
            shape.moe_layer_params + shape.num_experts * shape.expert_params)
            + shape.embedding_params + shape.lm_head_params)
        sync_s = weights * 2 * 2 * (world - 1) / world / _bandwidth(gpu, world, world, nvlink_domain)
    elif layout.strategy != "ddp":
        fsdp = (layout.dp_shard or 1) * cp
        head = shape.lm_head_params or shape.embedding_params
        dense_w = (
            shape.dense_layers * shape.dense_layer_params + shape.moe_layers * shape.moe_layer_params
        ) / pp / tp + (shape.embedding_params + head) / min(pp, 2) / tp
        expert_w = shape.moe_layers / pp * shape.num_experts / ep / max(layout.etp, 1) * shape.expert_params
        if ep == 1:
            dense_w, expert_w = dense_w + expert_w, 0.0
        # gathers per step: weights kept unsharded across a deferred sync skip the gather after each backward;
        # otherwise non-PP layers reshard after forward and after backward and gather twice per micro batch
        gathers = ga if weights_stay_gathered(shape, layout, options, deferred) else 2 * ga
        reductions = 0 if training.is_peft else (1 if deferred else ga)  # gradient reduce-scatters
        reduce_bytes = options.reduce_bytes
        if fsdp > 1:
            bw = _bandwidth(gpu, fsdp, fsdp * tp, nvlink_domain)
            gather_s += gathers * 2 * dense_w * (fsdp - 1) / fsdp / bw
            sync_s += reductions * reduce_bytes * dense_w * (fsdp - 1) / fsdp / bw
        expert_shard = layout.ep_shard  # 1 without EP
        if expert_w and expert_shard > 1:  # experts stay gathered across forward: one gather per pass
            bw = _bandwidth(gpu, expert_shard, ep * expert_shard, nvlink_domain)
            gather_s += ga * 2 * expert_w * (expert_shard - 1) / expert_shard / bw
            sync_s += reductions * reduce_bytes * expert_w * (expert_shard - 1) / expert_shard / bw
        replicas = layout.dp_replicate or 1
        if replicas > 1 and not training.is_peft:  # HSDP all-reduce of the gradient shards
            bw = _bandwidth(gpu, replicas, world // pp, nvlink_domain)
            shard = dense_w / fsdp + expert_w / expert_shard
            sync_s += shard * reduce_bytes * 2 * (replicas - 1) / replicas / bw
    sync_window = last_backward if deferred else busy
    fsdp_comm = (max(0.0, gather_s - busy) + max(0.0, sync_s - sync_window)
                 + FSDP_EXPOSED * (gather_s + sync_s))

    host = host_seconds(shape, layout, options, params.physics)
    bubble = (compute + recompute + host + tp_comm + ep_comm) * _bubble_share(
        shape, layout, checkpointing_mode(layout, options), profile.torch_pipeline) if pp > 1 else 0.0
    return {
        "compute": compute,
        "recompute": recompute,
        "host": host,
        "pipeline_bubble": bubble,
        "tp_comm": tp_comm,
        "ep_comm": ep_comm,
        "cp_comm": cp_comm,
        "pp_comm": pp_comm,
        "fsdp_comm": fsdp_comm,
    }

"""estimate_layout: memory and step time of one layout of one problem.

The planner calls this on thousands of layouts, so everything that depends only on the model and the
training job (`ModelShape`, FLOPs per token) is built once and cached; the per-layout work is plain
arithmetic in `memory_breakdown` and `time_breakdown`.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

from automodel_dist.cost import memory, throughput
from automodel_dist.cost.estimate import Estimate
from automodel_dist.cost.memory import AUTOMODEL_DEFAULTS, RecipeOptions
from automodel_dist.cost.shape import model_shape
from automodel_dist.layout import Layout
from automodel_dist.problem import Problem

# The recipe settings the compiler writes when deferring the gradient sync does not fit (see planned_options).
SYNC_EVERY_MICRO_BATCH = RecipeOptions(defer_grad_sync=False)
# Exposed communication above this share of the step makes communication the binding wall.
COMMUNICATION_BOUND_SHARE = 0.25
_COMM_PARTS = ("tp_comm", "ep_comm", "cp_comm", "pp_comm", "fsdp_comm")
NOT_MODELED = memory.NOT_MODELED + throughput.NOT_MODELED

# The Megatron-Core stack as a profile of the same physics (the one place the cost model knows it; the
# megatron-bridge target passes framework="megatron"): the distributed optimizer keeps fp32 master
# weights and Adam states (sharded over data parallelism), TP collectives overlap the GEMMs
# (userbuffers), the interleaved schedule does not block on receives, and the target's recompute is
# selective (megatron-bridge.md §10).
FRAMEWORKS = ("automodel", "megatron")
MEGATRON_PROFILE = RecipeOptions(master_weights="fp32", async_tp=True, blocking_pipeline_recv=False)
# Megatron-Core keeps about half the activation bytes per layer that the AutoModel-fitted model counts
# (TE's fused attention, LayerNorm and SwiGLU kernels): Megatron-Bridge's own estimate_training_memory puts
# Qwen3-30B-A3B (TP1 EP16, seq 4096, MBS 1) at 13.9 GB of activations where the model says 26.8 GiB, and
# with this share the run's measured 62.2 GiB peak allocated is met within 3% (reference/
# megatron-bridge-oracle.md §7, megatron-bridge.md §1). To be fitted with the framework profiles.
MEGATRON_ACTIVATION_SHARE = 0.5
# With EP overlap (overlap_moe_expert_parallel_comm, which the megatron-bridge target turns on wherever its
# prerequisites hold) this share of the dispatch/combine hides behind expert compute: 16xH100 Qwen3-30B-A3B
# HybridEP, communication hidden by compute 0.11% -> 36.55% (megatron-bridge.md §2).
MEGATRON_EP_OVERLAP_HIDDEN = 0.37


def megatron_adjusted(mem: dict[str, float], time: dict[str, float], *, ep_overlap: bool) -> tuple[dict, dict]:
    """The Megatron profile's two departures from the shared physics (activation bytes, EP overlap)."""
    mem = {**mem, "activations": mem["activations"] * MEGATRON_ACTIVATION_SHARE}
    if ep_overlap:
        time = {**time, "ep_comm": time["ep_comm"] * (1.0 - MEGATRON_EP_OVERLAP_HIDDEN)}
    return mem, time


def framework_options(problem: Problem, layout: Layout, framework: str) -> RecipeOptions:
    """The recipe settings a framework's compiled output runs with."""
    if framework == "megatron":
        return replace(MEGATRON_PROFILE, checkpointing="selective" if layout.activation_checkpointing else "none")
    if framework != "automodel":
        raise ValueError(f"framework must be one of {FRAMEWORKS}, got {framework!r}")
    return planned_options(problem, layout)


def memory_limit_gib(problem: Problem) -> float:
    """The GPU's HBM less the problem's headroom: what a layout's peak must stay under to fit."""
    return problem.cluster.gpu.hbm_gib * (1.0 - problem.memory_headroom)


def planned_options(problem: Problem, layout: Layout) -> RecipeOptions:
    """The recipe settings the compiler writes for `layout` (the emitter and the planner's estimates agree).

    AutoModel's defaults, except `defer_fsdp_grad_sync: false` when the deferred sync is what keeps the
    layout's structure from fitting at all (even with activation checkpointing and one sample per micro
    batch): deferring keeps every layer's unsharded fp32 gradients across the accumulation micro batches,
    and AutoModel's own Llama-3.1-70B recipes turn it off for exactly that reason (its comment: "True →
    delayed resharding → OOM"). Deciding on the structure, not on the batch or the checkpointing, keeps
    memory monotonic in both. Pipelines defer regardless, so only FSDP2 without PP and with more than one
    micro batch per step has the choice. Dense models only, as in AutoModel's recipes: its MoE recipes keep
    the default and bound the deferred expert gradients with PP and EP (DeepSeek-V3 pp4 ep64, Qwen3-235B
    pp4 ep32), whose sync would otherwise cross nodes every micro batch.
    """
    if (layout.strategy != "fsdp2" or layout.pp > 1 or layout.grad_accumulation <= 1
            or problem.model.is_moe):
        return AUTOMODEL_DEFAULTS
    smallest = layout.with_(activation_checkpointing=True, local_batch_size=1, micro_batch_size=1)
    return _structure_options(problem, smallest)


@lru_cache(maxsize=4096)
def _structure_options(problem: Problem, smallest: Layout) -> RecipeOptions:
    shape = model_shape(problem.model, problem.training)
    mem = memory.memory_breakdown(shape, smallest, problem.training, nvlink_domain=problem.cluster.nvlink_domain)
    if sum(mem.values()) <= memory_limit_gib(problem):
        return AUTOMODEL_DEFAULTS
    return SYNC_EVERY_MICRO_BATCH


def estimate_layout(problem: Problem, layout: Layout, *, options: RecipeOptions | None = None,
                    framework: str = "automodel", ep_overlap: bool = False) -> Estimate:
    """Peak memory (most loaded rank), step time and throughput of `layout` for `problem`.

    `fits` compares the peak with the GPU's HBM less `problem.memory_headroom`; it never raises for a
    layout that does not fit. TFLOP/s count model FLOPs without recompute and MFU divides them by the
    bf16 dense peak, as AutoModel's performance tables do (also for fp8 runs). `options` are the recipe
    settings outside the Layout: by default those the compiler would write (`planned_options`); a
    caller with a recipe in hand passes the recipe's (validate, and the calibration for each measured run).
    `framework` picks the profile whose settings apply when `options` is None (see framework_options);
    `ep_overlap` (Megatron only) says the run overlaps the MoE dispatch with expert compute.
    """
    if options is None:
        options = framework_options(problem, layout, framework)
    training, cluster = problem.training, problem.cluster
    gpu = cluster.gpu
    shape = model_shape(problem.model, training)
    domain = cluster.nvlink_domain
    mem = memory.memory_breakdown(shape, layout, training, nvlink_domain=domain, options=options)
    time = throughput.time_breakdown(shape, layout, training, gpu, nvlink_domain=domain, options=options)
    if framework == "megatron":
        mem, time = megatron_adjusted(mem, time, ep_overlap=ep_overlap)
    peak = sum(mem.values())
    step = sum(time.values())
    fits = peak <= memory_limit_gib(problem)
    world = max(layout.world_size, 1)
    tokens_per_gpu = training.global_batch_size * training.seq_length / world / step if step > 0 else 0.0
    tflops = tokens_per_gpu * throughput.model_flops_per_token(shape) / 1e12
    comm = sum(time[name] for name in _COMM_PARTS)
    if not fits:
        bound = "memory"
    elif step > 0 and comm / step > COMMUNICATION_BOUND_SHARE:
        bound = "communication"
    else:
        bound = "compute"
    return Estimate(
        memory_gib=peak,
        memory=mem,
        fits=fits,
        hbm_gib=gpu.hbm_gib,
        step_time_s=step,
        time=time,
        tflops_per_gpu=tflops,
        tokens_per_s_per_gpu=tokens_per_gpu,
        mfu=tflops / gpu.tflops_bf16 if gpu.tflops_bf16 else 0.0,
        bound=bound,
        not_modeled=NOT_MODELED,
    )

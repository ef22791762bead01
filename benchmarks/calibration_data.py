"""Measured configurations the cost model is fitted to ("fit") or checked against ("held-out").

Each row names its source. Throughput is compared as tokens/s/GPU (the physical rate; TFLOP/s depends
on each source's FLOP-counting convention); memory as the source reports it: torchtitan logs the
caching allocator's peak *reserved* memory, Megatron-Bridge the peak *allocated* memory.

Sources (public):
- AUTOMODEL: NeMo AutoModel `docs/performance-summary.mdx` (2025-10-02), DGX-H100 BF16 tables; activation
  checkpointing per the benchmark recipes of that period (quoted in the project's calibration notes).
- AUTOMODEL_CI: AutoModel's own benchmark recipes `examples/llm_benchmark/deepseek/deepseek_v3_te_deepep.yaml`
  and `examples/llm_benchmark/qwen/qwen3_moe_235b_te_deepep.yaml` (CI: 32 nodes): nothing measured is
  published with them, but they run, so the model must call them a fit.
- TITAN_H100: pytorch/torchtitan `benchmarks/llama3_h100_202412_torchtitan.md` (Grand Teton H100
  96 GB HBM2e at 500 W; the 8B/70B/405B tomls of that commit use seq_len 8192; PP micro batches default
  to the number of stages, interleaved schedules use 2 stages per rank; TP uses sequence and loss
  parallelism; PP layers are not resharded after forward).
- TITAN_H200: pytorch/torchtitan `benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md` (torchtitan e7c0cae).
- MB_HW: NVIDIA-NeMo/Megatron-Bridge `skills/nemo-mbridge-perf-moe-hardware-configs/SKILL.md` and
  card.yaml; MB_DISPATCH: `skills/nemo-mbridge-perf-moe-dispatcher-selection/SKILL.md`;
  Megatron keeps fp32 master weights and reduce-scatters gradients every micro batch, so those rows use
  master_weights="fp32" and no deferral.
- MB_SUMMARY: every row of Megatron-Bridge's `docs/performance-summary.md` and its archive over all releases,
  imported by benchmarks/import_measurements.py into benchmarks/measurements/megatron_bridge.csv (each row
  names the file and commit it came from), with the recipe conditions of the release's performance preset
  the row matches (recompute, dispatcher, EP overlap, ETP, CUDA graphs; `conditions_source` names the preset
  and perf script at path@commit; empty where no preset matched, `conditions_note` says why).
- AUTOMODEL_PAGE: the rows of AutoModel's current `docs/performance-summary.mdx` beyond the calibration
  notes (DeepSeek-V3 and Kimi-K2 pipelines, GPT-OSS-120B): held out, never fitted to.
- TITAN_ASYNC_TP: pytorch/torchtitan `benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md`.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from automodel_dist.cost.host import graphed_modules
from automodel_dist.targets.megatron_bridge.choose import TE_LOSS_LOGIT_BYTES

AUTOMODEL = "NVIDIA-NeMo/Automodel docs/performance-summary.mdx (2025-10-02), DGX-H100 BF16"
AUTOMODEL_CI = "NVIDIA-NeMo/Automodel examples/llm_benchmark (benchmark recipes run in CI on 32 H100 nodes)"
TITAN_H100 = "pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md"
TITAN_H200 = "pytorch/torchtitan benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md@cbccb3878"
MB_HW = "NVIDIA-NeMo/Megatron-Bridge skills/nemo-mbridge-perf-moe-hardware-configs (SKILL.md, card.yaml)"
MB_DISPATCH = "NVIDIA-NeMo/Megatron-Bridge skills/nemo-mbridge-perf-moe-dispatcher-selection/SKILL.md"
MB_RECOMPUTE = "NVIDIA-NeMo/Megatron-Bridge skills/nemo-mbridge-perf-activation-recompute/SKILL.md"
MB_MEMORY_TUNING = ("NVIDIA-NeMo/Megatron-Bridge skills/nemo-mbridge-perf-memory-tuning/SKILL.md and "
                    "skills/nemo-mbridge-perf-activation-recompute/SKILL.md@067f987df03b (Bridge PR #3107)")
AUTOMODEL_PAGE = ("NVIDIA-NeMo/Automodel docs/performance-summary.mdx@cb9765441e51 (DGX-H100 BF16; layouts per "
                  "examples/llm_benchmark recipes)")
TITAN_ASYNC_TP = "pytorch/torchtitan benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md@4a61bd87d"
MEASUREMENTS = Path(__file__).resolve().parent / "measurements"


def mb_logged_gib(gb: float) -> float:
    """GiB of a memory figure Megatron-Bridge's training log printed: `report_memory`
    (training/utils/train_utils.py) divides the allocator's byte counts by 1.0e9, rounds them to five significant
    figures and prints them as "memory (GB)"; its skills quote those figures, some under the label GiB."""
    return gb * 1e9 / 2**30


# Megatron-Bridge's performance recipes fuse the cross entropy with TE's kernel (`cross_entropy_fusion_impl: te`),
# which writes the logits' gradient in place of the bf16 logits: 2 bytes per logit alive at the loss.
MB_PERF_LOGIT_BYTES = TE_LOSS_LOGIT_BYTES
# Every release's performance presets reduce gradients in bf16: `cfg.ddp.grad_reduce_in_fp32 = False` (and
# `mixed_precision.grad_reduce_in_fp32`) in scripts/performance/configs/*/*_llm_{pretrain,finetune}.py's common
# settings at each release measured (yaml configs at 25.09, e.g. llama3_70b_llm_pretrain.yaml), and in
# perf_recipes/_common.py `_benchmark_common` and `_perf_precision` from 26.08 (only Kimi K2's 26.08 recipe turns
# it back on; the table has no 26.08 Kimi K2 row). So MCore's gradient buffer is bf16 (`_ParamAndGradBuffer`
# grad_dtype = param dtype), half what the library recipes' default fp32 takes.
MB_PERF_REDUCE_DTYPE = "bfloat16"
# torchtitan's Grand Teton H100s (its 2024-12 benchmark notes): 96 GB HBM2e at 2.4 TB/s (the H100 SXM preset has
# 80 GB HBM3 at 3.35 TB/s), 500 W power limit ("the actual peak TFLOPs number is between SXM and NVL"); the logs put
# 82.4 GiB at 86.7 %, i.e. 95.0 GiB. Its own name keys the GPU's fitted efficiency (gpu_efficiency:<name>).
TITAN_GPU = {"name": "h100-96gb-hbm2e-500w", "hbm_gib": 95.0, "hbm_tbps": 2.4}


@dataclass(frozen=True)
class CalibrationRow:
    """One measured run: the model, GPUs and layout it ran with, and what was measured."""

    name: str
    source: str
    model: str | dict[str, Any]  # what catalog.models.resolve_model accepts
    gpu: str
    world_size: int
    layout: dict[str, Any]
    seq_length: int
    global_batch_size: int
    task: str = "pretrain"
    precision: str = "bf16"
    peft_rank: int | None = None
    checkpointing: str = "none"  # none | full | selective (torchtitan's op-level policy; Megatron's modules) | auto
    recompute_modules: tuple[str, ...] = ()  # Megatron's selective recompute modules (MCore labels)
    ep_overlap: bool = True  # Megatron's overlap_moe_expert_parallel_comm (RecipeOptions.ep_overlap)
    cuda_graphs: tuple[str, ...] = ()  # what the run captures in CUDA graphs (RecipeOptions.cuda_graphs)
    master_weights: str = "bf16"  # AutoModel loads bf16 weights; torchtitan and Megatron keep fp32 masters
    logit_bytes: float | None = None  # None: fp32-upcast cross entropy; 4: bf16 one; 0: fused linear CE
    moment_dtype: str | None = None  # AdamW's moments (None: the master weights' dtype; RecipeOptions.moment_dtype)
    precision_aware: bool = False  # Megatron's precision-aware optimizer (RecipeOptions.precision_aware)
    fp8_primary_weights: bool = False  # FP8 weights cast from the masters at the step (RecipeOptions)
    defer_grad_sync: bool = True  # AutoModel's defer_fsdp_grad_sync
    reduce_dtype: str = "float32"  # distributed.mp_policy.reduce_dtype
    async_tp: bool = False  # TP collectives overlapped with GEMMs (torch async TP; Megatron's TP comm overlap)
    framework: str = "automodel"  # automodel | megatron | torchtitan: the profile that times it
    balanced_gate: bool = False  # AutoModel's fake_balanced_gate (its benchmark recipes; a learned router otherwise)
    fp8_recipe: str = "tensorwise"  # tensorwise (per-tensor current scaling) | rowwise | blockwise | mxfp8
    attention: str | None = None  # the attention kernel the run names (AutoModel's backend.attn); None: the default
    tokens_per_s_per_gpu: float | None = None
    tflops_per_gpu: float | None = None
    memory_gib: float | None = None
    memory_metric: str = "reserved"  # reserved | allocated
    gpu_conditions: dict[str, Any] | None = None  # GpuSpec fields where the GPUs differ from the preset's
    compiled: bool | None = None  # torch.compile on or off (None: the stack's default, memory.runs_fused)
    # fit | held-out (never fitted to: AutoModel's performance rows beyond the calibration notes) | reported (evaluated
    # and paired, never fitted: a job whose steps hold costs the model does not price, named in its notes)
    role: str = "fit"
    memory_role: str = "fit"  # fit | held-out, for memory (the ±10% target counts the torchtitan fit rows)
    notes: str = ""
    release: str = ""  # the software release measured (Megatron-Bridge's container), for pairing layouts
    excluded: str = ""  # why the row is kept but not evaluated (no preset for its model or GPU, NVFP4)

    @property
    def family(self) -> str:
        """The model family left out together in cross-validation."""
        name = (self.model if isinstance(self.model, str) else "deepseek").lower()
        for family in ("llama", "qwen2.5", "qwen3", "deepseek", "kimi", "gpt-oss", "nemotron"):
            if family in name:
                return family
        return name


def _lora(name: str, model: str, gpus: int, tp: int, step_s: float, tflops: float, tps: float,
          ac: bool, note: str) -> CalibrationRow:
    return CalibrationRow(
        name=name, source=AUTOMODEL, model=model, gpu="h100", world_size=gpus,
        layout={"tp": tp, "local_batch_size": 2, "activation_checkpointing": ac, "sequence_parallel": tp > 1},
        seq_length=4096, global_batch_size=32, task="peft", peft_rank=16, defer_grad_sync=gpus == 1,
        checkpointing="full" if ac else "none", async_tp=tp > 1, tokens_per_s_per_gpu=tps, tflops_per_gpu=tflops,
        notes=f"{step_s} s/step; LoRA rank 16 on all linear layers; {note}",
    )


_MULTI_GPU_LORA = ("AC not recorded in the table; the 70B PEFT benchmark recipe sets it on, with sequence "
                   "parallelism, async TP and defer_fsdp_grad_sync false (and without AC the activations "
                   "alone would exceed 80 GB)")

def _titan(name: str, model: str, world: int, layout: dict[str, Any], seq: int, gbs: int, *, precision: str,
           checkpointing: str, tps: float, memory_gib: float, notes: str, gpu: str = "h100",
           memory_role: str = "fit", async_tp: bool = False, compiled: bool = True,
           logit_bytes: float | None = None) -> CalibrationRow:
    """A torchtitan run: fp32 master weights, throughput held out (eager/compile, not AutoModel's TE)."""
    return CalibrationRow(
        name=name, source=TITAN_H200 if gpu == "h200" else TITAN_H100, model=model, gpu=gpu, world_size=world,
        layout=layout, seq_length=seq, global_batch_size=gbs, precision=precision, checkpointing=checkpointing,
        master_weights="fp32", async_tp=async_tp, tokens_per_s_per_gpu=tps, memory_gib=memory_gib,
        gpu_conditions=TITAN_GPU if gpu == "h100" else None, memory_role=memory_role, notes=notes,
        framework="torchtitan", compiled=compiled, logit_bytes=logit_bytes,
    )


def _megatron(name: str, source: str, world: int, layout: dict[str, Any], seq: int, gbs: int, *,
              model: str | dict[str, Any] = "Qwen/Qwen3-30B-A3B", checkpointing: str = "none",
              precision: str = "bf16",
              tps: float | None = None, tflops: float | None = None, memory_gib: float | None = None,
              gpu: str = "h100", cuda_graphs: tuple[str, ...] = (), reduce_dtype: str = "float32",
              moment_dtype: str | None = None, logit_bytes: float | None = None, precision_aware: bool = False,
              recompute_modules: tuple[str, ...] = (), notes: str) -> CalibrationRow:
    """A Megatron-Bridge run: fp32 master weights, gradients reduced every micro batch, TP communication
    overlapped with the GEMMs (TE userbuffers, on in its performance recipes), Megatron's own pipeline
    schedules; all held out."""
    return CalibrationRow(
        name=name, source=source, model=model, gpu=gpu, world_size=world,
        layout={"strategy": "distributed_optimizer", **layout}, seq_length=seq,
        global_batch_size=gbs, precision=precision, checkpointing=checkpointing, master_weights="fp32",
        defer_grad_sync=False, async_tp=layout.get("tp", 1) > 1, framework="megatron", tokens_per_s_per_gpu=tps,
        tflops_per_gpu=tflops, memory_gib=memory_gib, memory_metric="allocated",
        memory_role="held-out", cuda_graphs=cuda_graphs, reduce_dtype=reduce_dtype, moment_dtype=moment_dtype,
        logit_bytes=logit_bytes, precision_aware=precision_aware, recompute_modules=recompute_modules, notes=notes,
    )


def _moonlight_h100(modules: tuple[str, ...], step_ms: float, tflops: float, memory_gb: float) -> CalibrationRow:
    """One run of Megatron-Bridge's matched Moonlight-16B study on 8 H100 (2026-08, Bridge 600d069b): its recipe
    `moonlight_16b_pretrain_8gpu_h100_bf16_config` (TP2 SP, EP8 alltoall, MBS 1, GBS 4: DP 4, one micro batch,
    grad_reduce_in_fp32 false, the precision-aware optimizer with bf16 exp_avg/exp_avg_sq beside fp32 main params,
    TE fused cross entropy, tp_comm_overlap and overlap_moe_expert_parallel_comm off, no CUDA graphs) with only
    `recompute_modules` changed; 20 steps on mock data, a learned router (moe_router_force_load_balancing false).
    Step time and TFLOP/s are the means over iterations 11-20; the peak allocated memory is reported after
    iteration 2. Reported, not fitted: the model predicts these steps at about half their measured time, and what the
    rest is (one micro batch per step, so every per-step cost counts whole; no CUDA graphs; a small model's many
    short kernels) has no term; fitting six of them would pull the MoE host time every MoE run shares."""
    label = "[" + ", ".join(modules) + "]"
    row = _megatron(f"MB Moonlight-16B 8xH100 TP2 EP8 recompute {label}", MB_RECOMPUTE, 8,
                    {"tp": 2, "ep": 8, "local_batch_size": 1, "sequence_parallel": True}, 4096, 4,
                    model="moonshotai/Moonlight-16B-A3B",
                    checkpointing="selective" if modules else "none", recompute_modules=modules,
                    tps=4 * 4096 / 8 / (step_ms / 1000), tflops=tflops, memory_gib=mb_logged_gib(memory_gb),
                    reduce_dtype="bfloat16", moment_dtype="bfloat16", logit_bytes=MB_PERF_LOGIT_BYTES,
                    precision_aware=True,
                    notes=f"recompute {label}: {step_ms} ms/step, {tflops} TFLOP/s/GPU, {memory_gb} GB peak allocated")
    return replace(row, async_tp=False, ep_overlap=False, role="reported")


_L8B, _L70B, _L405B = "meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.1-70B", "meta-llama/Llama-3.1-405B"
_TP8 = {"tp": 8, "activation_checkpointing": True, "sequence_parallel": True}

ROWS: tuple[CalibrationRow, ...] = (
    # --- NeMo AutoModel, DGX-H100, BF16: throughput fit rows; every one ran on 80 GB ---
    CalibrationRow(
        name="AM Qwen3-30B-A3B pretrain 8xH100 EP8", source=AUTOMODEL, model="Qwen/Qwen3-30B-A3B",
        gpu="h100", world_size=8,
        layout={"ep": 8, "local_batch_size": 4, "activation_checkpointing": True, "dispatcher": "deepep"},
        seq_length=4096, global_batch_size=512, checkpointing="full", logit_bytes=4, balanced_gate=True,
        tokens_per_s_per_gpu=12040, tflops_per_gpu=277,
        notes="21.773 s/step; TE + DeepEP, fake balanced gate; MaskedCrossEntropy(fp32_upcast=false)",
    ),
    CalibrationRow(
        name="AM GPT-OSS-20B pretrain 8xH100 EP8", source=AUTOMODEL, model="openai/gpt-oss-20b",
        gpu="h100", world_size=8,
        layout={"ep": 8, "local_batch_size": 2, "activation_checkpointing": False, "dispatcher": "deepep"},
        seq_length=4096, global_batch_size=256, checkpointing="none", logit_bytes=0, balanced_gate=True,
        attention="flex", tokens_per_s_per_gpu=13058, tflops_per_gpu=279,
        notes="10.04 s/step; TE + DeepEP + FlexAttn, experts torch_mm; FusedLinearCrossEntropy",
    ),
    CalibrationRow(
        name="AM Llama-3-70B pretrain 64xH100 CP2", source=AUTOMODEL, model="meta-llama/Meta-Llama-3-70B",
        gpu="h100", world_size=64,
        layout={"cp": 2, "local_batch_size": 1, "activation_checkpointing": True},
        seq_length=8192, global_batch_size=128, checkpointing="full", defer_grad_sync=False,
        tokens_per_s_per_gpu=866.77, tflops_per_gpu=389,
        notes="18.90 s/step; TE + FSDP2 prefetch; recipe sets defer_fsdp_grad_sync false",
    ),
    _lora("AM Llama-3-8B LoRA 1xH100", "meta-llama/Meta-Llama-3-8B", 1, 1, 10.51, 402, 12472.87, False,
          "AC off per the benchmark recipe"),
    _lora("AM Qwen2.5-7B LoRA 1xH100", "Qwen/Qwen2.5-7B", 1, 1, 9.29, 423, 14110.05, False,
          "AC off per the benchmark recipe"),
    _lora("AM Llama-3-70B LoRA 8xH100 TP2", "meta-llama/Meta-Llama-3-70B", 8, 2, 15.00, 316, 1091.85, True,
          _MULTI_GPU_LORA),
    _lora("AM Qwen2.5-32B LoRA 8xH100 TP2", "Qwen/Qwen2.5-32B", 8, 2, 7.28, 301, 2250.31, True,
          _MULTI_GPU_LORA),
    _lora("AM Llama-3-70B LoRA 16xH100 TP2", "meta-llama/Meta-Llama-3-70B", 16, 2, 8.32, 285, 984.85, True,
          _MULTI_GPU_LORA),
    _lora("AM Qwen2.5-32B LoRA 16xH100 TP2", "Qwen/Qwen2.5-32B", 16, 2, 3.95, 277, 2072.89, True,
          _MULTI_GPU_LORA),
    # --- AutoModel benchmark recipes that run on 32 H100 nodes: only "must fit" ---
    CalibrationRow(
        name="AM-CI DeepSeek-V3 256xH100 PP4 VP4 EP64", source=AUTOMODEL_CI, model="deepseek-ai/DeepSeek-V3",
        gpu="h100", world_size=256,
        layout={"pp": 4, "vpp": 4, "ep": 64, "pp_schedule": "interleaved1f1b", "local_batch_size": 4,
                "micro_batch_size": 1, "activation_checkpointing": True, "dispatcher": "hybridep"},
        seq_length=4096, global_batch_size=256, checkpointing="full", logit_bytes=4, reduce_dtype="bfloat16",
        balanced_gate=True,
        notes="deepseek_v3_te_deepep.yaml: layers_per_stage 4, mp_policy reduce_dtype bf16, "
              "MaskedCrossEntropy(fp32_upcast=false)",
    ),
    CalibrationRow(
        name="AM-CI Qwen3-235B-A22B 256xH100 PP4 VP12 EP32", source=AUTOMODEL_CI, model="Qwen/Qwen3-235B-A22B",
        gpu="h100", world_size=256,
        layout={"pp": 4, "vpp": 12, "ep": 32, "pp_schedule": "interleaved1f1b", "local_batch_size": 8,
                "micro_batch_size": 1, "activation_checkpointing": True, "dispatcher": "hybridep"},
        seq_length=4096, global_batch_size=2048, checkpointing="full", logit_bytes=4, balanced_gate=True,
        notes="qwen3_moe_235b_te_deepep.yaml: layers_per_stage 2 (48 stages, rounded up), ep_shard 2 with "
              "experts kept gathered, MaskedCrossEntropy(fp32_upcast=false)",
    ),
    # --- torchtitan FSDP2 (peers.md §6 rows 1-7): memory fit rows; throughput held out ---
    _titan("TT Llama-3.1-8B FSDP8", _L8B, 8, {"local_batch_size": 2}, 8192, 16, precision="bf16",
           checkpointing="selective", tps=5762, memory_gib=82.4, notes="Table 1, eager bf16; 500 W H100",
           compiled=False),
    _titan("TT Llama-3.1-8B FSDP8 compile", _L8B, 8, {"local_batch_size": 2}, 8192, 16, precision="bf16",
           checkpointing="selective", tps=6667, memory_gib=77.0,
           notes="Table 1, torch.compile bf16; 500 W H100"),
    _titan("TT Llama-3.1-8B FSDP8 compile+fp8", _L8B, 8, {"local_batch_size": 2}, 8192, 16, precision="fp8",
           checkpointing="selective", tps=8532, memory_gib=76.8,
           notes="Table 1; torch.compile not modelled; 500 W H100"),
    _titan("TT Llama-3.1-8B FSDP128", _L8B, 128, {"local_batch_size": 2}, 8192, 256, precision="bf16",
           checkpointing="selective", tps=5605, memory_gib=67.0, notes="Table 3, eager bf16; 500 W H100",
           compiled=False),
    _titan("TT Llama-3.1-8B FSDP128 compile", _L8B, 128, {"local_batch_size": 2}, 8192, 256, precision="bf16",
           checkpointing="selective", tps=6514, memory_gib=62.0,
           notes="Table 3, torch.compile bf16; 500 W H100"),
    *(
        _titan(f"TT Llama-3.1-8B FSDP{8 // cp} CP{cp} seq{seq // 1024}k", _L8B, 8,
               {"cp": cp, "local_batch_size": 1, "activation_checkpointing": True}, seq, 8 // cp,
               precision="fp8", checkpointing="full", tps=tps, memory_gib=mem,
               notes="Table 2, compile + Float8; 500 W H100")
        for cp, seq, tps, mem in ((1, 32768, 3890, 83.9), (2, 65536, 2540, 84.2), (4, 131072, 1071, 84.0),
                                  (8, 262144, 548, 84.5))
    ),
    _titan("TT Llama-3.1-70B FSDP32 TP8", _L70B, 256, {**_TP8, "local_batch_size": 16}, 8192, 512,
           precision="fp8", checkpointing="full", tps=829, memory_gib=71.9,
           notes="Table 4, compile + Float8, no AsyncTP; 500 W H100"),
    _titan("TT Llama-3.1-405B FSDP8 TP8 PP8 1F1B", _L405B, 512,
           {**_TP8, "pp": 8, "pp_schedule": "1f1b", "local_batch_size": 32, "micro_batch_size": 4}, 8192, 256,
           precision="fp8", checkpointing="full", tps=100, memory_gib=82.5, async_tp=True,
           notes="Table 5, compile + Float8 + AsyncTP; 8 micro batches (one per stage); 500 W H100"),
    _titan("TT Llama-3.1-405B FSDP8 TP8 PP8 interleaved", _L405B, 512,
           {**_TP8, "pp": 8, "vpp": 2, "pp_schedule": "interleaved1f1b", "local_batch_size": 32,
            "micro_batch_size": 2}, 8192, 256, precision="fp8", checkpointing="full", tps=128, memory_gib=72.7,
           async_tp=True,
           notes="Table 5; 2 stages per rank, 16 micro batches (one per stage); 500 W H100"),
    *(
        _titan(f"TT Llama-3.1-405B FSDP{8 // cp} CP{cp} TP8 PP8 seq{seq // 1024}k", _L405B, 512,
               {**_TP8, "pp": 8, "cp": cp, "pp_schedule": "1f1b", "local_batch_size": 8, "micro_batch_size": 1},
               seq, 8 * (8 // cp), precision="fp8", checkpointing="full", tps=tps, memory_gib=mem, async_tp=True,
               notes="Table 6, compile + Float8 + AsyncTP, 1F1B with 8 micro batches; 500 W H100")
        for cp, seq, tps, mem in ((1, 32768, 76, 75.3), (2, 65536, 47, 75.9), (4, 131072, 31, 77.1),
                                  (8, 262144, 16, 84.9))
    ),
    *(
        _titan(f"TT Llama-3.1-8B FSDP{gpus} H200 compile+fp8", _L8B, gpus, {"local_batch_size": 2}, 8192,
               2 * gpus, precision="fp8", checkpointing="selective", tps=tps, memory_gib=mem, gpu="h200",
               logit_bytes=4,
               notes="compile + Float8 with fp8 FSDP all-gather, selective op AC (llama3_8b.toml) at torchtitan "
                     "e7c0cae, which compiles the loss with --training.compile (components/loss.py: bf16 logits "
                     "and their bf16 gradient; the 2024-12 rows ran it eager: 'compiling loss function causes "
                     "CUDA errors, turning off for now') and no longer saves aten.abs in its op list")
        for gpus, tps, mem in ((32, 10938, 47.96), (64, 10753, 46.97))
    ),
    # --- Megatron-Bridge (a different stack): held out ---
    _megatron("MB Qwen3-30B-A3B 16xH100 EP16 HybridEP", MB_HW, 16,
              {"ep": 16, "local_batch_size": 1, "dispatcher": "hybridep"}, 4096, 1024,
              tps=1024 * 4096 / 16 / 20.14729, tflops=299.352, memory_gib=mb_logged_gib(62.166),
              cuda_graphs=graphed_modules("transformer_engine", ("moe_router", "moe_preprocess")),
              reduce_dtype=MB_PERF_REDUCE_DTYPE, logit_bytes=MB_PERF_LOGIT_BYTES, precision_aware=True,
              notes="20.147 s/step, EP overlap on, CUDA graphs for router/preprocess; rank-0 peak allocated "
                    "62.166 (the skill says GiB; five significant figures as the training log prints decimal "
                    "GB, and the alltoall run of the same shape logged 61.351 GB). "
                    "qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config at Bridge 3a9559f0 (model verification card "
                    "qwen3-30b-a3b): _perf_precision('bf16') and _benchmark_common set grad_reduce_in_fp32 false "
                    "and TE's fused cross entropy; its base recipe turns the precision-aware optimizer on (fp32 "
                    "main weights and moments)"),
    _megatron("MB Qwen3-30B-A3B 16xH100 EP16 alltoall", MB_DISPATCH, 16,
              {"ep": 16, "local_batch_size": 1, "dispatcher": "alltoall"}, 4096, 1024,
              tps=1024 * 4096 / 16 / 45.65, tflops=132.9, memory_gib=mb_logged_gib(61.351),
              reduce_dtype=MB_PERF_REDUCE_DTYPE, logit_bytes=MB_PERF_LOGIT_BYTES, precision_aware=True,
              notes="availability smoke: alltoall fallback, 45.65 s/step; 61.351 GB peak allocated. The 2026-05 "
                    "performance scripts (scripts/performance at Bridge 17a381f95): qwen3_llm_pretrain.py sets "
                    "grad_reduce_in_fp32 false, utils/overrides.py TE's fused cross entropy and, for BF16 with "
                    "Adam, the precision-aware optimizer"),
    _megatron("MB Qwen3-30B-A3B 32xH100 EP8 full recompute", MB_HW, 32,
              {"ep": 8, "local_batch_size": 4, "activation_checkpointing": True, "dispatcher": "deepep"},
              4096, 256, checkpointing="full", tflops=210,
              notes="card best_configs: ~210 TFLOP/s/GPU, MBS 4 GBS 256, DeepEP, full recompute"),
    *(_moonlight_h100(modules, step_ms, tflops, memory_gb) for modules, step_ms, tflops, memory_gb in (
        ((), 457.18, 77.50, 36.618), (("core_attn",), 474.80, 74.44, 36.614),
        (("mla_up_proj",), 480.89, 73.72, 35.902), (("mla_up_proj", "mlp"), 496.73, 71.50, 35.917),
        (("moe_act",), 466.26, 75.50, 35.941), (("layernorm", "moe_act"), 506.53, 70.27, 35.949))),
)



# --- AutoModel's current performance page, rows beyond the calibration notes: held out ---
def _am_page(name: str, model: str, world: int, layout: dict[str, Any], gbs: int, step_s: float, tflops: float,
             tps: float, notes: str, checkpointing: str = "full", attention: str | None = None) -> CalibrationRow:
    return CalibrationRow(
        name=name, source=AUTOMODEL_PAGE, model=model, gpu="h100", world_size=world, layout=layout, seq_length=4096,
        global_batch_size=gbs, checkpointing=checkpointing, logit_bytes=4, balanced_gate=True, tokens_per_s_per_gpu=tps,
        tflops_per_gpu=tflops, role="held-out", notes=f"{step_s} s/step; {notes}", attention=attention,
    )


_DSV3_PP = {"pp": 4, "vpp": 8, "ep": 64, "pp_schedule": "interleaved1f1b", "local_batch_size": 8,
            "micro_batch_size": 1, "activation_checkpointing": True, "dispatcher": "hybridep"}
HELD_OUT_ROWS: tuple[CalibrationRow, ...] = (
    _am_page("AMp DeepSeek-V3 256xH100 PP4 VP8 EP64", "deepseek-ai/DeepSeek-V3", 256, _DSV3_PP, 512, 8.18, 250, 1002,
             "TE + DeepEP (recipe: hybridep, torch_mm experts, MaskedCrossEntropy fp32_upcast false)"),
    _am_page("AMp DeepSeek-V3 1024xH100 PP4 VP8 EP64", "deepseek-ai/DeepSeek-V3", 1024, _DSV3_PP, 8192, 37.87, 216,
             865, "TE + DeepEP; GA 4"),
    _am_page("AMp Kimi-K2 256xH100 PP8 VP4 EP32", "moonshotai/Kimi-K2-Instruct", 256,
             {"pp": 8, "vpp": 4, "ep": 32, "pp_schedule": "interleaved1f1b", "local_batch_size": 8,
              "micro_batch_size": 1, "activation_checkpointing": True, "dispatcher": "deepep"}, 512, 8.86, 189, 924,
             "TE + DeepEP (recipe: deepep, gmm experts); GA 2"),
    _am_page("AMp GPT-OSS-120B 64xH100 EP64", "openai/gpt-oss-120b", 64,
             {"ep": 64, "local_batch_size": 2, "activation_checkpointing": False, "dispatcher": "hybridep"}, 512, 4.30,
             231, 7626, "TE + DeepEP + FlexAttn; no activation checkpointing", checkpointing="none", attention="flex"),
)


# --- torchtitan async TP (June 2025, Grand Teton H100 500 W, torch.compile): vanilla vs async TP ---
def _titan_async(model: str, world: int, tp: int, lbs: int, checkpointing: str, quant: str, vanilla: float,
                 async_tps: float) -> tuple[CalibrationRow, ...]:
    precision, recipe = ("bf16", "tensorwise") if quant == "bf16" else ("fp8", quant)
    size = model.rsplit("-", 1)[1]
    return tuple(
        CalibrationRow(
            name=f"TT Llama-3.1-{size} FSDP{world // tp} TP{tp} {quant}{' asyncTP' if on else ''}",
            source=TITAN_ASYNC_TP, model=model, gpu="h100", world_size=world,
            layout={"tp": tp, "local_batch_size": lbs, "activation_checkpointing": checkpointing == "full",
                    "sequence_parallel": True},
            seq_length=8192, global_batch_size=lbs * world // tp, precision=precision, fp8_recipe=recipe,
            checkpointing=checkpointing, master_weights="fp32", async_tp=on, framework="torchtitan",
            tokens_per_s_per_gpu=tps, gpu_conditions=TITAN_GPU,
            notes=f"torch.compile, {checkpointing} AC, local batch {lbs}; {quant}")
        for on, tps in ((False, vanilla), (True, async_tps))
    )


TITAN_ASYNC_TP_ROWS: tuple[CalibrationRow, ...] = (
    *_titan_async(_L70B, 256, 8, 16, "full", "bf16", 597.3, 652.4),
    *_titan_async(_L70B, 256, 8, 16, "full", "tensorwise", 809.8, 942.4),
    *_titan_async(_L70B, 256, 8, 16, "full", "rowwise", 599.6, 624.8),
    *_titan_async(_L8B, 64, 8, 12, "selective", "bf16", 4378, 4809.4),
    *_titan_async(_L8B, 64, 8, 12, "selective", "tensorwise", 5078.1, 5570.1),
    *_titan_async(_L8B, 64, 8, 12, "selective", "rowwise", 3708.5, 3914.9),
)


# --- Megatron-Bridge's performance summary, every release (benchmarks/measurements/megatron_bridge.csv) ---
MB_MODELS = {
    "LLAMA3_8B": "meta-llama/Meta-Llama-3-8B", "LLAMA3_70B": "meta-llama/Meta-Llama-3-70B",
    "LLAMA3.1_405B": "meta-llama/Llama-3.1-405B", "DeepSeekV3": "deepseek-ai/DeepSeek-V3",
    "GPT OSS 120B": "openai/gpt-oss-120b", "Qwen3_30B_a3B": "Qwen/Qwen3-30B-A3B",
    "Qwen3_235B_a22B": "Qwen/Qwen3-235B-A22B", "Kimi_K2": "moonshotai/Kimi-K2-Instruct",
}
MB_GPUS = {"DGX-H100": "h100", "DGX-B200": "b200", "DGX-GB200": "gb200-nvl72", "DGX-GB300": "gb300-nvl72"}
# precision column -> (precision, FP8 recipe); NVFP4 has no model yet
MB_PRECISIONS = {"BF16": ("bf16", "tensorwise"), "FP8": ("fp8", "tensorwise"), "FP8-CS": ("fp8", "tensorwise"),
                 "FP8-blockwise": ("fp8", "blockwise"), "MXFP8": ("fp8", "mxfp8"), "FP8-MX": ("fp8", "mxfp8")}


def _size(cell: str) -> int:
    return 1 if cell in ("", "n/a", "-") else int(cell)


def _mb_recompute(r: dict[str, str]) -> tuple[str, tuple[str, ...]]:
    """The row's recompute as its preset states it, else "auto" (the least that fits); selective with no
    modules recomputes nothing. CPU offloading of activations is not modelled: the least recompute that fits
    stands in for it."""
    if r["cpu_offload_layers"] not in ("", "none"):
        return "auto", ()
    if r["recompute"] == "selective":
        modules = tuple(m for m in r["recompute_modules"].split("+") if m not in ("", "none"))
        return ("selective", modules) if modules else ("none", ())
    return (r["recompute"], ()) if r["recompute"] in ("none", "full") else ("auto", ())


# Table cells that contradict the same row and the release's preset, with what ran instead. 25.11 GPT OSS 120B on
# 64 H100 (performance-summary-archive.md@4ab94dfad366) prints MBS 4 and GA 2, the DGX-B200 row's values (PP1, DP
# 64); at PP4 (DP 16) GBS 512 with MBS 4 would be GA 8. Its preset (scripts/performance/configs/gpt_oss/
# workload_base_configs.py@7af9601c9da7 GPT_OSS_120B_H100_BF16_BASE_CONFIG over BASE_GPT_OSS_120B_CONFIG) states
# MBS 1, as every later release's H100 row does.
MB_TABLE_ERRATA = {("25.11", "DGX-H100", "GPT OSS 120B", "BF16"): {"mbs": "1"}}


def _mb_row(r: dict[str, str]) -> CalibrationRow:
    erratum = MB_TABLE_ERRATA.get((r["release"], r["system"], r["model"], r["precision"]), {})
    r = {**r, **erratum}
    tp, pp, cp, vp, ep = (_size(r[k]) for k in ("tp", "pp", "cp", "vp", "ep"))
    gpus, gbs, mbs = int(r["gpus"]), int(r["gbs"]), int(r["mbs"])
    dp = gpus // (tp * pp * cp)
    excluded = ""
    if r["model"] not in MB_MODELS:
        excluded = "no model preset"
    elif r["system"] not in MB_GPUS:
        excluded = "no hardware preset"
    elif r["precision"] not in MB_PRECISIONS:
        excluded = f"{r['precision']} not modelled"
    precision, recipe = MB_PRECISIONS.get(r["precision"], ("bf16", "tensorwise"))
    gpu = MB_GPUS.get(r["system"], "h100")
    # FSDP off: Megatron-Core's DDP with the distributed optimizer (every performance preset turns it on)
    layout = {"strategy": "fsdp2" if r["fsdp"] == "1" else "distributed_optimizer",
              "tp": tp, "pp": pp, "cp": cp, "ep": ep, "sequence_parallel": tp > 1,
              "local_batch_size": gbs // dp if pp > 1 else mbs, "micro_batch_size": mbs}
    if pp > 1:
        layout |= {"vpp": vp, "pp_schedule": "interleaved1f1b" if vp > 1 else "1f1b"}
    if ep > 1:
        # the preset's dispatcher; unstated: the flex backend the GPU generation takes
        stated = r["flex_backend"] if r["dispatcher"] == "flex" else r["dispatcher"]
        layout["dispatcher"] = stated or ("hybridep" if gpu.startswith("gb") else "deepep")
        if r["conditions_source"]:  # MCore: expert_tensor_parallel_size None is the TP size
            layout["etp"] = int(r["etp"]) if r["etp"] not in ("", "none") else tp
    checkpointing, modules = _mb_recompute(r)
    notes = "; ".join(x for x in (r["notes"], f"FSDP {'on' if r['fsdp'] == '1' else 'off (distributed optimizer)'}",
                                  r["cuda_graph_impl"] not in ("", "none") and
                                  f"CUDA graphs {r['cuda_graph_impl']} ({r['cuda_graph_scope']})",
                                  r["cpu_offload_layers"] not in ("", "none") and
                                  f"CPU offloading of {r['cpu_offload_layers']} layers (not modelled)",
                                  r["capacity_factor"] not in ("", "none") and
                                  f"MoE capacity factor {r['capacity_factor']} (not modelled)",
                                  r["conditions_note"],
                                  erratum and "table cells corrected to the preset's: " + ", ".join(
                                      f"{k} {v}" for k, v in erratum.items())) if x)
    return CalibrationRow(
        name=f"MB {r['release']} {r['task']} {r['model']} {gpus}x{r['system'].removeprefix('DGX-')} {r['precision']} "
             f"TP{tp} PP{pp} VP{vp} CP{cp} EP{ep} MBS{mbs} GBS{gbs}",
        source=r["source"] + (f"; conditions: {r['conditions_source']}" if r["conditions_source"] else ""),
        model=MB_MODELS.get(r["model"], r["model"]), gpu=gpu, world_size=gpus, layout=layout,
        seq_length=int(r["seq"]), global_batch_size=gbs, task="peft" if r["task"] == "lora" else "pretrain",
        peft_rank=16 if r["task"] == "lora" else None, precision=precision, fp8_recipe=recipe,
        checkpointing=checkpointing, recompute_modules=modules, ep_overlap=r["ep_overlap"] != "false",
        cuda_graphs=graphed_modules(r["cuda_graph_impl"], r["cuda_graph_scope"].split("+")),
        master_weights="fp32", async_tp=tp > 1, framework="megatron",
        # the performance recipes fuse the loss with TE's parallel cross entropy (perf_recipes/_common.py
        # `_benchmark_common(cross_entropy_impl="te")`): it keeps only the output layer's bf16 logits and writes
        # their gradient into the same buffer, 2 bytes per logit
        logit_bytes=MB_PERF_LOGIT_BYTES, reduce_dtype=MB_PERF_REDUCE_DTYPE,
        # the performance scripts turn the precision-aware optimizer on for BF16 runs since they exist
        # (scripts/performance at Bridge 568b3a3ef, 2025-08: `if args.compute_dtype == "bf16"`) and off again with
        # Megatron FSDP ("cannot work with FSDP together", utils/overrides.py)
        precision_aware=precision == "bf16" and r["fsdp"] != "1",
        # per-tensor FP8 keeps FP8 primary weights (mixed_precision.py: the current- and delayed-scaling recipes set
        # fp8_param_gather since Bridge 958fb9b7d, 2025-07), but for DeepSeek-V3 on H100, whose performance recipe
        # turns them off (perf_recipes/deepseek/h100/deepseek_v3.py @067f987df)
        fp8_primary_weights=recipe == "tensorwise" and precision == "fp8" and r["fsdp"] != "1"
        and not (r["model"] == "DeepSeekV3" and gpu == "h100"),
        # Megatron FSDP reduce-scatters every micro batch; its distributed optimizer keeps a full fp32 grad buffer
        defer_grad_sync=r["fsdp"] != "1",
        tokens_per_s_per_gpu=float(r["tokens_per_s_per_gpu"]), tflops_per_gpu=float(r["tflops_per_gpu"]),
        notes=notes, release=r["release"], excluded=excluded,
    )


def _megatron_summary() -> tuple[CalibrationRow, ...]:
    with (MEASUREMENTS / "megatron_bridge.csv").open(newline="") as f:
        return tuple(_mb_row(r) for r in csv.DictReader(f))


def _llama3_70b_sft_h100(name: str, layout: dict[str, Any], modules: tuple[str, ...], tflops: float | None,
                         memory_gb: float, notes: str) -> CalibrationRow:
    """One run of Megatron-Bridge's Llama-3 70B SFT study on 32 H100 (PR #3107, 2026-04): its performance preset
    LLAMA3_70B_SFT_CONFIG_H100_FP8_CS_V1 (FP8 current scaling, TE CUDA graphs over the MLP, MBS 1, GBS 32, 4096-token
    packed sequences padded to length, the performance scripts' bf16 gradients and TE cross entropy) with one change
    per row. TFLOP/s, and the peak memory the study tabulates as "Peak Mem (GB)": Megatron-Bridge's log figure
    (`mb_logged_gib`), the allocated peak (the baseline's OOM is put down to fragmentation: the allocator's
    reserve, not this figure, reached the 80 GB; with expandable segments it ran at ~59)."""
    return CalibrationRow(
        name=f"MB PR3107 sft LLAMA3_70B 32xH100 FP8-CS {name}", source=MB_MEMORY_TUNING,
        model=MB_MODELS["LLAMA3_70B"], gpu="h100", world_size=32,
        layout={"strategy": "distributed_optimizer", "tp": 4, "pp": 4, "vpp": 5, "pp_schedule": "interleaved1f1b",
                "sequence_parallel": True, "micro_batch_size": 1, **layout},
        seq_length=4096, global_batch_size=32, precision="fp8", fp8_recipe="tensorwise", checkpointing="selective",
        recompute_modules=modules, cuda_graphs=graphed_modules("transformer_engine", ("mlp",)),
        master_weights="fp32", async_tp=layout.get("tp", 4) > 1, framework="megatron", fp8_primary_weights=True,
        logit_bytes=MB_PERF_LOGIT_BYTES, reduce_dtype=MB_PERF_REDUCE_DTYPE, tflops_per_gpu=tflops,
        memory_gib=mb_logged_gib(memory_gb), memory_metric="allocated", memory_role="held-out", notes=notes,
        release="PR3107",
    )


# The study's matched rows: the baseline (`core_attn`, the recipe's recompute in that run), recompute modules
# changed one at a time, then PP or TP doubled (DP 2 -> 1)
LLAMA3_70B_SFT_ROWS: tuple[CalibrationRow, ...] = (
    _llama3_70b_sft_h100("TP4 PP4 VP5 core_attn", {"local_batch_size": 16}, ("core_attn",), 704, 58.8,
                         "~704 TFLOP/s/GPU (golden 709.93); the memory-tuning skill's baseline; OOM on rank 0 from "
                         "fragmentation without expandable segments"),
    _llama3_70b_sft_h100("TP4 PP4 VP5 mlp", {"local_batch_size": 16}, ("mlp",), 593.6, 55.6,
                         "mlp recompute: the FFN replayed (~16% slower)"),
    _llama3_70b_sft_h100("TP4 PP4 VP5 mlp+core_attn", {"local_batch_size": 16}, ("mlp", "core_attn"), 586.8, 55.6,
                         "mlp and core_attn recompute"),
    _llama3_70b_sft_h100("TP4 PP4 VP5 core_attn+layernorm", {"local_batch_size": 16}, ("core_attn", "layernorm"),
                         702, 59.6, "~702 TFLOP/s/GPU: layernorm recompute nearly free; OOM on rank 0 as the "
                         "baseline"),
    _llama3_70b_sft_h100("TP4 PP8 VP5 core_attn", {"pp": 8, "local_batch_size": 32}, ("core_attn",), 668.0, 53.2,
                         "More PP: DP 2 -> 1, 32 micro batches per step"),
    _llama3_70b_sft_h100("TP8 PP4 VP5 core_attn", {"tp": 8, "local_batch_size": 32}, ("core_attn",), 508.7, 50.2,
                         "More TP: TP8 within the node, DP 1 ('TP=8 is catastrophic (-28%)')"),
    _llama3_70b_sft_h100("TP4 PP4 VP10 core_attn", {"vpp": 10, "local_batch_size": 16}, ("core_attn",), None, 60.2,
                         "VPP 5 -> 10, with expandable segments: 'slightly more peak memory (60.2 GB vs 58.8 GB)' "
                         "(the memory-tuning skill's note on VPP); no throughput given"),
)


ROWS = ROWS + TITAN_ASYNC_TP_ROWS + _megatron_summary() + LLAMA3_70B_SFT_ROWS + HELD_OUT_ROWS

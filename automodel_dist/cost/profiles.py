"""The cost model's free parameters: shared physics, and one profile per training stack.

Physics (how fast a GEMM of a given shape runs on a GPU generation, how much faster FP8 makes it) is
shared by every stack; a `FrameworkProfile` holds what differs between AutoModel, Megatron-Bridge and
torchtitan (how much of the MoE dispatch they hide, whether they run torch's pipeline runtime, how much of TP's
traffic async TP hides, whether their memory-bound ops are fused); which attention kernels a run uses is
`throughput.attention_kernel`.

The GEMM efficiency is physics, not a profile's: all three stacks run their linear layers as cuBLAS GEMMs
(Transformer Engine's Linear and torch's nn.Linear call the same cuBLASLt kernels), so one efficiency serves
all of them; what differs between stacks is what runs around the GEMMs. That also keeps a stack's rows
predictable when its only model family is held out (every torchtitan row is Llama).

The values are data: `fitted_parameters.json`, written by `benchmarks/calibration.py --fit` (a least-squares
fit on log throughput error over the measurement set in benchmarks/measurements/ and
benchmarks/calibration_data.py). Each parameter records whether it was fitted and over how many rows;
one resting on fewer than five rows stays at its prior (a physical estimate named in the file).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, fields
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple

DEFAULT_FRAMEWORK = "automodel"
PARAMETERS_FILE = Path(__file__).with_name("fitted_parameters.json")


@dataclass(frozen=True)
class FrameworkProfile:
    """What one training stack does differently on the same hardware (see the module docstring).

    `ep_overlap`: share of the compute time the MoE dispatch/combine can run under (Megatron's EP overlap
    runs one micro batch's exchange during another's compute; dispatch beyond it stays exposed; AutoModel
    runs them on the critical path). `tp_exposed`: share of TP collectives left exposed with async TP / TP
    comm overlap.
    `peft_efficiency`: speed of LoRA steps relative to the counted FLOPs (thin adapter GEMMs).
    `torch_pipeline`: the stack runs torch.distributed.pipelining (blocking send/receive; its schedule is
    replayed, cost/pipeline.py).
    """

    name: str
    ep_overlap: float
    tp_exposed: float
    peft_efficiency: float
    torch_pipeline: bool


@dataclass(frozen=True)
class Physics:
    """Shared hardware laws (see the module docstring).

    `kernel_efficiency` is the achieved share of the bf16 peak on large dense GEMMs (cuBLAS, every stack); GEMM
    efficiency of an (m x k) @ (k x n) GEMM is m/(m + gemm_tokens) · n/(n + gemm_width) of it (m tokens, n the
    output width per rank); routed experts run as grouped GEMMs whose extra scheduling costs
    `grouped_gemm_efficiency`. `attention_efficiency` is each fused attention kernel family's share of the
    GEMMs' rate ("te": cuDNN through Transformer Engine; "torch": PyTorch's SDPA flash kernel and
    FlexAttention), its backward especially running below the GEMMs'. `gpu_efficiency` scales a GPU's achieved
    share of its peak relative to H100 (power and clock limits: B200 at 1,000 W, GB200 at 1,200 W);
    `fp8_speedup` is the linear layers' speed-up per (generation, FP8 recipe) on large GEMMs;
    `fp8_overhead_width` charges quantization/casting, memory-bound work per element, as width/(width +
    overhead) of that speed-up; `elementwise_bytes` is the HBM traffic per activation element of the
    memory-bound ops (norms, activations, MoE permutes) over a training step when they run fused,
    `eager_elementwise_bytes` when each op is its own kernel (every intermediate of a norm, rotary or SwiGLU
    chain round-trips HBM); `alltoall_efficiency` is the share of the link bandwidth Megatron's plain `alltoall`
    dispatcher (NCCL all-to-all, one copy per routed expert) reaches. `host_moe_layer_seconds` is the host time an
    eager MoE layer exposes per micro batch (forward and backward), `graph_host_share` the share of it left under
    Transformer Engine's per-layer graphs of the router ("moe_router") and of attention too ("attn+moe_router")
    (cost/host.py).
    """

    kernel_efficiency: float
    attention_efficiency: dict[str, float]
    gemm_tokens: float
    gemm_width: float
    grouped_gemm_efficiency: float
    gpu_efficiency: dict[str, float]
    fp8_speedup: dict[str, float]
    fp8_overhead_width: float
    elementwise_bytes: float
    eager_elementwise_bytes: float
    alltoall_efficiency: float
    host_moe_layer_seconds: float
    graph_host_share: dict[str, float]


@dataclass(frozen=True)
class ErrorBand:
    """The cross-validated median |throughput error| of measured rows like an estimate: `group` names them
    (framework/family/GPU generation, '*' where a coarser group had to stand in), over `rows` rows."""

    median_abs_error: float
    rows: int
    group: str


@dataclass(frozen=True)
class MemoryBand:
    """How the peaks measured on rows like an estimate compared with their estimates: measured / estimated - 1
    from `low` to `high` and its median magnitude, over `rows` rows of `group` (framework/kind, kind "moe" or
    "dense"; '*' where a coarser group had to stand in). Memory is not fitted, so this is no cross-validation:
    the rows' plain error."""

    low: float
    high: float
    median_abs_error: float
    rows: int
    group: str


@dataclass(frozen=True)
class MemoryRisk:
    """What the measured memory error of rows like an estimate says of its peak: raised by the largest error
    (`high`, measured over estimated) it is `raised_gib` of the GPU's `hbm_gib`; `headroom` is the intent's
    memory_headroom under which every planned peak, so raised, stays within the GPU's memory."""

    high: float
    raised_gib: float
    hbm_gib: float

    @property
    def over(self) -> bool:
        return self.raised_gib > self.hbm_gib

    @property
    def headroom(self) -> float:
        return math.ceil(100 * self.high / (1 + self.high)) / 100

    def warning(self) -> str:
        """One line for a compiled file's header and the compile command's stderr."""
        return (f"measured peaks of runs like this one were up to {self.high:+.0%} over their estimates: this "
                f"peak would then be {self.raised_gib:.1f} of {self.hbm_gib:.1f} GiB; memory_headroom: "
                f"{self.headroom:.2f} in the intent plans for it")


def memory_risk(band: MemoryBand, thin: MemoryBand | None, peak_gib: float, hbm_gib: float) -> MemoryRisk:
    """A peak raised by the largest measured error of its memory band and of the thinner group more like it
    (`Parameters.memory_band`)."""
    high = max(band.high, thin.high if thin else band.high)
    return MemoryRisk(high, peak_gib * (1 + high), hbm_gib)


# A stack whose memory estimates come from another's measured rows: AutoModel's peaks follow the same FSDP2 and
# activation accounting as torchtitan's (cost/memory.py's constants were fitted to torchtitan's rows), and no
# AutoModel source publishes its peaks.
MEMORY_PEERS = {"automodel": "torchtitan"}


def memory_groups(stack: str, moe: bool) -> tuple[str, str]:
    """The groups a row with a measured peak counts in: its stack and kind of model, and its stack."""
    return f"{stack}/{'moe' if moe else 'dense'}", f"{stack}/*"


def memory_band_groups(framework: str, moe: bool) -> tuple[str, ...]:
    """The groups of rows with measured peaks an estimate's memory band may come from, most like it first: its
    stack's (`memory_groups`), then those of the stack whose accounting it shares."""
    peer = MEMORY_PEERS.get(framework)
    return memory_groups(framework, moe) + (memory_groups(peer, moe) if peer else ())


# Model families as the measurement set names them (a preset's family, e.g. qwen3_moe, maps by prefix).
_FAMILIES = ("llama", "qwen2", "qwen3", "deepseek", "kimi", "gpt_oss", "mixtral")
MIN_BAND_ROWS = 5


def band_groups(framework: str, family: str, generation: str) -> tuple[str, ...]:
    """The groups of measured rows an estimate's error band may come from, most like it first: its stack,
    family and GPU generation; its stack on that generation; every stack on that generation (a stack measured
    only on another generation says little of how the shared physics carries over to this one); its stack;
    every row."""
    return (f"{framework}/{family}/{generation}", f"{framework}/*/{generation}", f"*/*/{generation}",
            f"{framework}/*/*", "*/*/*")


@dataclass(frozen=True)
class Parameters:
    physics: Physics
    profiles: dict[str, FrameworkProfile]
    cv_bands: dict[str, ErrorBand]
    memory_bands: dict[str, MemoryBand]

    def error_band(self, framework: str, family: str, generation: str) -> ErrorBand | None:
        """The band of the most specific group with at least MIN_BAND_ROWS rows (None before any fit)."""
        fam = next((f for f in _FAMILIES if family.lower().replace("-", "_").startswith(f)), family)
        fam = {"qwen2": "qwen2.5", "gpt_oss": "gpt-oss"}.get(fam, fam)
        for key in band_groups(framework, fam, generation):
            band = self.cv_bands.get(key)
            if band and band.rows >= MIN_BAND_ROWS:
                return band
        return None

    def memory_band(self, framework: str, moe: bool) -> tuple[MemoryBand | None, MemoryBand | None]:
        """The memory band of the most specific group with at least MIN_BAND_ROWS rows (None: no such group), and
        the most specific group before it that has rows, too few to stand alone (None: there is none)."""
        thin = None
        for key in memory_band_groups(framework, moe):
            band = self.memory_bands.get(key)
            if band and band.rows >= MIN_BAND_ROWS:
                return band, thin
            thin = thin or band
        return None, thin

    def memory_warning(self, framework: str, moe: bool, peak_gib: float, hbm_gib: float) -> str | None:
        """`MemoryRisk.warning` of a peak under the memory band of rows like it (`memory_band`), where the
        band's high end takes it past the GPU's memory; None where it does not."""
        band, thin = self.memory_band(framework, moe)
        if band is None:
            return None
        risk = memory_risk(band, thin, peak_gib, hbm_gib)
        return risk.warning() if risk.over else None

    def profile(self, framework: str) -> FrameworkProfile:
        try:
            return self.profiles[framework]
        except KeyError:
            raise ValueError(f"framework must be one of {tuple(STACKS)}, got {framework!r}") from None


class StackFacts(NamedTuple):
    """What a stack runs, read from its code (not fitted). `fused_elementwise`: its memory-bound ops run as fused
    kernels by default (Megatron's TE fusions; torchtitan under torch.compile, which its benchmarks use) rather
    than one eager kernel per op (AutoModel); a run may say otherwise (`RecipeOptions.compiled`, read by
    `memory.runs_fused`)."""

    fused_elementwise: bool
    torch_pipeline: bool


# AutoModel: eager torch norms, rotary and activations (`rms_norm: torch_fp32`, `rope_fusion` forced off,
# automodel.md §6), torch.distributed.pipelining. Megatron: TE's fused norm/SwiGLU/RoPE kernels, its own
# schedules. torchtitan: torch.compile in its published benchmarks (each row says when it ran eager),
# torch.distributed.pipelining.
STACKS = {
    "automodel": StackFacts(fused_elementwise=False, torch_pipeline=True),
    "megatron": StackFacts(fused_elementwise=True, torch_pipeline=False),
    "torchtitan": StackFacts(fused_elementwise=True, torch_pipeline=True),
}


def _from_json(data: dict) -> Parameters:
    values = {name: entry["value"] for name, entry in data["parameters"].items()}

    def keyed(prefix: str) -> dict[str, float]:
        return {k.split(":", 1)[1]: v for k, v in values.items() if k.startswith(f"{prefix}:")}

    physics = Physics(
        kernel_efficiency=values["kernel_efficiency"], attention_efficiency=keyed("attention_efficiency"),
        gemm_tokens=values["gemm_tokens"], gemm_width=values["gemm_width"],
        grouped_gemm_efficiency=values["grouped_gemm_efficiency"],
        gpu_efficiency=keyed("gpu_efficiency"), fp8_speedup=keyed("fp8_speedup"),
        fp8_overhead_width=values["fp8_overhead_width"], elementwise_bytes=values["elementwise_bytes"],
        eager_elementwise_bytes=values["eager_elementwise_bytes"], alltoall_efficiency=values["alltoall_efficiency"],
        host_moe_layer_seconds=values["host_moe_layer_seconds"], graph_host_share=keyed("graph_host_share"),
    )
    profiles = {}
    for name, facts in STACKS.items():
        kw = {f.name: values[f"{name}.{f.name}"] for f in fields(FrameworkProfile)
              if f.name not in ("name", "torch_pipeline")}
        profiles[name] = FrameworkProfile(name=name, torch_pipeline=facts.torch_pipeline, **kw)
    bands = {key: ErrorBand(entry["median_abs_error"], entry["rows"], key)
             for key, entry in data.get("cv_bands", {}).items()}
    memory = {key: MemoryBand(entry["low"], entry["high"], entry["median_abs_error"], entry["rows"], key)
              for key, entry in data.get("memory_bands", {}).items()}
    return Parameters(physics=physics, profiles=profiles, cv_bands=bands, memory_bands=memory)


@lru_cache(maxsize=1)
def parameters() -> Parameters:
    """The fitted parameters the runtime uses (read once)."""
    return _from_json(json.loads(PARAMETERS_FILE.read_text()))


def parameters_from_values(values: dict[str, float]) -> Parameters:
    """Parameters with `values` (flat names as in the JSON file) replacing the fitted ones: the fit's trials."""
    data = json.loads(PARAMETERS_FILE.read_text())
    for name, value in values.items():
        data["parameters"][name]["value"] = value
    return _from_json(data)

"""The cost model's free parameters: shared physics, and one profile per training stack.

Physics (how fast a GEMM of a given shape runs on a GPU generation, how much faster FP8 makes it) is
shared by every stack; a `FrameworkProfile` holds what differs between AutoModel, Megatron-Bridge and
torchtitan (their kernels' overall efficiency, how much of the MoE dispatch they hide, how much of a
whether they run torch's pipeline runtime, how much of TP's traffic async TP hides).

The values are data: `fitted_parameters.json`, written by `benchmarks/calibration.py --fit` (a least-squares
fit on log throughput error over the measurement set in benchmarks/measurements/ and
benchmarks/calibration_data.py). Each parameter records whether it was fitted and over how many rows;
one resting on fewer than five rows stays at its prior (a physical estimate named in the file).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from functools import lru_cache
from pathlib import Path

FRAMEWORKS = ("automodel", "megatron", "torchtitan")
DEFAULT_FRAMEWORK = "automodel"
PARAMETERS_FILE = Path(__file__).with_name("fitted_parameters.json")


@dataclass(frozen=True)
class FrameworkProfile:
    """What one training stack does differently on the same hardware (see the module docstring).

    `kernel_efficiency`: achieved share of the bf16 peak on large dense GEMMs. `attention_efficiency`: the
    fused attention kernel's share of that (its backward especially runs below the GEMMs'), by kernel family:
    Transformer Engine's (cuDNN/flash) in the Megatron profile (`megatron.attention_efficiency`), PyTorch's
    (SDPA, FlexAttention) in the AutoModel and torchtitan ones (the shared `attention_efficiency`). Which
    family a run uses is `throughput.attention_kernel` (AutoModel's own model classes run TE's).
    `ep_overlap`: share of the compute time the MoE dispatch/combine can run under (Megatron's EP overlap
    runs one micro batch's exchange during another's compute; dispatch beyond it stays exposed; AutoModel
    runs them on the critical path). `tp_exposed`: share of TP collectives left exposed with async TP / TP
    comm overlap.
    `peft_efficiency`: speed of LoRA steps relative to the counted FLOPs (thin adapter GEMMs).
    `grad_sync_every_micro_batch`: the stack reduces gradients every micro batch (Megatron's DDP/dist-opt).
    `torch_pipeline`: the stack runs torch.distributed.pipelining (blocking send/receive; its schedule is
    replayed, cost/pipeline.py).
    """

    name: str
    kernel_efficiency: float
    attention_efficiency: float
    ep_overlap: float
    tp_exposed: float
    peft_efficiency: float
    torch_pipeline: bool


@dataclass(frozen=True)
class Physics:
    """Shared hardware laws (see the module docstring).

    GEMM efficiency of an (m x k) @ (k x n) GEMM is m/(m + gemm_tokens) · n/(n + gemm_width) of the stack's
    `kernel_efficiency` (m tokens, n the output width per rank); routed experts run as grouped GEMMs whose
    extra scheduling costs `grouped_gemm_efficiency`. `gpu_efficiency` scales a GPU's achieved share of its
    peak relative to H100 (power and clock limits: B200 at 1,000 W, GB200 at 1,200 W); `fp8_speedup` is the
    linear layers' speed-up per (generation, FP8 recipe) on large GEMMs; `fp8_overhead_width` charges
    quantization/casting, memory-bound work per element, as width/(width + overhead) of that speed-up;
    `elementwise_bytes` is the HBM traffic per activation element of the memory-bound ops (norms,
    activations, MoE permutes) over a training step; `alltoall_efficiency` is
    the share of the link bandwidth Megatron's plain `alltoall` dispatcher (NCCL all-to-all, one copy per
    routed expert) reaches.
    """

    gemm_tokens: float
    gemm_width: float
    grouped_gemm_efficiency: float
    gpu_efficiency: dict[str, float]
    fp8_speedup: dict[str, float]
    fp8_overhead_width: float
    elementwise_bytes: float
    alltoall_efficiency: float


@dataclass(frozen=True)
class ErrorBand:
    """The cross-validated median |throughput error| of measured rows like an estimate: `group` names them
    (framework/family/GPU generation, '*' where a coarser group had to stand in), over `rows` rows."""

    median_abs_error: float
    rows: int
    group: str


# Model families as the measurement set names them (a preset's family, e.g. qwen3_moe, maps by prefix).
_FAMILIES = ("llama", "qwen2", "qwen3", "deepseek", "kimi", "gpt_oss", "mixtral")
MIN_BAND_ROWS = 5


@dataclass(frozen=True)
class Parameters:
    physics: Physics
    profiles: dict[str, FrameworkProfile]
    cv_bands: dict[str, ErrorBand]

    def error_band(self, framework: str, family: str, generation: str) -> ErrorBand | None:
        """The band of the most specific group with at least MIN_BAND_ROWS rows (None before any fit)."""
        fam = next((f for f in _FAMILIES if family.lower().replace("-", "_").startswith(f)), family)
        fam = {"qwen2": "qwen2.5", "gpt_oss": "gpt-oss"}.get(fam, fam)
        for key in (f"{framework}/{fam}/{generation}", f"{framework}/*/{generation}", f"{framework}/*/*", "*/*/*"):
            band = self.cv_bands.get(key)
            if band and band.rows >= MIN_BAND_ROWS:
                return band
        return None

    def profile(self, framework: str) -> FrameworkProfile:
        try:
            return self.profiles[framework]
        except KeyError:
            raise ValueError(f"framework must be one of {FRAMEWORKS}, got {framework!r}") from None


def _from_json(data: dict) -> Parameters:
    values = {name: entry["value"] for name, entry in data["parameters"].items()}
    physics = Physics(
        gemm_tokens=values["gemm_tokens"], gemm_width=values["gemm_width"],
        grouped_gemm_efficiency=values["grouped_gemm_efficiency"],
        gpu_efficiency={k.split(":", 1)[1]: v for k, v in values.items() if k.startswith("gpu_efficiency:")},
        fp8_speedup={k.split(":", 1)[1]: v for k, v in values.items() if k.startswith("fp8_speedup:")},
        fp8_overhead_width=values["fp8_overhead_width"], elementwise_bytes=values["elementwise_bytes"],
        alltoall_efficiency=values["alltoall_efficiency"],
    )
    profiles = {}
    for name in FRAMEWORKS:
        kw = {f.name: values.get(f"{name}.{f.name}") for f in fields(FrameworkProfile)
              if f.name not in ("name", "torch_pipeline")}
        # the torch stacks (AutoModel, torchtitan) share PyTorch's attention kernels; Megatron runs TE's cuDNN ones
        kw["attention_efficiency"] = kw["attention_efficiency"] or values["attention_efficiency"]
        profiles[name] = FrameworkProfile(name=name, torch_pipeline=name != "megatron", **kw)
    bands = {key: ErrorBand(entry["median_abs_error"], entry["rows"], key)
             for key, entry in data.get("cv_bands", {}).items()}
    return Parameters(physics=physics, profiles=profiles, cv_bands=bands)


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

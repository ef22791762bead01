"""The cost model's shared physics: one GEMM efficiency for every stack, attention by kernel family, fused vs
eager memory-bound ops, each dense GEMM at its own TP-split width, and Gaussian priors in the fit. Each term has
a case that triggers it and a neighbour that does not."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from automodel_dist.catalog.hardware import get_gpu
from automodel_dist.catalog.models import resolve_model
from automodel_dist.cost import throughput
from automodel_dist.cost.memory import RecipeOptions
from automodel_dist.cost.profiles import PARAMETERS_FILE, STACKS, parameters
from automodel_dist.cost.shape import model_shape
from automodel_dist.layout import Layout
from automodel_dist.problem import TrainingSpec

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import calibration
from calibration_data import ROWS, TITAN_GPU

TRAINING = TrainingSpec(task="pretrain", seq_length=8192, global_batch_size=64, precision="bf16")


def shape(model: str = "meta-llama/Llama-3.1-70B"):
    return model_shape(resolve_model(model), TRAINING)


def layout(**fields) -> Layout:
    return Layout(world_size=64, global_batch_size=64, local_batch_size=1, micro_batch_size=1, **fields)


def compute(model: str = "meta-llama/Llama-3.1-70B", gpu: str = "h100", lay: Layout | None = None,
            **options) -> float:
    return throughput.compute_seconds(shape(model), lay or layout(), TRAINING, get_gpu(gpu),
                                      options=RecipeOptions(**options))[0]


def test_every_stack_runs_its_gemms_at_the_one_fitted_efficiency():
    """cuBLAS serves TE's Linear and torch's nn.Linear alike: the GEMM efficiency is physics, not a profile's."""
    physics = parameters().physics
    assert 0.6 <= physics.kernel_efficiency <= 0.85  # large bf16 GEMMs: 0.7-0.8 of the peak on H100 and B200
    assert not any(hasattr(p, "kernel_efficiency") for p in parameters().profiles.values())
    # with the same attention kernel and fused memory-bound ops, Megatron and AutoModel compute alike
    same = {"attention": "te", "compiled": True}
    assert compute(framework="megatron", **same) == pytest.approx(compute(framework="automodel", **same), rel=1e-12)


def test_attention_runs_at_its_kernel_familys_efficiency():
    physics = parameters().physics
    te, torch = physics.attention_efficiency["te"], physics.attention_efficiency["torch"]
    assert torch < te  # FlashAttention-2 (PyTorch SDPA) below cuDNN / FlashAttention-3-class kernels on Hopper
    s = shape()
    # AutoModel's own Llama class runs TE's attention, as Megatron does; torchtitan runs PyTorch's
    assert throughput.attention_efficiency(parameters(), s, RecipeOptions(framework="automodel")) == te
    assert throughput.attention_efficiency(parameters(), s, RecipeOptions(framework="megatron")) == te
    assert throughput.attention_efficiency(parameters(), s, RecipeOptions(framework="torchtitan")) == torch
    # a recipe naming SDPA or FlexAttention gets PyTorch's
    assert throughput.attention_efficiency(parameters(), s, RecipeOptions(attention="flex")) == torch
    slower = compute(framework="automodel", attention="sdpa", compiled=True)
    assert slower > compute(framework="automodel", attention="te", compiled=True)


def test_eager_memory_bound_ops_stream_more_bytes_than_fused_ones():
    """One kernel per op round-trips every intermediate; torch.compile and TE's fusions do not."""
    physics = parameters().physics
    assert physics.eager_elementwise_bytes > physics.elementwise_bytes
    eager, fused = compute(compiled=False), compute(compiled=True)
    assert eager > fused
    # each stack's default: AutoModel eager, Megatron and torchtitan (its benchmarks run torch.compile) fused
    assert compute(framework="automodel") == eager
    assert not STACKS["automodel"].fused_elementwise
    assert STACKS["megatron"].fused_elementwise and STACKS["torchtitan"].fused_elementwise
    assert compute(framework="torchtitan", compiled=False, attention="te") == pytest.approx(
        compute(framework="automodel", attention="te"), rel=1e-12)
    # the difference is exactly the streamed bytes' difference
    s, lay = shape(), layout()
    extra = (throughput.elementwise_bytes(s, lay, physics, fused=False)
             - throughput.elementwise_bytes(s, lay, physics, fused=True))
    tokens = TRAINING.global_batch_size * TRAINING.seq_length / lay.world_size
    assert eager - fused == pytest.approx(tokens * extra / throughput.hbm_bytes_per_s(get_gpu("h100")), rel=1e-9)


def test_dense_gemms_cover_the_linear_flops_outside_the_routed_experts():
    for model in ("meta-llama/Llama-3.1-70B", "Qwen/Qwen3-30B-A3B", "deepseek-ai/DeepSeek-V3"):
        s = shape(model)
        total = s.dense_layers * s.dense_layer_flops + s.moe_layers * s.moe_layer_flops + s.lm_head_flops
        assert sum(flops for flops, _ in s.dense_gemms) == pytest.approx(total, rel=1e-12)


def test_each_dense_gemm_runs_at_the_efficiency_of_its_own_split_width():
    """TP8 leaves Llama-3.1-70B's attention projections 1,024 columns but its MLP 3,584: the MLP keeps more of
    the large-GEMM efficiency than charging every GEMM at hidden/tp would say."""
    s, physics, gpu = shape(), parameters().physics, get_gpu("h100")
    peak, tokens = 1e15, 8192.0

    def at_hidden_width(tp: int) -> float:
        flops = sum(f for f, _ in s.dense_gemms)
        return flops / (peak * throughput.gemm_efficiency(physics, tokens, s.hidden / tp))

    tp8 = throughput.dense_gemm_seconds(s, physics, gpu, peak, tokens, 8, None)
    assert tp8 < at_hidden_width(8) * 0.95
    # each GEMM is split by TP: eight ranks do an eighth of the work each, at a lower efficiency
    tp1 = throughput.dense_gemm_seconds(s, physics, gpu, peak, tokens, 1, None)
    assert tp1 < tp8 and tp1 <= at_hidden_width(1)
    # FP8 speeds each GEMM up less the narrower it is (the casts)
    fp8 = throughput.dense_gemm_seconds(s, physics, gpu, peak, tokens, 8, "tensorwise")
    assert tp8 / physics.fp8_speedup["hopper/tensorwise"] < fp8 < tp8


def test_torchtitans_gpus_run_under_their_stated_conditions():
    """The Grand Teton H100s: 96 GB HBM2e at 2.4 TB/s and 500 W, with their own fitted efficiency; a DGX H100
    row keeps the preset."""
    titan = next(r for r in ROWS if r.name == "TT Llama-3.1-8B FSDP8")
    gpu = calibration.row_gpu(titan)
    assert (gpu.name, gpu.hbm_tbps, gpu.hbm_gib) == (TITAN_GPU["name"], 2.4, 95.0)
    assert gpu.tflops_bf16 == get_gpu("h100").tflops_bf16
    assert 0.84 <= parameters().physics.gpu_efficiency[gpu.name] < 1.0  # between the NVL and SXM peaks
    dgx = next(r for r in ROWS if r.framework == "megatron" and r.gpu == "h100")
    assert calibration.row_gpu(dgx) == get_gpu("h100")
    # the slower HBM and the power limit make the same run slower
    slow = throughput.compute_seconds(shape(), layout(), TRAINING, gpu)[0]
    assert slow > throughput.compute_seconds(shape(), layout(), TRAINING, replace(gpu, name="h100-80gb",
                                                                                hbm_tbps=3.35))[0]


def test_the_fit_pulls_towards_physical_priors_quadratically():
    """A parameter one prior standard deviation off costs what one row ROBUST_SCALE off costs, and the cost
    grows with the square of the distance however far, despite the rows' robust loss."""
    import numpy as np
    f = calibration.ROBUST_SCALE
    x = np.array([0.0, 1.0, 3.0, 10.0])
    r = calibration.prior_residuals(x, np.zeros(4), np.ones(4))
    robust_cost = 2 * f * f * (np.sqrt(1 + (r / f) ** 2) - 1)  # scipy's soft_l1 cost of a residual
    assert robust_cost == pytest.approx((f * x) ** 2, rel=1e-9)
    spec = json.loads(PARAMETERS_FILE.read_text())["parameters"]
    assert all(entry["prior_sd"] > 0 for entry in spec.values() if entry["fittable"])


def test_a_stack_measured_only_on_another_generation_takes_that_generations_band():
    """AutoModel's measured rows are all Hopper: its Blackwell estimates quote every stack's cross-validated
    error on Blackwell, its Hopper ones its own."""
    params = parameters()
    assert params.error_band("automodel", "qwen3_next", "blackwell").group == "*/*/blackwell"
    assert params.error_band("automodel", "llama", "hopper").group.startswith("automodel/")
    assert params.error_band("megatron", "llama", "blackwell").group == "megatron/llama/blackwell"


def test_memory_bands_come_from_rows_of_the_same_stack_and_kind_else_the_stack_whose_accounting_it_shares():
    """Megatron MoE estimates quote Megatron's measured MoE peaks (which run high: Moonlight's six and the two BF16
    Qwen3-30B ones); its dense ones its dense runs; AutoModel, with no published peaks, torchtitan's (the FSDP2
    accounting its constants were fitted to)."""
    params = parameters()
    band, thin = params.memory_band("megatron", moe=True)
    assert band.group == "megatron/moe" and band.rows >= 5 and band.low > 0 and thin is None
    band, thin = params.memory_band("megatron", moe=False)
    assert band.group == "megatron/dense" and thin is None
    band, thin = params.memory_band("automodel", moe=True)
    assert band.group == "torchtitan/*" and band.rows >= 18 and thin is None
    assert band.low < 0 < band.high


def test_a_memory_group_with_too_few_rows_is_named_beside_the_coarser_band():
    """A group under MIN_BAND_ROWS does not stand alone: the band is its stack's, and the thin group comes back
    beside it for explain to name."""
    params = parameters()
    moe = replace(params.memory_bands["megatron/moe"], rows=2)
    thinned = replace(params, memory_bands={**params.memory_bands, "megatron/moe": moe})
    band, thin = thinned.memory_band("megatron", moe=True)
    assert band.group == "megatron/*" and thin == moe

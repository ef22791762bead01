"""GPU catalog: the required presets exist with vendor figures in the stored units (GiB as the
driver reports it, dense TFLOP/s, one-direction GB/s), each names its source, and lookups fail
clearly."""

from __future__ import annotations

from pathlib import Path

import pytest

from automodel_dist.catalog.hardware import HARDWARE_DIR, get_gpu, gpu_presets, list_gpus
from automodel_dist.catalog.specs import ClusterSpec
from automodel_dist.errors import InputError

REQUIRED = ["a100-40gb", "a100-80gb", "h100-80gb", "h200-141gb", "b200", "gb200-nvl72", "gb300-nvl72"]

# Vendor figures (reference/calibration.md and the data sheets named in each preset):
# dense BF16 TFLOP/s, NVLink GB/s per GPU as vendors quote it (bidirectional), NIC line rate Gb/s per GPU.
VENDOR = {
    "a100-40gb": (312, 600, 200, "8.0"),
    "a100-80gb": (312, 600, 200, "8.0"),
    "h100-80gb": (989, 900, 400, "9.0"),
    "h200-141gb": (989, 900, 400, "9.0"),
    "b200": (2250, 1800, 400, "10.0"),
    "gb200-nvl72": (2500, 1800, 400, "10.0"),
    "gb300-nvl72": (2500, 1800, 800, "10.3"),
}
# nvidia-smi memory totals (MiB) of each GPU, as published in driver output.
DRIVER_MIB = {"a100-40gb": 40960, "a100-80gb": 81920, "h100-80gb": 81559, "h200-141gb": 143771,
              "b200": 183359, "gb200-nvl72": 189471, "gb300-nvl72": 284208}


def test_required_presets_exist_and_only_those_files() -> None:
    assert sorted(g.name for g in list_gpus()) == sorted(REQUIRED)
    assert sorted(p.stem for p in HARDWARE_DIR.glob("*.yaml")) == sorted(REQUIRED)


@pytest.mark.parametrize("name", REQUIRED)
def test_vendor_figures_in_stored_units(name: str) -> None:
    gpu = get_gpu(name)
    bf16, nvlink_bidirectional, nic_gbit, cc = VENDOR[name]
    assert gpu.tflops_bf16 == bf16
    assert gpu.tflops("bf16") == bf16
    assert gpu.nvlink_gbps == nvlink_bidirectional / 2  # stored one direction
    assert gpu.internode_gbps == nic_gbit / 8  # Gb/s line rate -> GB/s
    assert gpu.compute_capability == cc
    if gpu.supports_fp8:
        assert gpu.tflops_fp8 == pytest.approx(2 * bf16, rel=0.001)
        assert gpu.tflops("fp8") == gpu.tflops_fp8


@pytest.mark.parametrize("name", REQUIRED)
def test_hbm_is_the_driver_figure_in_gib_not_the_decimal_label(name: str) -> None:
    gpu = get_gpu(name)
    assert gpu.hbm_gib == pytest.approx(DRIVER_MIB[name] / 1024, abs=0.01)
    decimal_gib = gpu.hbm_vendor_gb * 1e9 / 2**30
    assert gpu.hbm_gib > decimal_gib  # the "80GB" label is not 80e9 bytes
    assert gpu.hbm_gib == pytest.approx(gpu.hbm_vendor_gb, rel=0.03)


def test_node_shapes() -> None:
    for name in REQUIRED:
        gpu = get_gpu(name)
        nvl72 = name.endswith("nvl72")
        assert gpu.gpus_per_node == (4 if nvl72 else 8)  # GB200/GB300: 4 GPUs per compute tray
        assert gpu.nvlink_domain == (72 if nvl72 else 8)
    rack = ClusterSpec(get_gpu("gb200-nvl72"), nodes=18, gpus_per_node=4)
    assert rack.nvlink_domain == 72
    assert ClusterSpec(get_gpu("h100-80gb"), nodes=4, gpus_per_node=8).nvlink_domain == 8
    # 4 GPUs of each 8-GPU HGX node: the other 4 ranks of a group of 8 are on another node, over the network;
    # 4 GPUs of each GB200 tray: the rack's NVLink still joins 72 of them.
    assert ClusterSpec(get_gpu("h100-80gb"), nodes=4, gpus_per_node=4).nvlink_domain == 4
    assert ClusterSpec(get_gpu("gb200-nvl72"), nodes=4, gpus_per_node=4).nvlink_domain == 16
    assert not get_gpu("h100-80gb").rack_scale and get_gpu("gb200-nvl72").rack_scale


def test_a_partial_hgx_node_plans_tp_and_ep_inside_it(tmp_path: Path) -> None:
    """4 GPUs per H100 node: TP stays inside the 4, and an EP group of 8 is told it crosses the NVLink domain
    (the dispatcher is DeepEP's internode path, not the rack-scale HybridEP)."""
    from automodel_dist.compiler import compile_intent

    intent = tmp_path / "i.yaml"
    intent.write_text("model: Qwen/Qwen3-30B-A3B\nhardware: {gpu: h100-80gb, nodes: 4, gpus_per_node: 4}\n"
                      "training: {task: sft, seq_length: 4096, global_batch_size: 256}\nparallelism: {ep: 8}\n")
    text = compile_intent(intent).yaml
    assert "dispatcher: deepep" in text and "crosses the 4-GPU NVLink domain" in text
    assert "NVL8 rack" not in text


def test_fp8_on_a100_is_an_input_error() -> None:
    gpu = get_gpu("a100-80gb")
    assert not gpu.supports_fp8
    with pytest.raises(InputError, match="no FP8 tensor cores") as info:
        gpu.tflops("fp8")
    assert "bf16" in info.value.hint


def test_every_preset_names_its_source() -> None:
    for preset in gpu_presets():
        text = preset.path.read_text(encoding="utf-8")
        assert preset.spec.source, preset.path.name
        assert "https://" in text.split("\nname:")[0], preset.path.name  # a URL in the header comment
        assert "nvidia-smi" in text  # where the HBM figure comes from


def test_aliases_and_case() -> None:
    assert get_gpu("H100").name == "h100-80gb"
    assert get_gpu(" GB200 ").name == "gb200-nvl72"
    assert get_gpu("H200-141GB").name == "h200-141gb"


def test_unknown_gpu_suggests_the_closest() -> None:
    with pytest.raises(InputError, match=r"unknown GPU 'h100-80g' \(did you mean 'h100-80gb'") as info:
        get_gpu("h100-80g")
    assert info.value.where == "hardware.gpu"
    assert "gb300-nvl72" in info.value.hint
    with pytest.raises(InputError, match="did you mean"):
        get_gpu("a100")
    with pytest.raises(InputError, match="unknown GPU 'tpu-v5'"):
        get_gpu("tpu-v5", where="--gpu")


def test_non_string_gpu_is_an_input_error() -> None:
    with pytest.raises(InputError, match="preset id string"):
        get_gpu(8)  # type: ignore[arg-type]

"""The `skypilot:` section, checked against AutoModel's own SkyPilotConfig and launcher code."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from launch_support import BASE_RECIPE, make_problem, make_result
from nemo_automodel.components.launcher.skypilot.config import SUPPORTED_CLOUDS as AUTOMODEL_CLOUDS
from nemo_automodel.components.launcher.skypilot.config import SkyPilotConfig
from nemo_automodel.components.launcher.skypilot.launcher import SkyPilotLauncher, _parse_gpus_per_node

from automodel_dist.catalog.hardware import get_gpu, list_gpus
from automodel_dist.catalog.params import param_counts
from automodel_dist.errors import InputError
from automodel_dist.launch import write_launch_files
from automodel_dist.launch.skypilot import SUPPORTED_CLOUDS, accelerator_name
from automodel_dist.yamlio import load_document

CLOUD = {"cloud": "aws", "region": "us-east-1", "cache_dir": "/mnt/shared/cache", "env": {"NCCL_DEBUG": "WARN"}}
FIELDS = {f.name for f in dataclasses.fields(SkyPilotConfig)}


def _section(tmp_path: Path, model: str, gpu: str, nodes: int, launcher: dict, **layout: object) -> tuple:
    result = make_result(make_problem(model, gpu, nodes), launcher=launcher, **layout)
    path = tmp_path / "recipe.yaml"
    assert write_launch_files(result, path, "skypilot") == []
    return result, path, load_document(path).plain()


@pytest.mark.parametrize(("model", "gpu", "nodes", "layout"), [
    ("llama-3.1-8b", "h100-80gb", 1, {}),
    ("qwen3-30b-a3b", "h100-80gb", 2, {"ep": 8, "dispatcher": "hybridep"}),
    ("llama-3.1-70b", "a100-80gb", 4, {"tp": 8}),
    ("deepseek-v3", "b200", 8, {"ep": 64, "pp": 1}),
])
def test_section_builds_automodels_config_with_the_plans_sizes(tmp_path: Path, model: str, gpu: str, nodes: int,
                                                                layout: dict) -> None:
    result, _, recipe = _section(tmp_path, model, gpu, nodes, CLOUD, **layout)
    section = recipe["skypilot"]
    assert set(section) <= FIELDS, "AutoModel silently drops unknown keys"
    config = SkyPilotConfig(**section)  # its __post_init__ checks cloud and num_nodes
    cluster = result.problem.cluster
    assert config.num_nodes == cluster.nodes
    assert _parse_gpus_per_node(config.accelerators) == cluster.gpus_per_node
    command = SkyPilotLauncher()._build_command("nemo_automodel.recipes.llm.train_ft.Recipe", "/cfg.yaml",
                                                _parse_gpus_per_node(config.accelerators), config.num_nodes)
    assert f"--nproc_per_node={cluster.gpus_per_node}" in command
    assert ("--nnodes=$SKYPILOT_NUM_NODES" in command) == (cluster.nodes > 1)
    assert config.use_spot is False and config.region == "us-east-1"
    assert config.hf_home == "/mnt/shared/cache/huggingface"
    assert config.env_vars["NCCL_DEBUG"] == "WARN"
    assert config.env_vars["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    # AutoModel env-resolves the whole section locally: a `$` would need a variable on the laptop
    assert not any("$" in str(v) for v in (*section.values(), *config.env_vars.values()))


def test_hybridep_gets_the_domain_size_and_timeouts_follow_the_scale(tmp_path: Path) -> None:
    _, path, recipe = _section(tmp_path, "qwen3-30b-a3b", "h100-80gb", 2, CLOUD, ep=8, dispatcher="hybridep")
    assert recipe["skypilot"]["env_vars"]["NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN"] == "8"
    assert recipe["dist_env"]["timeout_minutes"] == 30
    assert "preemption_signal" not in recipe["step_scheduler"], "spot preemption sends SIGTERM, the default"
    text = path.read_text()
    assert "# the base recipe's own comment" in text
    assert text.index("step_scheduler:") < text.index("skypilot:"), "the section is appended"
    assert "H100:8  # h100-80gb, 8 per node" in text


def test_launcher_env_that_replaces_a_planned_variable_warns(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    launcher = {**CLOUD, "env": {"NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN": "4", "NCCL_DEBUG": "WARN"}}
    _, _, recipe = _section(tmp_path, "qwen3-30b-a3b", "h100-80gb", 2, launcher, ep=8, dispatcher="hybridep")
    assert recipe["skypilot"]["env_vars"]["NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN"] == "4"  # the user's, as asked
    line = next(line for line in (tmp_path / "recipe.yaml").read_text().splitlines()
                if "NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN" in line)
    assert line.endswith("# the intent's launcher.env") and "NVLink" not in line  # not the plan's reason
    err = capsys.readouterr().err
    assert "NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN is set to '8' (by the plan) and then to '4'" in err
    assert "NCCL_DEBUG" not in err


def test_use_spot_is_written_as_asked(tmp_path: Path) -> None:
    _, _, recipe = _section(tmp_path, "llama-3.1-8b", "h100-80gb", 1, {"cloud": "gcp", "use_spot": True})
    assert recipe["skypilot"]["use_spot"] is True
    assert "hf_home" not in recipe["skypilot"], "no cache_dir: SkyPilot's own default"
    assert SkyPilotConfig(**recipe["skypilot"]).job_name == "automodel-llama-3.1-8b-sft"


def test_same_plan_same_bytes(tmp_path: Path) -> None:
    texts = [_section(tmp_path, "qwen3-30b-a3b", "h100-80gb", 2, CLOUD, ep=8)[1].read_bytes() for _ in range(2)]
    assert texts[0] == texts[1]


@pytest.mark.parametrize(("launcher", "message"), [({}, "needs a cloud"), ({"cloud": "oci"}, "does not support")])
def test_a_missing_or_unknown_cloud_is_an_input_error(tmp_path: Path, launcher: dict, message: str) -> None:
    with pytest.raises(InputError, match=message) as info:
        _section(tmp_path, "llama-3.1-8b", "h100-80gb", 1, launcher)
    assert info.value.where == "launcher.cloud"


def test_our_clouds_are_automodels() -> None:
    assert SUPPORTED_CLOUDS == AUTOMODEL_CLOUDS


def test_every_gpu_preset_has_a_skypilot_name() -> None:
    expected = {"a100-40gb": "A100", "a100-80gb": "A100-80GB", "b200": "B200", "gb200-nvl72": "GB200",
                "gb300-nvl72": "GB300", "h100-80gb": "H100", "h200-141gb": "H200"}
    names = {gpu.name: accelerator_name(gpu) for gpu in list_gpus()}
    assert {k: v for k, v in names.items() if k in expected} == expected
    assert accelerator_name(get_gpu("a100-80gb")) == "A100-80GB"


@pytest.mark.parametrize(("model", "task", "disk"), [
    ("llama-3.1-8b", "sft", None),        # 16 GB of weights fit AutoModel's 100 GB default
    ("qwen3-30b-a3b", "sft", 200),        # 61 GB: download + consolidated save + 50 = 172
    ("qwen3-30b-a3b", "peft", 150),       # the adapter save is small: 61 + 50 = 111
    ("deepseek-v3", "sft", 2750),         # 1342 GB: 2 x 1342 + 50 = 2734
])
def test_disk_size_holds_the_weights(tmp_path: Path, model: str, task: str, disk: int | None) -> None:
    problem = make_problem(model, "h100-80gb", 4)
    problem = dataclasses.replace(problem, training=dataclasses.replace(problem.training, task=task))
    result = make_result(problem, launcher=CLOUD)
    write_launch_files(result, tmp_path / "recipe.yaml", "skypilot")
    config = SkyPilotConfig(**load_document(tmp_path / "recipe.yaml").plain()["skypilot"])
    assert config.disk_size == (disk or 100)
    weights_gb = param_counts(problem.model).total * 2 / 1e9
    assert config.disk_size >= (1 if task == "peft" else 2) * weights_gb


def test_a_base_recipes_skypilot_keys_are_kept(tmp_path: Path) -> None:
    base = BASE_RECIPE + "skypilot:\n  cloud: gcp\n  zone: us-central1-a  # mine\n  env_vars:\n    MY_FLAG: '1'\n"
    result = make_result(make_problem("llama-3.1-8b", "h100-80gb", 2), launcher=CLOUD, recipe=base)
    write_launch_files(result, tmp_path / "recipe.yaml", "skypilot")
    text = (tmp_path / "recipe.yaml").read_text()
    section = load_document(text).plain()["skypilot"]
    assert section["cloud"] == "aws" and section["zone"] == "us-central1-a" and "# mine" in text
    assert section["env_vars"]["MY_FLAG"] == "1" and section["env_vars"]["NCCL_DEBUG"] == "WARN"
    assert SkyPilotConfig(**section).num_nodes == 2

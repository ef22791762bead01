"""Shapes of real AutoModel recipes that once drew false rejections, and the corpus re-check script."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml
from recipe_fixtures import RECIPES

from automodel_dist.errors import InputError
from automodel_dist.validate import validate_recipe
from automodel_dist.verify.mesh import build_meshes
from automodel_dist.yamlio import load_document

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import recipe_corpus

UNSET_ENV = RECIPES / "valid" / "llama3_2_1b_unset_env_data_paths.yaml"


def test_unset_env_var_in_a_data_path_warns_and_the_meshes_build(monkeypatch) -> None:
    monkeypatch.delenv("DATA_ROOT", raising=False)
    monkeypatch.delenv("CKPT_ROOT", raising=False)
    report = validate_recipe(UNSET_ENV, world_size=8)
    assert report.ok and {f.path for f in report.warnings if f.rule == "am-r2-env-var"} == {
        "dataset.file_pattern", "checkpoint.checkpoint_dir"}
    meshes = build_meshes(UNSET_ENV, world_size=8)
    assert meshes.ok and any(f.rule == "am-r2-env-var" for f in meshes.warnings)


def test_unset_env_var_the_meshes_depend_on_is_still_bad_input(monkeypatch) -> None:
    """`tp_size: ${TP}` unset: the meshes cannot be built from an unknown size (exit 2, at its key)."""
    monkeypatch.delenv("TP", raising=False)
    with pytest.raises(InputError, match="Environment variable 'TP' is not set"):
        build_meshes("distributed:\n  strategy: fsdp2\n  tp_size: ${TP}\n", world_size=8)


def test_world_from_ci_benchmark_and_comments() -> None:
    world = recipe_corpus.world_from_recipe
    assert world("", {"ci": {"nodes": 16, "cluster_tag": "gb200"}}).size == 64
    assert world("", {"ci": {"nodes": 32, "nproc_per_node": 4}}).size == 128
    assert world("", {"ci": {"nodes": 2}}).size == 16
    assert world("", {"ci": {"nproc_per_node": 2}}).size == 2
    assert world("# Target: 32 nodes x 4 GB200 GPUs, EP128\n", {"ci": {"nodes": 32}}).size == 128
    assert world("", {"benchmark": {"num_nodes": 2, "num_gpus": 16}}).size == 16
    assert world("# 4 nodes x 8 GPUs\n", {}).size == 32
    assert world("# run on 2 GB200 nodes\n#   torchrun --nnodes=2 --nproc-per-node=4 x.py\n", {}).size == 8
    assert world("#   automodel r.yaml --nproc-per-node 8\n", {}).size == 8
    assert world("# 256 GPUs / 32 nodes: pp4 x cp16\n", {}).size == 256
    assert world("", {"skypilot": {"accelerators": "H100:1", "num_nodes": 2}}).size == 2
    assert world("", {"nemo_run": {"nodes": 2, "devices": 8}}).size == 16
    assert world("# nothing here\n", {}) is None


def test_ci_overrides_are_applied_as_ci_runs_the_recipe(tmp_path: Path) -> None:
    path = tmp_path / "r.yaml"
    path.write_text("step_scheduler: {global_batch_size: 512, local_batch_size: 32}\n"
                    "distributed: {strategy: fsdp2, ep_size: 8}\nci: {nodes: 8, local_batch_size: 8}\n")
    run = recipe_corpus.as_run(path)
    assert run["step_scheduler"]["local_batch_size"] == 8
    outcome = recipe_corpus.judge_recipe(path)
    assert outcome.world.size == 64 and outcome.clean


def test_a_recipe_without_a_world_is_fitted_to_its_distributed_section(tmp_path: Path) -> None:
    path = tmp_path / "r.yaml"
    path.write_text("step_scheduler: {global_batch_size: 512, local_batch_size: 8}\n"
                    "distributed: {strategy: fsdp2, pp_size: 8, dp_size: 16, pipeline: {pp_microbatch_size: 1}}\n")
    outcome = recipe_corpus.judge_recipe(path)
    assert outcome.world.source == "fitted" and outcome.world.size == 128 and outcome.clean


EP32_GB200 = ("recipe: TrainFinetuneRecipeForNextTokenPrediction\n"
              "step_scheduler: {global_batch_size: 256, local_batch_size: 8}\n"
              "model: {pretrained_model_name_or_path: Qwen/Qwen3-30B-A3B, backend: {dispatcher: hybridep}}\n"
              "distributed: {strategy: fsdp2, ep_size: 32}\n")


def test_ep_leaving_an_assumed_domain_is_a_note_without_a_gpu() -> None:
    """EP 32 on 4-GPU GB200 nodes stays inside the NVL72 rack: without --gpu the domain is unknown (a note)."""
    def leaves(report):
        return [f.severity for f in report.findings if f.rule == "topo-ep-leaves-nvlink"]

    assert leaves(validate_recipe(EP32_GB200, world_size=32, gpus_per_node=4)) == ["note"]
    assert leaves(validate_recipe(EP32_GB200, world_size=32, gpus_per_node=4, gpu="gb200-nvl72")) == []
    assert leaves(validate_recipe(EP32_GB200, world_size=32, gpus_per_node=8, gpu="h100-80gb")) == ["warning"]


DUPLICATE_KEY = RECIPES / "valid" / "qwen3_moe_30b_duplicate_key_ep8.yaml"


def test_a_repeated_key_keeps_its_last_value_as_pyyaml_does() -> None:
    """AutoModel reads recipes with yaml.safe_load: the later activation_checkpointing wins."""
    doc = load_document(DUPLICATE_KEY)
    expected = yaml.safe_load(DUPLICATE_KEY.read_text(encoding="utf-8"))
    assert doc.plain() == expected and expected["distributed"]["activation_checkpointing"] is True
    assert [(d.key, d.line) for d in doc.duplicate_keys] == [("activation_checkpointing", 19)]


def test_a_repeated_key_is_a_warning_at_the_ignored_one() -> None:
    report = validate_recipe(DUPLICATE_KEY, world_size=8)
    assert report.ok
    warning = next(f for f in report.warnings if "written again" in f.message)
    assert (warning.line, warning.col) == (19, 3)
    assert build_meshes(DUPLICATE_KEY, world_size=8).layout.activation_checkpointing == "full"


def test_a_reused_anchor_is_refused_as_pyyaml_refuses_it() -> None:
    text = "a: &A 1\nb: &A 2\nc: *A\n"
    with pytest.raises(yaml.composer.ComposerError):
        yaml.safe_load(text)
    with pytest.raises(InputError, match="duplicate anchor 'A'"):
        load_document(text)


def test_diffusion_recipes_are_counted_apart(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "flux.yaml").write_text("fsdp:\n  tp_size: 1\nflow_matching:\n  shift: 3\n")
    outcome = recipe_corpus.judge_recipe(tmp_path / "flux.yaml")
    assert outcome.diffusion and outcome.clean
    assert recipe_corpus.main([str(tmp_path)]) == 0
    assert "1 diffusion, not judged" in capsys.readouterr().out

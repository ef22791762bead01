"""The public API for the megatron-bridge target: `compile_intent`, `validate_recipe` and `explain` take
`target="megatron-bridge"` and give what the CLI prints; a bad call raises the package's InputError."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import automodel_dist as ad
from automodel_dist import explain
from automodel_dist.cli import main
from automodel_dist.errors import InputError
from automodel_dist.targets.megatron_bridge.compile import MegatronCompileResult

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "intents"
QWEN = EXAMPLES / "qwen3-30b-a3b-16xh100.yaml"
RECIPE = "qwen3_30b_a3b_sft_config"
BAD_OVERRIDES = ("model:\n  sequence_parallel: true\n  tensor_model_parallel_size: 3\n"
                 "train:\n  global_batch_size: 64\n")


@pytest.fixture(scope="module")
def result() -> MegatronCompileResult:
    compiled = ad.compile_intent(QWEN, target="megatron-bridge")
    assert isinstance(compiled, MegatronCompileResult)
    return compiled


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().out


def test_explain_is_a_public_name() -> None:
    assert ad.explain_intent is explain.explain_intent
    assert "explain_intent" in ad.__all__


def test_compile_gives_what_the_cli_prints(result: MegatronCompileResult, capsys: pytest.CaptureFixture[str]) -> None:
    assert result.recipe_function == RECIPE and result.target == "megatron-bridge"
    assert cli(capsys, "compile", str(QWEN), "--target", "megatron-bridge") == (0, result.yaml)
    hydra = cli(capsys, "compile", str(QWEN), "--target", "megatron-bridge", "--format", "hydra")[1]
    assert hydra == result.hydra_text() and hydra.splitlines()[-len(result.hydra):] == list(result.hydra)
    assert result.recipe["train"]["global_batch_size"] == result.layout.global_batch_size


def test_the_default_target_is_still_automodel() -> None:
    compiled = ad.compile_intent(QWEN)
    assert compiled.target == "automodel" and "distributed:" in compiled.yaml and compiled.settings() == []


def test_validate_takes_the_file_its_text_or_the_hydra_list(result: MegatronCompileResult, tmp_path: Path) -> None:
    path = tmp_path / "overrides.yaml"
    path.write_text(result.yaml, encoding="utf-8")
    world = result.layout.world_size
    kwargs: dict[str, Any] = {"world_size": world, "gpu": "h100-80gb", "target": "megatron-bridge",
                              "recipe_function": RECIPE}
    for source in (path, str(path), result.yaml, list(result.hydra)):
        report = ad.validate_recipe(source, **kwargs)
        assert report.ok, report.errors


def test_validate_locates_megatrons_error(tmp_path: Path) -> None:
    path = tmp_path / "overrides.yaml"
    path.write_text(BAD_OVERRIDES, encoding="utf-8")
    report = ad.validate_recipe(path, world_size=8, target="megatron-bridge",
                                recipe_function="qwen3_8b_pretrain_config")
    assert not report.ok
    [error] = [f for f in report.errors if f.rule == "mb-world-divisible"]
    assert (error.path, error.line, error.col) == ("model.tensor_model_parallel_size", 3, 3)
    assert "world size (8) is not divisible by total_model_size" in error.message
    hydra = ad.validate_recipe(["model.sequence_parallel=true", "model.tensor_model_parallel_size=3",
                                "train.global_batch_size=64"],
                               world_size=8, target="megatron-bridge", recipe_function="qwen3_8b_pretrain_config")
    assert {f.rule for f in hydra.errors} == {f.rule for f in report.errors}


def test_explain_text_json_and_html(result: MegatronCompileResult) -> None:
    text = ad.explain_intent(QWEN, target="megatron-bridge", top=2)
    assert text == explain.render_explain(result, top=2)
    assert f"writes Megatron-Bridge overrides for {RECIPE}" in text
    assert "  model.expert_model_parallel_size = 16: experts over 16 ranks" in text
    data = json.loads(ad.explain_intent(QWEN, target="megatron-bridge", fmt="json"))
    assert data["target"] == "megatron-bridge"
    paths = {s["path"]: s for s in data["settings"]}
    assert paths["model.expert_model_parallel_size"]["value"] == "16"
    assert all(s["why"] for s in data["settings"]), "every value has its reason"
    assert {e["path"] for e in data["environment"]} >= {"CUDA_DEVICE_MAX_CONNECTIONS", "PYTORCH_CUDA_ALLOC_CONF"}
    page = ad.explain_intent(QWEN, target="megatron-bridge", fmt="html")
    assert page.startswith("<!DOCTYPE html>") and 'id="settings"' in page


@pytest.mark.parametrize(("call", "kwargs", "words"), [
    (ad.compile_intent, {"source": QWEN, "target": "megatron"}, "unknown target 'megatron'"),
    (ad.compile_intent, {"source": QWEN, "target": None}, "unknown target None"),
    (ad.explain_intent, {"source": QWEN, "target": "mbridge"}, "unknown target"),
    (ad.explain_intent, {"source": QWEN, "fmt": "pdf"}, "unknown format 'pdf'"),
    (ad.explain_intent, {"source": QWEN, "top": 0}, "top must be a positive integer"),
    (ad.explain_intent, {"source": QWEN, "top": True}, "top must be a positive integer"),
    (ad.validate_recipe, {"source": BAD_OVERRIDES, "world_size": 8, "target": "megatron-bridge"},
     "must be a Megatron-Bridge recipe name, got None"),
    (ad.validate_recipe, {"source": BAD_OVERRIDES, "world_size": 8, "target": "megatron-bridge",
                          "recipe_function": 5}, "recipe name, got 5"),
    (ad.validate_recipe, {"source": BAD_OVERRIDES, "world_size": 8, "target": "megatron-bridge",
                          "recipe_function": "x; rm -rf /"}, "recipe name"),
    (ad.validate_recipe, {"source": BAD_OVERRIDES, "world_size": 8, "recipe_function": RECIPE},
     "recipe_function names a Megatron-Bridge recipe function"),
    (ad.validate_recipe, {"source": BAD_OVERRIDES, "world_size": 0, "target": "megatron-bridge",
                          "recipe_function": RECIPE}, "world size must be a positive integer"),
    (ad.validate_recipe, {"source": BAD_OVERRIDES, "world_size": 8, "target": "megatron-bridge",
                          "recipe_function": RECIPE, "gpu": "h100x"}, "unknown GPU"),
    (ad.validate_recipe, {"source": BAD_OVERRIDES, "world_size": 8, "target": "megatron-bridge",
                          "recipe_function": RECIPE, "model": "no-such-model"}, "no-such-model"),
    (ad.validate_recipe, {"source": BAD_OVERRIDES, "world_size": 8, "target": "megatron-bridge",
                          "recipe_function": RECIPE, "sbatch": 5}, "sbatch must be a path"),
    (ad.validate_recipe, {"source": ["model.tensor_model_parallel_size=2", 3], "world_size": 8,
                          "target": "megatron-bridge", "recipe_function": RECIPE}, "must be a string, got int"),
    (ad.validate_recipe, {"source": ["tensor parallel 2"], "world_size": 8, "target": "megatron-bridge",
                          "recipe_function": RECIPE}, "not a Hydra override"),
    (ad.validate_recipe, {"source": 3.5, "world_size": 8, "target": "megatron-bridge", "recipe_function": RECIPE},
     "must be a path, YAML text or a mapping"),
])
def test_bad_calls_raise_input_errors(call: Any, kwargs: dict[str, Any], words: str) -> None:
    with pytest.raises(InputError) as caught:
        call(**kwargs)
    assert words in str(caught.value)


def test_estimate_of_the_winners_pins_is_the_winners_estimate() -> None:
    """Pin the layout compile chose: estimate gives compile's figures (the same rules, settings and profile)."""
    won = ad.compile_intent(QWEN, ["training.task=pretrain"], target="megatron-bridge")
    lay = won.layout
    names = ("tp", "pp", "cp", "ep", "micro_batch_size", *(("vpp",) if lay.pp > 1 else ()))
    pins = [f"parallelism.{name}={getattr(lay, name)}" for name in names]
    pins.append(f"parallelism.activation_checkpointing={str(lay.activation_checkpointing).lower()}")
    est = ad.estimate(QWEN, ["training.task=pretrain", *pins], target="megatron-bridge")
    assert (est.memory_gib, est.tokens_per_s_per_gpu) == (won.estimate.memory_gib, won.estimate.tokens_per_s_per_gpu)


def test_estimate_names_open_pins_and_broken_rules() -> None:
    from automodel_dist.errors import ValidationFailed

    with pytest.raises(InputError) as caught:
        ad.estimate(QWEN, ["parallelism.tp=1"], target="megatron-bridge")
    assert "still open: pp, cp, activation_checkpointing, micro_batch_size, ep" in str(caught.value)
    pins = ["parallelism.tp=1", "parallelism.pp=1", "parallelism.cp=1", "parallelism.ep=3",
            "parallelism.activation_checkpointing=false", "parallelism.micro_batch_size=1"]
    with pytest.raises(ValidationFailed) as failed:
        ad.estimate(QWEN, pins, target="megatron-bridge")
    assert "mb-ep-divides-experts" in str(failed.value) and "num_moe_experts=128 must be divisible" in str(failed.value)
    with pytest.raises(InputError, match=r"parallelism\.strategy is an AutoModel choice"):
        ad.estimate(QWEN, [*pins, "parallelism.strategy=fsdp2"], target="megatron-bridge")

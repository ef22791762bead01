"""`automodel-dist dry-run --model`: the shell around build_model_dry_run (exit codes, messages, output)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from automodel_dist.cli import main
from automodel_dist.verify import model_dryrun

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "recipes" / "qwen3-30b-a3b-16xh100.yaml"
# tp_size on line 5: AutoModel's Qwen3-MoE class has no TP plan.
MOE_TP = """\
recipe: TrainFinetuneRecipeForNextTokenPrediction
model:
  pretrained_model_name_or_path: Qwen/Qwen3-30B-A3B
distributed:
  tp_size: 2
  ep_size: 4
step_scheduler:
  global_batch_size: 64
  local_batch_size: 1
"""


def test_without_the_oracle_extra_it_is_one_line_and_exit_2(monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(model_dryrun.importlib.util, "find_spec", lambda name: None)
    assert main(["dry-run", "--model", str(EXAMPLE), "--nodes", "2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "automodel-dist[oracle]" in err


def test_all_ranks_is_refused_on_a_large_world(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dry-run", "--model", str(EXAMPLE), "--nodes", "16", "--all-ranks"]) == 2
    assert "--all-ranks builds every rank" in capsys.readouterr().err


def test_all_ranks_needs_model(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dry-run", str(EXAMPLE), "--nodes", "2", "--all-ranks"]) == 2
    assert "add --model" in capsys.readouterr().err


@pytest.mark.model_oracle
def test_automodels_refusal_is_a_located_finding(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(MOE_TP, encoding="utf-8")
    assert main(["dry-run", "--model", str(recipe), "--nodes", "1", "--format", "json"]) == 1
    data = json.loads(capsys.readouterr().out)
    [finding] = [f for f in data["findings"] if f["severity"] == "error"]
    assert (finding["rule"], finding["line"], finding["col"]) == ("am-r22-tp-plan", 5, 3)
    assert "Qwen3MoeForCausalLM has no TP plan" in finding["automodel_message"]
    assert data["ranks"][0]["ok"] is False


@pytest.mark.model_oracle  # the command asks for the oracle extra first
def test_a_null_distributed_section_builds_nothing_as_in_automodel(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """AutoModel 0.7.0's training recipe reads cfg.distributed as a mapping: `distributed: null` raises a
    TypeError before any mesh or model exists, so the model-level dry-run builds nothing and says why."""
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(MOE_TP.replace("distributed:\n  tp_size: 2\n  ep_size: 4\n", "distributed: null\n"),
                      encoding="utf-8")
    assert main(["dry-run", "--model", str(recipe), "--nodes", "1", "--format", "json"]) == 1
    data = json.loads(capsys.readouterr().out)
    [finding] = [f for f in data["findings"] if f["severity"] == "error"]
    assert (finding["rule"], finding["line"], finding["col"]) == ("am-distributed-missing", 4, 1)
    assert finding["automodel_message"] == "TypeError: 'NoneType' object is not iterable" and data["ranks"] == []


DDP_8B = """\
recipe: TrainFinetuneRecipeForNextTokenPrediction
model:
  pretrained_model_name_or_path: meta-llama/Llama-3.1-8B
distributed:
  strategy: ddp
step_scheduler:
  global_batch_size: 64
  local_batch_size: 8
"""


def test_a_ddp_build_counts_the_whole_models_weights_in_host_memory() -> None:
    """DDP materializes the weights (bf16 by default, fp32 with torch_dtype float32); the rest builds on meta."""
    from automodel_dist.catalog.models import resolve_model
    from automodel_dist.layout import Layout

    spec = resolve_model("meta-llama/Llama-3.1-8B")
    ddp = Layout(world_size=8, global_batch_size=64, strategy="ddp")
    bf16 = model_dryrun.host_memory_needed_gib({}, ddp, spec)
    fp32 = model_dryrun.host_memory_needed_gib({"model": {"torch_dtype": "torch.float32"}}, ddp, spec)
    assert bf16 == pytest.approx(8.03e9 * 2 / 2**30 + model_dryrun.WORKER_BASELINE_GIB, rel=0.01)
    assert fp32 - model_dryrun.WORKER_BASELINE_GIB == pytest.approx(2 * (bf16 - model_dryrun.WORKER_BASELINE_GIB))
    assert model_dryrun.host_memory_needed_gib({}, ddp.with_(strategy="fsdp2"), spec) is None


@pytest.mark.model_oracle  # the command asks for the oracle extra first
def test_a_ddp_build_larger_than_free_memory_is_refused_before_it_starts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(DDP_8B, encoding="utf-8")
    monkeypatch.setattr(model_dryrun, "available_host_gib", lambda: 6.0)
    monkeypatch.setattr(model_dryrun, "ModelWorker", None)  # no worker may start
    assert main(["dry-run", "--model", str(recipe), "--nodes", "1"]) == 2
    err = capsys.readouterr().err
    assert f"{recipe}:5:3" in err and "about 15.5 GiB for llama-3.1-8b, and 6.0 GiB are available" in err
    assert "dry-run without --model" in err


@pytest.mark.model_oracle
def test_built_model_states_that_pass_the_gpu_are_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Mixtral's stacked experts over 64 ranks: each rank builds one expert's rows of every layer (FSDP2 pads the
    8-row tensors), 42 GiB of weights, gradients and Adam states, past a 40 GB A100 before any activation; on an
    80 GB H100 the same build is told nothing."""
    recipe = tmp_path / "r.yaml"
    body = ("recipe: TrainFinetuneRecipeForNextTokenPrediction\nmodel:\n  _target_: "
            "nemo_automodel.NeMoAutoModelForCausalLM.from_pretrained\n  pretrained_model_name_or_path: "
            "mistralai/Mixtral-8x7B-v0.1\ndistributed: {strategy: fsdp2}\n"
            "step_scheduler: {global_batch_size: 64, local_batch_size: 1}\noptimizer: {_target_: torch.optim.AdamW}\n")
    recipe.write_text("# world: 8 x 8\n# gpu: a100-40gb\n" + body)
    code = main(["dry-run", "--model", str(recipe), "--format", "json"])
    report = json.loads(capsys.readouterr().out)
    [finding] = [f for f in report["findings"] if f["rule"] == "model-states-fit"]
    assert code == 1 and "x an even split (FSDP2 pads" in finding["message"] and "a100-40gb" in finding["message"]
    recipe.write_text("# world: 8 x 8\n# gpu: h100-80gb\n" + body)
    main(["dry-run", "--model", str(recipe), "--format", "json"])
    assert [f for f in json.loads(capsys.readouterr().out)["findings"] if f["rule"] == "model-states-fit"] == []

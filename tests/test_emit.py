"""AutoModel emitter: parse(emit(layout)) == layout, only the keys each strategy accepts, reasons on chosen
values, the header, and merging into a base recipe (comments and order kept; contradictions name both places)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from automodel_dist.compiler import compile_intent
from automodel_dist.dispatcher import choose_dispatcher
from automodel_dist.errors import InputError
from automodel_dist.intent import load_intent, resolve_intent
from automodel_dist.planner import make_layout, plan
from automodel_dist.problem import Problem
from automodel_dist.schema_check import load_schema
from automodel_dist.targets.automodel.emit import COMMON_KEYS, STRATEGY_KEYS, emit_recipe
from automodel_dist.targets.automodel.parse import parse_recipe


def intent(model: str = "Qwen/Qwen3-30B-A3B", gpu: str = "h100-80gb", nodes: int = 2,
           parallelism: dict[str, Any] | None = None, **training: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"model": model, "hardware": {"gpu": gpu, "nodes": nodes},
                            "training": {"task": "sft", "seq_length": 4096, "global_batch_size": 256, **training}}
    if parallelism:
        spec["parallelism"] = parallelism
    return spec


def problem_of(spec: dict[str, Any]) -> Problem:
    return resolve_intent(load_intent(spec))


PROBLEMS = {
    "moe-16xh100": intent(),
    "dense-70b-32xh100": intent(model="meta-llama/Llama-3.1-70B", nodes=4),
    "dense-8b-packed-32k": intent(model="Qwen/Qwen3-8B", nodes=1, seq_length=32768, global_batch_size=32,
                                  packed_sequences=True),
    "moe-gb200": intent(model="Qwen/Qwen3-235B-A22B", gpu="gb200-nvl72", nodes=32, global_batch_size=1024),
    "lora-8b": intent(model="meta-llama/Llama-3.1-8B", nodes=1, task="peft", global_batch_size=64),
}


@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_parse_of_emit_is_the_layout(name: str) -> None:
    problem = problem_of(PROBLEMS[name])
    result = plan(problem)
    for c in [result.best, *result.alternatives[:40]]:
        _, recipe = emit_recipe(problem, c.layout, c.estimate)
        assert parse_recipe(recipe, world_size=problem.cluster.world_size, model=problem.model) == c.layout


def test_round_trip_covers_every_strategy_and_dimension() -> None:
    problem = problem_of(PROBLEMS["moe-16xh100"])
    est = plan(problem).best.estimate
    layouts = [
        make_layout(problem, strategy="ddp", tp=1, pp=1, cp=1, ep=1, dp_replicate=1, vpp=1,
                    activation_checkpointing=True, local_batch_size=2),
        make_layout(problem, strategy="megatron_fsdp", tp=2, pp=1, cp=2, ep=1, dp_replicate=1, vpp=1,
                    activation_checkpointing=False, local_batch_size=4),
        make_layout(problem, strategy="fsdp2", tp=2, pp=2, cp=1, ep=4, dp_replicate=2, vpp=3,
                    activation_checkpointing=True, local_batch_size=8, micro_batch_size=2),
        make_layout(problem, strategy="fsdp2", tp=1, pp=4, cp=2, ep=2, dp_replicate=1, vpp=1,
                    activation_checkpointing=False, local_batch_size=16, micro_batch_size=4),
    ]
    for layout in layouts:
        _, recipe = emit_recipe(problem, layout, est)
        assert parse_recipe(recipe, world_size=16, model=problem.model) == layout


def test_distributed_keys_are_the_ones_each_strategy_accepts() -> None:
    problem = problem_of(PROBLEMS["dense-70b-32xh100"])
    est = plan(problem).best.estimate
    for strategy in ("ddp", "megatron_fsdp", "fsdp2"):
        layout = make_layout(problem, strategy=strategy, tp=1 if strategy == "ddp" else 2, pp=1, cp=1, ep=1,
                             dp_replicate=1, vpp=1, activation_checkpointing=False, local_batch_size=1)
        text, recipe = emit_recipe(problem, layout, est)
        dist = recipe["distributed"]
        assert set(dist) <= set(COMMON_KEYS) | set(STRATEGY_KEYS[strategy])
        assert dist["dp_size"] is None and "  dp_size: null" in text
        assert ("sequence_parallel" in dist) == (strategy == "fsdp2")
        assert "pipeline" not in dist and "moe" not in dist
        assert dist["strategy"] == strategy.lower()


def test_pipeline_and_moe_blocks_appear_exactly_when_needed() -> None:
    problem = problem_of(PROBLEMS["moe-16xh100"])
    est = plan(problem).best.estimate
    layout = make_layout(problem, strategy="fsdp2", tp=1, pp=2, cp=1, ep=8, dp_replicate=1, vpp=2,
                         activation_checkpointing=False, local_batch_size=8, micro_batch_size=2)
    _, recipe = emit_recipe(problem, layout, est)
    pipe = recipe["distributed"]["pipeline"]
    assert pipe["pp_schedule"] == "interleaved1f1b" and pipe["pp_microbatch_size"] == 2
    assert -(-problem.model.num_layers // pipe["layers_per_stage"]) == 2 * 2  # ceil(layers / lps) stages
    assert "pp_batch_size" not in pipe  # AutoModel overwrites it with local_batch_size
    assert recipe["distributed"]["moe"] == {"reshard_after_forward": False}
    single = layout.with_(pp=2, vpp=1, pp_schedule="1f1b")
    _, recipe = emit_recipe(problem, single, est)
    assert recipe["distributed"]["pipeline"]["pp_schedule"] == "1f1b"
    assert "layers_per_stage" not in recipe["distributed"]["pipeline"]


def test_header_comments_and_schema_line() -> None:
    result = compile_intent(PROBLEMS["moe-16xh100"])
    lines = result.yaml.splitlines()
    head = [line for line in lines if line.startswith("#")]
    schema_id = load_schema("automodel-recipe.schema.json")["$id"]
    assert any(line.startswith(f"# schema: {schema_id} ") for line in head)
    assert not any("$schema=" in line for line in head), "no path that breaks when the recipe is copied"
    assert any(f"{result.estimate.memory_gib:.1f} GiB" in line for line in head)
    assert any(f"{result.estimate.tokens_per_s_per_gpu:,.0f} tokens/s/GPU" in line for line in head)
    body = lines[lines.index("distributed:") + 1:]
    block = [line for line in body[:body.index("")] if not line.startswith("    ")]
    assert block and all("  # " in line for line in block), "every chosen distributed value says why"
    assert YAML(typ="safe").load(result.yaml) == result.recipe


def test_model_backend_and_dispatcher_by_gpu_and_ep_locality() -> None:
    h100 = problem_of(PROBLEMS["moe-16xh100"])
    gb200 = problem_of(PROBLEMS["moe-gb200"])
    assert choose_dispatcher(h100.model, h100.cluster, 1).name == "torch"
    assert choose_dispatcher(h100.model, h100.cluster, 8).name == "hybridep"   # inside the 8-GPU node
    assert choose_dispatcher(h100.model, h100.cluster, 16).name == "deepep"    # crosses nodes
    assert choose_dispatcher(gb200.model, gb200.cluster, 32).name == "hybridep"  # NVL72 rack
    dense = problem_of(PROBLEMS["dense-70b-32xh100"])
    assert choose_dispatcher(dense.model, dense.cluster, 1).name is None

    est = plan(h100).best.estimate
    cp_layout = make_layout(h100, strategy="fsdp2", tp=1, pp=1, cp=2, ep=8, dp_replicate=1, vpp=1,
                            activation_checkpointing=False, local_batch_size=1)
    _, recipe = emit_recipe(h100, cp_layout, est)
    backend = recipe["model"]["backend"]
    assert backend["attn"] == "te" and backend["dispatcher"] == "hybridep" == cp_layout.dispatcher
    _, dense_recipe = emit_recipe(dense, plan(dense).best.layout, est)
    assert "backend" not in dense_recipe["model"]


def test_scale_aware_timeout_packing_and_peft() -> None:
    one_node = compile_intent(PROBLEMS["lora-8b"]).recipe
    multi = compile_intent(PROBLEMS["moe-16xh100"]).recipe
    assert 10 <= one_node["dist_env"]["timeout_minutes"] < multi["dist_env"]["timeout_minutes"]
    assert one_node["peft"]["dim"] == 16 and one_node["peft"]["match_all_linear"] is True
    assert "peft" not in multi
    packed = compile_intent(PROBLEMS["dense-8b-packed-32k"]).recipe
    assert packed["packed_sequence"]["packed_sequence_size"] == 32768
    assert multi["packed_sequence"]["packed_sequence_size"] == 0
    assert packed["dataset"]["_target_"].endswith("mock.build_unpacked_dataset")  # the packer fills packs
    assert packed["dataset"]["max_sentence_len"] == 32768
    assert multi["dataset"]["_target_"].endswith("MockIterableDataset")
    assert multi["dataset"]["batch_size"] == multi["step_scheduler"]["local_batch_size"]
    assert multi["model"]["pretrained_model_name_or_path"] == "Qwen/Qwen3-30B-A3B"


# -- base recipe --------------------------------------------------------------------------------------------
BASE = """\
# Our team's recipe: this comment must survive
recipe: TrainFinetuneRecipeForNextTokenPrediction
step_scheduler:
  global_batch_size: 64   # team default
  local_batch_size: 8
  num_epochs: 3           # keep me
model:
  _target_: nemo_automodel.NeMoAutoModelForCausalLM.from_pretrained
  pretrained_model_name_or_path: meta-llama/Llama-3.1-8B  # our checkpoint
dataset:   # our data, not the placeholder
  _target_: nemo_automodel.components.datasets.llm.squad.make_squad_dataset
  dataset_name: rajpurkar/squad
distributed:
  strategy: fsdp2
  tp_size: 4
  dp_size: 8              # a stale explicit dp_size
  defer_fsdp_grad_sync: false   # ours, keep it
optimizer:
  _target_: torch.optim.AdamW
  lr: 2.0e-5
"""


def write_intent(tmp_path: Path, pins: str = "") -> Path:
    (tmp_path / "base.yaml").write_text(BASE, encoding="utf-8")
    path = tmp_path / "intent.yaml"
    path.write_text("model: meta-llama/Llama-3.1-8B\nhardware: {gpu: h100-80gb, nodes: 1}\n"
                    "training: {task: sft, seq_length: 4096, global_batch_size: 128}\n"
                    f"base_recipe: base.yaml\n{pins}", encoding="utf-8")
    return path


@pytest.mark.parametrize(("base_lines", "intent_lines", "where", "says"), [
    ("", "model: Qwen/Qwen3-8B\n", "base.yaml:7:1", "builds llama-3.1-8b, which differs in num_layers 32 (36)"),
    ("", "model: {preset: llama-3.1-8b, num_layers: 16}\n", "base.yaml:7:1", "differs in num_layers 32 (16)"),
    ("peft:\n  _target_: nemo_automodel.components._peft.lora.PeftConfig\n  dim: 8\n", "", "base.yaml:21:1",
     "trains LoRA adapters"),
    ("fp8:\n  enabled: true\n", "", "base.yaml:22:3", "turns FP8 on"),
    ("", "training: {task: sft, seq_length: 4096, global_batch_size: 128, init: from_scratch}\n", "base.yaml:8:3",
     "starts pretrained"),
    ("peft:\n  _target_: nemo_automodel.components._peft.lora.PeftConfig\n  dim: 8\n",
     "training: {task: peft, seq_length: 4096, global_batch_size: 128, peft: {rank: 32}}\n", "base.yaml:23:3",
     "trains rank-8 adapters"),
])
def test_a_base_that_trains_another_job_than_the_intent_is_bad_input(tmp_path: Path, base_lines: str,
                                                                      intent_lines: str, where: str, says: str) -> None:
    """The merge keeps the base's model, LoRA and FP8 settings: where they contradict the intent, the recipe would
    run one job while its header estimates another."""
    path = write_intent(tmp_path)
    (tmp_path / "base.yaml").write_text(BASE + base_lines, encoding="utf-8")
    text = path.read_text(encoding="utf-8")
    for line in intent_lines.splitlines(keepends=True):
        key = line.split(":", 1)[0]
        text = "".join(line if old.startswith(key + ":") else old for old in text.splitlines(keepends=True))
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputError) as err:
        compile_intent(path)
    assert err.value.where.endswith(where) and says in str(err.value) and "make them agree" in err.value.hint


@pytest.mark.parametrize("intent_lines", [
    "model: meta-llama/Llama-3.1-8B-Instruct\n",  # the same architecture under another name
    f"model: {Path(__file__).parent / 'fixtures' / 'hf_configs' / 'llama-3.1-8b' / 'config.json'}\n",  # its config
    "training: {task: sft, seq_length: 4096, global_batch_size: 128, precision: fp8}\n",
    "training: {task: peft, seq_length: 4096, global_batch_size: 128}\n",  # the default rank, the base's too
])
def test_a_base_that_agrees_with_the_intent_merges(tmp_path: Path, intent_lines: str) -> None:
    path = write_intent(tmp_path)
    (tmp_path / "base.yaml").write_text(BASE + "fp8:\n  enabled: true\n" * ("fp8" in intent_lines)
                                        + "peft:\n  dim: 16\n" * ("peft" in intent_lines), encoding="utf-8")
    text = path.read_text(encoding="utf-8")
    key = intent_lines.split(":", 1)[0]
    path.write_text("".join(intent_lines if old.startswith(key + ":") else old
                            for old in text.splitlines(keepends=True)), encoding="utf-8")
    result = compile_intent(path)
    assert result.recipe["model"]["pretrained_model_name_or_path"] == "meta-llama/Llama-3.1-8B"  # the base's


def test_a_base_that_reshapes_its_model_is_judged_as_it_builds(tmp_path: Path) -> None:
    """The base's own reshaping keys decide what it trains: 2 layers of Llama-3.1-8B is not the intent's model,
    16 layers is the intent's when the intent asks for 16."""
    path = write_intent(tmp_path)
    base = BASE.replace("  pretrained_model_name_or_path: meta-llama/Llama-3.1-8B  # our checkpoint\n",
                        "  pretrained_model_name_or_path: meta-llama/Llama-3.1-8B  # our checkpoint\n"
                        "  num_hidden_layers: {layers}\n")
    (tmp_path / "base.yaml").write_text(base.format(layers=2), encoding="utf-8")
    with pytest.raises(InputError, match=r"differs in num_layers 2 \(32\)"):
        compile_intent(path)
    (tmp_path / "base.yaml").write_text(base.format(layers=16), encoding="utf-8")
    path.write_text(path.read_text(encoding="utf-8").replace("model: meta-llama/Llama-3.1-8B",
                                                             "model: {preset: llama-3.1-8b, num_layers: 16}"))
    assert compile_intent(path).problem.model.num_layers == 16


def test_a_base_lora_without_a_rank_gets_the_intents(tmp_path: Path) -> None:
    path = write_intent(tmp_path)
    (tmp_path / "base.yaml").write_text(BASE + "peft:\n  match_all_linear: true\n", encoding="utf-8")
    path.write_text(path.read_text(encoding="utf-8").replace(
        "training: {task: sft,", "training: {peft: {rank: 32}, task: peft,"), encoding="utf-8")
    peft = compile_intent(path).recipe["peft"]
    assert peft["dim"] == 32 and peft["alpha"] == 64 and peft["match_all_linear"] is True


def test_base_recipe_keeps_comments_order_and_its_own_sections(tmp_path: Path) -> None:
    result = compile_intent(write_intent(tmp_path))
    text, recipe = result.yaml, result.recipe
    for comment in ("# Our team's recipe: this comment must survive", "# keep me", "# our data, not the placeholder",
                    "# our checkpoint"):
        assert comment in text
    keys = list(recipe)
    assert keys[:6] == ["recipe", "step_scheduler", "model", "dataset", "distributed", "optimizer"]
    assert recipe["dataset"]["dataset_name"] == "rajpurkar/squad"
    assert recipe["optimizer"]["lr"] == 2.0e-5 and recipe["step_scheduler"]["num_epochs"] == 3
    dist = recipe["distributed"]
    assert dist["dp_size"] is None and dist["tp_size"] == result.layout.tp
    assert dist.get("defer_fsdp_grad_sync") is (False if result.layout.strategy == "fsdp2" else None)
    # where the compiler writes the setting itself (it syncs every micro batch) its reason replaces the
    # base's comment; otherwise the base's line stays as it was
    from automodel_dist.cost.model import planned_options

    ours = result.layout.strategy == "fsdp2" and not planned_options(result.problem, result.layout).defer_grad_sync
    assert ("# ours, keep it" in text) != ours
    assert recipe["step_scheduler"]["global_batch_size"] == 128
    assert "dist_env" in recipe and "packed_sequence" in recipe
    assert "dataloader" not in recipe, "the base's own data needs no placeholder dataloader"
    assert parse_recipe(recipe, world_size=8, model=result.problem.model) == result.layout


@pytest.mark.parametrize("rows", ["", "  batch_size: 3\n"])
def test_a_base_mock_dataset_yields_the_local_batch(tmp_path: Path, rows: str) -> None:
    """MockIterableDataset's batch_size (default 1) is the batch a step trains on: the compiler sets it."""
    from automodel_dist.validate import validate_recipe

    base = tmp_path / "base.yaml"
    base.write_text("recipe: TrainFinetuneRecipeForNextTokenPrediction\ndataset:\n  _target_: "
                    "nemo_automodel.components.datasets.llm.mock_iterable_dataset.MockIterableDataset\n"
                    f"  seq_len: 4096\n{rows}", encoding="utf-8")
    intent = tmp_path / "intent.yaml"
    intent.write_text("model: meta-llama/Llama-3.1-8B\nhardware: {gpu: h100-80gb, nodes: 1}\n"
                      "training: {task: sft, seq_length: 4096, global_batch_size: 128}\nbase_recipe: base.yaml\n",
                      encoding="utf-8")
    result = compile_intent(intent)
    assert result.layout.local_batch_size > 1
    assert result.recipe["dataset"]["batch_size"] == result.layout.local_batch_size
    findings = validate_recipe(result.yaml, world_size=8).findings
    assert "am-mock-batch-size" not in {f.rule for f in findings}


def test_base_value_contradicting_a_pin_names_both_places(tmp_path: Path) -> None:
    path = write_intent(tmp_path, "parallelism:\n  tp: 2\n")
    with pytest.raises(InputError) as err:
        compile_intent(path)
    exc = err.value
    assert exc.where == f"{tmp_path / 'base.yaml'}:15:3"
    assert f"{path}:6:3" in exc.message and "tp_size: 4" in exc.message


def test_base_values_are_compared_as_automodel_reads_them() -> None:
    problem = problem_of(intent(parallelism={"strategy": "megatron_fsdp", "activation_checkpointing": False}))
    layout = make_layout(problem, strategy="megatron_fsdp", tp=1, pp=1, cp=1, ep=1, dp_replicate=1, vpp=1,
                         activation_checkpointing=False, local_batch_size=1)
    est = plan(replace(problem, pins=replace(problem.pins, strategy=None))).best.estimate
    agreeing = "distributed:\n  strategy: megatron-fsdp\n  activation_checkpointing: 'off'\n"
    _, recipe = emit_recipe(problem, layout, est, base=agreeing)
    assert recipe["distributed"]["strategy"] == "megatron_fsdp"
    with pytest.raises(InputError, match="activation_checkpointing: full"):
        emit_recipe(problem, layout, est, base="distributed:\n  activation_checkpointing: full\n")


def test_fp8_settings_follow_the_gpu() -> None:
    def fp8(model: str, gpu: str) -> str:
        return compile_intent(intent(model=model, gpu=gpu, precision="fp8", task="pretrain")).yaml

    dense = YAML(typ="safe").load(fp8("Qwen/Qwen3-8B", "h100-80gb"))
    assert dense["fp8"]["enabled"] is True and "backend" not in dense["model"]
    moe_text = fp8("Qwen/Qwen3-30B-A3B", "b200")
    backend = YAML(typ="safe").load(moe_text)["model"]["backend"]
    assert backend["te_fp8"] == {"recipe": "mxfp8"} and backend["linear"] == "te"
    assert backend["experts"] == ("te" if backend["dispatcher"] in ("deepep", "hybridep") else "torch_mm")
    ampere = fp8("Qwen/Qwen3-8B", "a100-80gb")
    assert "no FP8 tensor cores" in ampere and "fp8:" not in ampere


def test_cli_compile_names_the_schema_by_id_wherever_the_recipe_is_written(tmp_path: Path, capsys: Any) -> None:
    from automodel_dist.cli import main

    intent_path = tmp_path / "intent.yaml"
    intent_path.write_text("model: Qwen/Qwen3-8B\nhardware: {gpu: h100-80gb, nodes: 1}\n"
                           "training: {seq_length: 4096, global_batch_size: 64}\n", encoding="utf-8")
    outputs = [tmp_path / "run" / "recipe.yaml", tmp_path / "a" / "b" / "c" / "recipe.yaml"]
    for out in outputs:
        assert main(["compile", str(intent_path), "-o", str(out)]) == 0
    texts = [out.read_text(encoding="utf-8") for out in outputs]
    assert texts[0] == texts[1], "the recipe does not depend on where it is written"
    schema_id = load_schema("automodel-recipe.schema.json")["$id"]
    assert f"# schema: {schema_id} " in texts[0]
    assert "wrote" in capsys.readouterr().err


def test_from_scratch_pretraining_builds_from_the_config() -> None:
    from automodel_dist.validate import validate_recipe

    intent = {"model": "Qwen/Qwen3-8B", "hardware": {"gpu": "h100-80gb", "nodes": 1},
              "training": {"task": "pretrain", "init": "from_scratch", "seq_length": 4096, "global_batch_size": 64}}
    model = compile_intent(intent).recipe["model"]
    assert model["_target_"] == "nemo_automodel.NeMoAutoModelForCausalLM.from_config"
    assert model["config"]["pretrained_model_name_or_path"] == "Qwen/Qwen3-8B"
    assert "pretrained_model_name_or_path" not in model
    assert validate_recipe(compile_intent(intent).recipe, world_size=8).ok


def test_lora_from_scratch_is_input_error() -> None:
    with pytest.raises(InputError, match="LoRA adapts pretrained weights"):
        compile_intent({"model": "Qwen/Qwen3-8B", "hardware": {"gpu": "h100-80gb"},
                        "training": {"task": "peft", "init": "from_scratch", "seq_length": 4096,
                                     "global_batch_size": 64}})


def test_a_local_config_json_is_written_as_its_folders_absolute_path(tmp_path: Path) -> None:
    import json

    from automodel_dist.catalog.hf_export import hf_config_dict
    from automodel_dist.catalog.models import resolve_model
    from automodel_dist.validate import validate_recipe

    folder = tmp_path / "models" / "my-qwen"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(hf_config_dict(resolve_model("qwen3-8b"))), encoding="utf-8")
    intent = tmp_path / "intent.yaml"
    intent.write_text("model: models/my-qwen/config.json\nhardware: {gpu: h100-80gb}\n"
                      "training: {seq_length: 4096, global_batch_size: 64}\n", encoding="utf-8")
    recipe = compile_intent(intent).recipe
    assert recipe["model"]["pretrained_model_name_or_path"] == str(folder.resolve())
    assert not [f for f in validate_recipe(recipe, world_size=8).findings if f.rule == "am-model-path"]


BASE_WITH_SETTINGS = """\
recipe: TrainFinetuneRecipeForNextTokenPrediction
distributed:
  strategy: fsdp2
  defer_fsdp_grad_sync: false   # the team's habit
  mp_policy:
    _target_: torch.distributed.fsdp.MixedPrecisionPolicy
    reduce_dtype: bfloat16
loss_fn:
  _target_: nemo_automodel.components.loss.linear_ce.FusedLinearCrossEntropy
"""


@pytest.mark.parametrize("model, seq", [("meta-llama/Llama-3.2-1B", 4096), ("meta-llama/Llama-3.1-8B", 8192)])
def test_a_base_recipes_settings_are_what_the_header_estimates(tmp_path: Path, model: str, seq: int) -> None:
    """The header's figures are those of the merged recipe: the base's bf16 reduction and fused loss are
    estimated, and the compiler's deferred-sync choice replaces the base's (kept only where it is false)."""
    from automodel_dist.cost.model import estimate_layout, planned_options
    from automodel_dist.cost.recipe import recipe_options

    (tmp_path / "base.yaml").write_text(BASE_WITH_SETTINGS, encoding="utf-8")
    path = tmp_path / "intent.yaml"
    path.write_text(f"model: {model}\nhardware: {{gpu: h100-80gb, nodes: 1, gpus_per_node: 8}}\n"
                    f"training: {{task: pretrain, seq_length: {seq}, global_batch_size: 256}}\n"
                    "base_recipe: base.yaml\n", encoding="utf-8")
    result = compile_intent(path)
    written = recipe_options(result.recipe)
    assert written.reduce_dtype == "bfloat16" and written.logit_bytes == 0.0
    assert written.defer_grad_sync == planned_options(result.problem, result.layout).defer_grad_sync
    fresh = replace(result.problem, recipe_options=None)
    again = estimate_layout(fresh, result.layout, options=written)
    assert again.memory_gib == pytest.approx(result.estimate.memory_gib)
    assert again.step_time_s == pytest.approx(result.estimate.step_time_s)
    assert ("# the team's habit" in result.yaml) is False
    if not written.defer_grad_sync:
        assert "unsharded bf16 gradients" in result.yaml


def test_without_the_base_the_same_intent_estimates_automodel_defaults(tmp_path: Path) -> None:
    """The neighbour: no base recipe, AutoModel's fp32 reduction and upcast loss are estimated (more memory)."""
    (tmp_path / "base.yaml").write_text(BASE_WITH_SETTINGS, encoding="utf-8")
    text = ("model: meta-llama/Llama-3.1-8B\nhardware: {gpu: h100-80gb, nodes: 1, gpus_per_node: 8}\n"
            "training: {task: pretrain, seq_length: 4096, global_batch_size: 256}\n"
            "parallelism: {strategy: fsdp2, tp: 1, pp: 1, cp: 1, local_batch_size: 2,\n"
            "              activation_checkpointing: true}\n")
    (tmp_path / "plain.yaml").write_text(text, encoding="utf-8")
    (tmp_path / "based.yaml").write_text(text + "base_recipe: base.yaml\n", encoding="utf-8")
    plain, based = compile_intent(tmp_path / "plain.yaml"), compile_intent(tmp_path / "based.yaml")
    assert plain.problem.recipe_options is None
    assert based.problem.recipe_options is not None
    assert plain.layout == based.layout
    assert based.estimate.memory_gib < plain.estimate.memory_gib

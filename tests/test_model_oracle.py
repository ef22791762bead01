"""The model-level oracle: AutoModel 0.7.0 builds the real model on meta, and agrees with the pure rules.

- every stand-in still has its target in the pinned AutoModel;
- the model-class table (TP plan, MoE mixin) is what AutoModel decides for each catalog family;
- every shipped example builds for one rank per pipeline stage, each stage holding the layers
  `pipeline_split` says;
- the guarantee: 100 random intents (dense, MoE, LoRA, PP, CP, EP, HSDP; 1 to 1024 GPUs), drawn from
  fixed seeds, each compile, validate without errors, and build under AutoModel for one rank per stage.

One worker process per test module imports AutoModel once and builds everything (`ModelWorker`).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from automodel_dist.catalog.hf_export import hf_config_dict
from automodel_dist.catalog.models import list_models
from automodel_dist.compiler import compile_intent
from automodel_dist.findings import ERROR
from automodel_dist.targets.automodel.model_classes import MODEL_CLASSES
from automodel_dist.validate import validate_recipe
from automodel_dist.verify.model_dryrun import ModelWorker, build_model_dry_run, render_model_report, stage_layers

pytestmark = pytest.mark.model_oracle
ROOT = Path(__file__).resolve().parent.parent
INTENTS = sorted((ROOT / "examples" / "intents").glob("*.yaml"))


@pytest.fixture(scope="module")
def worker():
    with ModelWorker() as running:
        yield running


def test_every_stand_in_still_has_its_target() -> None:
    code = ("import json\nfrom automodel_dist.verify.standins import STAND_INS, resolve\n"
            "print(json.dumps([callable(t) or isinstance(t, property) for t in (resolve(s)[2] for s in STAND_INS)]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    found = json.loads(out.stdout.strip().splitlines()[-1])
    from automodel_dist.verify.standins import STAND_INS

    assert found == [True] * len(STAND_INS)


def _family_request(family: str, distributed: dict, world: int) -> dict:
    """A 4-layer model of the family's first preset at real widths (the class decides, not the depth); a
    family without a preset (mistral) takes Llama-3.1-8B's widths."""
    dense = next(p.spec for p in list_models() if p.id == "llama-3.1-8b")
    spec = next((p.spec for p in list_models() if p.spec.family == family), replace(dense, family=family))
    spec = replace(spec, num_layers=4, first_dense_layers=min(spec.first_dense_layers, 1),
                   linear_attention_layers=3 if spec.linear_attention_layers else 0,
                   sliding_window_layers=2 if spec.sliding_window_layers else 0)
    cls = MODEL_CLASSES[family]
    return {"config": hf_config_dict(spec), "distributed": distributed, "world_size": world, "ranks": [0],
            "backend": {} if cls.custom else None, "attn": "te" if cls.custom else None, "peft": None,
            "pipeline": None}


@pytest.mark.parametrize("family", sorted(MODEL_CLASSES))
def test_model_class_table_is_automodels(worker: ModelWorker, family: str) -> None:
    cls = MODEL_CLASSES[family]
    built = worker.build(_family_request(family, {"strategy": "fsdp2", "tp_size": 2}, 8))["ranks"]["0"]
    assert ("no TP plan" not in built.get("error", "")) == cls.tp_plan, built
    if built["ok"]:
        assert built["class"] == cls.name and built["plans"]["tp_sharded"] > 0
    built = worker.build(_family_request(family, {"strategy": "fsdp2", "ep_size": 2}, 8))["ranks"]["0"]
    assert ("MoEFSDPSyncMixin" not in built.get("error", "")) == cls.moe_mixin, built
    if built["ok"]:
        assert built["plans"]["ep_sharded"] > 0


def _check_built(recipe: dict, world: int, gpus_per_node: int, worker: ModelWorker, what: str) -> None:
    """validate has no errors, and AutoModel builds one rank per stage with the layers our split predicts."""
    report = validate_recipe(recipe, world_size=world, gpus_per_node=gpus_per_node)
    assert report.ok, f"{what}: " + "; ".join(f"{f.rule}: {f.message}" for f in report.errors)
    built = build_model_dry_run(recipe, world_size=world, gpus_per_node=gpus_per_node, worker=worker)
    assert built.ok, f"{what}: " + "; ".join(f.message for f in built.findings if f.severity == ERROR)
    from automodel_dist.targets.automodel.config import resolve_config
    from automodel_dist.targets.automodel.parse import layout_from_config
    from automodel_dist.targets.automodel.recipe_model import recipe_model

    config = resolve_config(recipe)[0]
    spec = recipe_model(config).spec
    layout = layout_from_config(config, world_size=world, model=spec)
    for rank in built.ranks:
        assert rank.layers == stage_layers(layout, spec, rank.pp_rank), f"{what}: rank {rank.rank}"
        assert rank.param_bytes > 0


@pytest.mark.parametrize("intent", INTENTS, ids=lambda p: p.stem)
def test_every_example_builds_under_automodel(worker: ModelWorker, intent: Path) -> None:
    result = compile_intent(intent)
    cluster = result.problem.cluster
    _check_built(result.recipe, cluster.world_size, cluster.gpus_per_node, worker, intent.stem)


# -- the guarantee: random intents ----------------------------------------------------------------------
RANDOM_INTENTS = 100
BATCHES = 4  # separate tests, so the xdist workers share them
GPUS = ("h100-80gb", "h200-141gb", "b200", "gb200-nvl72", "a100-80gb")


def random_intent(rng: random.Random) -> dict:
    """One intent over the space the compiler serves; pins sometimes force PP, CP, EP or HSDP."""
    model = rng.choice(list_models())
    gpu = rng.choice(GPUS)
    per_node = 4 if gpu.startswith("gb") else 8
    nodes = rng.choice([n for n in (1, 2, 4, 8, 16, 32, 64, 128, 256) if n * per_node <= 1024])
    task = rng.choice(("sft", "sft", "pretrain", "peft"))
    training = {"task": task, "seq_length": rng.choice((2048, 4096, 8192, 16384)),
                "global_batch_size": rng.choice((64, 128, 256, 512, 1024, 2048))}
    if task == "pretrain" and rng.random() < 0.3:
        training["init"] = "from_scratch"
    parallelism: dict[str, object] = {}
    knob = rng.choice(("none", "none", "pp", "cp", "ep", "hsdp"))
    if knob == "pp":
        parallelism["pp"] = [2, 4]
    elif knob == "cp":
        parallelism["cp"] = 2
    elif knob == "ep" and model.spec.is_moe:
        parallelism["ep"] = [e for e in (2, 4, 8, 16, 32, 64) if model.spec.num_routed_experts % e == 0]
    elif knob == "hsdp":
        parallelism["dp_replicate"] = [2, 4, 8]
    intent = {"model": model.id, "hardware": {"gpu": gpu, "nodes": nodes}, "training": training}
    if parallelism:
        intent["parallelism"] = parallelism
    return intent


def random_intents(seed: int, count: int):
    """`count` intents that compile (a draw nothing fits, or whose pins the model cannot take, is redrawn)."""
    from automodel_dist.errors import AutomodelDistError

    rng = random.Random(seed)
    made = 0
    while made < count:
        intent = random_intent(rng)
        try:
            result = compile_intent(intent)
        except AutomodelDistError:
            continue
        made += 1
        yield intent, result


@pytest.mark.parametrize("batch", range(BATCHES))
def test_random_intents_compile_validate_and_build(worker: ModelWorker, batch: int) -> None:
    for intent, result in random_intents(seed=1000 + batch, count=RANDOM_INTENTS // BATCHES):
        cluster = result.problem.cluster
        _check_built(result.recipe, cluster.world_size, cluster.gpus_per_node, worker,
                     f"{json.dumps(intent)} -> {result.layout.short()}")


STRATEGY_CASES = {  # name -> (model, distributed section, extra recipe sections)
    "ddp": ("llama-3.2-1b", {"strategy": "ddp"}, {}),
    "hsdp": ("qwen3-8b", {"strategy": "fsdp2", "dp_replicate_size": 2}, {}),
    "cp-dense": ("llama-3.1-8b", {"strategy": "fsdp2", "cp_size": 2}, {}),
    "cp-moe": ("qwen3-30b-a3b", {"strategy": "fsdp2", "cp_size": 2, "ep_size": 4}, {}),
    "peft": ("llama-3.1-8b", {"strategy": "fsdp2", "tp_size": 2},
             {"peft": {"_target_": "nemo_automodel.components._peft.lora.PeftConfig", "match_all_linear": True,
                       "dim": 16, "alpha": 32}}),
}


@pytest.mark.parametrize("name", sorted(STRATEGY_CASES))
def test_strategies_build_under_automodel(worker: ModelWorker, name: str) -> None:
    model, distributed, extra = STRATEGY_CASES[name]
    recipe = {"model": {"pretrained_model_name_or_path": model}, "distributed": distributed,
              "step_scheduler": {"global_batch_size": 64, "local_batch_size": 1}, **extra}
    _check_built(recipe, 8, 8, worker, name)
    built = build_model_dry_run(recipe, world_size=8, worker=worker)
    [rank] = built.ranks
    if name == "peft":  # LoRA: the frozen base has no gradients; only the adapters train
        assert 0 < rank.grad_bytes < rank.param_bytes / 100
    if name == "ddp":  # replicated: every rank holds the whole model
        assert rank.param_bytes == rank.param_bytes_even


def _mfsdp_recipe(model: str, **distributed) -> dict:
    return {"model": {"pretrained_model_name_or_path": model},
            "distributed": {"strategy": "megatron_fsdp", **distributed},
            "step_scheduler": {"global_batch_size": 64, "local_batch_size": 1}}


def test_megatron_fsdp_builds_with_its_flat_buffers(worker: ModelWorker) -> None:
    """MegatronFSDP (its wrapping under FakeTensorMode): tp2 dp4, the bytes its flat-buffer shards hold."""
    recipe = _mfsdp_recipe("llama-3.1-8b", tp_size=2)
    _check_built(recipe, 8, 8, worker, "megatron_fsdp tp2")
    [rank] = build_model_dry_run(recipe, world_size=8, worker=worker).ranks
    assert rank.model_class == "LlamaForCausalLM" and rank.plans["tp_sharded"] > 0
    # bf16 weights over dp·tp = 8 (8.03e9 parameters), padded by at most 0.1%
    assert 8.03e9 * 2 / 8 < rank.param_bytes_even <= rank.param_bytes < rank.param_bytes_even * 1.001
    assert rank.grad_bytes == rank.param_bytes and rank.optimizer_bytes == 2 * rank.param_bytes
    # fp32 main weights beside the bf16 ones, fp32 gradients, AdamW on the fp32 main weights
    fp32 = _mfsdp_recipe("llama-3.1-8b", tp_size=2, preserve_fp32_weights=True, grad_reduce_in_fp32=True)
    [main] = build_model_dry_run(fp32, world_size=8, worker=worker).ranks
    assert main.param_bytes == 3 * rank.param_bytes and main.grad_bytes == 2 * rank.grad_bytes
    assert main.optimizer_bytes == 2 * rank.optimizer_bytes


@pytest.mark.parametrize("model", ["mixtral-8x7b", "qwen3-30b-a3b"])
def test_megatron_fsdp_refuses_moe_models_as_validate_says(worker: ModelWorker, model: str) -> None:
    """AutoModel's own class (no _no_split_modules) and Hugging Face's (no expert data-parallel group) both fail."""
    recipe = _mfsdp_recipe(model)
    built = build_model_dry_run(recipe, world_size=8, worker=worker)
    [rank] = built.ranks
    assert not built.ok and not rank.ok
    [finding] = [f for f in validate_recipe(recipe, world_size=8).errors]
    assert finding.rule == "am-mfsdp-moe" and finding.automodel_message in rank.error


@pytest.mark.parametrize(("strategy", "mode"), [("fsdp2", "selective"), ("fsdp2", "full"), ("fsdp2", "off"),
                                              ("ddp", "selective")])
def test_automodel_applies_the_emitted_checkpointing_mode(worker: ModelWorker, strategy: str, mode: str) -> None:
    """AutoModel's own build of a compiled recipe checkpoints as its activation_checkpointing says: every decoder
    block under the selective (op-level) policy, checkpoint wrappers without it for full, none when off."""
    spec = {"model": "meta-llama/Llama-3.2-1B", "hardware": {"gpu": "h100-80gb", "nodes": 1, "gpus_per_node": 2},
            "training": {"seq_length": 4096, "global_batch_size": 8},
            "parallelism": {"strategy": strategy, "activation_checkpointing": mode}}
    result = compile_intent(spec)
    assert result.layout.activation_checkpointing == mode
    report = build_model_dry_run(result.yaml, world_size=2, gpus_per_node=2, worker=worker)
    built = report.ranks[0]
    assert built.ok, built.error
    layers = len(built.layers)
    counts = built.checkpointing
    expected = {"selective": counts["wrapped"] == counts["selective"] == layers,
                "full": counts["wrapped"] >= layers and counts["selective"] == 0,
                "off": counts == {"wrapped": 0, "selective": 0}}
    assert expected[mode], (mode, counts, layers)
    if mode == "selective":
        assert f"{layers} selective" in render_model_report(report)


def test_uneven_expert_shards_are_refused_as_the_rule_says(worker: ModelWorker) -> None:
    """GPT-OSS's hidden size and expert width (2880) split over 64 expert data-parallel ranks but not over 128:
    AutoModel shards its grouped experts on dim 1, and FSDP2 refuses the uneven split with the rule's message."""
    from automodel_dist.layout import Layout
    from automodel_dist.rules.layout import check_layout

    model = next(p.spec for p in list_models() if p.id == "gpt-oss-20b")
    for ep, refused in ((2, True), (4, False)):
        built = worker.build(_family_request("gpt_oss", {"strategy": "fsdp2", "ep_size": ep}, 256))["ranks"]["0"]
        layout = Layout(world_size=256, ep=ep, global_batch_size=256, local_batch_size=1, micro_batch_size=1)
        findings = [f for f in check_layout(layout, model=model) if f.rule == "am-expert-shard-even"]
        assert built["ok"] is not refused and bool(findings) is refused, built
        if refused:
            assert findings[0].automodel_message.split(": torch")[0] in built["error"]
            assert "(world size: 128)" in built["error"] and "(world size: 128)" in findings[0].automodel_message

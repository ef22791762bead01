"""Properties of `compile` over random valid intents (hypothesis):

- the compiled recipe passes `validate_recipe` with no errors;
- its `distributed:` section is accepted by AutoModel 0.7.0's own mesh builder (the oracle, run under
  torch's fake process group in a worker process) and builds the meshes the layout says;
- `parse(emit(layout)) == layout`;
- the same intent compiles to the same bytes.
An intent nothing fits must instead fail with the closest layouts and at least one computed remedy.
"""

from __future__ import annotations

from typing import Any

from automodel_oracle import Oracle
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from automodel_dist.compiler import compile_intent
from automodel_dist.errors import InfeasibleError
from automodel_dist.layout import Layout
from automodel_dist.targets.automodel.parse import parse_recipe
from automodel_dist.validate import validate_recipe

MODELS = ("Qwen/Qwen3-30B-A3B", "Qwen/Qwen3-8B", "meta-llama/Llama-3.2-1B", "meta-llama/Llama-3.1-8B",
          "mistralai/Mixtral-8x7B-v0.1", "openai/gpt-oss-20b", "Qwen/Qwen2.5-7B", "meta-llama/Llama-3.1-70B")
GPUS = ("h100-80gb", "h200-141gb", "b200", "a100-80gb", "gb200-nvl72")


@st.composite
def intents(draw: Any) -> dict[str, Any]:
    gpu = draw(st.sampled_from(GPUS))
    per_node = 4 if gpu == "gb200-nvl72" else 8
    hardware: dict[str, Any] = {"gpu": gpu, "nodes": draw(st.sampled_from((1, 2, 3, 4, 8)))}
    if hardware["nodes"] == 1:
        hardware["gpus_per_node"] = draw(st.sampled_from(tuple(g for g in (1, 2, 4, 8) if g <= per_node)))
    task = draw(st.sampled_from(("sft", "pretrain", "peft")))
    training: dict[str, Any] = {"task": task, "seq_length": draw(st.sampled_from((2048, 4096, 8192, 16384))),
                                "global_batch_size": draw(st.sampled_from((16, 64, 128, 256, 512)))}
    if draw(st.booleans()):
        training["packed_sequences"] = draw(st.booleans())
    if task == "peft":
        training["peft"] = {"rank": draw(st.sampled_from((8, 16, 64)))}
    spec = {"model": draw(st.sampled_from(MODELS)), "hardware": hardware, "training": training,
            "objective": draw(st.sampled_from(("throughput", "memory")))}
    pins = draw(st.sampled_from(({}, {"activation_checkpointing": True}, {"activation_checkpointing": "selective"},
                                 {"activation_checkpointing": ["off", "selective"]}, {"tp": [1, 2]}, {"pp": 1},
                                 {"local_batch_size": [1, 2, 4]}, {"strategy": ["fsdp2", "megatron_fsdp"]},
                                 {"pp": [2, 4], "micro_batch_size": 1})))
    if pins:
        spec["parallelism"] = pins
    return spec


def expected_meshes(layout: Layout) -> tuple[list[int] | None, list[int] | None]:
    """The device mesh and MoE mesh shapes AutoModel builds for this layout (reference/automodel.md §5)."""
    if layout.strategy == "ddp":
        return None, None
    if layout.strategy == "megatron_fsdp":
        return [layout.dp, layout.cp, layout.tp], None
    shape = [layout.pp, layout.dp_replicate, layout.dp_shard, layout.cp, layout.tp]
    return shape, ([layout.ep_shard, layout.ep] if layout.ep > 1 else None)


@settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spec=intents())
def test_compiled_recipes_are_valid_buildable_round_trip_and_deterministic(oracle: Oracle,
                                                                          spec: dict[str, Any]) -> None:
    try:
        result = compile_intent(spec)
    except InfeasibleError as exc:  # what is closest (when anything passed the rules) and what would help
        assert exc.suggestions or "nothing tried makes it fit" in str(exc)
        assert exc.closest or "no layout is legal" in str(exc)
        return
    problem, layout = result.problem, result.layout
    cluster = problem.cluster
    world = cluster.world_size

    report = validate_recipe(result.yaml, world_size=world, gpus_per_node=cluster.gpus_per_node,
                             model=problem.model, gpu=cluster.gpu.name)
    assert report.errors == [], [f.message for f in report.errors]

    answer = oracle.ask(result.recipe["distributed"], world, [0])
    assert answer["ok"], answer.get("error")
    device_mesh, moe_mesh = expected_meshes(layout)
    assert (answer["device_mesh"] or {}).get("shape") == device_mesh
    assert (answer["moe_mesh"] or {}).get("shape") == moe_mesh

    assert parse_recipe(result.recipe, world_size=world, model=problem.model) == layout
    assert compile_intent(spec).yaml == result.yaml


def test_every_strategy_and_dimension_builds_in_automodel(oracle: Oracle) -> None:
    """Layouts the random intents rarely pick (HSDP, MegatronFSDP, DDP, PP with EP and CP) still build."""
    from automodel_dist.intent import load_intent, resolve_intent
    from automodel_dist.planner import make_layout, plan
    from automodel_dist.targets.automodel.emit import emit_recipe

    problem = resolve_intent(load_intent({"model": "Qwen/Qwen3-30B-A3B", "hardware": {"gpu": "h100-80gb", "nodes": 4},
                                          "training": {"seq_length": 4096, "global_batch_size": 256}}))
    est = plan(problem).best.estimate
    # with every checkpointing mode the planner may emit for the strategy (selective: fsdp2 and ddp only)
    sizes = [("ddp", 1, 1, 1, 1, 1, 1, "selective"), ("ddp", 1, 1, 1, 1, 1, 1, "full"),
             ("megatron_fsdp", 2, 1, 2, 1, 1, 1, "off"), ("fsdp2", 1, 1, 1, 8, 4, 1, "selective"),
             ("fsdp2", 2, 2, 2, 4, 2, 2, "full"), ("fsdp2", 1, 4, 2, 8, 1, 3, "selective"),
             ("fsdp2", 4, 1, 1, 16, 2, 1, "off")]
    for strategy, tp, pp, cp, ep, dpr, vpp, ac in sizes:
        layout = make_layout(problem, strategy=strategy, tp=tp, pp=pp, cp=cp, ep=ep, dp_replicate=dpr, vpp=vpp,
                             activation_checkpointing=ac, local_batch_size=8, micro_batch_size=1)
        _, recipe = emit_recipe(problem, layout, est)
        answer = oracle.ask(recipe["distributed"], 32, [0])
        assert answer["ok"], (layout.short(), answer.get("error"))
        device_mesh, moe_mesh = expected_meshes(layout)
        assert (answer["device_mesh"] or {}).get("shape") == device_mesh, layout.short()
        assert (answer["moe_mesh"] or {}).get("shape") == moe_mesh, layout.short()

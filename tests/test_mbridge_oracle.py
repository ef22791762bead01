"""Differential tests: the megatron-bridge target's rules against Megatron-Bridge 0.6.2 / MCore 0.19.2 themselves.

Three sets of override sets go to the oracle (tests/mbridge_oracle.py, one worker, batched):
1. every rule's trigger case and valid neighbour (tests/test_mbridge_rules.py) that a recipe the oracle can
   build offline expresses: the verdicts must agree, and on an error rule's trigger Megatron's message must
   contain ours;
2. hypothesis-generated override sets over the Qwen3-30B-A3B recipe: the verdicts must agree;
3. every override set `compile --target megatron-bridge` writes for the tuned-layout intents: Megatron
   accepts it.
The oracle emulates the GPU (its name and compute capability) and Transformer Engine 2.12.0; see there.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mbridge_oracle import Oracle, available
from test_mbridge_rules import DSV3, LLAMA_8B, MB_CASES, QWEN3_30B

from automodel_dist.catalog.specs import ClusterSpec, ModelSpec
from automodel_dist.findings import ERROR
from automodel_dist.targets.megatron_bridge.choose import comm_overlap_class, layout_dispatcher
from automodel_dist.targets.megatron_bridge.compile import compile_megatron
from automodel_dist.targets.megatron_bridge.emit import hydra_overrides
from automodel_dist.targets.megatron_bridge.overrides import OverrideSet
from automodel_dist.targets.megatron_bridge.parse import megatron_layout
from automodel_dist.targets.megatron_bridge.recipes import recipe_for
from automodel_dist.targets.megatron_bridge.rules import check_overrides

pytestmark = [
    pytest.mark.mbridge_oracle,
    pytest.mark.skipif(not available(), reason="the Megatron-Bridge oracle venv (.venv-mb) is not installed: "
                                                "run scripts/setup-mbridge-oracle.sh"),
]
EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "intents"
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
# Device names Megatron-Bridge's flex-dispatcher check reads (torch.cuda.get_device_properties), by preset.
DEVICES = {"h100-80gb": ("NVIDIA H100 80GB HBM3", 9, 0), "h200-141gb": ("NVIDIA H200", 9, 0),
           "b200": ("NVIDIA B200", 10, 0), "gb200-nvl72": ("NVIDIA GB200", 10, 0),
           "gb300-nvl72": ("NVIDIA GB300", 10, 3), "a100-80gb": ("NVIDIA A100-SXM4-80GB", 8, 0)}
ORACLE_MODELS = {m.name: m for m in (QWEN3_30B, DSV3, LLAMA_8B)}


@pytest.fixture(scope="module")
def oracle() -> Any:
    worker = Oracle()
    yield worker
    worker.close()


def _norm(text: str) -> str:
    return " ".join(text.split())


# Rules that judge what Megatron checks only after its config-time validation (the oracle's reach): Megatron
# accepts their trigger there and refuses it later.
LATER_THAN_CONFIG = {
    "mb-cp-comm-type": "Transformer Engine refuses an unknown cp_comm_type when it builds the attention layer",
    "mb-cuda-graph-rng": "GPTModelProvider asserts the TE RNG tracker when it builds the model",
    "mb-ep-divides-experts": "MCore's MoE layer asserts it when it builds the experts",
    "mb-fp8-gpu": "Transformer Engine checks the FP8 recipe against the GPU at the first FP8 forward "
                  "(check_recipe_support); the oracle runs on a CPU",
}
# Megatron's config-time wording of the same arithmetic (it checks the evaluation batch, which defaults to the
# training batch, before the training batch's own "global batch size ... is not divisible by ..." at start-up).
SAME_CHECK = {"global batch size (": "eval_global_batch_size ("}


def message_agrees(ours: list[str], theirs: str) -> bool:
    theirs = _norm(theirs)
    return any(_norm(m)[:60] in theirs or any(m.startswith(a) and b in theirs for a, b in SAME_CHECK.items())
               for m in ours)


def task_of(override: OverrideSet) -> str:
    """The recipe kind an override set is for: a LoRA adapter is peft's, packed sequences the sft recipes'."""
    s = override.settings
    return "peft" if s.peft_dim else "sft" if s.packed_sequence_size else "pretrain"


def oracle_case(override: OverrideSet, model: ModelSpec, cluster: ClusterSpec | None) -> dict[str, Any]:
    recipe = recipe_for(model, task_of(override))
    assert recipe is not None
    s = replace(override.settings, comm_overlap=True,  # built with _target_ where the recipe leaves it None
                comm_overlap_target=None if recipe.comm_overlap else comm_overlap_class())
    layout = override.layout
    if model.is_moe and layout.dispatcher is None:  # the MoE keys are written for MoE models
        layout = replace(layout, dispatcher=layout_dispatcher(s.dispatcher_type, s.flex_backend))
    gpu = cluster.gpu.name if cluster else "h100-80gb"
    return {"recipe": recipe.function, "world_size": layout.world_size,
            "overrides": hydra_overrides(OverrideSet(layout, s)), "gpu": list(DEVICES[gpu]),
            "ours": OverrideSet(layout, s), "model": model, "cluster": cluster}


def our_errors(case: dict[str, Any]) -> list[str]:
    return [f.message for f in check_overrides(case["ours"], model=case["model"], cluster=case["cluster"])
            if f.severity == ERROR]


def send(oracle: Oracle, cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    wire = [{k: case[k] for k in ("recipe", "world_size", "overrides", "gpu")} for case in cases]
    return oracle.judge(wire)


def expressible(override: OverrideSet, extra: dict[str, Any]) -> bool:
    """A rule case the oracle can run: a model it builds offline, and keys the override set writes for it."""
    model = extra.get("model", QWEN3_30B)
    s = override.settings
    return (model.name in ORACLE_MODELS and recipe_for(model, task_of(override)) is not None
            and (model.is_moe or not (s.ep_overlap or s.delay_wgrad)))


@cache
def rule_cases() -> list[tuple[str, str, dict[str, Any]]]:
    """(rule, 'bad' | 'good', oracle case) for every expressible rule case."""
    out = []
    for rule, bad, good, extra in MB_CASES:
        model, cluster = extra.get("model", QWEN3_30B), extra.get("cluster")
        for kind, case in (("bad", bad), ("good", good)):
            if expressible(case, extra):
                out.append((rule, kind, oracle_case(case, model, cluster)))
    return out


def test_every_rule_case_agrees_with_megatron(oracle: Oracle) -> None:
    cases = rule_cases()
    verdicts = send(oracle, [c for _, _, c in cases])
    disagree, wording = [], []
    for (rule, kind, case), theirs in zip(cases, verdicts, strict=True):
        ours = our_errors(case)
        if kind == "bad" and rule in LATER_THAN_CONFIG:
            assert ours and theirs["ok"], (rule, ours, theirs)  # Megatron's config-time checks let it through
        elif bool(ours) == theirs["ok"]:
            disagree.append((rule, kind, ours, theirs["error"]))
        elif kind == "bad" and ours and not message_agrees(ours, theirs["error"]):
            wording.append((rule, ours, theirs["error"]))
    rules = {rule for rule, _, _ in cases}
    later = sum(kind == "bad" and rule in LATER_THAN_CONFIG for rule, kind, _ in cases)
    print(f"\nrule cases: {len(cases)} override sets over {len(rules)} rules; verdicts agree on "
          f"{len(cases) - len(disagree) - later} ({later} triggers Megatron checks after config time); "
          "Megatron's message contains ours on "
          f"{sum(k == 'bad' for _, k, _ in cases) - later - len(wording)} of "
          f"{sum(k == 'bad' for _, k, _ in cases) - later} triggers")
    assert disagree == []
    assert wording == []


def test_every_error_rule_is_checked_against_megatron() -> None:
    """Which rules the oracle judges; the rest say why not (warnings, or nothing offline expresses them)."""
    from test_mbridge_keys import covered_rules  # judged in tests/test_mbridge_fields_oracle.py

    from automodel_dist.rules import RULES
    from automodel_dist.rules.registry import SCRIPT

    judged = {rule for rule, kind, _ in rule_cases() if kind == "bad"} | covered_rules()
    mine = {rid for rid, r in RULES.items()  # the launch-script rules are judged with shellcheck and the CLI
            if r.target == "megatron-bridge" and r.severity == ERROR and r.path != SCRIPT}
    not_expressible = {
        "mb-tp-query-groups": "needs a model whose query groups neither divide nor are divided by TP",
        "mb-delay-wgrad-graph-attn-bias": "needs a model with attention bias (Qwen2.5) the oracle does not build",
        "mb-ep-overlap-experts": "the override set writes the MoE keys (EP overlap among them) for MoE models only",
        # TransformerConfig asserts both at config time ("Bias in Moe is only supported when ETP==1"; "linear_num_key_
        # heads=16 must be a multiple of (tensor_model_parallel_size=8 * context_parallel_size=4)"), on models this
        # oracle does not build offline
        "mb-moe-bias-etp": "needs GPT-OSS (biased experts), which the oracle does not build offline",
        "mb-tp-cp-linear-heads": "needs Qwen3-Next (Gated DeltaNet), which the oracle does not build offline",
    }
    assert mine - judged == set(not_expressible)


# -- hypothesis-generated override sets --------------------------------------------------------------------
GENERATED: list[OverrideSet] = []


@st.composite
def qwen_override_sets(draw: st.DrawFn) -> OverrideSet:
    from automodel_dist.targets.megatron_bridge.overrides import MegatronSettings

    world = draw(st.sampled_from([8, 12, 16, 24, 32, 64]))
    tp, pp, cp = draw(st.sampled_from([1, 2, 4, 8])), draw(st.sampled_from([1, 2, 4])), draw(st.sampled_from([1, 2, 4]))
    vpp = draw(st.sampled_from([1, 2, 3, 4])) if pp > 1 else 1
    ep = draw(st.sampled_from([1, 2, 4, 8, 16, 32]))
    overlap = draw(st.booleans())
    granularity = draw(st.sampled_from([None, "selective", "full"]))
    s = MegatronSettings(
        comm_overlap=True, ep_overlap=overlap, dispatcher_type=draw(st.sampled_from(["alltoall", "flex"])),
        flex_backend=draw(st.sampled_from([None, "deepep", "hybridep"])),
        shared_expert_overlap=draw(st.booleans()) if not overlap else False,
        recompute_granularity=granularity,
        recompute_method=draw(st.sampled_from([None, "uniform"])) if granularity else None,
        recompute_num_layers=draw(st.sampled_from([None, 1])) if granularity else None,
        recompute_modules=draw(st.sampled_from([("moe_act",), ("moe",), ("core_attn", "layernorm")]))
        if granularity == "selective" else None,
        cuda_graph_impl=draw(st.sampled_from(["none", "transformer_engine"])),
        cuda_graph_scope=draw(st.sampled_from([(), ("moe_router", "moe_preprocess"), ("attn",), ("moe",)])),
        te_rng_tracker=True, cp_comm_type=draw(st.sampled_from(["p2p", "a2a+p2p"])),
        hierarchical_cp_sizes=draw(st.sampled_from([None, (2, 2), (2, 1)])) if cp > 1 else None,
        seq_length=draw(st.sampled_from([4096, 6144])))
    layout = megatron_layout(world, tp=tp, pp=pp, vpp=vpp, cp=cp, ep=ep, sequence_parallel=tp > 1,
                             global_batch_size=draw(st.sampled_from([256, 768])),
                             micro_batch_size=draw(st.sampled_from([1, 2])),
                             activation_checkpointing=granularity or "off",
                             dispatcher=layout_dispatcher(s.dispatcher_type, s.flex_backend))
    return OverrideSet(layout, s)


@settings(max_examples=300, database=None, suppress_health_check=list(HealthCheck), deadline=None)
@given(qwen_override_sets())
def _collect(x: OverrideSet) -> None:
    GENERATED.append(x)


def test_generated_override_sets_agree_with_megatron(oracle: Oracle) -> None:
    GENERATED.clear()
    _collect()
    cases = [oracle_case(x, QWEN3_30B, None) for x in GENERATED]
    verdicts = send(oracle, cases)
    disagree = [(case["overrides"], our_errors(case), theirs["error"])
                for case, theirs in zip(cases, verdicts, strict=True) if bool(our_errors(case)) == theirs["ok"]]
    invalid = sum(not v["ok"] for v in verdicts)
    print(f"\ngenerated: {len(cases)} override sets ({invalid} invalid per Megatron); verdicts agree on "
          f"{len(cases) - len(disagree)}")
    assert disagree == [], "\n".join(f"{o}\n  ours: {e}\n  theirs: {t}" for o, e, t in disagree[:5])


# -- the compiler's own output ------------------------------------------------------------------------------
COMPILED = ["qwen3-30b-a3b-16xh100", "deepseek-v3-256xgb200",
            "deepseek-v3-1024xh100", "qwen3-235b-a22b-256xh100", "qwen3-235b-a22b-128xgb200",
            "llama-3.1-70b-32xh100"]


# Beyond the examples and the card: Moonlight (a DeepSeek-V3 architecture without MTP) for each of its recipes, and
# Qwen3-Next pinned to an even pipeline split (its recipe's MTP layer on the last stage, no layout string)
MORE_INTENTS = [
    *({"model": "moonshotai/Moonlight-16B-A3B", "hardware": {"gpu": "h100-80gb", "nodes": 1},
       "training": {"task": task, "seq_length": 4096, "global_batch_size": 64}}
      for task in ("pretrain", "sft", "peft")),
    {"model": "Qwen/Qwen3-Next-80B-A3B-Instruct", "hardware": {"gpu": "h100-80gb", "nodes": 4},
     "training": {"task": "pretrain", "seq_length": 4096, "global_batch_size": 1024}, "parallelism": {"pp": 4}},
]


def test_compiled_override_sets_pass_megatron(oracle: Oracle) -> None:
    """The examples' override sets, the hardware-config card's (benchmarks/mbridge_tuned.py: expert tensor
    parallelism among them; Qwen3-Next's recipe is built from Qwen3NextConfig's defaults, which are the
    80B-A3B's: 48 layers, 512 experts, hidden 2048) and MORE_INTENTS'."""
    from mbridge_tuned import ROWS, intent

    cards = [intent(row) for row in ROWS] + MORE_INTENTS
    cases = []
    for source in [EXAMPLES / f"{name}.yaml" for name in COMPILED] + cards:
        result = compile_megatron(source)
        cases.append({"recipe": result.recipe_function, "world_size": result.layout.world_size,
                      "overrides": list(result.hydra), "gpu": list(DEVICES[result.problem.cluster.gpu.name])})
    verdicts = send(oracle, cases)
    failed = [(c["recipe"], v["error"]) for c, v in zip(cases, verdicts, strict=True) if not v["ok"]]
    print(f"\ncompiled: {len(cases) - len(failed)} of {len(cases)} override sets pass Megatron-Bridge's validation")
    assert failed == []


def test_yaml_file_passes_megatrons_own_loader(oracle: Oracle, tmp_path: Path) -> None:
    """The YAML file, merged by Megatron-Bridge's config-file path, is accepted like the Hydra list."""
    cases = []
    for name in ("deepseek-v3-256xgb200", "qwen3-30b-a3b-16xh100"):
        result = compile_megatron(EXAMPLES / f"{name}.yaml")
        path = tmp_path / f"{name}.yaml"
        path.write_text(result.yaml, encoding="utf-8")
        cases.append({"recipe": result.recipe_function, "world_size": result.layout.world_size, "overrides": [],
                      "config_file": str(path), "gpu": list(DEVICES[result.problem.cluster.gpu.name])})
    assert [v["error"] for v in oracle.judge(cases)] == [None, None]


def _card_intents() -> list[dict]:
    """One card row per model (the last; not the 1,024-GPU H100 row), as the card table compiles it."""
    from mbridge_tuned import ROWS, intent

    return [intent(row) for row in {row.model: row for row in ROWS if (row.gpu, row.gpus) != ("h100-80gb", 1024)}
            .values()]


def _deepseek_v3_at_tp2() -> list[dict]:
    """DeepSeek-V3's GB200 card row pinned to TP2, where its bridge's 1280 x TP vocabulary padding (2,560: 130,560
    rows) differs from Megatron's default 128 x TP (129,280 itself)."""
    from mbridge_tuned import ROWS, intent

    row = next(row for row in ROWS if row.model == "deepseek-ai/DeepSeek-V3" and row.gpu == "gb200-nvl72")
    return [{**intent(row), "parallelism": {"tp": 2}}]


@pytest.mark.parametrize("intents", [_card_intents, _deepseek_v3_at_tp2], ids=["card-rows", "deepseek-v3-tp2"])
def test_megatron_flop_count_is_megatron_bridges_own(oracle: Oracle, intents: Any) -> None:
    """The card table converts predictions into Megatron-Bridge's TFLOP/s with `plan.megatron_flops`: on the
    compiled override set of one card row per model (the recipe's MTP depth, its vocabulary padding, Gated
    DeltaNet), and of DeepSeek-V3 at TP2 (its bridge pads to 1280 x TP), it equals Megatron-Bridge's own
    `num_floating_point_operations` over the sequence's tokens."""
    from automodel_dist.targets.megatron_bridge.plan import megatron_flops

    results = [compile_megatron(one) for one in intents()]
    cases = [{"recipe": r.recipe_function, "world_size": r.layout.world_size, "overrides": list(r.hydra),
              "gpu": list(DEVICES[r.problem.cluster.gpu.name]), "flops": True} for r in results]
    verdicts = oracle.judge(cases)
    assert [v["error"] for v in verdicts] == [None] * len(cases)
    for result, verdict in zip(results, verdicts, strict=True):
        seq = result.problem.training.seq_length
        ours = megatron_flops(result.problem, result.layout)
        assert ours * seq == pytest.approx(verdict["values"]["flops"], rel=1e-9), result.recipe_function
    if intents is _deepseek_v3_at_tp2:
        assert [r.layout.tp for r in results] == [2]

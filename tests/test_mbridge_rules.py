"""Every Megatron-Bridge rule fires on a case that breaks it and stays quiet on the valid neighbour.

Cases are override sets (`mb`): a Megatron layout plus settings; `check_overrides` judges them with the
model and cluster the case names. `MB_CASES` also feeds the registry-coverage test in test_rules.py.
The messages are Megatron's own (checked against the installed packages by tests/test_mbridge_oracle.py).
"""

from __future__ import annotations

from typing import Any

import pytest

from automodel_dist.catalog.hardware import get_gpu
from automodel_dist.catalog.models import resolve_model
from automodel_dist.catalog.specs import ClusterSpec
from automodel_dist.findings import ERROR
from automodel_dist.rules import RULES
from automodel_dist.targets.megatron_bridge.overrides import PRETRAINED_FROM_ENV, MegatronSettings, OverrideSet
from automodel_dist.targets.megatron_bridge.parse import megatron_layout
from automodel_dist.targets.megatron_bridge.rules import check_overrides, check_sbatch, expand_layout

QWEN3_30B = resolve_model("qwen3-30b-a3b")   # 48 layers, 32 heads, 4 KV heads, 128 experts
DSV3 = resolve_model("deepseek-v3")          # 61 layers, MLA, 256 experts, shared expert
LLAMA_8B = resolve_model("llama-3.1-8b")     # dense, 32 layers, 8 KV heads
QWEN25_7B = resolve_model("qwen2.5-7b")      # attention (qkv) bias
H100_2 = ClusterSpec(get_gpu("h100-80gb"), nodes=2, gpus_per_node=8)
GB200_16 = ClusterSpec(get_gpu("gb200-nvl72"), nodes=4, gpus_per_node=4)
V100_LIKE = ClusterSpec(get_gpu("a100-80gb"), nodes=2, gpus_per_node=8)


def mb(world: int = 16, settings: MegatronSettings | None = None, **layout: Any) -> OverrideSet:
    layout.setdefault("global_batch_size", 1024)
    return OverrideSet(megatron_layout(world, **layout), settings or MegatronSettings())


S = MegatronSettings
EPO = S(ep_overlap=True)
GRAPHS = S(cuda_graph_impl="transformer_engine", cuda_graph_scope=("moe_router", "moe_preprocess"),
           te_rng_tracker=True)
DWC_ATTN = S(ep_overlap=True, delay_wgrad=True, cuda_graph_impl="transformer_engine",
             cuda_graph_scope=("attn",), te_rng_tracker=True)
Q = {"model": QWEN3_30B}
LAYOUT_4 = "Et*12|t*12|t*12|t*12L"  # Qwen3-30B-A3B's 48 layers in 4 stages: VPP 2 at PP 2
# The sft/peft recipes' keys as the compiler writes them (choose.finetune): packed, CP-ready, checkpoint from
# the environment (the oracle worker sets it), and a LoRA adapter for peft.
SFT_CP = S(packed_sequence_size=4096, pad_seq_to_mult=4, per_token_loss=True, average_in_collective=False,
           pretrained_checkpoint=PRETRAINED_FROM_ENV)
PEFT = S(packed_sequence_size=4096, pad_seq_to_mult=1, pretrained_checkpoint=PRETRAINED_FROM_ENV, peft_dim=16,
         peft_alpha=32)
MB_CASES: list[tuple[str, OverrideSet, OverrideSet, dict[str, Any]]] = [
    ("mb-world-divisible", mb(16, tp=3), mb(16, tp=2), {}),
    ("mb-expert-world-divisible", mb(12, ep=16, global_batch_size=1536), mb(16, ep=16), {}),
    ("mb-expert-world-divisible", mb(16, pp=2, ep=16, vpp=1), mb(32, pp=2, ep=16), {}),
    ("mb-sp-needs-tp", mb(sequence_parallel=True), mb(tp=2, sequence_parallel=True), {}),
    ("mb-vpp-needs-pp", mb(vpp=2), mb(pp=2, vpp=2), {}),
    ("mb-vpp-needs-pp", mb(16, S(vpp_set_to_one=True)), mb(16), Q),  # VPP 1 is set, not None
    ("mb-vpp-needs-pp", mb(16, S(pipeline_layout=LAYOUT_4)), mb(16, S(pipeline_layout="Et*48L")), Q),  # sets VPP 4
    ("mb-vpp-divides-stage-layers", mb(16, S(account_for_embedding=True, account_for_loss=True), pp=2, vpp=4),
     mb(16, S(account_for_embedding=True, account_for_loss=True), pp=2, vpp=5), Q),
    ("mb-packed-micro-batch", mb(16, S(packed_sequence_size=4096), micro_batch_size=2),
     mb(16, S(packed_sequence_size=4096)), {}),
    ("mb-gbs-divisible", mb(16, global_batch_size=24), mb(16, global_batch_size=32), {}),
    ("mb-tp-heads", mb(24, tp=3), mb(16, tp=2), Q),
    ("mb-tp-query-groups", mb(48, tp=6), mb(16, tp=8), {"model": LLAMA_8B.__class__(**{
        **LLAMA_8B.__dict__, "name": "custom-48-heads", "num_attention_heads": 48, "num_key_value_heads": 4})}),
    ("mb-ep-needs-moe", mb(ep=8), mb(), {"model": LLAMA_8B}),
    ("mb-ep-divides-experts", mb(48, ep=48, global_batch_size=1536), mb(32, ep=32), Q),
    # Qwen3-Next's Gated DeltaNet: 16 key and 32 value heads split over TP·CP; TP8 CP4 = 32 does not divide 16.
    ("mb-tp-cp-linear-heads", mb(64, tp=8, cp=4, ep=2), mb(64, tp=8, cp=2, ep=2),
     {"model": resolve_model("qwen3-next-80b-a3b")}),
    # GPT-OSS (36 layers, 128 experts, biased expert linears): Megatron asserts ETP 1; the same TP2 EP8 passes.
    ("mb-moe-bias-etp", mb(16, tp=2, ep=8, etp=2), mb(16, tp=2, ep=8), {"model": resolve_model("gpt-oss-120b")}),
    ("mb-pp-divides-layers", mb(20, pp=5), mb(16, pp=4), Q),
    ("mb-vpp-divides-stage-layers", mb(16, pp=2, vpp=5), mb(16, pp=2, vpp=4), Q),
    ("mb-pipeline-layout", mb(64, S(pipeline_layout="Et*3|(tt|)*28m|L", mtp_num_layers=1), pp=8, vpp=4),
     mb(64, S(pipeline_layout="Et*3|(tt|)*29m|L", mtp_num_layers=1), pp=8, vpp=4), {"model": DSV3}),
    ("mb-pipeline-layout", mb(64, S(pipeline_layout="Et*3|(tt|)*29|L", mtp_num_layers=1), pp=8, vpp=4),
     mb(64, S(pipeline_layout="Et*3|(tt|)*29m|L", mtp_num_layers=1), pp=8, vpp=4), {"model": DSV3}),
    ("mb-pipeline-layout", mb(64, S(pipeline_layout="Et*3|(tt|)*29m|L", mtp_num_layers=1, account_for_loss=True),
                              pp=8, vpp=4),
     mb(64, S(pipeline_layout="Et*3|(tt|)*29m|L", mtp_num_layers=1), pp=8, vpp=4), {"model": DSV3}),
    ("mb-pipeline-layout", mb(16, S(pipeline_layout=LAYOUT_4, vpp_set_to_one=True), pp=2),
     mb(16, S(pipeline_layout=LAYOUT_4), pp=2, vpp=2), Q),
    ("mb-pipeline-layout", mb(16, S(pipeline_layout=LAYOUT_4), pp=2, vpp=4),
     mb(16, S(pipeline_layout=LAYOUT_4), pp=2), Q),  # VPP None takes the layout's 2
    ("mb-pp-divides-layers", mb(16, S(account_for_embedding=True, account_for_loss=True), pp=4), mb(16, pp=4), Q),
    ("mb-cp-seq-divisible", mb(48, cp=3), mb(16, cp=4), {}),
    ("mb-seq-length-match", mb(16, S(dataset_seq_length=8192)), mb(16, S(dataset_seq_length=4096)), {}),
    ("mb-cp-comm-type", mb(16, S(cp_comm_type="ring"), cp=4), mb(16, S(cp_comm_type="a2a"), cp=4), {}),
    ("mb-hcp-sizes-missing", mb(16, S(cp_comm_type="a2a+p2p"), cp=4),
     mb(16, S(cp_comm_type="a2a+p2p", hierarchical_cp_sizes=(2, 2)), cp=4), {}),
    ("mb-hcp-sizes-product", mb(16, S(cp_comm_type="a2a+p2p", hierarchical_cp_sizes=(2, 4)), cp=4),
     mb(16, S(cp_comm_type="a2a+p2p", hierarchical_cp_sizes=(2, 2)), cp=4), {}),
    ("mb-hcp-inner-domain", mb(16, S(cp_comm_type="a2a+p2p", hierarchical_cp_sizes=(16, 1)), cp=16),
     mb(16, S(cp_comm_type="a2a+p2p", hierarchical_cp_sizes=(8, 2)), cp=16), {"cluster": H100_2}),
    ("mb-ep-overlap-ep", mb(16, EPO), mb(16, EPO, ep=16), Q),
    ("mb-ep-overlap-experts", mb(16, EPO), mb(16), {"model": LLAMA_8B}),
    ("mb-ep-overlap-dispatcher", mb(16, EPO.with_(dispatcher_type="allgather"), ep=16), mb(16, EPO, ep=16), Q),
    ("mb-ep-overlap-vpp", mb(16, EPO, pp=2, ep=8), mb(16, EPO, pp=2, vpp=2, ep=8), Q),
    ("mb-ep-overlap-vpp", mb(16, EPO.with_(pipeline_layout=LAYOUT_4), pp=2, ep=8),  # asked before the layout sets it
     mb(16, EPO.with_(pipeline_layout=LAYOUT_4), pp=2, vpp=2, ep=8), Q),
    ("mb-ep-overlap-full-recompute", mb(16, EPO.with_(recompute_granularity="full", recompute_method="uniform",
                                                        recompute_num_layers=1), ep=16),
     mb(16, EPO.with_(recompute_granularity="selective", recompute_modules=("moe_act",)), ep=16), Q),
    ("mb-ep-overlap-recompute-method", mb(16, EPO.with_(recompute_granularity="selective",
                                                          recompute_method="uniform"), ep=16),
     mb(16, EPO.with_(recompute_granularity="selective"), ep=16), Q),
    ("mb-ep-overlap-recompute-layers", mb(16, EPO.with_(recompute_granularity="selective",
                                                          recompute_num_layers=2), ep=16),
     mb(16, EPO.with_(recompute_granularity="selective"), ep=16), Q),
    ("mb-ep-overlap-moe-recompute", mb(16, EPO.with_(recompute_granularity="selective", recompute_modules=("moe",)),
                                       ep=16),
     mb(16, EPO.with_(recompute_granularity="selective", recompute_modules=("moe_act",)), ep=16), Q),
    ("mb-ep-overlap-shared-expert", mb(16, EPO.with_(shared_expert_overlap=True), ep=16), mb(16, EPO, ep=16), Q),
    ("mb-ep-overlap-mtp", mb(16, EPO.with_(mtp_num_layers=2), ep=16), mb(16, EPO.with_(mtp_num_layers=1), ep=16),
     {"model": DSV3}),
    ("mb-delay-wgrad-needs-overlap", mb(16, S(delay_wgrad=True), ep=16),
     mb(16, S(delay_wgrad=True, ep_overlap=True), ep=16), Q),
    ("mb-delay-wgrad-graph-fusion", mb(16, DWC_ATTN.with_(gradient_accumulation_fusion=False), ep=16),
     mb(16, DWC_ATTN, ep=16), Q),
    ("mb-delay-wgrad-graph-fusion", mb(16, DWC_ATTN.with_(gradient_accumulation_fusion=False,
                                                        cuda_graph_scope=("moe_router",)), ep=16),
     mb(16, DWC_ATTN.with_(gradient_accumulation_fusion=False, cuda_graph_scope=("moe_router",)), ep=16), Q),
    ("mb-delay-wgrad-graph-attn-bias", mb(16, DWC_ATTN.with_(ep_overlap=False, delay_wgrad=True)),
     mb(16, DWC_ATTN.with_(ep_overlap=False, delay_wgrad=True, cuda_graph_scope=())), {"model": QWEN25_7B}),
    ("mb-flex-backend-gpu", mb(16, S(dispatcher_type="flex", flex_backend="deepep"), ep=16),
     mb(16, S(dispatcher_type="flex", flex_backend="hybridep"), ep=16), {"cluster": GB200_16}),
    ("mb-flex-backend-ignored", mb(16, S(flex_backend="deepep"), ep=16),
     mb(16, S(dispatcher_type="flex", flex_backend="deepep"), ep=16), {}),
    ("mb-flex-without-backend", mb(16, S(dispatcher_type="flex"), ep=16),
     mb(16, S(dispatcher_type="flex", flex_backend="hybridep"), ep=16), {}),
    ("mb-tp-crosses-nvlink", mb(16, tp=16), mb(16, tp=8), {"cluster": H100_2}),
    # Transformer Engine's recipe support: MXFP8 needs Blackwell, any FP8 needs sm89 (A100 is sm80)
    ("mb-fp8-gpu", mb(16, S(precision="bf16_with_mxfp8_mixed")),
     mb(16, S(precision="bf16_with_fp8_subchannel_scaling_mixed")), {"cluster": H100_2}),
    ("mb-fp8-gpu", mb(16, S(precision="bf16_with_fp8_current_scaling_mixed")), mb(16, S(precision="bf16_mixed")),
     {"cluster": V100_LIKE}),
    ("mb-recompute-granularity", mb(16, S(recompute_granularity="partial")),
     mb(16, S(recompute_granularity="selective")), {}),
    ("mb-recompute-full-args", mb(16, S(recompute_granularity="full")),
     mb(16, S(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1)), {}),
    ("mb-recompute-full-args", mb(16, S(recompute_granularity="selective", recompute_num_layers=1)),
     mb(16, S(recompute_granularity="selective")), {}),
    ("mb-recompute-modules", mb(16, S(recompute_granularity="selective", recompute_modules=("attention",))),
     mb(16, S(recompute_granularity="selective", recompute_modules=("core_attn",))), {}),
    ("mb-recompute-modules", mb(16, S(recompute_granularity="selective", recompute_modules=("mla_up_proj",))),
     mb(16, S(recompute_granularity="selective", recompute_modules=("moe_act",))), Q),
    ("mb-recompute-modules", mb(16, S(precision="bf16_with_fp8_delayed_scaling_mixed",
                                      recompute_granularity="selective", recompute_modules=("moe_act",))),
     mb(16, S(precision="bf16_with_fp8_current_scaling_mixed", recompute_granularity="selective",
              recompute_modules=("moe_act",))), Q),  # delayed scaling keeps no moe_act/layernorm recompute
    ("mb-recompute-modules", mb(64, S(recompute_granularity="selective", recompute_modules=("shared_experts",),
                                      shared_expert_overlap=True), ep=8),
     mb(64, S(recompute_granularity="selective", recompute_modules=("shared_experts",)), ep=8),
     {"model": DSV3}),  # DeepSeek-V3's shared expert: recomputed or overlapped, not both
    ("mb-cuda-graph-impl", mb(16, S(cuda_graph_impl="cudagraph")), mb(16, S(cuda_graph_impl="none")), {}),
    ("mb-cuda-graph-scope", mb(16, GRAPHS.with_(cuda_graph_scope=("moe", "moe_router"))), mb(16, GRAPHS), {}),
    ("mb-cuda-graph-scope", mb(16, GRAPHS.with_(cuda_graph_scope=("moe_preprocess",))), mb(16, GRAPHS), {}),
    ("mb-cuda-graph-local-scope", mb(16, GRAPHS.with_(cuda_graph_impl="local", cuda_graph_scope=("attn",))),
     mb(16, GRAPHS.with_(cuda_graph_impl="local", cuda_graph_scope=("full_iteration",),
                         check_for_nan_in_loss=False)), {}),
    # MCore 0.19's own full-iteration implementation: no per-layer scope, and it carries full recompute
    ("mb-cuda-graph-scope", mb(16, S(cuda_graph_impl="full_iteration", cuda_graph_scope=("attn",),
                                     te_rng_tracker=True, check_for_nan_in_loss=False)),
     mb(16, S(cuda_graph_impl="full_iteration", te_rng_tracker=True, check_for_nan_in_loss=False,
              recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1)), {}),
    ("mb-cuda-graph-scope", mb(16, GRAPHS.with_(cuda_graph_scope=("mlp",))), mb(16, GRAPHS), Q),  # no dense layer
    ("mb-cuda-graph-scope", mb(16, GRAPHS), mb(16, GRAPHS.with_(cuda_graph_scope=("attn", "mlp"))),
     {"model": LLAMA_8B}),  # a dense model has no router to graph
    ("mb-cuda-graph-scope", mb(64, GRAPHS.with_(cuda_graph_scope=("mlp", "moe_router", "moe_preprocess"),
                                                ep_overlap=True, dispatcher_type="alltoall"), ep=8),
     mb(64, GRAPHS.with_(cuda_graph_scope=("mlp", "moe_router", "moe_preprocess")), ep=8), {"model": DSV3}),
    ("mb-cuda-graph-moe-dropless", mb(16, GRAPHS.with_(cuda_graph_scope=("moe",))), mb(16, GRAPHS), {}),
    ("mb-cuda-graph-full-recompute", mb(16, GRAPHS.with_(recompute_granularity="full", recompute_method="uniform",
                                                         recompute_num_layers=1)),
     mb(16, GRAPHS.with_(recompute_granularity="selective", recompute_modules=("moe_act",))), {}),
    ("mb-cuda-graph-nan-check", mb(16, S(cuda_graph_impl="local", cuda_graph_scope=("full_iteration",),
                                         te_rng_tracker=True)),
     mb(16, S(cuda_graph_impl="local", cuda_graph_scope=("full_iteration",), te_rng_tracker=True,
              check_for_nan_in_loss=False)), {}),
    ("mb-cuda-graph-packed-attn", mb(16, GRAPHS.with_(cuda_graph_scope=("attn",), packed_sequence_size=4096)),
     mb(16, GRAPHS.with_(packed_sequence_size=4096)), {}),
    ("mb-cuda-graph-rng", mb(16, GRAPHS.with_(te_rng_tracker=False)), mb(16, GRAPHS), {}),
    ("mb-cuda-graph-moe-recompute", mb(16, GRAPHS.with_(recompute_granularity="selective",
                                                        recompute_modules=("moe",))),
     mb(16, GRAPHS.with_(recompute_granularity="selective", recompute_modules=("moe_act",))), {}),
    ("mb-finetune-cp-per-token-loss", mb(16, SFT_CP.with_(per_token_loss=None), cp=2), mb(16, SFT_CP, cp=2), {}),
    ("mb-finetune-cp-per-token-loss", mb(16, PEFT.with_(per_token_loss=False, average_in_collective=False), cp=2),
     mb(16, PEFT.with_(per_token_loss=True, average_in_collective=False), cp=2), {}),
    ("mb-finetune-cp-average-in-collective", mb(16, SFT_CP.with_(average_in_collective=True), cp=2),
     mb(16, SFT_CP, cp=2), {}),
    ("mb-finetune-cp-average-in-collective", mb(16, SFT_CP.with_(average_in_collective=None), cp=2),
     mb(16, SFT_CP.with_(average_in_collective=None)), {}),
    ("mb-packed-cp-padding", mb(16, SFT_CP.with_(pad_seq_to_mult=2), cp=2), mb(16, SFT_CP.with_(pad_seq_to_mult=8),
                                                                            cp=2), {}),
    ("mb-peft-pretrained-checkpoint", mb(16, PEFT.with_(pretrained_checkpoint=None)), mb(16, PEFT), {}),
]


GOOD_SBATCH = """#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=8
export HF_HOME="$SHARED_DIR/hf_home"
srun --no-container-mount-home python scripts/training/run_recipe.py --recipe x
"""
SBATCH_CASES: list[tuple[str, str, str]] = [
    ("launch-ntasks-per-node", GOOD_SBATCH.replace("python scripts", "torchrun --nproc_per_node=8 scripts"),
     GOOD_SBATCH.replace("=8", "=1").replace("python scripts", "torchrun --nproc_per_node=8 scripts")),
    ("mb-slurm-task-per-gpu", GOOD_SBATCH.replace("=8", "=1"), GOOD_SBATCH),
    ("mb-slurm-mount-home-directive", GOOD_SBATCH.replace("#SBATCH --nodes=2", "#SBATCH --no-container-mount-home"),
     GOOD_SBATCH),
    ("mb-slurm-dist-vars", GOOD_SBATCH.replace("export HF", "export WORLD_SIZE=16\nexport HF"), GOOD_SBATCH),
    ("mb-slurm-secret", GOOD_SBATCH.replace("export HF", "export HF_TOKEN=hf_abc123\nexport HF"),
     GOOD_SBATCH.replace("export HF", ': "${HF_TOKEN:?set it}"\nexport HF')),
    ("launch-node-local-cache", GOOD_SBATCH.replace("$SHARED_DIR/hf_home", "/root/.cache/hf"), GOOD_SBATCH),
    ("launch-env-reassigned", GOOD_SBATCH.replace("export HF", "export NCCL_DEBUG=INFO\nexport NCCL_DEBUG=WARN\n"
                                                               "export HF"),
     GOOD_SBATCH.replace("export HF", "export NCCL_DEBUG=INFO\nexport NCCL_DEBUG=INFO\nexport HF")),
]


@pytest.mark.parametrize(("rule", "bad", "good"), SBATCH_CASES, ids=[c[0] for c in SBATCH_CASES])
def test_mb_sbatch_rule_fires_and_neighbour_passes(rule: str, bad: str, good: str) -> None:
    def fired(text: str) -> set[str]:
        return {f.rule for f in check_sbatch(text, gpus_per_node=8, multi_node=True)}

    assert rule in fired(bad)
    assert fired(good) == set()


def _fired(case: OverrideSet, extra: dict[str, Any]) -> set[str]:
    return {f.rule for f in check_overrides(case, model=extra.get("model"), cluster=extra.get("cluster"))}


@pytest.mark.parametrize(("rule", "bad", "good", "extra"), MB_CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(MB_CASES)])
def test_mb_rule_fires_and_neighbour_passes(rule: str, bad: OverrideSet, good: OverrideSet,
                                            extra: dict[str, Any]) -> None:
    if rule == "mb-delay-wgrad-graph-fusion" and bad == good:  # moe_router triggers only with shared experts
        assert rule not in _fired(bad, extra)
        assert rule in _fired(bad, {"model": DSV3})
        return
    assert rule in _fired(bad, extra)
    assert rule not in _fired(good, extra)



def test_a_dense_models_inherited_dispatcher_keys_are_not_flagged() -> None:
    """Dense recipes (Llama) carry the MoE dispatcher defaults; no dispatcher runs, so nothing to warn about."""
    inherited = mb(16, S(flex_backend="deepep"))
    assert "mb-flex-backend-ignored" not in _fired(inherited, {"model": LLAMA_8B})
    assert "mb-flex-backend-ignored" in _fired(mb(16, S(flex_backend="deepep"), ep=16), {})


def test_every_mb_rule_is_megatron_targeted_and_has_a_case() -> None:
    mine = {rid for rid, rule in RULES.items() if rule.target == "megatron-bridge"}
    from test_mbridge_keys import covered_rules

    assert mine == ({c[0] for c in MB_CASES} | {c[0] for c in SBATCH_CASES if c[0].startswith("mb-")}
                    | covered_rules())
    assert all(rid.startswith("mb-") for rid in mine)


def test_min_gpu_formula_matches_the_card_table() -> None:
    """megatron-bridge.md Appendix C: each tuned layout is legal at its stated GPU count (max() formula)."""
    rows = [(1024, 2, 8, 1, 64), (256, 1, 8, 1, 32), (256, 1, 4, 1, 64), (256, 2, 8, 1, 32), (128, 2, 4, 1, 16),
            (128, 1, 4, 1, 32), (32, 1, 1, 1, 8), (16, 1, 1, 1, 16), (64, 1, 2, 1, 32), (256, 1, 8, 32, 32),
            (512, 1, 8, 64, 32), (128, 4, 4, 4, 32)]
    for world, tp, pp, cp, ep in rows:
        vpp = 2 if pp > 1 else 1
        errors = [f for f in check_overrides(mb(world, tp=tp, pp=pp, vpp=vpp, cp=cp, ep=ep, global_batch_size=8192))
                  if f.severity == ERROR]
        assert errors == [], (world, tp, pp, cp, ep, errors)
    # the skill's own misfit: "DeepSeek-V3 671B on 256 GPUs" as TP2 PP16 EP64 needs 1024
    bad = check_overrides(mb(256, tp=2, pp=16, vpp=1, ep=64))
    assert "mb-expert-world-divisible" in {f.rule for f in bad}
    assert "= 1024" in next(f.hint for f in bad if f.rule == "mb-expert-world-divisible")


def test_layout_grammar_unrolls_like_mcore() -> None:
    stages = expand_layout("Et*3|(tt|)*29m|L")
    assert len(stages) == 32 and "".join(stages).count("t") == 61 and stages[-2:] == ("m", "L")

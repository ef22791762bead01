"""Every rule fires on a case that breaks it, and stays quiet on the valid neighbour one step away.

Layout rules are driven through `check_layout` (what the planner calls); recipe rules through
`validate_recipe` on a mapping (the whole chain: env resolution, value translation, parse, rules), and
launch rules the same way, with the sbatch script that launches the recipe where a rule reads it.
A final test checks that every registered rule id has a case here.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from launch_support import LAUNCH_LINE, TORCHRUN_SBATCH, USR1_SBATCH

from automodel_dist.catalog.hardware import get_gpu
from automodel_dist.catalog.models import resolve_model
from automodel_dist.catalog.specs import ClusterSpec
from automodel_dist.findings import ERROR
from automodel_dist.layout import Layout
from automodel_dist.problem import TrainingSpec
from automodel_dist.rules import RULES, check_layout
from automodel_dist.validate import validate_recipe
from automodel_dist.verify.model_dryrun import RankModel

LLAMA_8B = resolve_model("llama-3.1-8b")      # 32 layers, 32 heads, 8 KV heads, untied
LLAMA_1B = resolve_model("llama-3.2-1b")      # tied embeddings
QWEN3_MOE = resolve_model("qwen3-30b-a3b")    # 128 routed experts
MIXTRAL = resolve_model("mixtral-8x7b")       # 8 experts, served by Hugging Face code (no packed CP, no EP)
GPT_OSS = resolve_model("gpt-oss-20b")        # 32 experts, AutoModel's own MoE class (EP, no TP plan)
H100_2_NODES = ClusterSpec(get_gpu("h100-80gb"), nodes=2, gpus_per_node=8)
GB200_RACK = ClusterSpec(get_gpu("gb200-nvl72"), nodes=4, gpus_per_node=4)
PACKED_4K = TrainingSpec(seq_length=4096, packed_sequences=True)


def lay(world: int = 8, **fields: Any) -> Layout:
    """A layout whose batch sizes divide out unless a case says otherwise."""
    fields.setdefault("global_batch_size", 1024)
    return Layout(world_size=world, **fields)


# Two nodes, {tasks} srun tasks in all (one per node is right), each starting torchrun.
SRUN_TASKS_SBATCH = ("#!/bin/bash\n#SBATCH -N 2\nMASTER=$(scontrol show hostnames | head -n 1)\n"
                     "srun -n {tasks} bash -c 'torchrun --nproc_per_node=8 --nnodes=2 -m nemo_automodel.cli.app "
                     "r.yaml'\n")
PP = {"pp_schedule": "1f1b", "local_batch_size": 8}
LAYOUT_CASES: list[tuple[str, Layout, Layout, dict[str, Any]]] = [
    ("am-r9-world-divisible", lay(tp=3), lay(tp=2), {}),
    ("am-r9-world-divisible", lay(strategy="megatron_fsdp", cp=3), lay(strategy="megatron_fsdp", cp=2), {}),
    ("mesh-world-product", lay(tp=2, dp_size=2), lay(tp=2, dp_size=4), {}),
    ("mesh-world-product", lay(dp_size=16), lay(dp_size=8), {}),
    ("am-r10-hsdp-needs-fsdp2", lay(strategy="megatron_fsdp", dp_replicate=2), lay(dp_replicate=2), {}),
    ("am-r11-strategy-feature", lay(strategy="ddp", tp=2), lay(strategy="ddp"), {}),
    ("am-r11-strategy-feature", lay(strategy="megatron_fsdp", pp=2, **PP), lay(pp=2, **PP), {}),
    ("am-r11-strategy-feature", lay(strategy="megatron_fsdp", ep=2), lay(ep=2), {}),
    ("am-r12-dp-replicate-multiple", lay(tp=2, dp_replicate=3), lay(tp=2, dp_replicate=2), {}),
    ("am-r12-dp-replicate-below-dp", lay(dp_replicate=8), lay(dp_replicate=4), {}),
    ("am-r13-ep-divides-non-pp", lay(tp=2, ep=3), lay(tp=2, ep=4), {}),
    ("am-r13-ep-divides-non-pp", lay(16, pp=2, ep=16, **PP), lay(16, pp=2, ep=8, **PP), {}),
    ("am-r3-unknown-option", lay(strategy="megatron_fsdp", sequence_parallel=True),
     lay(sequence_parallel=True), {}),
    ("am-r27-moe-tp-sequence-parallel", lay(16, tp=2, ep=8, sequence_parallel=True), lay(16, tp=2, ep=8), {}),
    ("mfsdp-ac-skipped", lay(strategy="megatron_fsdp", activation_checkpointing=True),
     lay(activation_checkpointing=True), {}),
    ("am-r5-selective-ac", lay(strategy="megatron_fsdp", activation_checkpointing="selective"),
     lay(strategy="ddp", activation_checkpointing="selective"), {}),
    ("am-r30-mfsdp-no-dp-shard", lay(strategy="megatron_fsdp", tp=8), lay(strategy="megatron_fsdp", tp=4), {}),
    ("am-r31-lbs-divisible-by-mbs", lay(pp=2, pp_schedule="1f1b", local_batch_size=5, micro_batch_size=2),
     lay(pp=2, pp_schedule="1f1b", local_batch_size=4, micro_batch_size=2), {}),
    ("am-r18-pp-microbatches", lay(pp=4, pp_schedule="1f1b", local_batch_size=2),
     lay(pp=4, pp_schedule="1f1b", local_batch_size=4), {}),
    ("am-r33-stages-per-rank", lay(pp=2, pp_schedule="interleaved1f1b", local_batch_size=8),
     lay(pp=2, pp_schedule="interleaved1f1b", vpp=2, local_batch_size=8), {}),
    ("am-r33-stages-per-rank", lay(pp=2, vpp=2, **PP), lay(pp=2, **PP), {}),
    ("am-r33-stages-per-rank", lay(pp=2, pp_schedule="zbvzerobubble", vpp=3, local_batch_size=8),
     lay(pp=2, pp_schedule="zbvzerobubble", vpp=2, local_batch_size=8), {}),
    ("am-r35-microbatches-below-stages", lay(pp=2, pp_schedule="interleaved1f1b", vpp=4, local_batch_size=2),
     lay(pp=2, pp_schedule="interleaved1f1b", vpp=4, local_batch_size=4), {}),
    ("pp-schedule-microbatches", lay(pp=4, pp_schedule="interleaved1f1b", vpp=2, local_batch_size=9),
     lay(pp=4, pp_schedule="interleaved1f1b", vpp=2, local_batch_size=8), {}),
    ("pp-schedule-microbatches", lay(pp=2, pp_schedule="dualpipev", vpp=2, local_batch_size=3),
     lay(pp=2, pp_schedule="dualpipev", vpp=2, local_batch_size=4), {}),
    ("am-r39-gbs-divisible", lay(global_batch_size=12), lay(global_batch_size=16), {}),
    ("am-r39-gbs-divisible", lay(strategy="ddp", global_batch_size=4), lay(strategy="ddp", global_batch_size=8), {}),
    ("am-r37-mok-world", lay(6, dispatcher="mok", global_batch_size=6), lay(8, dispatcher="mok"), {}),
    ("am-r37-flex-dispatcher-one-gpu", lay(1, dispatcher="deepep"), lay(1, dispatcher="torch"), {}),
    ("am-r24-tp-divides-heads", lay(16, tp=16), lay(16, tp=8), {"model": LLAMA_8B}),
    ("am-r22-ep-needs-moe", lay(ep=2), lay(ep=2), {"model": LLAMA_8B, "good_model": QWEN3_MOE}),
    ("am-r22-ep-needs-moe", lay(ep=8), lay(ep=8), {"model": MIXTRAL, "good_model": QWEN3_MOE}),
    ("am-r22-tp-plan", lay(tp=2, ep=4), lay(ep=8), {"model": QWEN3_MOE}),
    ("am-r22-tp-plan", lay(tp=2), lay(tp=2), {"model": GPT_OSS, "good_model": MIXTRAL}),
    ("am-mfsdp-moe", lay(strategy="megatron_fsdp"), lay(), {"model": MIXTRAL}),
    ("am-mfsdp-moe", lay(strategy="megatron_fsdp"), lay(strategy="megatron_fsdp"),
     {"model": QWEN3_MOE, "good_model": LLAMA_8B}),
    ("am-r26-ep-divides-experts", lay(64, ep=64), lay(64, ep=32), {"model": GPT_OSS}),
    # gpt-oss's 2880-wide hidden and experts: 128 expert data-parallel ranks split them unevenly, 64 evenly
    ("am-expert-shard-even", lay(256, ep=2, global_batch_size=256), lay(256, ep=4, global_batch_size=256),
     {"model": GPT_OSS}),
    ("pp-vpp-whole-layers", lay(32, pp=4, pp_schedule="interleaved1f1b", vpp=7, local_batch_size=32),
     lay(32, pp=4, pp_schedule="interleaved1f1b", vpp=2, local_batch_size=32), {"model": LLAMA_8B}),
    ("cp-seq-padded", lay(cp=2), lay(cp=2), {"training": TrainingSpec(seq_length=4098),
                                             "good_training": TrainingSpec(seq_length=4096)}),
    ("moe-dispatcher-package", lay(ep=8, dispatcher="deepep"), lay(ep=8, dispatcher="torch"), {}),
    ("moe-dispatcher-gpu", lay(256, ep=64, dispatcher="deepep"), lay(256, ep=64, dispatcher="hybridep"),
     {"cluster": ClusterSpec(get_gpu("gb200-nvl72"), nodes=64, gpus_per_node=4)}),
    ("am-r34-stages-exceed-layers", lay(16, pp=16, pp_schedule="interleaved1f1b", vpp=4, local_batch_size=64),
     lay(16, pp=16, pp_schedule="interleaved1f1b", vpp=2, local_batch_size=64), {"model": LLAMA_8B}),
    ("am-r36-pp-tied-embeddings", lay(pp=2, **PP), lay(pp=2, **PP), {"model": LLAMA_1B, "good_model": LLAMA_8B}),
    ("am-r20-cp-packing-support", lay(cp=2), lay(cp=2),
     {"model": MIXTRAL, "good_model": LLAMA_8B, "training": PACKED_4K}),
    ("pack-seq-divisible-by-2cp", lay(cp=4), lay(cp=4),
     {"training": TrainingSpec(seq_length=4100, packed_sequences=True), "good_training": PACKED_4K}),
    ("topo-tp-crosses-node", lay(16, tp=16), lay(16, tp=8), {"cluster": H100_2_NODES}),
    ("topo-tp-crosses-node", lay(16, tp=16), lay(16, tp=16),  # 16 GPUs, 4 per node
     {"cluster": GB200_RACK, "good_cluster": ClusterSpec(get_gpu("h100-80gb"), nodes=1, gpus_per_node=16)}),
    ("topo-ep-leaves-nvlink", lay(16, ep=16), lay(16, ep=8), {"cluster": H100_2_NODES}),
    ("topo-ep-leaves-nvlink", lay(16, ep=16), lay(16, ep=16), {"cluster": H100_2_NODES, "good_cluster": GB200_RACK}),
]


def _kwargs(extra: dict[str, Any], good: bool) -> dict[str, Any]:
    out = {}
    for key in ("model", "cluster", "training"):
        value = extra.get(f"good_{key}", extra.get(key)) if good else extra.get(key)
        if value is not None:
            out[key] = value
    return out


@pytest.mark.parametrize(("rule", "bad", "good", "extra"), LAYOUT_CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(LAYOUT_CASES)])
def test_layout_rule_fires_and_neighbour_passes(rule: str, bad: Layout, good: Layout, extra: dict[str, Any]) -> None:
    fired = check_layout(bad, **_kwargs(extra, good=False))
    assert rule in {f.rule for f in fired}
    finding = next(f for f in fired if f.rule == rule)
    assert finding.severity == RULES[rule].severity
    assert finding.message and finding.hint and finding.path
    clean = check_layout(good, **_kwargs(extra, good=True))
    assert rule not in {f.rule for f in clean}
    assert [f for f in clean if f.severity == ERROR] == []


def test_automodel_wording_is_formatted_with_the_values() -> None:
    [finding] = check_layout(lay(tp=2, ep=3))
    assert finding.automodel_message == "non_pp_size=8 must be a multiple of ep_size=3"
    assert "1, 2, 4, 8" in finding.hint
    [finding] = check_layout(lay(tp=3))
    assert finding.automodel_message == ("world_size (8) must be divisible by (tp_size * cp_size * pp_size) "
                                         "(3 * 1 * 1 = 3)")


def test_a_valid_pipelined_moe_layout_has_no_findings() -> None:
    """The layout benchmarks/per_layout_speed.py times: valid, so the checker runs every rule to the end."""
    layout = lay(64, pp=2, cp=2, ep=8, pp_schedule="interleaved1f1b", vpp=2, local_batch_size=4)
    kwargs = {"model": QWEN3_MOE, "cluster": ClusterSpec(get_gpu("h100-80gb"), nodes=8, gpus_per_node=8),
              "training": PACKED_4K}
    assert check_layout(layout, **kwargs) == []


# --------------------------------------------------------------------------------------------------
# Recipe rules, through validate_recipe
# --------------------------------------------------------------------------------------------------
BASE = {"recipe": "TrainFinetuneRecipeForNextTokenPrediction",
        "distributed": {"strategy": "fsdp2"},
        "step_scheduler": {"global_batch_size": 64, "local_batch_size": 1},
        "model": {"_target_": "my_pkg.build_model"},  # no model id: model-aware rules only where a case names one
        "optimizer": {"_target_": "torch.optim.AdamW", "lr": 1.0e-5}}
DELETE = object()
MOCK_DATASET = "nemo_automodel.components.datasets.llm.mock_iterable_dataset.MockIterableDataset"
MOCK_SAMPLES = "nemo_automodel.components.datasets.llm.mock.build_unpacked_dataset"  # samples the loader batches
PIPE = {"distributed.pp_size": 2, "step_scheduler.local_batch_size": 4}
CP_PACKED = {"distributed.cp_size": 2, "packed_sequence.packed_sequence_size": 4096}
KD_SPLIT = {"separate_meshes": True, "distributed.dp_size": 4, "teacher_distributed": {"dp_size": 2, "tp_size": 2}}


def recipe(changes: dict[str, Any]) -> dict[str, Any]:
    """BASE with dotted keys set (DELETE removes a key)."""
    out = copy.deepcopy(BASE)
    for dotted, value in changes.items():
        node = out
        *parents, last = dotted.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        if value is DELETE:
            node.pop(last, None)
        else:
            node[last] = copy.deepcopy(value)
    return out


RECIPE_CASES: list[tuple[str, dict[str, Any], dict[str, Any], dict[str, Any]]] = [
    ("am-r1-recipe-target", {"recipe": DELETE}, {}, {}),
    ("am-r1-recipe-target", {"recipe": {"_target_": ""}}, {"recipe": {"_target_": "pkg.Recipe"}}, {}),
    ("am-recipe-class-unknown", {"recipe": "TrainFinetuneRecipe"}, {"recipe": " TrainEagle3Recipe "}, {}),
    ("am-recipe-class-unknown", {"recipe": {"_target_": "FinetuneRecipeForVlm"}},
     {"recipe": {"_target_": "my_pkg.recipes.MyRecipe"}}, {}),
    ("am-section-misspelled", {"step_schedular": {"local_batch_size": 2}},
     {"step_scheduler.local_batch_size": 2, "my_defaults": {"lr": 1e-4}, "_anchors": {}}, {}),
    ("am-section-misspelled", {"Peft": {"dim": 8}}, {"validation_dataset_squad": {"path": "squad"}}, {}),
    ("am-section-missing", {"optimizer": DELETE}, {"optimizer": DELETE, "recipe": "TrainEagle3Recipe"}, {}),
    ("am-section-missing", {"model": DELETE}, {"model": DELETE, "recipe": "my_pkg.MyRecipe"}, {}),
    ("am-section-unknown-key", {"lr_scheduler": {"warmup_steps": 100}}, {"lr_scheduler": {"lr_warmup_steps": 100}},
     {}),
    ("am-section-unknown-key", {"checkpoint": {"checkpoint_path": "/ckpt"}},
     {"checkpoint": {"checkpoint_dir": "/ckpt", "restore_from": "/ckpt/step_100"}}, {}),
    ("am-section-unknown-key", {"validation_dataloader_squad": {"num_worker": 2}},
     {"validation_dataloader_squad": {"num_workers": 2}, "lr_scheduler": {"warmup_ratio": 0.1},
      "recipe": "TrainDSparkRecipe"}, {}),  # the drafter recipes read their own keys
    ("am-r22-cp-attention", {"distributed.cp_size": 2, "model.backend": {"attn": "sdpa"}},
     {"distributed.cp_size": 2, "model.backend": {"attn": "te"}}, {"model": "qwen3-30b-a3b"}),
    ("am-r22-cp-attention", {"distributed.cp_size": 2, "model.backend": {"attn": "flex"}},
     {"distributed.cp_size": 2, "model.backend": {"attn": "flex"}}, {"model": "qwen3-30b-a3b",
                                                                    "good_model": "mixtral-8x7b"}),  # HF class
    ("am-dist-backend", {"dist_env": {"backend": "ncl"}}, {"dist_env": {"backend": "NCCL"}}, {}),
    ("am-dist-backend", {"dist_env": {"backend": "my_backend"}}, {"dist_env": {"backend": "cpu:gloo,cuda:nccl"}}, {}),
    ("am-preemption-signal", {"step_scheduler.preemption_signal": "SIGUSR"},
     {"step_scheduler.preemption_signal": ["usr1", "SIGTERM", 15]}, {}),
    ("am-preemption-signal", {"step_scheduler.preemption_signal": 99}, {"step_scheduler.preemption_signal": 10}, {}),
    ("am-target-path", {"model.backend": {"_target_": "nemo_automodel.components.moe.utils.BackendConfig"}},
     {"model.backend": {"_target_": "nemo_automodel.components.models.common.BackendConfig"}}, {}),  # moved
    ("am-target-path", {"optimizer": {"_target_": "torch.optim.Adamw"}},
     {"optimizer": {"_target_": "torch.optim.AdamW"}}, {}),
    ("am-target-path", {"model": {"_target_": "nemo_automodel.NeMoAutoModelForCausalLM.from_pretrain"}},
     {"model": {"_target_": "nemo_automodel.NeMoAutoModelForCausalLM.from_pretrained"}}, {}),
    ("am-target-path", {"dataset": {"_target_": "nemo_automodel.components.datasets.llm.sqaud.make_squad_dataset"}},
     {"dataset": {"_target_": "nemo_automodel.components.datasets.llm.squad.make_squad_dataset",
                  "collate_fn": "my_pkg.collate"}}, {}),  # a user's own package is not judged
    ("am-rng-unread", {"rng": {"seed": 1111}}, {"rng": {"seed": 1111}, "seed": 1111}, {}),
    ("am-rng-unread", {"rng": {"seed": 7}, "seed": 3}, {"rng": {"seed": 42}}, {}),
    ("am-r2-env-var", {"distributed.tp_size": "${AMD_TEST_UNSET_TP}"},
     {"distributed.tp_size": "${AMD_TEST_UNSET_TP,2}"}, {}),
    ("am-r2-env-var", {"checkpoint.checkpoint_dir": "$AMD_TEST_UNSET_DIR/ckpt"},
     {"checkpoint.checkpoint_dir": "${oc.env:AMD_TEST_UNSET_DIR,/shared/runs}/ckpt"}, {}),
    ("am-distributed-missing", {"distributed": DELETE}, {"distributed": DELETE, "recipe": "TrainEagle3Recipe"}, {}),
    ("am-distributed-missing", {"distributed": None}, {"distributed": None, "recipe": "pkg.TrainDFlashRecipe"}, {}),
    ("am-r3-unknown-strategy", {"distributed.strategy": "zero3"}, {"distributed.strategy": "MFSDP"}, {}),
    ("am-r3-unknown-strategy", {"distributed.strategy": None}, {"distributed.strategy": "FSDP2"}, {}),
    ("am-r3-unknown-option", {"distributed.sequence_paralel": True}, {"distributed.sequence_parallel": True}, {}),
    ("am-r3-unknown-option", {"distributed.strategy": "megatron_fsdp", "distributed.sequence_parallel": False},
     {"distributed.strategy": "megatron_fsdp", "distributed.overlap_grad_reduce": False}, {}),
    ("am-pipeline-unknown-key", {**PIPE, "distributed.pipeline": {"pp_schedul": "1f1b"}},
     {**PIPE, "distributed.pipeline": {"pp_schedule": "1f1b"}}, {}),
    ("am-moe-unknown-key", {"distributed.ep_size": 2, "distributed.moe": {"wrap_outer": True}},
     {"distributed.ep_size": 1, "distributed.moe": {"wrap_outer": True}}, {}),  # ep 1 drops the block
    ("am-r4-ac-value", {"distributed.activation_checkpointing": "sometimes"},
     {"distributed.activation_checkpointing": "Full"}, {}),
    ("am-r5-selective-ac", {"distributed.strategy": "megatron_fsdp", "distributed.activation_checkpointing":
                            "selective"}, {"distributed.activation_checkpointing": "selective"}, {}),
    ("am-r6-pipeline-missing", PIPE, {**PIPE, "distributed.pipeline": {}}, {}),
    ("am-r6-pipeline-ignored", {"distributed.pipeline": {}}, {"distributed.pipeline": None}, {}),
    ("am-r7-ac-scope", {"distributed.activation_checkpointing_scope": "language,bogus"},
     {"distributed.activation_checkpointing_scope": "language+vision"}, {}),
    ("am-r7-ac-scope", {"distributed.activation_checkpointing_scope": ["all", "vision"]},
     {"distributed.activation_checkpointing_scope": ["language", "vision"]}, {}),
    ("am-r8-multimodal", {"distributed.multimodal": {"frozen_sharding": "rooot"}},
     {"distributed.multimodal": {"frozen_sharding": "per_layer"}}, {}),
    ("am-dtype-string", {"distributed.mp_policy": {"param_dtype": "fp32"}},
     {"distributed.mp_policy": {"param_dtype": "torch.BFloat16"}}, {}),
    ("am-r32-schedule-name", {**PIPE, "distributed.pipeline": {"pp_schedule": "interleaved_1f1b"}},
     {**PIPE, "distributed.pipeline": {"pp_schedule": "Interleaved1F1B"}}, {}),
    ("am-r32-schedule-name", {**PIPE, "distributed.pipeline": {"pp_schedule": None}},
     {**PIPE, "distributed.pipeline": {"pp_schedule": "GPipe"}}, {}),
    ("am-r33-virtual-stages",
     {**PIPE, "distributed.pipeline": {"pp_schedule": "interleaved1f1b", "layers_per_stage": 5}},
     {**PIPE, "distributed.pipeline": {"pp_schedule": "interleaved1f1b", "layers_per_stage": 8}},
     {"model": "llama-3.1-8b"}),
    ("am-r33-virtual-stages",
     {**PIPE, "distributed.pipeline": {"layers_per_stage": 5, "round_virtual_stages_to_pp_multiple": "nearest"}},
     {**PIPE, "distributed.pipeline": {"layers_per_stage": 11, "round_virtual_stages_to_pp_multiple": "down"}},
     {"model": "llama-3.1-8b"}),
    ("am-r23-async-tp-needs-sp", {"distributed.tp_size": 2, "distributed.enable_async_tensor_parallel": True},
     {"distributed.tp_size": 2, "distributed.enable_async_tensor_parallel": True,
      "distributed.sequence_parallel": True}, {}),
    ("am-r27-moe-async-tp", {"distributed.tp_size": 2, "distributed.ep_size": 4,
                             "distributed.enable_async_tensor_parallel": True},
     {"distributed.tp_size": 2, "distributed.ep_size": 4}, {}),
    ("am-r21-embedding-repair-pp", {**PIPE, "distributed.pipeline": {}, "embedding_row_repair": {"enabled": True}},
     {"embedding_row_repair": {"enabled": True}}, {}),
    ("am-r38-te-fp8", {"model.backend": {"linear": "torch", "experts": "torch_mm", "te_fp8": {"recipe": "current"}}},
     {"model.backend": {"linear": "te", "te_fp8": {"recipe": "current"}}}, {}),
    ("am-r38-te-fp8", {"model.backend": {"linear": "torch", "experts": "te", "dispatcher": "torch",
                                         "te_fp8": {"recipe": "block"}}},
     {"model.backend": {"linear": "torch", "experts": "te", "dispatcher": "deepep", "te_fp8": {"recipe": "block"}}},
     {}),
    ("am-r38-cuda-graph", {"model.backend": {"cuda_graph": {"modules": ["attn", "te_dpa"]}}},
     {"model.backend": {"cuda_graph": {"modules": ["te_dpa"]}}}, {}),
    ("am-r38-cuda-graph", {"model.backend": {"cuda_graph": {"modules": ["moe_router", "moe_preprocess"]},
                                             "dispatcher": "deepep"}},
     {"model.backend": {"cuda_graph": {"modules": ["moe_router", "moe_preprocess"]}, "dispatcher": "hybridep"}}, {}),
    ("am-r38-mok-config", {"model.backend": {"mok": {"minibatch_size": 1000}}},
     {"model.backend": {"mok": {"minibatch_size": 1024, "macrobatch_size": 131072}}}, {}),
    ("am-r39-step-scheduler-positive", {"step_scheduler.local_batch_size": 0}, {}, {}),
    ("am-r39-step-scheduler-positive", {"step_scheduler.max_steps": -5}, {"step_scheduler.max_steps": 5}, {}),
    ("am-r40-packing-strategy", {"packed_sequence": {"packed_sequence_size": 0, "packing_strategy": "fancy"}},
     {"packed_sequence": {"packed_sequence_size": 0, "packing_strategy": "neat"}}, {}),
    ("am-r41-checkpoint", {"checkpoint.model_save_format": "pickle"}, {"checkpoint.model_save_format": "torch_save"},
     {}),
    ("am-r41-checkpoint", {"checkpoint.max_recent_checkpoints": 0}, {"checkpoint.max_recent_checkpoints": 3}, {}),
    ("am-r42-kd-meshes", {"separate_meshes": True}, {**KD_SPLIT}, {}),
    ("am-r42-kd-meshes", {"teacher_distributed": {"strategy": "fsdp2"}}, {"separate_meshes": False}, {}),
    ("am-r42-kd-meshes", {**KD_SPLIT, "teacher_distributed.dp_size": 8}, KD_SPLIT, {}),
    ("am-r42-kd-meshes", {**KD_SPLIT, "distributed.dp_size": None}, KD_SPLIT, {}),
    ("am-r42-kd-meshes", {**KD_SPLIT, "teacher_distributed.strategy": "ddp"}, KD_SPLIT, {}),
    ("dist-env-timeout", {}, {"dist_env.timeout_minutes": 30}, {"world_size": 16}),
    # AutoModel builds timedelta(minutes=...): NaN, inf and 1e30 raise; torch refuses <= 0 and > int64 µs.
    ("dist-env-timeout-value", {"dist_env.timeout_minutes": float("nan")}, {"dist_env.timeout_minutes": 30}, {}),
    ("dist-env-timeout-value", {"dist_env.timeout_minutes": float("inf")}, {"dist_env.timeout_minutes": 1e9}, {}),
    ("dist-env-timeout-value", {"dist_env.timeout_minutes": 1e30}, {"dist_env.timeout_minutes": 1.5e11}, {}),
    ("dist-env-timeout-value", {"dist_env.timeout_minutes": -5}, {"dist_env.timeout_minutes": 0.5}, {}),
    ("dist-env-timeout-value", {"dist_env.timeout_minutes": "soon"}, {"dist_env.timeout_minutes": "10"}, {}),
    ("ddp-dp-size-ignored", {"distributed.strategy": "ddp", "distributed.dp_size": 4},
     {"distributed.strategy": "ddp", "distributed.dp_size": None}, {}),
    ("am-mock-batch-size", {"dataset": {"_target_": MOCK_DATASET, "batch_size": 8}},
     {"dataset": {"_target_": MOCK_DATASET, "batch_size": 1}}, {}),
    # The benchmarking recipe sets the dataset's batch_size to local_batch_size itself (recipes/llm/benchmark.py).
    ("am-mock-batch-size", {"dataset": {"_target_": MOCK_DATASET}, "step_scheduler.local_batch_size": 4},
     {"dataset": {"_target_": MOCK_DATASET}, "step_scheduler.local_batch_size": 4,
      "recipe": "BenchmarkingRecipeForNextTokenPrediction"}, {}),
    ("am-mock-batch-size", {"dataset": {"_target_": MOCK_DATASET}, "step_scheduler.local_batch_size": 2},
     {"dataset": {"_target_": MOCK_SAMPLES, "batch_size": 8}, "step_scheduler.local_batch_size": 2}, {}),
    ("schema", {"dist_env.backend": 5}, {"dist_env.backend": "nccl"}, {}),
    ("memory-fit", {"step_scheduler.local_batch_size": 8, "packed_sequence.packed_sequence_size": 8192},
     {"step_scheduler.local_batch_size": 1, "step_scheduler.global_batch_size": 8,
      "packed_sequence.packed_sequence_size": 2048, "distributed.activation_checkpointing": True},
     {"model": "llama-3.1-8b", "gpu": "a100-40gb"}),
    ("am-r20-cp-packing-support", {**CP_PACKED, "model.backend.attn": "sdpa"}, CP_PACKED, {"model": "qwen3-8b"}),
    ("am-r20-cp-packing-support", CP_PACKED, {**CP_PACKED, "model.attn_implementation": "te"},
     {"model": "mixtral-8x7b"}),
    ("skipped", {}, {}, {"good_model": "llama-3.1-8b"}),
    ("am-model-path", {"model.pretrained_model_name_or_path": "models/qwen3/config.json"},
     {"model.pretrained_model_name_or_path": "/models/qwen3"}, {}),
    ("am-model-path", {"model.config": {"pretrained_model_name_or_path": "../qwen3"}},
     {"model.config": {"pretrained_model_name_or_path": "Qwen/Qwen3-8B"}}, {}),
    # Launch rules: the recipe on two nodes, and (sbatch) the script that launches it.
    ("launch-ntasks-per-node", {}, {}, {"world_size": 16, "sbatch": TORCHRUN_SBATCH.format(tasks=8),
                                        "good_sbatch": TORCHRUN_SBATCH.format(tasks=1)}),
    ("launch-ntasks-per-node", {}, {}, {"world_size": 16, "sbatch": SRUN_TASKS_SBATCH.format(tasks=16),
                                        "good_sbatch": SRUN_TASKS_SBATCH.format(tasks=2)}),
    ("launch-script-nodes", {}, {}, {"world_size": 16, "sbatch": TORCHRUN_SBATCH.format(tasks=1).replace(
        "--nodes=2", "--nodes=4"), "good_sbatch": TORCHRUN_SBATCH.format(tasks=1)}),
    ("launch-preemption-signal", {}, {"step_scheduler.preemption_signal": ["SIGUSR1", "SIGTERM"]},
     {"sbatch": USR1_SBATCH}),
    ("launch-node-local-cache", {"checkpoint.checkpoint_dir": "/tmp/ckpt"},
     {"checkpoint.checkpoint_dir": "/lustre/ckpt"}, {"world_size": 16}),
    ("launch-node-local-cache", {}, {}, {"world_size": 16, "sbatch": "#!/bin/bash\nexport HF_HOME=/tmp/hf\n",
                                         "good_sbatch": "#!/bin/bash\nexport HF_HOME=/lustre/hf\n" + LAUNCH_LINE}),
    ("launch-ep-nvlink", {"distributed.ep_size": 16, "model.backend.dispatcher": "mok"},
     {"distributed.ep_size": 8, "model.backend.dispatcher": "mok"}, {"world_size": 16, "gpu": "h100-80gb"}),
    ("launch-ep-nvlink", {"distributed.ep_size": 16, "model.backend.dispatcher": "hybridep"},
     {"distributed.ep_size": 16, "model.backend.dispatcher": "hybridep"},
     {"world_size": 16, "gpu": "h100-80gb", "sbatch": "#!/bin/bash\n",
      "good_sbatch": "#!/bin/bash\nexport NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN=8\n" + LAUNCH_LINE}),
    ("launch-launcher-section", {"skypilot": {"cloud": "aws"}}, {},
     {"world_size": 16, "sbatch": TORCHRUN_SBATCH.format(tasks=1)}),
    # Start-up failures of the script itself: sbatch refuses it, bash cannot parse it, nothing starts torchrun.
    ("launch-sbatch-rejected", {}, {}, {"world_size": 16, "sbatch": " \n\t\n",
                                        "good_sbatch": TORCHRUN_SBATCH.format(tasks=1)}),
    ("launch-sbatch-rejected", {}, {}, {"world_size": 16,
                                        "sbatch": TORCHRUN_SBATCH.format(tasks=1).removeprefix("#!/bin/bash\n"),
                                        "good_sbatch": TORCHRUN_SBATCH.format(tasks=1)}),
    ("launch-sbatch-rejected", {}, {}, {"world_size": 16,
                                        "sbatch": TORCHRUN_SBATCH.format(tasks=1).replace("\n", "\r\n"),
                                        "good_sbatch": TORCHRUN_SBATCH.format(tasks=1)}),
    ("launch-sbatch-syntax", {}, {}, {"sbatch": "#!/bin/bash\nif [ -n \"$SLURM_JOB_ID\" ]; then\n" + LAUNCH_LINE,
                                      "good_sbatch": "#!/bin/bash\nif [ -n \"$SLURM_JOB_ID\" ]; then\n" + LAUNCH_LINE
                                      + "fi\n"}),
    ("launch-no-torchrun", {}, {}, {"world_size": 16,
                                    "sbatch": "#!/bin/bash\nsrun python -m nemo_automodel.cli.app r.yaml\n",
                                    "good_sbatch": "#!/bin/bash\n" + LAUNCH_LINE}),
    ("launch-no-torchrun", {}, {}, {"sbatch": "#!/bin/bash\nsrun python train.py\n",
                                    "good_sbatch": "#!/bin/bash\nsrun automodel recipe.yaml\n"}),
]


def _validate(changes: dict[str, Any], extra: dict[str, Any], good: bool) -> list[tuple[str, str]]:
    kwargs = {"world_size": extra.get("world_size", 8)}
    model = extra.get("good_model", extra.get("model")) if good else extra.get("model")
    if model is not None:
        kwargs["model"] = model
    if "gpu" in extra:
        kwargs["gpu"] = extra["gpu"]
    sbatch = extra.get("good_sbatch", extra.get("sbatch")) if good else extra.get("sbatch")
    if sbatch is not None:
        kwargs["sbatch"] = sbatch
    report = validate_recipe(recipe(changes), **kwargs)
    return [(f.rule, f.severity) for f in report.findings]


@pytest.mark.parametrize(("rule", "bad", "good", "extra"), RECIPE_CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(RECIPE_CASES)])
def test_recipe_rule_fires_and_neighbour_passes(rule: str, bad: dict[str, Any], good: dict[str, Any],
                                                extra: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AMD_TEST_UNSET_TP", raising=False)
    monkeypatch.delenv("AMD_TEST_UNSET_DIR", raising=False)
    fired = _validate(bad, extra, good=False)
    assert rule in {r for r, _ in fired}, fired
    clean = _validate(good, extra, good=True)
    assert rule not in {r for r, _ in clean}, clean
    assert [r for r, s in clean if s == ERROR] == []


# Rules the model-level dry-run files from what AutoModel's build says (verify/model_dryrun.py): an error
# no other rule predicts, and a TP/EP plan that sharded nothing; each with the answer that leaves it quiet.
GIB_BYTES = 1 << 30
MODEL_CASES = [
    # a rank's built weights, gradients and Adam states (bytes) against a 40 GB A100
    ("model-states-fit", RankModel(0, 0, True, param_bytes=10 * GIB_BYTES, grad_bytes=10 * GIB_BYTES,
                                   optimizer_bytes=21 * GIB_BYTES, param_bytes_even=2.7 * GIB_BYTES),
     RankModel(0, 0, True, param_bytes=5 * GIB_BYTES, grad_bytes=5 * GIB_BYTES, optimizer_bytes=10 * GIB_BYTES,
               param_bytes_even=5 * GIB_BYTES)),
    ("am-model-build", "AssertionError: Only Flex and TE Attention are supported for GPT-OSS",
     "ValueError: non_pp_size=8 must be a multiple of ep_size=3"),
    ("model-plan-unmatched", [{"tp_size": 2, "tp_sharded": 0}], [{"tp_size": 2, "tp_sharded": 113}]),
    ("model-plan-unmatched", [{"ep_size": 8, "ep_sharded": 0}] * 2,  # a stage of dense layers, then experts
     [{"ep_size": 8, "ep_sharded": 0}, {"ep_size": 8, "ep_sharded": 96}]),
]


@pytest.mark.parametrize(("rule", "bad", "good"), MODEL_CASES, ids=[c[0] for c in MODEL_CASES])
def test_model_build_rule_fires_and_neighbour_passes(rule: str, bad: Any, good: Any) -> None:
    from automodel_dist.verify.model_dryrun import error_finding, plan_findings, states_fit_findings

    def judge(answer: Any) -> list[str]:
        if isinstance(answer, str):
            return [error_finding(answer, 0, "model").rule]
        if isinstance(answer, RankModel):
            return [f.rule for f in states_fit_findings([answer], get_gpu("a100-40gb"))]
        return [f.rule for f in plan_findings(answer)]

    assert rule in judge(bad)
    assert rule not in judge(good)


def test_every_rule_has_a_case() -> None:
    from test_mbridge_keys import covered_rules
    from test_mbridge_rules import MB_CASES, SBATCH_CASES

    covered = ({c[0] for c in LAYOUT_CASES} | {c[0] for c in RECIPE_CASES} | {c[0] for c in MODEL_CASES}
               | {c[0] for c in MB_CASES} | {c[0] for c in SBATCH_CASES} | covered_rules())
    assert set(RULES) - covered == set()


def test_registry_entries_are_complete() -> None:
    for rule in RULES.values():
        assert rule.summary
        assert all(ref.startswith("R") and ref[1:].isdigit() for ref in rule.automodel)
        if rule.automodel:  # a check AutoModel makes carries the am- prefix
            assert rule.id.startswith("am-")


def test_ep_hint_lists_sizes_the_experts_and_ranks_allow() -> None:
    """On a GB200 rack (72-GPU NVLink domain) the hint must not suggest 3, 9 or 72 for 256 experts on 256 GPUs."""
    layout = lay(256, ep=128, dispatcher="hybridep")
    cluster = ClusterSpec(get_gpu("gb200-nvl72"), nodes=64, gpus_per_node=4)
    [finding] = [f for f in check_layout(layout, model=resolve_model("deepseek-v3"), cluster=cluster)
                 if f.rule == "topo-ep-leaves-nvlink"]
    assert finding.hint.endswith("inside the domain: 2, 4, 8")


def test_tp_plan_and_ep_messages_are_automodels() -> None:
    [tp] = [f for f in check_layout(lay(tp=2, ep=4), model=QWEN3_MOE) if f.rule == "am-r22-tp-plan"]
    assert tp.automodel_message.startswith("Tensor parallelism (tp_size=2) requested but Qwen3MoeForCausalLM has no "
                                           "TP plan (not in PARALLELIZE_FUNCTIONS")
    [ep] = [f for f in check_layout(lay(ep=8), model=MIXTRAL) if f.rule == "am-r22-ep-needs-moe"]
    assert ep.automodel_message.startswith("Expert parallelism (ep_size=8) requires a MoE model, but "
                                           "MixtralForCausalLM does not inherit from MoEFSDPSyncMixin")
    assert ep.message == ("ep_size=8 but mixtral-8x7b runs on Hugging Face's MixtralForCausalLM, which AutoModel "
                          "cannot expert-shard")
    [dense] = [f for f in check_layout(lay(ep=2), model=LLAMA_8B) if f.rule == "am-r22-ep-needs-moe"]
    assert dense.message == "ep_size=2 but llama-3.1-8b is a dense model with no experts"


def test_an_unknown_recipe_class_names_the_classes_it_may_mean() -> None:
    [truncated] = [f for f in validate_recipe(recipe({"recipe": "TrainFinetuneRecipe"}), world_size=8).findings
                   if f.rule == "am-recipe-class-unknown"]
    assert truncated.severity == ERROR and truncated.path == "recipe"
    assert "(did you mean 'TrainFinetuneRecipeForNextTokenPrediction' or " in truncated.message
    [mapped] = [f for f in validate_recipe(recipe({"recipe": {"_target_": "FinetuneRecipeForVlm"}}),
                                           world_size=8).findings if f.rule == "am-recipe-class-unknown"]
    assert mapped.path == "recipe._target_" and "(did you mean 'FinetuneRecipeForVLM'?)" in mapped.message


def test_recipe_classes_are_the_ones_automodel_resolves() -> None:
    from nemo_automodel.cli.utils import _discover_recipe_classes

    from automodel_dist.targets.automodel.recipe_classes import RECIPE_CLASSES

    assert {name: f"{module}.{name}" for name, module in RECIPE_CLASSES.items()} == _discover_recipe_classes()


def test_a_misspelled_section_names_the_one_it_means_at_its_key() -> None:
    findings = validate_recipe(recipe({"distenv": {"backend": "nccl"}, "Step-Scheduler": {}}), world_size=8).findings
    by_path = {f.path: f for f in findings if f.rule == "am-section-misspelled"}
    assert set(by_path) == {"distenv", "Step-Scheduler"}
    assert "did you mean `dist_env:`?" in by_path["distenv"].message
    assert "the recipe has a `step_scheduler:` section too" in by_path["Step-Scheduler"].message


@pytest.mark.parametrize(("section", "severity", "said"), [
    ({"peft": {"_target_": "nemo_automodel.components._peft.lora.PeftConfig", "rank": 16}}, ERROR,
     "LoRA's rank is `dim`"),
    ({"fp8": {"enable": True}}, "warning", "did you mean 'enabled'?"),
    ({"fp8": {"enabled": True, "recipe_name": "blockwise"}}, ERROR, "torchao asserts the name"),
    ({"compile": {"enable": True}}, "warning", "did you mean 'enabled'?"),
    ({"compile": {"enabled": True, "mode": "fast"}}, ERROR, "torch.compile refuses other modes"),
])
def test_peft_fp8_and_compile_keys_are_judged_as_automodel_reads_them(section: dict, severity: str, said: str) -> None:
    """PeftConfig is instantiated with the section (a TypeError on another key); fp8 and compile are read with
    dict.get, so a misspelled key silently leaves the feature off (a warning), and their names go to torchao and
    torch.compile, which refuse others. The valid spellings pass."""
    [finding] = [f for f in validate_recipe(recipe(section), world_size=8).findings if f.rule == "schema"]
    assert finding.severity == severity and said in finding.message + finding.hint
    fixed = {name: {("dim" if k == "rank" else "enabled" if k == "enable" else k):
                    ("rowwise" if v == "blockwise" else "max-autotune" if v == "fast" else v) for k, v in body.items()}
             for name, body in section.items()}
    assert [f for f in validate_recipe(recipe(fixed), world_size=8).findings if f.rule == "schema"] == []


def test_the_closed_section_tables_are_automodels_fields() -> None:
    """LRSchedulerConfig's and CheckpointingConfig's fields (plus the `_target_` and `restore_from` the typed config
    drops), and the loader fields `_resolve_dataloader` accepts, as the installed AutoModel defines them."""
    import dataclasses
    import inspect

    from nemo_automodel.components.checkpoint.config import CheckpointingConfig
    from nemo_automodel.components.optim.optimizer import LRSchedulerConfig
    from nemo_automodel.recipes import _typed_config

    from automodel_dist.targets.automodel.config import CHECKPOINT_KEYS, DATALOADER_KEYS, LR_SCHEDULER_KEYS

    assert {f.name for f in dataclasses.fields(LRSchedulerConfig)} | {"_target_"} == LR_SCHEDULER_KEYS
    assert {f.name for f in dataclasses.fields(CheckpointingConfig)} | {"restore_from"} == CHECKPOINT_KEYS
    source = inspect.getsource(_typed_config.RecipeConfig._resolve_dataloader)
    for key in DATALOADER_KEYS:
        assert f'"{key}"' in source, key


def test_the_target_path_index_is_the_installed_automodels() -> None:
    """data/automodel/targets.json is what scripts/automodel_targets.py reads from the installed AutoModel."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parent.parent / "scripts" / "automodel_targets.py"
    done = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]


def test_a_missing_section_names_its_misspelling() -> None:
    report = validate_recipe(recipe({"optimizer": DELETE, "optimiser": {"lr": 1.0e-4}}), world_size=8)
    [missing] = [f for f in report.findings if f.rule == "am-section-missing"]
    assert missing.message.startswith("the recipe has no optimizer: section (`optimiser:` looks like a misspelling")


def test_the_section_table_holds_every_section_automodel_reads() -> None:
    """Every top-level name AutoModel's recipes read from their whole config (as sections.py says it was
    gathered) is in READ_SECTIONS, so an AutoModel section is never called a misspelling."""
    import re
    from pathlib import Path

    import nemo_automodel

    from automodel_dist.targets.automodel.sections import READ_SECTIONS

    reads = re.compile(r"""self\.(?:cfg|_raw)\.get\(\s*["']([A-Za-z_0-9]+)|self\.cfg\.([A-Za-z_0-9]+)"""
                       r"""|["']([A-Za-z_0-9]+)["'] in self\.cfg\b""")
    methods = {"get", "instantiate_path", "raw_config", "set_by_dotted", "to_dict", "to_yaml_dict"}
    found = set()
    for source in (Path(nemo_automodel.__file__).parent / "recipes").rglob("*.py"):
        for match in reads.finditer(source.read_text()):
            found.add(next(g for g in match.groups() if g))
    assert len(found) > 40
    assert found - methods - READ_SECTIONS == set()


def test_mock_batch_size_names_both_sizes_and_the_default() -> None:
    [finding] = [f for f in validate_recipe(recipe({"dataset": {"_target_": MOCK_DATASET},
                                                    "step_scheduler.local_batch_size": 2}), world_size=8).findings
                 if f.rule == "am-mock-batch-size"]
    assert finding.message.startswith("dataset.batch_size=1 (its default) but step_scheduler.local_batch_size=2")
    assert finding.hint.startswith("set dataset.batch_size: 2") and finding.path == "dataset.batch_size"


def test_dist_env_timeout_counts_a_partly_filled_node() -> None:
    from automodel_dist.rules.recipe import check_recipe

    [finding] = [f for f in check_recipe({"distributed": {}}, world_size=12, gpus_per_node=8)
                 if f.rule == "dist-env-timeout"]
    assert "on a 2-node run" in finding.message  # 12 GPUs at 8 per node are 2 nodes, not 12 // 8 = 1

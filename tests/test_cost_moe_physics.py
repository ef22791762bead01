"""MoE terms of the cost model read from AutoModel's and Megatron's code: which attention kernel a run uses,
whether FSDP keeps an MoE model's weights gathered across the micro batches of a deferred sync, and the
chunked checkpointing of a biased expert MLP."""

from __future__ import annotations

from dataclasses import replace

import pytest

from automodel_dist.catalog.hardware import get_gpu
from automodel_dist.catalog.models import resolve_model
from automodel_dist.catalog.specs import ClusterSpec
from automodel_dist.cost import throughput
from automodel_dist.cost.memory import (
    RecipeOptions,
    expert_mlp_checkpointed,
    memory_breakdown,
    weights_stay_gathered,
)
from automodel_dist.cost.model import estimate_layout
from automodel_dist.cost.profiles import parameters
from automodel_dist.cost.shape import model_shape
from automodel_dist.layout import Layout
from automodel_dist.problem import Problem, TrainingSpec

TRAINING = TrainingSpec(task="pretrain", seq_length=4096, global_batch_size=512)


def shape(model: str):
    return model_shape(resolve_model(model), TRAINING)


@pytest.mark.parametrize(("model", "options", "kernel"), [
    ("Qwen/Qwen3-30B-A3B", RecipeOptions(), "te"),  # AutoModel's own class: BackendConfig.attn defaults to te
    ("meta-llama/Llama-3.1-8B", RecipeOptions(), "te"),  # its own dense class too
    ("mistralai/Mixtral-8x7B-v0.1", RecipeOptions(), "sdpa"),  # Hugging Face's class: PyTorch's SDPA
    ("openai/gpt-oss-120b", RecipeOptions(attention="flex"), "flex"),  # a recipe naming FlexAttention
    ("Qwen/Qwen3-30B-A3B", RecipeOptions(framework="megatron"), "te"),
    ("Qwen/Qwen3-30B-A3B", RecipeOptions(framework="torchtitan"), "sdpa"),
])
def test_the_attention_kernel_is_the_one_the_stack_and_model_class_run(model, options, kernel):
    assert throughput.attention_kernel(shape(model), options) == kernel


def test_te_attention_runs_at_te_s_efficiency_and_pytorch_s_at_pytorch_s():
    params = parameters()
    qwen = shape("Qwen/Qwen3-30B-A3B")
    te = throughput.attention_efficiency(params, qwen, RecipeOptions())
    flex = throughput.attention_efficiency(params, qwen, RecipeOptions(attention="flex"))
    assert te == params.physics.attention_efficiency["te"]
    assert flex == params.physics.attention_efficiency["torch"] != te
    # the same run's compute moves with the kernel's efficiency, and only its attention part
    problem = Problem(resolve_model("Qwen/Qwen3-30B-A3B"), ClusterSpec(get_gpu("h100"), 1, 8), TRAINING)
    layout = Layout(world_size=8, ep=8, global_batch_size=512, local_batch_size=4, micro_batch_size=4,
                    dispatcher="deepep")
    at_te = throughput.compute_seconds(qwen, layout, TRAINING, problem.cluster.gpu, options=RecipeOptions())
    at_flex = throughput.compute_seconds(qwen, layout, TRAINING, problem.cluster.gpu,
                                         options=RecipeOptions(attention="flex"))
    assert at_te[2] / at_flex[2] == pytest.approx(flex / te)
    assert at_te[0] - at_te[2] == pytest.approx(at_flex[0] - at_flex[2])


def _gpt_oss_120b_ep64(options: RecipeOptions):
    """AutoModel's GPT-OSS-120B benchmark shape: 64 H100, EP64, local batch 2, GA 4, no recompute."""
    problem = Problem(resolve_model("openai/gpt-oss-120b"), ClusterSpec(get_gpu("h100"), 8, 8), TRAINING)
    layout = Layout(world_size=64, ep=64, global_batch_size=512, local_batch_size=2, micro_batch_size=2,
                    activation_checkpointing=False, dispatcher="hybridep")
    return problem, layout, estimate_layout(problem, layout, options=options)


def test_moe_weights_are_resharded_after_each_backward_unless_fsdp_optimizations_keep_them():
    gpt_oss, qwen, llama = shape("openai/gpt-oss-120b"), shape("Qwen/Qwen3-30B-A3B"), shape("meta-llama/Llama-3.1-8B")
    flat = Layout(world_size=64, ep=8, global_batch_size=512, local_batch_size=2, micro_batch_size=2)
    off, on = RecipeOptions(), RecipeOptions(fsdp_optimizations=True)
    assert not weights_stay_gathered(gpt_oss, flat, off, deferred=True)
    assert weights_stay_gathered(gpt_oss, flat, on, deferred=True)
    assert not weights_stay_gathered(qwen, flat, on, deferred=False)  # nothing deferred, nothing kept
    assert weights_stay_gathered(qwen, replace(flat, pp=2), off, deferred=True)  # torch's pipeline stage keeps them
    fsdp8 = Layout(world_size=8, global_batch_size=512, local_batch_size=2, micro_batch_size=2)
    # AutoModel's dense classes reshard too: its deferred sync only turns the gradient sync off (get_sync_ctx)
    assert not weights_stay_gathered(llama, fsdp8, off, deferred=True)
    assert weights_stay_gathered(llama, fsdp8, RecipeOptions(framework="megatron"), deferred=True)
    assert weights_stay_gathered(qwen, flat, RecipeOptions(framework="torchtitan"), deferred=True)


def test_gpt_oss_120b_on_64_h100_fits_as_it_ran_and_keeping_weights_gathered_costs_the_dense_weights():
    problem, layout, resharded = _gpt_oss_120b_ep64(RecipeOptions(logit_bytes=4, balanced_gate=True,
                                                                  attention="flex"))
    assert resharded.memory_gib <= problem.cluster.gpu.hbm_gib  # it ran on 80 GB (without the planner's headroom)
    _, _, kept = _gpt_oss_120b_ep64(RecipeOptions(logit_bytes=4, balanced_gate=True, attention="flex",
                                                  fsdp_optimizations=True))
    assert kept.memory_gib > problem.cluster.gpu.hbm_gib  # the whole model's dense weights gathered would not
    s = shape("openai/gpt-oss-120b")
    dense_weights = (s.moe_layers * s.moe_layer_params + s.embedding_params + s.lm_head_params) * 2 / 2**30
    # kept: every dense weight unsharded; resharded: the layer in use, the prefetched one and the head
    assert kept.memory["fsdp_gather"] == pytest.approx(dense_weights, rel=0.01)
    assert resharded.memory["fsdp_gather"] < kept.memory["fsdp_gather"] / 2
    # the unsharded fp32 gradients accumulate over the micro batches either way
    assert resharded.memory["gradients"] == pytest.approx(kept.memory["gradients"])
    # resharding costs a second gather per micro batch
    parts = memory_breakdown(s, layout, TRAINING, options=RecipeOptions(balanced_gate=True))
    assert parts["fsdp_gather"] == pytest.approx(resharded.memory["fsdp_gather"])
    assert resharded.time["fsdp_comm"] >= kept.time["fsdp_comm"]


def _gpt_oss_20b(local_batch: int, dispatcher: str = "deepep"):
    problem = Problem(resolve_model("openai/gpt-oss-20b"), ClusterSpec(get_gpu("h100"), 1, 8), TRAINING)
    layout = Layout(world_size=8, ep=8, global_batch_size=512, local_batch_size=local_batch,
                    micro_batch_size=local_batch, activation_checkpointing=False, dispatcher=dispatcher)
    return problem, layout


def test_a_biased_expert_mlp_past_512_mib_of_gate_up_output_is_checkpointed_in_chunks():
    gpt_oss, options = shape("openai/gpt-oss-20b"), RecipeOptions(balanced_gate=True)
    # a rank receives local batch x 4096 tokens x top-4 copies; gate/up is 2 x 2880 wide in bf16:
    # 2 sequences make 360 MiB (kept whole, as the AutoModel benchmark ran), 3 make 540 MiB (chunked)
    _, two = _gpt_oss_20b(2)
    _, three = _gpt_oss_20b(3)
    assert not expert_mlp_checkpointed(gpt_oss, two, TRAINING, options)
    assert expert_mlp_checkpointed(gpt_oss, three, TRAINING, options)
    # neighbours: experts without biases, torch's dispatcher path, Megatron, MXFP8 grouped GEMMs
    assert not expert_mlp_checkpointed(shape("Qwen/Qwen3-30B-A3B"), three, TRAINING, options)
    assert not expert_mlp_checkpointed(gpt_oss, _gpt_oss_20b(3, dispatcher="torch")[1], TRAINING, options)
    assert not expert_mlp_checkpointed(gpt_oss, three, TRAINING, RecipeOptions(framework="megatron"))
    fp8 = replace(TRAINING, precision="fp8")
    assert not expert_mlp_checkpointed(gpt_oss, three, fp8, RecipeOptions(fp8_recipe="mxfp8"))


def test_the_chunked_expert_mlp_keeps_only_the_dispatched_copies_and_replays_the_expert_gemms():
    gpt_oss, options = shape("openai/gpt-oss-20b"), RecipeOptions(balanced_gate=True)
    problem, three = _gpt_oss_20b(3)
    gpu = problem.cluster.gpu
    chunked = memory_breakdown(gpt_oss, three, TRAINING, options=options)
    kept = memory_breakdown(replace(gpt_oss, expert_bias=False), three, TRAINING, options=options)
    per_token_saved = gpt_oss.moe_act_expert - gpt_oss.top_k * gpt_oss.hidden  # the k x 3 x width intermediates
    expected = gpt_oss.moe_layers * per_token_saved * 3 * 4096 * 2 / 2**30
    assert kept["activations"] - chunked["activations"] == pytest.approx(expected, rel=1e-6)
    compute, recompute, _ = throughput.compute_seconds(gpt_oss, three, TRAINING, gpu, options=options)
    plain = throughput.compute_seconds(replace(gpt_oss, expert_bias=False), three, TRAINING, gpu, options=options)
    assert compute == pytest.approx(plain[0]) and plain[1] == 0.0  # no recompute without the checkpointed MLP
    assert 0.0 < recompute < compute / 3  # one forward of the expert GEMMs, a part of the whole forward

"""Recipe settings outside the Layout reach the cost model: read from a recipe, and used by `validate`."""

from __future__ import annotations

import copy

from automodel_dist.cost.memory import AUTOMODEL_DEFAULTS, RecipeOptions
from automodel_dist.cost.recipe import recipe_options
from automodel_dist.validate import validate_recipe

# The shape of AutoModel's Llama-3.1-70B pretraining benchmark (64 H100, cp 2, dp 32, seq 8192), written
# for this test with only the keys the cost model and the rules read.
LLAMA_70B_CP2 = {
    "step_scheduler": {"global_batch_size": 128, "local_batch_size": 1},
    "model": {"_target_": "nemo_automodel.NeMoAutoModelForCausalLM.from_pretrained",
              "pretrained_model_name_or_path": "meta-llama/Llama-3.1-70B", "torch_dtype": "bf16"},
    "dataset": {"_target_": "nemo_automodel.components.datasets.llm.mock_iterable_dataset.MockIterableDataset",
                "seq_len": 8192},
    "loss_fn": {"_target_": "nemo_automodel.components.loss.masked_ce.MaskedCrossEntropy"},
    "distributed": {"strategy": "fsdp2", "tp_size": 1, "cp_size": 2, "pp_size": 1,
                    "activation_checkpointing": True, "defer_fsdp_grad_sync": False},
}


def test_an_empty_recipe_means_automodels_defaults():
    assert recipe_options({}) == AUTOMODEL_DEFAULTS


def test_each_setting_is_read():
    options = recipe_options({
        "model": {"torch_dtype": "torch.float32"},
        "loss_fn": {"_target_": "nemo_automodel.components.loss.linear_ce.FusedLinearCrossEntropy"},
        "distributed": {"defer_fsdp_grad_sync": False, "activation_checkpointing": "Selective",
                        "mp_policy": {"reduce_dtype": "bfloat16"}, "enable_async_tensor_parallel": True},
    })
    # the checkpointing mode is the layout's, not an option: parse reads "Selective" into the Layout
    assert options == RecipeOptions(master_weights="fp32", logit_bytes=0.0,
                                    defer_grad_sync=False, reduce_dtype="bfloat16", async_tp=True)
    bf16_loss = {"loss_fn": {"_target_": "nemo_automodel.components.loss.masked_ce.MaskedCrossEntropy",
                             "fp32_upcast": False}}
    assert recipe_options(bf16_loss).logit_bytes == 4.0
    assert recipe_options({"distributed": {"mp_policy": {"reduce_dtype": "float32"}}}).reduce_bytes == 4


def test_malformed_values_fall_back_to_defaults():
    options = recipe_options({"distributed": {"defer_fsdp_grad_sync": "yes", "mp_policy": "bf16"},
                              "model": {"torch_dtype": 16}, "loss_fn": "ce"})
    assert options == AUTOMODEL_DEFAULTS


def test_validate_uses_the_recipes_settings_for_the_memory_check():
    """The benchmark recipe runs on 80 GB H100s; with AutoModel's default deferred gradient sync it OOMs
    (the recipe's own comment). validate must tell the two apart."""
    ok = validate_recipe(LLAMA_70B_CP2, world_size=64, gpu="h100")
    assert ok.errors == []
    deferred = copy.deepcopy(LLAMA_70B_CP2)
    deferred["distributed"]["defer_fsdp_grad_sync"] = True
    oom = validate_recipe(deferred, world_size=64, gpu="h100")
    assert [f.rule for f in oom.errors] == ["memory-fit"]
    assert "gradients" in oom.errors[0].message


def test_enable_fsdp_optimizations_is_read_from_the_backend():
    on = {"model": {"backend": {"enable_fsdp_optimizations": True, "fake_balanced_gate": True}}}
    assert recipe_options(on) == RecipeOptions(fsdp_optimizations=True, balanced_gate=True)
    # anything but true is AutoModel's default (false)
    assert recipe_options({"model": {"backend": {"enable_fsdp_optimizations": "yes"}}}) == AUTOMODEL_DEFAULTS


MFSDP_8B = {
    "step_scheduler": {"global_batch_size": 64, "local_batch_size": 1},
    "model": {"pretrained_model_name_or_path": "meta-llama/Llama-3.1-8B"},
    "distributed": {"strategy": "megatron_fsdp", "tp_size": 2},
}


def test_megatron_fsdps_fp32_buffers_are_read_and_counted():
    """MegatronFSDP's `preserve_fp32_weights` adds an fp32 main-weight buffer (AdamW then keeps fp32 states)
    and `grad_reduce_in_fp32` an fp32 main-gradient buffer: the ratios its own build allocates
    (tests/test_model_oracle.py: 3x weights, 2x gradients, 2x optimizer against the bf16 defaults)."""
    from automodel_dist.catalog.models import resolve_model
    from automodel_dist.cost.memory import RankLoad, model_states
    from automodel_dist.cost.shape import model_shape
    from automodel_dist.problem import TrainingSpec
    from automodel_dist.targets.automodel.config import resolve_config
    from automodel_dist.targets.automodel.parse import layout_from_config

    fp32 = copy.deepcopy(MFSDP_8B)
    fp32["distributed"] |= {"preserve_fp32_weights": True, "grad_reduce_in_fp32": True}
    options = recipe_options(fp32)
    assert options.preserve_fp32_weights and options.grad_reduce_in_fp32
    assert recipe_options(MFSDP_8B) == AUTOMODEL_DEFAULTS
    spec = resolve_model("meta-llama/Llama-3.1-8B")
    layout = layout_from_config(resolve_config(MFSDP_8B)[0], world_size=8, model=spec)
    shape = model_shape(spec, TrainingSpec())
    load = RankLoad(0, spec.num_layers, 0, 1, True, True)
    bf16, main = model_states(shape, layout, TrainingSpec(), load), model_states(shape, layout, TrainingSpec(), load,
                                                                                  options)
    assert main.params == 3 * bf16.params and main.grads == 2 * bf16.grads
    assert main.optimizer == 2 * bf16.optimizer
    # the neighbour: FSDP2 has no such buffers, the same options change nothing there
    fsdp2 = layout.with_(strategy="fsdp2")
    assert model_states(shape, fsdp2, TrainingSpec(), load, options) == model_states(shape, fsdp2, TrainingSpec(), load)


def test_per_layer_compile_is_read_where_automodel_applies_it():
    """FSDP2's `enable_compile` compiles each decoder layer (fused memory-bound ops, fewer kept activations); the
    EP path never receives it (automodel.md §3.3), so an MoE recipe with ep_size > 1 stays eager."""
    assert recipe_options({"distributed": {"enable_compile": True}}).compiled is True
    assert recipe_options({"distributed": {"enable_compile": True, "ep_size": 8}}).compiled is None
    assert recipe_options({"distributed": {"enable_compile": False}}).compiled is None

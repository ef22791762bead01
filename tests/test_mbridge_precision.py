"""Mixed precision an override set leaves out runs at the recipe's own (data/megatron_bridge/config_fields.json): a
recipe function that holds a MixedPrecisionConfig object (24 of 49) is judged at its fields, one that names a
precision recipe at that recipe's; the cost model reads the FP8 recipe and the gradient-buffer dtype from them, and
`validate --gpu` judges the memory fit on them. Megatron-Bridge's own resolution of the same sets is checked in
tests/test_mbridge_fields_oracle.py."""

from __future__ import annotations

from typing import Any

import pytest

from automodel_dist import validate_recipe
from automodel_dist.catalog.hardware import resolve_gpu
from automodel_dist.catalog.specs import ClusterSpec
from automodel_dist.cost.memory import RecipeOptions
from automodel_dist.cost.model import estimate_layout
from automodel_dist.errors import InputError
from automodel_dist.problem import Problem
from automodel_dist.targets.megatron_bridge.choose import cost_options
from automodel_dist.targets.megatron_bridge.compile import model_for_recipe, override_problem
from automodel_dist.targets.megatron_bridge.fields import (
    MixedPrecision,
    config_fields,
    mixed_precision,
    precision_recipe,
    recipe_values,
)
from automodel_dist.targets.megatron_bridge.overrides import OverrideSet
from automodel_dist.targets.megatron_bridge.parse import parse_overrides

Q30 = "qwen3_30b_a3b_pretrain_config"  # a MixedPrecisionConfig object: bf16, gradients reduced in bf16
Q8 = "qwen3_8b_pretrain_config"        # the same, on a dense model
L8 = "llama31_8b_pretrain_config"      # names bf16_mixed (gradients reduced in fp32)
MXFP8 = MixedPrecision(fp8="e4m3", fp8_recipe="mxfp8", grad_reduce_in_fp32=True, fp8_param_gather=True,
                       reuse_grad_buf_for_mxfp8_param_ag=True)
CURRENT = MixedPrecision(fp8="hybrid", fp8_recipe="tensorwise", fp8_param_gather=True)
# (recipe, world, override set, the mixed precision it runs with)
PRECISION_CASES: list[tuple[str, int, dict[str, Any], MixedPrecision]] = [
    (Q30, 16, {}, MixedPrecision(grad_reduce_in_fp32=False)),
    (Q30, 16, {"mixed_precision": "bf16_mixed"}, MixedPrecision()),
    (Q30, 16, {"mixed_precision": "bf16_with_mxfp8_mixed"}, MXFP8),
    (Q30, 16, {"mixed_precision.grad_reduce_in_fp32": True}, MixedPrecision()),
    (Q8, 8, {}, MixedPrecision(grad_reduce_in_fp32=False)),
    (L8, 8, {}, MixedPrecision()),
    (L8, 8, {"mixed_precision": "bf16_with_fp8_subchannel_scaling_mixed"},
     MixedPrecision(fp8="hybrid", fp8_recipe="blockwise")),
    (L8, 8, {"mixed_precision": "bf16_with_fp8_current_scaling_mixed"}, CURRENT),
    (Q30, 16, {"mixed_precision.fp8": "hybrid", "mixed_precision.fp8_param_gather": True},
     MixedPrecision(fp8="hybrid", grad_reduce_in_fp32=False, fp8_param_gather=True)),
]


def settings(recipe: str, world: int, flat: dict[str, Any]) -> Any:
    return parse_overrides(flat, world_size=world, base=recipe_values(recipe)).settings


@pytest.mark.parametrize(("recipe", "world", "flat", "expect"), PRECISION_CASES)
def test_mixed_precision_left_out_is_the_recipes(recipe: str, world: int, flat: dict[str, Any],
                                                 expect: MixedPrecision) -> None:
    assert mixed_precision(settings(recipe, world, flat)) == expect


def test_recipes_object_or_name_is_recorded() -> None:
    fields = config_fields()
    objects = [r for r, v in fields.values.items() if "mixed_precision.grad_reduce_in_fp32" in v]
    named = [r for r, v in fields.values.items() if isinstance(v.get("mixed_precision"), str)]
    assert len(objects) == 24 and len(named) == 25 and not set(objects) & set(named)
    assert precision_recipe("bf16-mixed") == {"fp8": None, "fp8_recipe": "tensorwise", "grad_reduce_in_fp32": True,
                                              "fp8_param_gather": False, "reuse_grad_buf_for_mxfp8_param_ag": False}
    assert precision_recipe("no_such_recipe") is None
    assert settings(Q30, 16, {}).precision is None
    assert settings(Q30, 16, {"mixed_precision": "bf16_mixed"}).grad_reduce_in_fp32 is None  # the object is replaced


def costed(recipe: str, world: int, flat: dict[str, Any], gpu: str = "h100-80gb"
           ) -> tuple[Problem, OverrideSet, RecipeOptions]:
    """The job, the override set and the cost model's options of `flat` on the recipe, as validate reads them."""
    model = model_for_recipe(recipe)
    assert model is not None
    override = parse_overrides(flat, world_size=world, base=recipe_values(recipe))
    cluster = ClusterSpec(resolve_gpu(gpu), nodes=max(1, world // 8), gpus_per_node=8)
    problem = override_problem(override, model, cluster, "pretrain")
    return problem, override, cost_options(problem, override.layout, override.settings)


def test_cost_model_reads_the_gradient_buffer_and_fp8_recipe() -> None:
    for flat, reduce, fp8 in (({}, "bfloat16", "tensorwise"),
                              ({"mixed_precision": "bf16_mixed"}, "float32", "tensorwise"),
                              ({"mixed_precision": "bf16_with_mxfp8_mixed"}, "float32", "mxfp8")):
        problem, _, options = costed(Q30, 16, flat, gpu="b200")
        assert (options.reduce_dtype, options.fp8_recipe) == (reduce, fp8)
        assert problem.training.precision == ("fp8" if fp8 == "mxfp8" else "bf16")


def test_cost_model_reads_which_fp8_recipes_cast_their_weights_at_the_step() -> None:
    """Per-tensor FP8 keeps FP8 weights that the optimizer step casts through bf16 copies (fp8_param_gather);
    MXFP8 stages them in the gradient buffer, blockwise keeps bf16 weights, BF16 has none: only the first prices
    the copies; on a recipe's own MixedPrecisionConfig, the set's fp8_param_gather decides."""
    for recipe, world, flat, primary in (
            (L8, 8, {"mixed_precision": "bf16_with_fp8_current_scaling_mixed"}, True),
            (L8, 8, {"mixed_precision": "bf16_with_fp8_delayed_scaling_mixed"}, True),
            (L8, 8, {"mixed_precision": "bf16_with_mxfp8_mixed"}, False),
            (L8, 8, {"mixed_precision": "bf16_with_fp8_subchannel_scaling_mixed"}, False),
            (L8, 8, {"mixed_precision": "bf16_mixed"}, False),
            (Q30, 16, {"mixed_precision.fp8": "hybrid", "mixed_precision.fp8_param_gather": True}, True),
            (Q30, 16, {"mixed_precision.fp8": "hybrid"}, False)):
        assert _options(recipe, world, flat).fp8_primary_weights is primary, flat


def test_memory_fit_is_judged_at_the_recipes_precision() -> None:
    """Qwen3-8B on 4 H100 without sharding, one sample per micro batch, fits with the recipe's bf16 gradient buffer
    (about 71 GiB), not with bf16_mixed's fp32 one (about 86 GiB)."""
    batch = {"train.global_batch_size": 1024, "train.micro_batch_size": 1}

    def errors(flat: dict[str, Any]) -> list[str]:
        report = validate_recipe(flat, world_size=4, target="megatron-bridge", recipe_function=Q8, gpu="h100-80gb")
        return [f.rule for f in report.errors]

    assert errors(batch) == []
    assert errors({**batch, "mixed_precision": "bf16_mixed"}) == ["memory-fit"]
    report = validate_recipe({**batch, "mixed_precision": "bf16_mixed"}, world_size=4, target="megatron-bridge",
                             recipe_function=Q8, gpu="h100-80gb")
    [finding] = report.errors
    assert "exceeds the" in finding.message and "gradients" in finding.message
    assert "mixed_precision.grad_reduce_in_fp32=false" in finding.hint


def _options(recipe: str, world: int, flat: dict[str, Any]) -> RecipeOptions:
    return costed(recipe, world, flat)[2]


def test_the_precision_aware_optimizer_left_out_is_the_recipes() -> None:
    """`optimizer.use_precision_aware_optimizer` is the recipe's where the set leaves it out (Qwen3-8B's and
    DeepSeek-V3's pretrain recipes turn it on, Llama-3.1-8B's not) and the set's where it gives it."""
    assert recipe_values(Q8)["optimizer.use_precision_aware_optimizer"] is True
    assert recipe_values(L8)["optimizer.use_precision_aware_optimizer"] is False
    assert _options(Q8, 8, {}).precision_aware
    assert not _options(L8, 8, {}).precision_aware
    assert _options(L8, 8, {"optimizer.use_precision_aware_optimizer": True}).precision_aware
    assert not _options(Q8, 8, {"optimizer.use_precision_aware_optimizer": False}).precision_aware


def test_the_precision_aware_optimizer_is_modelled_in_bf16_only() -> None:
    """With FP8 weights Megatron-Core hands the main weights to Transformer Engine: no remainders modelled."""
    assert not _options(Q8, 8, {"mixed_precision": "bf16_with_fp8_subchannel_scaling_mixed"}).precision_aware


def test_the_memory_is_judged_with_the_precision_aware_optimizer() -> None:
    """Llama-3.1-8B on 8 H100 with bf16_mixed's fp32 gradients: the precision-aware optimizer's 16-bit main-weight
    remainders lower the estimated peak by 2 bytes per sharded weight; a string value is bad input."""
    def peak(flat: dict[str, Any]) -> float:
        problem, override, options = costed(L8, 8, flat)
        return estimate_layout(problem, override.layout, options=options).memory_gib

    saved = peak({"optimizer.use_precision_aware_optimizer": False}) - peak(
        {"optimizer.use_precision_aware_optimizer": True})
    assert saved == pytest.approx(2 * 8.03e9 / 8 / 2**30, rel=0.02)  # 2 B of each of 8.03B weights over DP 8
    with pytest.raises(InputError, match="use_precision_aware_optimizer"):
        validate_recipe({"optimizer.use_precision_aware_optimizer": "yes"}, world_size=8, target="megatron-bridge",
                        recipe_function=L8)

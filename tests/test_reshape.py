"""An intent's model reshaped from its checkpoint ({preset: X, num_layers: 16}): the recipe carries the config keys
that make AutoModel build the planned architecture, and validate reads the same model back."""

from __future__ import annotations

import pytest

from automodel_dist.catalog.specs import architecture_changes
from automodel_dist.compiler import compile_intent
from automodel_dist.errors import InputError
from automodel_dist.targets.automodel.recipe_model import recipe_model


def intent(model: str, init: str) -> str:
    return (f"model: {model}\nhardware: {{gpu: h100-80gb, nodes: 2}}\n"
            f"training: {{task: pretrain, init: {init}, seq_length: 4096, global_batch_size: 256}}\n")


@pytest.mark.parametrize(("model", "init", "at", "keys"), [
    ("{preset: llama-3.1-8b, num_layers: 16}", "from_scratch", "config", {"num_hidden_layers": 16}),
    ("{preset: llama-3.1-8b, num_layers: 16}", "pretrained", "", {"num_hidden_layers": 16}),
    ("{preset: qwen3-30b-a3b, num_routed_experts: 64, num_layers: 24}", "from_scratch", "config",
     {"num_experts": 64, "num_hidden_layers": 24}),
    ("{preset: llama-3.1-8b, hidden_size: 2048, num_attention_heads: 16, num_key_value_heads: 8, head_dim: 128}",
     "from_scratch", "config", {"hidden_size": 2048, "num_attention_heads": 16}),
])
def test_the_recipe_builds_the_intents_architecture(model: str, init: str, at: str, keys: dict) -> None:
    result = compile_intent(intent(model, init))
    section = result.recipe["model"][at] if at else result.recipe["model"]
    assert keys.items() <= section.items()
    built = recipe_model(result.recipe).spec
    assert built is not None and architecture_changes(built, result.problem.model) == []


@pytest.mark.parametrize("model", [
    "{preset: llama-3.1-8b, num_layers: 40}",            # added layers would start random
    "{preset: qwen3-30b-a3b, num_routed_experts: 64}",   # the experts' weights change shape
    "{preset: llama-3.1-8b, intermediate_size: 8192}",
])
def test_a_pretrained_run_may_only_drop_layers(model: str) -> None:
    with pytest.raises(InputError, match="only fewer layers load") as err:
        compile_intent(intent(model, "pretrained"))
    assert err.value.where.endswith(":1:1") and "from_scratch" in err.value.hint
    assert compile_intent(intent(model, "from_scratch")).problem.model.num_layers > 0


@pytest.mark.parametrize(("model", "cannot"), [
    ("{preset: llama-3.1-8b, qk_norm: true}", "qk_norm True (False)"),  # a flag no size key carries
    ("{preset: qwen3-30b-a3b, num_shared_experts: 1, shared_expert_intermediate_size: 6144}", "num_shared_experts"),
    ("{preset: qwen3-next-80b-a3b, num_layers: 16, linear_attention_layers: 10}",  # not the mix 16 layers give
     "linear_attention_layers 10 (12)"),
])
def test_a_change_the_config_keys_cannot_carry_is_refused_not_dropped(model: str, cannot: str) -> None:
    with pytest.raises(InputError, match="cannot carry") as err:
        compile_intent(intent(model, "from_scratch"))
    assert cannot in str(err.value)


def test_a_layer_mix_the_layer_count_gives_is_written_as_the_count() -> None:
    result = compile_intent(intent("{preset: qwen3-next-80b-a3b, num_layers: 16, linear_attention_layers: 12}",
                                   "from_scratch"))
    config = result.recipe["model"]["config"]
    assert config["num_hidden_layers"] == 16 and "layer_types" not in config  # transformers derives the mix


def test_an_unchanged_model_writes_no_keys() -> None:
    recipe = compile_intent(intent("{preset: llama-3.1-8b}", "pretrained")).recipe
    assert "num_hidden_layers" not in recipe["model"]

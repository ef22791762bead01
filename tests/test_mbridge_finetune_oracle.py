"""Fine-tuning override sets against Megatron-Bridge 0.6.2 itself: every sft and peft (LoRA) intent below
compiles (`compile --target megatron-bridge`) to an override set that the matching recipe function
(`<model>_sft_config`, `<model>_peft_config`) accepts through its own Hydra parser and validation, and the
values Megatron ends up with are the ones written: the LoRA rank, the checkpoint read from the environment,
CP's loss averaging and packing padding. The YAML file goes through Megatron-Bridge's config-file merge too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mbridge_oracle import Oracle, available
from test_mbridge_oracle import DEVICES

from automodel_dist.compiler import compile_intent
from automodel_dist.targets.megatron_bridge.compile import MegatronCompileResult

pytestmark = [
    pytest.mark.mbridge_oracle,
    pytest.mark.skipif(not available(), reason="the Megatron-Bridge oracle venv (.venv-mb) is not installed: "
                                                "run scripts/setup-mbridge-oracle.sh"),
]
EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "intents"
# What Megatron's validated config must hold, per override key the compiler writes.
READ = {"peft.dim": "peft_dim", "peft.alpha": "peft_alpha", "model.calculate_per_token_loss": "per_token_loss",
        "ddp.average_in_collective": "average_in_collective",
        "dataset.offline_packing_specs.pad_seq_to_mult": "pad_seq_to_mult",
        "dataset.offline_packing_specs.packed_sequence_size": "packed_sequence_size"}
LAYOUT_READ = {"model.context_parallel_size": "cp", "model.tensor_model_parallel_size": "tp",
               "model.expert_model_parallel_size": "ep", "train.global_batch_size": "global_batch_size"}


def intent(model: str, gpu: str, nodes: int, task: str, seq: int = 4096, **parallelism: int) -> dict[str, Any]:
    training: dict[str, Any] = {"task": task, "seq_length": seq, "global_batch_size": 64}
    if task == "peft":
        training["peft"] = {"rank": 8}
    return {"model": model, "hardware": {"gpu": gpu, "nodes": nodes}, "training": training,
            **({"parallelism": parallelism} if parallelism else {})}


# Dense and MoE, one node to eight, H100 and B200, with and without CP (pinned where the planner would not).
# Full SFT of the 70B needs 4 nodes: on 2, Megatron's distributed optimizer without data parallelism keeps
# 12 bytes of fp32 state per local weight (tp8 pp2: 80 GiB per GPU).
INTENTS = [
    *(intent("meta-llama/Llama-3.1-8B", "h100-80gb", 1, task) for task in ("sft", "peft")),
    *(intent("meta-llama/Llama-3.1-70B", "h100-80gb", nodes, task)
      for task, node_counts in (("sft", (4, 8)), ("peft", (2, 4))) for nodes in node_counts),
    intent("meta-llama/Llama-3.1-70B", "h100-80gb", 2, "peft", seq=16384, cp=2),
    intent("meta-llama/Llama-3.1-8B", "h100-80gb", 1, "sft", seq=16384, cp=4),
    *(intent("Qwen/Qwen3-30B-A3B", gpu, nodes, task) for gpu, nodes in (("h100-80gb", 2), ("b200", 1))
      for task in ("sft", "peft")),
    intent("Qwen/Qwen3-30B-A3B", "h100-80gb", 2, "sft", seq=8192, cp=2),
    intent("Qwen/Qwen3-Next-80B-A3B-Instruct", "h100-80gb", 4, "sft"),  # its recipe packs no sequences
]


@pytest.fixture(scope="module")
def oracle() -> Any:
    worker = Oracle()
    yield worker
    worker.close()


@pytest.fixture(scope="module")
def compiled() -> list[MegatronCompileResult]:
    results = [compile_intent(data, target="megatron-bridge") for data in INTENTS]
    results.append(compile_intent(EXAMPLES / "llama-3.1-8b-lora-8xh100.yaml", target="megatron-bridge"))
    assert all(isinstance(r, MegatronCompileResult) for r in results)
    return results  # type: ignore[return-value]


def case(result: MegatronCompileResult, **extra: Any) -> dict[str, Any]:
    return {"recipe": result.recipe_function, "world_size": result.layout.world_size,
            "overrides": list(result.hydra), "gpu": list(DEVICES[result.problem.cluster.gpu.name]),
            "read": [*READ, *LAYOUT_READ, "checkpoint.pretrained_checkpoint"], **extra}


def expected(result: MegatronCompileResult, checkpoint: str) -> dict[str, Any]:
    assert result.override is not None
    s, lay = result.override.settings, result.layout
    want = {path: getattr(s, name) for path, name in READ.items() if getattr(s, name) is not None}
    want.update({path: getattr(lay, name) for path, name in LAYOUT_READ.items()})
    want["checkpoint.pretrained_checkpoint"] = checkpoint
    return want


def test_sft_and_peft_override_sets_pass_megatron(oracle: Oracle, compiled: list[MegatronCompileResult]) -> None:
    recipes = {r.recipe_function for r in compiled}
    assert {"llama31_8b_sft_config", "llama31_8b_peft_config", "llama31_70b_sft_config", "llama31_70b_peft_config",
            "qwen3_30b_a3b_sft_config", "qwen3_30b_a3b_peft_config", "qwen3_next_80b_a3b_sft_config"} <= recipes
    assert any(r.layout.cp > 1 and r.problem.training.task == "sft" for r in compiled)
    assert any(r.layout.cp > 1 and r.problem.training.task == "peft" for r in compiled)
    verdicts = oracle.judge([case(r) for r in compiled])
    failed = [(r.recipe_function, r.layout.short(), v["error"]) for r, v in zip(compiled, verdicts, strict=True)
              if not v["ok"]]
    print(f"\nfine-tuning: {len(compiled) - len(failed)} of {len(compiled)} override sets pass Megatron-Bridge")
    assert failed == []
    for result, verdict in zip(compiled, verdicts, strict=True):
        got = {path: verdict["values"][path] for path in expected(result, oracle.checkpoint)}
        assert got == expected(result, oracle.checkpoint), result.recipe_function


def test_the_yaml_file_passes_megatrons_config_file_merge(oracle: Oracle, compiled: list[MegatronCompileResult],
                                                          tmp_path: Path) -> None:
    """The YAML form (merged by Megatron-Bridge's config-file path: peft keys and oc.env in a file) lands the same."""
    chosen = [*[r for r in compiled if r.layout.cp > 1][:2], compiled[-1],
              next(r for r in compiled if r.recipe_function == "qwen3_next_80b_a3b_sft_config")]
    cases = []
    for i, result in enumerate(chosen):
        path = tmp_path / f"overrides-{i}.yaml"
        path.write_text(result.yaml, encoding="utf-8")
        cases.append(case(result, overrides=[], config_file=str(path)))
    verdicts = oracle.judge(cases)
    assert [v["error"] for v in verdicts] == [None] * len(chosen)
    for result, verdict in zip(chosen, verdicts, strict=True):
        assert verdict["values"] == {**verdict["values"], **expected(result, oracle.checkpoint)}


def test_without_the_checkpoint_megatron_refuses_peft(oracle: Oracle, compiled: list[MegatronCompileResult]) -> None:
    """Our rule's trigger, as a compiled override set without its checkpoint key: Megatron agrees."""
    peft = next(r for r in compiled if r.recipe_function == "llama31_8b_peft_config")
    overrides = [item for item in peft.hydra if not item.startswith("checkpoint.pretrained_checkpoint=")]
    [verdict] = oracle.judge([{**case(peft), "overrides": overrides}])
    assert verdict["error"] == "AssertionError: PEFT requires a pretrained checkpoint path"

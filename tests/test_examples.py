"""The shipped examples: each intent compiles to exactly the checked-in recipe, which validates cleanly.

When the planner, emitter or cost model changes an answer on purpose, run
`.venv/bin/python scripts/regen_examples.py` and review the diff of examples/recipes/.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest

from automodel_dist.compiler import CompileResult, compile_intent
from automodel_dist.validate import validate_recipe

ROOT = Path(__file__).resolve().parent.parent
INTENTS = sorted((ROOT / "examples" / "intents").glob("*.yaml"))
RECIPES = ROOT / "examples" / "recipes"
SCHEMA_LINE = "# yaml-language-server: $schema=../../automodel_dist/data/schemas/intent.schema.json"


@cache
def compiled(name: str) -> CompileResult:
    return compile_intent(ROOT / "examples" / "intents" / name)


def test_the_example_set_covers_the_promised_range() -> None:
    names = [p.name for p in INTENTS]
    assert len(names) >= 12 and "qwen3-30b-a3b-16xh100.yaml" in names
    problems = [compiled(name).problem for name in names]
    assert {p.model.is_moe for p in problems} == {False, True}
    assert min(p.cluster.world_size for p in problems) == 1
    assert max(p.cluster.world_size for p in problems) == 1024
    assert max(p.training.seq_length for p in problems) >= 131072
    assert any(p.training.is_peft for p in problems)
    assert {"h100-80gb", "h200-141gb", "b200", "gb200-nvl72"} <= {p.cluster.gpu.name for p in problems}
    demo = compiled("qwen3-30b-a3b-16xh100.yaml").problem
    assert (demo.model.name, demo.cluster.nodes, demo.cluster.gpus_per_node, demo.training.task) == (
        "qwen3-30b-a3b", 2, 8, "sft")


@pytest.mark.parametrize("intent", INTENTS, ids=lambda p: p.stem)
def test_intent_starts_with_the_schema_line(intent: Path) -> None:
    assert intent.read_text(encoding="utf-8").splitlines()[0] == SCHEMA_LINE


@pytest.mark.parametrize("intent", INTENTS, ids=lambda p: p.stem)
def test_compiled_recipe_matches_the_checked_in_bytes(intent: Path) -> None:
    recipe = RECIPES / intent.name
    assert recipe.exists(), f"missing {recipe.name}: run scripts/regen_examples.py"
    assert compiled(intent.name).yaml == recipe.read_text(encoding="utf-8"), (
        f"examples/recipes/{intent.name} drifted from what its intent compiles to: run scripts/regen_examples.py")


@pytest.mark.parametrize("intent", INTENTS, ids=lambda p: p.stem)
def test_compiled_recipe_validates_without_errors(intent: Path) -> None:
    result = compiled(intent.name)
    cluster = result.problem.cluster
    report = validate_recipe(RECIPES / intent.name, world_size=cluster.world_size,
                             gpus_per_node=cluster.gpus_per_node, model=result.problem.model, gpu=cluster.gpu.name)
    assert report.errors == []


def test_no_recipe_without_an_intent() -> None:
    assert sorted(p.name for p in RECIPES.glob("*.yaml")) == [p.name for p in INTENTS]

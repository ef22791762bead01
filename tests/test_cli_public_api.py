"""The package's public API: the names README shows are the real functions, and importing is light."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from launch_support import BASE_RECIPE, TORCHRUN_SBATCH

import automodel_dist as ad
from automodel_dist import compiler, validate
from automodel_dist.verify import mesh


def test_public_names_are_the_functions_themselves() -> None:
    assert ad.compile_intent is compiler.compile_intent
    assert ad.estimate is compiler.estimate
    assert ad.validate_recipe is validate.validate_recipe
    assert ad.build_meshes is mesh.build_meshes
    assert set(ad.__all__) <= set(dir(ad))


def test_validate_recipe_takes_the_sbatch_script_as_readme_shows(tmp_path: Path) -> None:
    recipe, script = tmp_path / "recipe.yaml", tmp_path / "launch.sbatch"
    recipe.write_text(BASE_RECIPE, encoding="utf-8")
    script.write_text(TORCHRUN_SBATCH.format(tasks=8), encoding="utf-8")
    report = ad.validate_recipe(str(recipe), world_size=16, gpus_per_node=8, sbatch=str(script))
    assert "launch-ntasks-per-node" in {f.rule for f in report.errors}


def test_unknown_attribute_is_an_attribute_error() -> None:
    assert not hasattr(ad, "compile")


def test_importing_the_package_loads_none_of_its_modules() -> None:
    heavy = ("torch", "ruamel", "jsonschema", "automodel_dist.")
    code = f"import sys, automodel_dist; print(sorted(m for m in sys.modules if m.startswith({heavy!r})))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"

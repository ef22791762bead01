"""Launch files from the same plan as the recipe: a Slurm sbatch script, or the recipe's `skypilot:` section.

`write_launch_files` is what `automodel-dist compile --launcher ...` calls after writing the recipe.
Both launchers rewrite the recipe with the settings the launch relies on (see `recipe_settings`), and
the result is checked with the same launch rules `validate` uses: an error stops the writing (exit 1),
a warning is printed.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from automodel_dist.errors import ValidationFailed
from automodel_dist.findings import Finding, Report
from automodel_dist.launch.recipe_settings import apply_recipe_settings
from automodel_dist.launch.settings import launcher_settings
from automodel_dist.launch.skypilot import skypilot_recipe_settings, skypilot_section
from automodel_dist.launch.slurm import render_sbatch, slurm_recipe_settings
from automodel_dist.output import Output, write_outputs
from automodel_dist.report import print_warnings
from automodel_dist.rules.launch import check_launch
from automodel_dist.shell_syntax import script_syntax
from automodel_dist.yamlio import dump_yaml, load_document

LAUNCHERS = ("slurm", "skypilot")
SBATCH_NAME = "launch.sbatch"


def write_launch_files(result: Any, recipe_path: Path, launcher: str, *,
                       inputs: Iterable[str | os.PathLike[str]] = (), force: bool = False) -> list[str]:
    """Write `result`'s recipe at `recipe_path` with the launch settings, and what launches it; return the
    paths written besides the recipe. Nothing is written when the launch rules fail.

    `result` is a CompileResult: `.problem`, `.layout`, `.yaml` (the recipe text) and `.intent` (whose
    `.launcher` is the intent's launcher block or None). The recipe is `.yaml` with the launch settings
    added, keeping its comments. Every file goes through the output writer: never onto one of `inputs`,
    never onto a file automodel-dist did not write unless `force`, each replaced whole or not at all.
    """
    if launcher not in LAUNCHERS:
        raise ValueError(f"unknown launcher {launcher!r}; expected one of {LAUNCHERS}")
    problem, layout = result.problem, result.layout
    recipe = load_document(result.yaml, what="recipe", comments=True).data  # the emitted text, with its comments
    settings = launcher_settings(getattr(result.intent, "launcher", None), problem)
    recipe_path = Path(recipe_path).resolve()
    sbatch_text = None
    replaced: list[Finding] = []
    if launcher == "slurm":
        apply_recipe_settings(recipe, slurm_recipe_settings(problem, layout))
        sbatch_text = render_sbatch(problem, layout, settings, recipe_path, recipe)
    else:
        apply_recipe_settings(recipe, skypilot_recipe_settings(problem, layout))
        recipe["skypilot"], replaced = skypilot_section(problem, layout, settings, recipe)
    cluster = problem.cluster
    findings = replaced + check_launch(recipe, world_size=cluster.world_size, gpus_per_node=cluster.gpus_per_node,
                            sbatch_text=sbatch_text, sbatch_file=SBATCH_NAME, layout=layout,
                            nvlink_domain=cluster.nvlink_domain,
                            sbatch_syntax=script_syntax(sbatch_text) if sbatch_text is not None else None)
    report = Report(findings=findings, source=str(recipe_path))
    if not report.ok:
        raise ValidationFailed("the launch files would break their own launch rules: "
                               + "; ".join(f.message for f in report.errors), report)
    print_warnings(report.warnings)
    outputs = [Output(recipe_path, dump_yaml(recipe))]
    if sbatch_text is not None:
        outputs.append(Output(recipe_path.parent / SBATCH_NAME, sbatch_text))
    write_outputs(outputs, inputs=inputs, force=force)
    if sbatch_text is not None:
        (recipe_path.parent / "logs").mkdir(parents=True, exist_ok=True)
    return [str(out.path) for out in outputs[1:]]

"""The recipe's `skypilot:` section: AutoModel launches it on a cloud when the section is present.

Fields follow AutoModel's `SkyPilotConfig` (reference/automodel.md §8.3): `cloud` is required and must
be one of SUPPORTED_CLOUDS; `accelerators` is "<GPU>:<count per node>", and AutoModel reads the per-node
process count from it; unknown keys are silently dropped, so only known keys are written.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from ruamel.yaml.comments import CommentedMap

from automodel_dist.catalog.params import param_counts
from automodel_dist.catalog.specs import GpuSpec
from automodel_dist.errors import InputError
from automodel_dist.findings import Finding
from automodel_dist.launch.environment import run_environment
from automodel_dist.launch.recipe_settings import RecipeSetting, timeout_settings
from automodel_dist.launch.settings import LauncherSettings
from automodel_dist.layout import Layout
from automodel_dist.problem import Problem
from automodel_dist.rules.launch import env_reassigned
from automodel_dist.textsafe import one_line

SUPPORTED_CLOUDS = ("aws", "gcp", "azure", "lambda", "kubernetes")
AUTOMODEL_DISK_GB = 100  # SkyPilotConfig.disk_size default
IMAGE_AND_CACHES_GB = 50  # the VM image, the Python environment and compile caches
_GPU_FAMILY = re.compile(r"^([a-z]+\d+[a-z]*)")
_MEMORY_GB = re.compile(r"(\d+)\s*gb")
# SkyPilot spells these with the memory size; the smaller size is the bare name (A100 = 40 GB).
_SIZED_NAMES = {("A100", 80): "A100-80GB", ("V100", 32): "V100-32GB"}


def accelerator_name(gpu: GpuSpec) -> str:
    """SkyPilot's accelerator name for a GPU preset: 'h100-80gb' -> 'H100', 'a100-80gb' -> 'A100-80GB'."""
    text = gpu.name.lower()
    family = _GPU_FAMILY.match(text)
    if not family:
        raise InputError(f"cannot tell SkyPilot's accelerator name for GPU {gpu.name!r}",
                         where="hardware.gpu", hint="use a GPU preset named after the chip, e.g. h100-80gb")
    name = family.group(1).upper()
    memory = _MEMORY_GB.search(text)
    if memory:
        return _SIZED_NAMES.get((name, int(memory.group(1))), name)
    return name


def disk_size_gb(problem: Problem) -> tuple[int, str] | None:
    """Disk for the bf16 weights download plus one consolidated save (PEFT saves only the adapter),
    when AutoModel's 100 GB default is too small; None when it is enough."""
    weights_gb = param_counts(problem.model).total * 2 / 1e9
    copies = 1 if problem.training.is_peft else 2
    need = copies * weights_gb + IMAGE_AND_CACHES_GB
    if need <= AUTOMODEL_DISK_GB:
        return None
    size = math.ceil(need / 50) * 50
    what = "the weights download" if copies == 1 else "the weights download and one consolidated save"
    return size, f"{weights_gb:.0f} GB of bf16 weights: {what}, plus {IMAGE_AND_CACHES_GB} GB for the image"


def skypilot_recipe_settings(problem: Problem, layout: Layout) -> list[RecipeSetting]:
    """Recipe settings a SkyPilot run needs (spot preemption already sends SIGTERM, AutoModel's default)."""
    return timeout_settings(problem, layout)


def skypilot_section(problem: Problem, layout: Layout, settings: LauncherSettings,
                     recipe: Mapping[str, Any]) -> tuple[CommentedMap, list[Finding]]:
    """The `skypilot:` mapping for this plan, with a comment on each derived value, and a warning for each
    planned variable the intent's launcher.env replaces.

    A section the recipe already has (from a base recipe) keeps its other keys (setup, zone, ...).
    """
    if not settings.cloud:
        raise InputError("--launcher skypilot needs a cloud", where="launcher.cloud",
                         hint=f"add `launcher: {{cloud: aws}}` to the intent (one of {', '.join(SUPPORTED_CLOUDS)})")
    cloud = settings.cloud.lower()
    if cloud not in SUPPORTED_CLOUDS:
        raise InputError(f"AutoModel's SkyPilot launcher does not support cloud {settings.cloud!r}",
                         where="launcher.cloud", hint=f"use one of {', '.join(SUPPORTED_CLOUDS)}")
    cluster = problem.cluster
    existing = recipe.get("skypilot")
    section = existing if isinstance(existing, CommentedMap) else CommentedMap()  # keep setup, zone, ...
    section["cloud"] = cloud
    section["accelerators"] = f"{accelerator_name(cluster.gpu)}:{cluster.gpus_per_node}"
    section.yaml_add_eol_comment(f"{one_line(cluster.gpu.name)}, {cluster.gpus_per_node} per node (one worker per GPU)",
                                 "accelerators")
    section["num_nodes"] = cluster.nodes
    section.yaml_add_eol_comment(f"layout {layout.short()} needs {cluster.world_size} GPUs", "num_nodes")
    section["use_spot"] = settings.use_spot
    if not settings.use_spot:
        section.yaml_add_eol_comment("on-demand unless launcher.use_spot (AutoModel's own default is spot)", "use_spot")
    disk = disk_size_gb(problem)
    if disk:
        section["disk_size"] = disk[0]
        section.yaml_add_eol_comment(disk[1], "disk_size")
    if settings.region:
        section["region"] = settings.region
    section["job_name"] = settings.job_name
    env = run_environment(problem, layout, recipe, settings.cache_dir)
    hf_home = next((var for var in env if var.name == "HF_HOME"), None)
    if hf_home:
        section["hf_home"] = hf_home.value
    env_vars = section.get("env_vars") if isinstance(section.get("env_vars"), CommentedMap) else CommentedMap()
    for var in env:
        if var.name != "HF_HOME":
            env_vars[var.name] = var.value
            if var.why:
                env_vars.yaml_add_eol_comment(var.why, var.name)
    planned = {var.name: var.value for var in env}
    replaced = []
    for name, value in settings.env:
        env_vars[name] = value
        if name in planned:  # the plan's reason no longer describes the value
            env_vars.yaml_add_eol_comment("the intent's launcher.env", name)
            if planned[name] != value:
                replaced.append(env_reassigned(name, planned[name], "by the plan", value, "by launcher.env",
                                               f"skypilot.env_vars.{name}"))
    if env_vars:
        section["env_vars"] = env_vars
    return section, replaced

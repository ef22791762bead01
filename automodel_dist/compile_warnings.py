"""What a compiled file warns of, in its header and on compile's stderr alike."""

from __future__ import annotations

from automodel_dist.cost.estimate import Estimate
from automodel_dist.cost.profiles import parameters
from automodel_dist.problem import Problem
from automodel_dist.textsafe import one_line


def compile_warnings(problem: Problem, estimate: Estimate, framework: str) -> list[str]:
    """A peak that the measured memory error of runs like this one could take past the GPU's memory, and an fp8
    intent on a GPU without FP8 tensor cores (the file trains in bf16: said, never done silently)."""
    gpu = problem.cluster.gpu
    memory = parameters().memory_warning(framework, problem.model.is_moe, estimate.memory_gib, gpu.hbm_gib)
    fp8 = (f"precision fp8 was asked for, but {one_line(gpu.name)} has no FP8 tensor cores: this file trains in bf16"
           if problem.training.precision == "fp8" and not gpu.supports_fp8 else None)
    return [warning for warning in (memory, fp8) if warning]

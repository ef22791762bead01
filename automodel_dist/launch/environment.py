"""The environment a large run needs, shared by the Slurm script and the SkyPilot section.

Only settings the references back: the allocator's expandable segments (Megatron-Bridge memory and
Slurm notes; not with NCCL user buffers; with CUDA graphs it needs NCCL_GRAPH_REGISTER=0), HybridEP's
NVLink-domain size and AutoModel's HybridEP kernel cache, and caches on shared storage.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from automodel_dist.layout import Layout
from automodel_dist.problem import Problem
from automodel_dist.rules.launch import HYBRIDEP_DOMAIN_VAR
from automodel_dist.yamlio import lookup


@dataclass(frozen=True)
class EnvVar:
    """One variable, its value, and why. `default_only`: a value exported at submission wins."""

    name: str
    value: str
    why: str = ""
    default_only: bool = False


def _cuda_graph_modules(recipe: Mapping[str, Any]) -> list[Any]:
    modules = lookup(recipe, "model.backend.cuda_graph.modules")[1]
    return list(modules) if isinstance(modules, list) else []


def run_environment(problem: Problem, layout: Layout, recipe: Mapping[str, Any],
                    cache_dir: str | None) -> list[EnvVar]:
    """Variables for `layout` on `problem.cluster`; cache variables only when `cache_dir` is known."""
    env: list[EnvVar] = []
    if lookup(recipe, "distributed.nccl_ub")[1] is not True:
        env.append(EnvVar("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True",
                          "fewer fragmentation OOMs at no speed cost (not with distributed.nccl_ub)"))
        if _cuda_graph_modules(recipe):
            env.append(EnvVar("NCCL_GRAPH_REGISTER", "0", "CUDA graphs with expandable segments need it off"))
    if layout.dispatcher == "hybridep":
        env.append(EnvVar(HYBRIDEP_DOMAIN_VAR, str(problem.cluster.nvlink_domain),
                          "HybridEP needs the real NVLink-domain size (a mismatch costs speed, sometimes correctness)"))
        if cache_dir:
            env.append(EnvVar("NEMO_HYBRIDEP_JIT_CACHE", f"{cache_dir}/hybridep_jit",
                              "compile HybridEP's kernels once per toolchain, not once per process", True))
    if cache_dir:
        why = "shared cache: one download and one compile for all nodes"
        env += [EnvVar("HF_HOME", f"{cache_dir}/huggingface", why, True),
                EnvVar("HF_DATASETS_CACHE", f"{cache_dir}/huggingface/datasets", why, True),
                EnvVar("TRITON_CACHE_DIR", f"{cache_dir}/triton", why, True),
                EnvVar("TORCHINDUCTOR_CACHE_DIR", f"{cache_dir}/inductor", why, True)]
    return env

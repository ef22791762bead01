"""automodel-dist: compile a training intent into a NeMo AutoModel recipe with the right layout.

Public API (the CLI is a shell over it):

    compile_intent(source, overrides=()) -> CompileResult
    estimate(source) -> Estimate
    validate_recipe(source, *, world_size, gpus_per_node=8, model=None, gpu=None) -> Report
    build_meshes(source, *, world_size, gpus_per_node=8) -> MeshReport   (needs torch)

Imports are lazy so `validate` and `compile` never pay for what they do not use.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["build_meshes", "compile_intent", "estimate", "validate_recipe"]


def compile_intent(source: Any, overrides: Any = ()) -> Any:
    from automodel_dist.compiler import compile_intent as impl

    return impl(source, overrides)


def estimate(source: Any) -> Any:
    from automodel_dist.compiler import estimate as impl

    return impl(source)


def validate_recipe(source: Any, *, world_size: int, gpus_per_node: int = 8, model: Any = None,
                    gpu: str | None = None) -> Any:
    from automodel_dist.validate import validate_recipe as impl

    return impl(source, world_size=world_size, gpus_per_node=gpus_per_node, model=model, gpu=gpu)


def build_meshes(source: Any, *, world_size: int, gpus_per_node: int = 8) -> Any:
    from automodel_dist.verify.mesh import build_meshes as impl

    return impl(source, world_size=world_size, gpus_per_node=gpus_per_node)

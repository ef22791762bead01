"""automodel-dist: compile a training intent into a NeMo AutoModel recipe with the right layout.

Public API (the CLI is a shell over it):

    compile_intent(source, overrides=(), *, target="automodel") -> CompileResult
    explain_intent(source, overrides=(), *, target="automodel", top=10, fmt="text") -> str  (text | json | html)
    estimate(source, overrides=(), *, target="automodel") -> Estimate
    validate_recipe(source, *, world_size, gpus_per_node=8, model=None, gpu=None, sbatch=None,
                    target="automodel", recipe_function=None) -> Report
    build_meshes(source, *, world_size, gpus_per_node=8, nvlink_domain=None, gpu=None) -> MeshReport  (needs torch)
    build_model_dry_run(source, *, world_size, gpus_per_node=8, ranks=None, all_ranks=False, model=None)
        -> ModelReport  (needs the oracle extra: AutoModel itself)

`target="megatron-bridge"` compiles to, estimates, explains and validates a Megatron-Bridge override set for a recipe
function (`recipe_function`, e.g. "deepseek_v3_pretrain_config"); compile then returns a
`MegatronCompileResult` (`.hydra`, `.recipe_function`, `.env` beside the CompileResult fields).

Each name is the function itself, imported on first use (PEP 562), so `import automodel_dist` stays
light and `validate` and `compile` never pay for what they do not use; wrappers would restate the
signatures and drift from them.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__version__ = "0.1.0"
__all__ = ["build_meshes", "build_model_dry_run", "compile_intent", "estimate", "explain_intent", "validate_recipe"]

_HOME = {
    "compile_intent": "automodel_dist.compiler",
    "estimate": "automodel_dist.compiler",
    "explain_intent": "automodel_dist.explain",
    "validate_recipe": "automodel_dist.validate",
    "build_meshes": "automodel_dist.verify.mesh",
    "build_model_dry_run": "automodel_dist.verify.model_dryrun",
}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(_HOME[name]), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})

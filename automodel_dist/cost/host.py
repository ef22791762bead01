"""Host time an MoE step exposes, and how much of it CUDA graphs take away.

An eager training step launches every kernel from Python: op dispatch, autograd bookkeeping and the CUDA launch
cost the CPU several microseconds per kernel, and an MoE layer forward and backward runs a few hundred of them.
A dense layer hides that behind the GPU's work (the CPU runs ahead). An MoE layer cannot: its dispatcher copies
the tokens-per-expert counts to the host to size the permuted buffers and the grouped GEMMs (Megatron-Core's
alltoall and flex dispatchers, AutoModel's DeepEP path), so the GPU waits while the CPU launches what follows
the copy. The time is per layer and micro batch, whatever their size: small-expert models on fast GPUs lose
the most ("the compute and host-overhead wall", Megatron-Core's MoE paper, Scalable Training of MoE Models with
Megatron Core, as Megatron-Bridge's MoE optimization workflow skill cites it).

CUDA graphs replay captured kernels without the host (Megatron-Bridge docs/training/cuda-graphs.md):
a full-iteration graph (`cuda_graph_impl: local` with scope `full_iteration`; MCore's whole-layer graphs of
drop-and-pad MoE before it) leaves none of it; Transformer Engine's per-layer graphs of the router and its
preprocessing (the scopes dropless MoE allows), with or without attention, leave the expert part eager: the
share they leave is fitted (`Physics.graph_host_share`). Megatron-Bridge's own measurements show the size: the
same Qwen3-30B-A3B layout on 8 GB200 (MBS 4, no EP overlap) ran 26,112 tokens/s/GPU with TE graphs of the
router and preprocess (release 26.04.01) and 39,936 with full-iteration graphs (26.08): 4.5 ms per MoE layer
and micro batch.
"""

from __future__ import annotations

from collections.abc import Iterable

from automodel_dist.cost.memory import RecipeOptions, micro_batches_per_step
from automodel_dist.cost.profiles import Physics
from automodel_dist.cost.shape import ModelShape
from automodel_dist.layout import Layout

FULL_ITERATION = "full_iteration"
_ATTENTION_SCOPES = frozenset({"attn", "te_dpa"})


def graphed_modules(impl: str | None, scope: Iterable[str] = ()) -> tuple[str, ...]:
    """What a stack's CUDA-graph settings capture, as RecipeOptions.cuda_graphs holds it: () without graphs,
    ("full_iteration",) when whole layers or iterations are captured, else the sorted scopes.

    Megatron's `local` implementation captured whole layers before MCore 0.16 (scope unset or `full`, drop-and-pad
    MoE in the 25.09 presets) and whole iterations since; both leave no kernel launched from Python."""
    impl = (impl or "none").lower()
    scope = {s for s in scope if s and s != "none"}
    if impl == "none":
        return ()
    if impl in ("local", FULL_ITERATION) or FULL_ITERATION in scope:
        return (FULL_ITERATION,)
    return tuple(sorted(scope))


def host_share(physics: Physics, graphs: tuple[str, ...]) -> float:
    """Share of an eager MoE layer's exposed host time left under `graphs` (RecipeOptions.cuda_graphs)."""
    if FULL_ITERATION in graphs:
        return 0.0
    if "moe_router" not in graphs:
        return 1.0  # attention graphs run before the counts are copied: the exposed part stays eager
    key = "attn+moe_router" if _ATTENTION_SCOPES & set(graphs) else "moe_router"
    return physics.graph_host_share[key]


def host_seconds(shape: ModelShape, layout: Layout, options: RecipeOptions, physics: Physics) -> float:
    """Seconds per step the busiest pipeline rank's GPUs wait on the host: each MoE layer it holds, each micro
    batch, the exposed launch time left by the run's CUDA graphs."""
    if not shape.moe_layers:
        return 0.0
    layers = shape.moe_layers / (layout.pp or 1)
    return (micro_batches_per_step(layout) * layers * physics.host_moe_layer_seconds
            * host_share(physics, options.cuda_graphs))

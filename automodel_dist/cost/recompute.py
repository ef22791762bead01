"""Megatron-Core's module-level selective recompute: what each `recompute_modules` label frees and replays.

Megatron's `recompute_granularity: selective` checkpoints named submodules (MCore 0.19:
transformer/transformer_layer.py, attention.py, multi_latent_attention.py, moe/experts.py, moe/moe_layer.py,
moe/shared_experts.py; which norms are modules of their own follows TE's layer specs in
models/gpt/gpt_layer_specs.py). One function (`module_cost`) gives both what a label frees, in the per-layer
activation parts `ModelShape` names, and the forward work it replays, so memory and time agree:

- core_attn: the core attention runs under a checkpoint whose inputs are q, k and v; its output stays alive
  as the output projection's input. With TE's fused attention that frees only the softmax statistics
  (counted as nothing: Moonlight 8xH100 measured -0.01%, megatron-bridge.md §10) and replays the attention
  kernel's forward, and CP's exchange inside it.
- mla_up_proj: the q/kv up-projections and RoPE (a checkpoint that drops its outputs once the core attention
  has used them): frees the expanded q, k, v; replays the up-projection GEMMs.
- layernorm: the norms that are modules of their own: the input norm under MLA (TE fuses it into linear_qkv
  otherwise) and the pre-MLP norm of MoE layers (a dense MLP fuses it into fc1): frees their outputs,
  replays the norms. MCore leaves the pre-MLP norm alone under a moe_router CUDA graph unless the dispatcher
  is alltoall (`can_recompute_pre_mlp_layernorm_for_cudagraph`); Megatron-Bridge's tuned MoE recipes and this
  target's plans capture that graph, so a flex dispatcher (`pre_mlp_norm=False`) frees the input norm only.
- moe_act: the routed experts' activation: frees its output (the down GEMM's input), replays it.
- mlp: a dense layer's whole MLP (nothing on MoE layers): frees its fused norm's output and its fc1 and
  activation outputs; replays its GEMMs and its TP collectives.
- shared_experts: frees the shared experts' intermediates, replays their GEMMs.
- moe: the whole MoE layer: frees the router's, dispatched, expert and output activations; replays the
  router, the expert GEMMs and the dispatch/combine.
- gdn_norm_out: not modelled (Gated DeltaNet's output norm; frees and replays nothing here).

AutoModel's `activation_checkpointing: selective` is a different policy (op-level; memory.SELECTIVE_AC_KEEP,
throughput.replayed_forward) and keeps its meaning; these apply to Megatron's selective recompute only.
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

from automodel_dist.cost.shape import ModelShape
from automodel_dist.layout import FLEX_DISPATCHERS

# MCore 0.19's labels (TransformerConfig.__post_init__'s allowed set)
MODULES = ("core_attn", "mla_up_proj", "layernorm", "moe_act", "mlp", "moe", "shared_experts", "gdn_norm_out")


class Freed(NamedTuple):
    """Activation elements per token one layer no longer keeps, split as `ModelShape` splits them: replicated
    (split by TP only with sequence parallelism), TP-split, and routed-expert copies."""

    dense_rep: float = 0.0
    dense_tp: float = 0.0
    moe_rep: float = 0.0
    moe_tp: float = 0.0
    moe_expert: float = 0.0


class ModuleCost(NamedTuple):
    """What a set of labels frees (per layer) and replays (per token of the whole model): the attention kernels'
    share, the FLOPs of non-expert linear layers (6 per weight, as `ModelShape` counts them), the routed
    experts' share, the activation elements memory-bound ops stream, and the share of each layer's forward
    TP, EP and CP collectives."""

    freed: Freed
    attention: float
    linear_flops: float
    expert: float
    elementwise: float
    tp: float
    ep: float
    cp: float


def is_module_level(mode: str, framework: str) -> bool:
    """Selective recompute as Megatron-Core runs it (by module) rather than AutoModel's op-level policy."""
    return mode == "selective" and framework == "megatron"


def recomputes_pre_mlp_norm(dispatcher: str | None) -> bool:
    """Whether `layernorm` reaches the MoE layers' pre-MLP norm under the moe_router graph (module docstring):
    only with the alltoall dispatcher (or none)."""
    return dispatcher not in FLEX_DISPATCHERS


def module_cost(shape: ModelShape, module: str, *, pre_mlp_norm: bool = True) -> ModuleCost:
    """What one label frees and replays on `shape` (module docstring), with the MoE layer's expert outputs
    (`ModelShape.moe_act_output`) kept as Megatron's stack keeps them; `pre_mlp_norm`: `layernorm` reaches
    the MoE layers' pre-MLP norm."""
    h, mla = shape.norm_out, shape.uses_mla
    dense, moe, layers = shape.dense_layers, shape.moe_layers, shape.num_layers
    if module == "core_attn":
        return _cost(attention=1.0, cp=1.0)
    if module == "mla_up_proj" and mla:
        return _cost(Freed(dense_tp=shape.attn_qkv, moe_tp=shape.attn_qkv), linear_flops=layers * shape.mla_up_flops,
                     elementwise=layers * shape.attn_qkv)
    if module == "layernorm":
        input_norm = h if mla else 0
        freed = Freed(dense_rep=input_norm, moe_rep=input_norm + (h if pre_mlp_norm else 0) if moe else 0)
        return _cost(freed, elementwise=2 * (dense * freed.dense_rep + moe * freed.moe_rep))
    if module == "moe_act" and moe:
        return _cost(Freed(moe_expert=shape.expert_act), elementwise=moe * 3 * shape.expert_act)
    if module == "mlp" and dense:
        return _cost(Freed(dense_rep=h, dense_tp=shape.mlp_inner), linear_flops=dense * shape.mlp_flops,
                     elementwise=dense * (shape.mlp_inner + 2 * h), tp=0.5 * dense / max(layers, 1))
    if module == "shared_experts" and moe:
        return _cost(Freed(moe_tp=shape.shared_inner), linear_flops=moe * shape.shared_flops,
                     elementwise=moe * shape.shared_inner)
    if module == "moe" and moe:
        router = 4 * shape.num_experts
        expert = shape.moe_act_expert + shape.moe_act_output
        return _cost(Freed(moe_rep=router, moe_tp=shape.shared_inner, moe_expert=expert), linear_flops=moe * (
            shape.shared_flops), expert=1.0, elementwise=moe * (router + shape.shared_inner + expert), ep=1.0)
    return _cost()  # gdn_norm_out, or a label the architecture has nothing for


NOTHING_FREED = Freed()


def _cost(freed: Freed = NOTHING_FREED, *, attention: float = 0.0, linear_flops: float = 0.0, expert: float = 0.0,
          elementwise: float = 0.0, tp: float = 0.0, ep: float = 0.0, cp: float = 0.0) -> ModuleCost:
    return ModuleCost(freed, attention, linear_flops, expert, elementwise, tp, ep, cp)


@lru_cache(maxsize=1024)
def modules_cost(shape: ModelShape, modules: tuple[str, ...], *, pre_mlp_norm: bool = True) -> ModuleCost:
    """The labels together: their parts summed, whole `moe` standing in for the `moe_act` and `shared_experts`
    inside it."""
    labels = set(modules)
    if "moe" in labels and shape.moe_layers:
        labels -= {"moe_act", "shared_experts"}
    costs = [module_cost(shape, m, pre_mlp_norm=pre_mlp_norm) for m in sorted(labels)]
    freed = Freed(*(sum(c.freed[i] for c in costs) for i in range(len(Freed._fields))))
    total = [sum(c[i] for c in costs) for i in range(1, len(ModuleCost._fields))]
    attention, linear_flops, expert, elementwise, tp, ep, cp = total
    return ModuleCost(freed, min(attention, 1.0), linear_flops, min(expert, 1.0), elementwise, min(tp, 1.0),
                      min(ep, 1.0), min(cp, 1.0))

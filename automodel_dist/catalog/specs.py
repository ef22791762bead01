"""The architecture and hardware facts the rules and the cost model consume."""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True)
class ModelSpec:
    """Architecture facts of a decoder-only LLM (dense or MoE), enough for rules and the cost model.

    MoE fields are zero for dense models. `first_dense_layers` counts leading layers with a dense MLP
    (DeepSeek's `first_k_dense_replace`). MLA fields are None for models with ordinary attention.
    `linear_attention_layers` counts layers using linear attention (Qwen3-Next's Gated DeltaNet),
    whose dims follow in `linear_*` fields. With MLA, `head_dim` is the query/key head size
    (qk_nope_head_dim + qk_rope_head_dim). `intermediate_size` is the dense MLP's width;
    `shared_expert_intermediate_size` is the width of one shared expert.

    The flags after `attention_bias` exist because they change parameter counts:
    `attention_bias` puts biases on q/k/v, `attention_out_bias` on the output projection;
    `attention_output_gate` doubles q_proj to emit a sigmoid gate (Qwen3-Next);
    `attention_sinks` adds one learned logit per head (gpt-oss); `qk_norm` adds per-head RMSNorms on
    q and k (Qwen3); `mlp_bias` puts biases on MLP and expert projections (gpt-oss experts);
    `router_bias` adds one bias per routed expert (gpt-oss, DeepSeek's e_score_correction_bias);
    `shared_expert_gate` adds a hidden->1 gate on the shared expert (Qwen3-Next).
    `sliding_window_layers` counts the layers that use `sliding_window` (the rest attend fully).
    """

    name: str
    family: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool = False
    # MoE
    num_routed_experts: int = 0
    num_shared_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate_size: int = 0
    shared_expert_intermediate_size: int = 0
    first_dense_layers: int = 0
    # MLA (DeepSeek-V3, Kimi-K2)
    q_lora_rank: int | None = None
    kv_lora_rank: int | None = None
    qk_nope_head_dim: int | None = None
    qk_rope_head_dim: int | None = None
    v_head_dim: int | None = None
    # Hybrid linear attention (Qwen3-Next)
    linear_attention_layers: int = 0
    linear_num_key_heads: int = 0
    linear_num_value_heads: int = 0
    linear_key_head_dim: int = 0
    linear_value_head_dim: int = 0
    linear_conv_kernel_dim: int = 0
    # Extras that change parameter counts
    attention_bias: bool = False
    sliding_window: int | None = None
    source: str = ""
    attention_out_bias: bool = False
    attention_output_gate: bool = False
    attention_sinks: bool = False
    qk_norm: bool = False
    mlp_bias: bool = False
    router_bias: bool = False
    shared_expert_gate: bool = False
    sliding_window_layers: int = 0

    @property
    def is_moe(self) -> bool:
        return self.num_routed_experts > 0

    @property
    def moe_layers(self) -> int:
        return self.num_layers - self.first_dense_layers if self.is_moe else 0

    @property
    def uses_mla(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def dense_layers(self) -> int:
        """Layers whose MLP is dense: all of them for a dense model, the leading ones for MoE."""
        return self.first_dense_layers if self.is_moe else self.num_layers

    @property
    def full_attention_layers(self) -> int:
        """Layers with softmax attention (all but the linear-attention ones)."""
        return self.num_layers - self.linear_attention_layers


@dataclass(frozen=True)
class GpuSpec:
    """One GPU model and the node it ships in. Bandwidths are GB/s per GPU, one direction.

    `hbm_gib` is the usable HBM the driver reports, in GiB; `hbm_vendor_gb` is the marketing label
    (data/presets/hardware/README.md explains why the two differ). TFLOP/s are dense (no sparsity).
    """

    name: str
    hbm_gib: float
    gpus_per_node: int
    nvlink_domain: int
    tflops_bf16: float
    tflops_fp8: float
    nvlink_gbps: float
    internode_gbps: float
    compute_capability: str
    source: str = ""
    hbm_vendor_gb: float = 0.0
    hbm_tbps: float = 0.0  # HBM bandwidth, TB/s (memory-bound work: permutes, norms, activations)

    @property
    def rack_scale(self) -> bool:
        """Whether NVLink joins GPUs of several nodes (an NVL72 rack), not only of one (an HGX node)."""
        return self.nvlink_domain > self.gpus_per_node

    @property
    def supports_fp8(self) -> bool:
        """FP8 tensor cores exist from Hopper (compute capability 8.9) on; A100 has none (tflops_fp8 0)."""
        return self.tflops_fp8 > 0

    def tflops(self, precision: str) -> float:
        """Dense peak TFLOP/s for `precision`; fp8 on a GPU without FP8 tensor cores is an input error."""
        if precision == "fp8":
            if not self.supports_fp8:
                from automodel_dist.errors import InputError

                raise InputError(f"{self.name} has no FP8 tensor cores (compute capability "
                                 f"{self.compute_capability})", hint="use precision: bf16 on this GPU")
            return self.tflops_fp8
        return self.tflops_bf16


@dataclass(frozen=True)
class ClusterSpec:
    """`nodes` nodes of `gpus_per_node` GPUs each."""

    gpu: GpuSpec
    nodes: int
    gpus_per_node: int

    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def nvlink_domain(self) -> int:
        """GPUs that share NVLink: the job's node, or a whole NVL72 rack (never more than the world). A job
        that takes 4 GPUs of each 8-GPU HGX node reaches its other ranks over the network."""
        return nvlink_domain_size(self.gpu.nvlink_domain if self.gpu.rack_scale else None,
                                  gpus_per_node=self.gpus_per_node, world_size=self.world_size)


# ModelSpec fields that name or describe a model, not its architecture
_NAMING = frozenset({"name", "family", "source"})


def architecture_changes(model: ModelSpec, other: ModelSpec) -> list[str]:
    """'field value (other's value)' for each architecture field where `model` differs from `other` (naming,
    family and source aside): empty when both build the same network."""
    return [f"{item.name} {getattr(model, item.name)} ({getattr(other, item.name)})" for item in fields(model)
            if item.name not in _NAMING and getattr(model, item.name) != getattr(other, item.name)]


def nvlink_domain_size(domain: int | None, *, gpus_per_node: int, world_size: int) -> int:
    """The NVLink domain a job sees: at least its node (None: the node alone), never more than its world."""
    return min(max(domain or gpus_per_node, gpus_per_node), world_size)

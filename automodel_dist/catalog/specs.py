"""The architecture and hardware facts the rules and the cost model consume."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelSpec:
    """Architecture facts of a decoder-only LLM (dense or MoE), enough for rules and the cost model.

    MoE fields are zero for dense models. `first_dense_layers` counts leading layers with a dense MLP
    (DeepSeek's `first_k_dense_replace`). MLA fields are None for models with ordinary attention.
    `linear_attention_layers` counts layers using linear attention (Qwen3-Next's Gated DeltaNet),
    whose dims follow in `linear_*` fields.
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

    @property
    def is_moe(self) -> bool:
        return self.num_routed_experts > 0

    @property
    def moe_layers(self) -> int:
        return self.num_layers - self.first_dense_layers if self.is_moe else 0

    @property
    def uses_mla(self) -> bool:
        return self.kv_lora_rank is not None


@dataclass(frozen=True)
class GpuSpec:
    """One GPU model and the node it ships in. Bandwidths are GB/s per GPU, one direction."""

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

    def tflops(self, precision: str) -> float:
        return self.tflops_fp8 if precision == "fp8" else self.tflops_bf16


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
        """GPUs that share NVLink: the node, or a whole NVL72 rack (never more than the world)."""
        return min(max(self.gpu.nvlink_domain, self.gpus_per_node), self.world_size)

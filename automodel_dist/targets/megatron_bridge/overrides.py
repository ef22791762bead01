"""The Megatron-Bridge override set: the IR the target writes and reads back (`parse(emit(x)) == x`).

An `OverrideSet` is a `Layout` (the sizes every target shares: TP, PP, VPP, CP, EP, ETP, batch) plus the
`MegatronSettings` only Megatron-Bridge has (dispatcher backend, EP overlap, recompute modules, CUDA
graphs, precision recipe, communication overlap). `KEYS` is the one table of where each field lives in
the recipe's `ConfigContainer` (dotted paths, the same in the YAML file and in the Hydra `key=value`
list), read by the emitter, the parser and the rules' finding paths.

Facts: reference/megatron-bridge.md §1 (EP overlap keys), §6 (CP/HCP keys), §7 (dispatcher keys), §9
(CUDA-graph keys; MCore 0.19 renamed `cuda_graph_scope` to `cuda_graph_modules` but the 0.6.2 recipes
still set the legacy key, and setting both fails, so the legacy key is the one written), §10 (recompute
keys); reference/megatron-bridge-oracle.md §6.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from automodel_dist.layout import MEGATRON_STRATEGY, Layout

# Layout.strategy of a Megatron-Bridge layout: Megatron's DDP with the distributed optimizer (optimizer
# state and fp32 master weights sharded over data parallelism; bf16 weights and gradients replicated).
DIST_OPTIMIZER = MEGATRON_STRATEGY

# The Megatron checkpoint a fine-tune loads (the Hugging Face weights imported with Megatron-Bridge's
# AutoBridge): only the user knows where it is, so the override set reads it from the environment when
# Megatron-Bridge resolves the config (OmegaConf's oc.env), and the launch script refuses to start without it.
PRETRAINED_ENV = "PRETRAINED_CHECKPOINT"
PRETRAINED_FROM_ENV = f"${{oc.env:{PRETRAINED_ENV}}}"

CP_COMM_TYPES = ("p2p", "all_gather", "a2a", "a2a+p2p")
DISPATCHER_TYPES = ("allgather", "alltoall", "flex")
FLEX_BACKENDS = ("deepep", "hybridep")
RECOMPUTE_GRANULARITIES = ("full", "selective")
RECOMPUTE_METHODS = ("uniform", "block")
# recompute_modules labels MCore 0.19 accepts (megatron-bridge.md §10)
RECOMPUTE_MODULES = ("core_attn", "mla_up_proj", "layernorm", "moe_act", "mlp", "moe", "shared_experts",
                     "gdn_norm_out")
CUDA_GRAPH_IMPLS = ("none", "local", "transformer_engine", "full_iteration")  # TransformerConfig's Literal (0.19)
CUDA_GRAPH_SCOPES = ("full_iteration", "attn", "mlp", "moe", "moe_router", "moe_preprocess", "mamba")
# Megatron-Bridge mixed-precision recipe names (megatron.bridge.training.mixed_precision)
PRECISIONS = ("bf16_mixed", "bf16_with_fp8_subchannel_scaling_mixed", "bf16_with_mxfp8_mixed")


@dataclass(frozen=True)
class MegatronSettings:
    """What a Megatron-Bridge override set says beyond the Layout. Defaults are ConfigContainer's own."""

    cp_comm_type: str = "p2p"
    hierarchical_cp_sizes: tuple[int, ...] | None = None
    pipeline_layout: str | None = None
    # VPP is 1 and set, not None (the Layout's vpp is 1 for both): Megatron holds a set VPP against a pipeline layout's
    # stage count and needs one with PP > 1 for EP overlap, where None takes the layout's and PP 1 takes no VPP at all
    vpp_set_to_one: bool = False
    account_for_embedding: bool = False
    account_for_loss: bool = False
    dispatcher_type: str = "alltoall"
    flex_backend: str | None = None
    shared_expert_overlap: bool = False
    ep_overlap: bool = False
    delay_wgrad: bool = False
    recompute_granularity: str | None = None
    recompute_method: str | None = None
    recompute_num_layers: int | None = None
    recompute_modules: tuple[str, ...] | None = None
    cuda_graph_impl: str = "none"
    cuda_graph_scope: tuple[str, ...] = ()
    # the mixed-precision recipe's name; None: the recipe's own MixedPrecisionConfig object, whose fields the five
    # below hold (each None elsewhere: the named recipe's value, fields.precision_recipe)
    precision: str | None = "bf16_mixed"
    grad_reduce_in_fp32: bool | None = None
    fp8: str | None = None
    fp8_recipe: str | None = None
    fp8_param_gather: bool | None = None
    reuse_grad_buf_for_mxfp8_param_ag: bool | None = None
    # `optimizer.use_precision_aware_optimizer` (None: the recipe's own): TE's FusedAdam keeps the fp32 main weights
    # as 16-bit remainders beside the bf16 ones and reads the bf16 gradients in place (cost/memory.RecipeOptions)
    precision_aware_optimizer: bool | None = None
    tp_comm_overlap: bool = False
    overlap_grad_reduce: bool = True
    overlap_param_gather: bool = True
    gradient_accumulation_fusion: bool = True
    check_for_nan_in_loss: bool = True
    te_rng_tracker: bool = False
    mtp_num_layers: int | None = None
    seq_length: int = 4096
    # the dataset's sequence length, which Megatron-Bridge asserts is the model's (None: the model's, as written)
    dataset_seq_length: int | None = None
    comm_overlap: bool = False  # the set writes comm_overlap keys (ConfigContainer's default section is None)
    # the class the set builds the section from (`comm_overlap._target_`) for a recipe that leaves it None
    comm_overlap_target: str | None = None
    packed_sequence_size: int | None = None  # the sft/peft recipes' packed sequences (pretrain: none)
    # Fine-tuning (sft/peft recipes; None leaves the recipe's value): padding of packed sequences for CP,
    # the loss and gradient averaging CP needs, the checkpoint the weights load from, the LoRA adapter.
    pad_seq_to_mult: int | None = None
    per_token_loss: bool | None = None
    average_in_collective: bool | None = None
    pretrained_checkpoint: str | None = None
    peft_dim: int | None = None
    peft_alpha: int | None = None

    def with_(self, **changes: object) -> MegatronSettings:
        """A copy with `changes`: built from the fields directly (`dataclasses.replace` re-checks every field's
        kind, a tenth of a Megatron compile that decides the settings of tens of thousands of layouts)."""
        return MegatronSettings(**{**vars(self), **changes})



@dataclass(frozen=True)
class OverrideSet:
    """One Megatron-Bridge override set: the shared layout and the Megatron-only settings."""

    layout: Layout
    settings: MegatronSettings = field(default_factory=MegatronSettings)


@dataclass(frozen=True)
class Key:
    """Where one field lives: its dotted ConfigContainer path, whether it is a Layout or settings field, and
    whether Hydra must append it (`+path=value`): Megatron-Bridge leaves the PEFT object out of the config it
    lets Hydra override ("Could not override 'peft.dim'. To append to your config use +peft.dim=16"), and
    sets the appended keys on it afterwards."""

    path: str
    field: str
    on_layout: bool = False
    append: bool = False


def _k(path: str, name: str) -> Key:
    return Key(path, name, on_layout=False)


def _l(path: str, name: str) -> Key:
    return Key(path, name, on_layout=True)


# Emission order; the parser reads the same table. The batch and the layout's sizes come first.
KEYS: tuple[Key, ...] = (
    _l("model.tensor_model_parallel_size", "tp"),
    _l("model.pipeline_model_parallel_size", "pp"),
    _l("model.virtual_pipeline_model_parallel_size", "vpp"),
    _k("model.pipeline_model_parallel_layout", "pipeline_layout"),
    _k("model.account_for_embedding_in_pipeline_split", "account_for_embedding"),
    _k("model.account_for_loss_in_pipeline_split", "account_for_loss"),
    _l("model.context_parallel_size", "cp"),
    _k("model.cp_comm_type", "cp_comm_type"),
    _k("model.hierarchical_context_parallel_sizes", "hierarchical_cp_sizes"),
    _l("model.expert_model_parallel_size", "ep"),
    _l("model.expert_tensor_parallel_size", "etp"),
    _l("model.sequence_parallel", "sequence_parallel"),
    _k("model.moe_token_dispatcher_type", "dispatcher_type"),
    _k("model.moe_flex_dispatcher_backend", "flex_backend"),
    _k("model.moe_shared_expert_overlap", "shared_expert_overlap"),
    _k("comm_overlap._target_", "comm_overlap_target"),
    _k("comm_overlap.overlap_moe_expert_parallel_comm", "ep_overlap"),
    _k("comm_overlap.delay_wgrad_compute", "delay_wgrad"),
    _k("comm_overlap.tp_comm_overlap", "tp_comm_overlap"),
    _k("ddp.overlap_grad_reduce", "overlap_grad_reduce"),
    _k("ddp.overlap_param_gather", "overlap_param_gather"),
    _k("model.gradient_accumulation_fusion", "gradient_accumulation_fusion"),
    _k("model.recompute_granularity", "recompute_granularity"),
    _k("model.recompute_method", "recompute_method"),
    _k("model.recompute_num_layers", "recompute_num_layers"),
    _k("model.recompute_modules", "recompute_modules"),
    _k("model.cuda_graph_impl", "cuda_graph_impl"),
    _k("model.cuda_graph_scope", "cuda_graph_scope"),
    _k("model.use_te_rng_tracker", "te_rng_tracker"),
    _k("rng.te_rng_tracker", "te_rng_tracker"),
    _k("rerun_state_machine.check_for_nan_in_loss", "check_for_nan_in_loss"),
    _k("mixed_precision", "precision"),
    _k("mixed_precision.grad_reduce_in_fp32", "grad_reduce_in_fp32"),
    _k("mixed_precision.fp8", "fp8"),
    _k("mixed_precision.fp8_recipe", "fp8_recipe"),
    _k("mixed_precision.fp8_param_gather", "fp8_param_gather"),
    _k("mixed_precision.reuse_grad_buf_for_mxfp8_param_ag", "reuse_grad_buf_for_mxfp8_param_ag"),
    _k("optimizer.use_precision_aware_optimizer", "precision_aware_optimizer"),
    _k("model.seq_length", "seq_length"),
    _k("dataset.seq_length", "dataset_seq_length"),
    _l("train.micro_batch_size", "micro_batch_size"),
    _l("train.global_batch_size", "global_batch_size"),
    _k("model.mtp_num_layers", "mtp_num_layers"),
    _k("dataset.offline_packing_specs.packed_sequence_size", "packed_sequence_size"),
    _k("dataset.offline_packing_specs.pad_seq_to_mult", "pad_seq_to_mult"),
    _k("model.calculate_per_token_loss", "per_token_loss"),
    _k("ddp.average_in_collective", "average_in_collective"),
    _k("checkpoint.pretrained_checkpoint", "pretrained_checkpoint"),
    Key("peft.dim", "peft_dim", append=True),
    Key("peft.alpha", "peft_alpha", append=True),
)
PATHS = {key.field: key.path for key in KEYS}  # the first path of each field (finding paths)
APPENDED = frozenset(key.path for key in KEYS if key.append)


def appended(path: str, settings: MegatronSettings) -> bool:
    """Hydra must append the key (`+path=value`): the PEFT keys, and every comm_overlap key when the set builds the
    section itself (the recipe's is None: "Could not override 'comm_overlap.overlap_moe_expert_parallel_comm'")."""
    return path in APPENDED or (settings.comm_overlap_target is not None and path.startswith("comm_overlap."))

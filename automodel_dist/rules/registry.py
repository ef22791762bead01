"""The rule registry: every legality rule, once, with its id, severity, recipe path and origin.

A `Rule` is metadata; the checks that fire it live in `rules/layout.py` (what a `Layout` can say) and
`rules/recipe.py` (what only the recipe mapping says). Ids starting with `am-` are checks AutoModel itself
makes at start-up (their R-number from the AutoModel reference is kept in `automodel`); the others are
checks AutoModel lacks.
"""

from __future__ import annotations

from dataclasses import dataclass

from automodel_dist.findings import ERROR, NOTE, WARNING, Finding

SEVERITIES = (ERROR, WARNING, NOTE)
SCRIPT = "sbatch"  # the path of a finding in the launch script rather than the recipe (its line is the script's)


@dataclass(frozen=True)
class Rule:
    """One legality rule. `needs` names the inputs beyond the layout it needs (model, cluster, training).

    `target` is the compilation target whose recipes the rule judges: "automodel" (this module's rules) or
    another target's name (its rules register themselves from `targets/<name>/rules.py`).
    """

    id: str
    severity: str
    path: str
    summary: str
    automodel: tuple[str, ...] = ()
    needs: tuple[str, ...] = ()
    target: str = "automodel"

    def finding(self, message: str, *, hint: str = "", automodel_message: str | None = None,
                path: str | None = None, severity: str | None = None) -> Finding:
        # path="" is a real place (the top level), so only None falls back to the rule's own path.
        return Finding(rule=self.id, severity=severity or self.severity, path=self.path if path is None else path,
                       message=message, hint=hint, automodel_message=automodel_message)


RULES: dict[str, Rule] = {}


def register(rule_id: str, severity: str, path: str, summary: str, *, automodel: tuple[str, ...] = (),
             needs: tuple[str, ...] = (), target: str = "automodel") -> Rule:
    """Add a rule to the registry; an id may be registered only once."""
    if rule_id in RULES:
        raise ValueError(f"rule {rule_id!r} registered twice")
    if severity not in SEVERITIES:
        raise ValueError(f"rule {rule_id!r}: unknown severity {severity!r}")
    rule = Rule(rule_id, severity, path, summary, automodel, needs, target)
    RULES[rule_id] = rule
    return rule


def divisors(n: int) -> list[int]:
    """Positive divisors of n in ascending order (hints list the valid sizes)."""
    if n <= 0:
        return []
    small, large = [], []
    i = 1
    while i * i <= n:
        if n % i == 0:
            small.append(i)
            if i != n // i:
                large.append(n // i)
        i += 1
    return small + large[::-1]


def listing(values: list[int], limit: int = 12) -> str:
    """'1, 2, 4, 8' (shortened with '...' past `limit` values)."""
    shown = [str(v) for v in values[:limit]]
    if len(values) > limit:
        shown.append("...")
    return ", ".join(shown) if shown else "none"


# ---------------------------------------------------------------------------------------------------
# Layout rules (rules/layout.py): judged from a Layout, plus the model / cluster / training when given.
# ---------------------------------------------------------------------------------------------------
WORLD_DIVISIBLE = register(
    "am-r9-world-divisible", ERROR, "distributed",
    "with dp_size inferred, the world size must be divisible by tp·cp·pp (MegatronFSDP: tp·cp)", automodel=("R9",))
WORLD_PRODUCT = register(
    "mesh-world-product", ERROR, "distributed.dp_size",
    "an explicit dp_size must make pp·dp·cp·tp equal the world size (AutoModel leaves ranks out silently)")
HSDP_NEEDS_FSDP2 = register(
    "am-r10-hsdp-needs-fsdp2", ERROR, "distributed.dp_replicate_size",
    "dp_replicate_size > 1 (HSDP) needs strategy fsdp2", automodel=("R10",))
STRATEGY_FEATURE = register(
    "am-r11-strategy-feature", ERROR, "distributed.strategy",
    "megatron_fsdp has no PP or EP; ddp has no TP, PP, CP or EP", automodel=("R11", "R19"))
DP_REPLICATE_MULTIPLE = register(
    "am-r12-dp-replicate-multiple", ERROR, "distributed.dp_replicate_size",
    "dp must be a multiple of dp_replicate_size", automodel=("R12",))
DP_REPLICATE_BELOW_DP = register(
    "am-r12-dp-replicate-below-dp", ERROR, "distributed.dp_replicate_size",
    "dp_replicate_size must be below dp (pure replication is DDP, not FSDP2)", automodel=("R12",))
EP_DIVIDES_NON_PP = register(
    "am-r13-ep-divides-non-pp", ERROR, "distributed.ep_size",
    "ep must divide dp·cp·tp, the ranks of one pipeline stage", automodel=("R13",))
UNKNOWN_OPTION = register(
    "am-r3-unknown-option", ERROR, "distributed",
    "a distributed key the strategy does not accept (closed key sets per strategy)", automodel=("R3",))
MOE_TP_SEQUENCE_PARALLEL = register(
    "am-r27-moe-tp-sequence-parallel", ERROR, "distributed.sequence_parallel",
    "sequence_parallel is not supported on the MoE TP path (ep > 1 with tp > 1)", automodel=("R27",))
MFSDP_AC_SKIPPED = register(
    "mfsdp-ac-skipped", WARNING, "distributed.activation_checkpointing",
    "MegatronFSDP skips activation checkpointing on more than one GPU")
MFSDP_MOE = register(
    "am-mfsdp-moe", ERROR, "distributed.strategy",
    "MegatronFSDP (megatron-fsdp 0.5.0) wraps no MoE model in AutoModel 0.7.0: it files every `.experts.` "
    "weight under an expert data-parallel group AutoModel never builds", automodel=("R30",), needs=("model",))
MFSDP_NO_DP_SHARD = register(
    "am-r30-mfsdp-no-dp-shard", WARNING, "distributed.tp_size",
    "MegatronFSDP with a DP shard group (dp·cp) of 1 only applies TP: no sharding", automodel=("R30",))
LBS_DIVISIBLE_BY_MBS = register(
    "am-r31-lbs-divisible-by-mbs", ERROR, "distributed.pipeline.pp_microbatch_size",
    "local_batch_size must be divisible by pp_microbatch_size", automodel=("R31", "R35"))
PP_MICROBATCHES = register(
    "am-r18-pp-microbatches", ERROR, "step_scheduler.local_batch_size",
    "pipeline micro batches per step (local_batch_size // pp_microbatch_size) must be at least pp",
    automodel=("R18",))
STAGES_PER_RANK = register(
    "am-r33-stages-per-rank", ERROR, "distributed.pipeline.pp_schedule",
    "single-stage schedules need 1 stage per rank, multi-stage ones at least 2, V schedules exactly 2",
    automodel=("R33", "R34"))
MICROBATCHES_BELOW_STAGES = register(
    "am-r35-microbatches-below-stages", WARNING, "distributed.pipeline.pp_microbatch_size",
    "fewer pipeline micro batches than local stages leaves stages idle", automodel=("R35",))
SCHEDULE_MICROBATCHES = register(
    "pp-schedule-microbatches", ERROR, "step_scheduler.local_batch_size",
    "torch's schedule checks: interleaved schedules need micro batches in whole rounds of pp, DualPipeV at least "
    "as many micro batches as stages")
GBS_DIVISIBLE = register(
    "am-r39-gbs-divisible", ERROR, "step_scheduler.global_batch_size",
    "global_batch_size must be divisible by local_batch_size · dp", automodel=("R39",))
MOK_WORLD = register(
    "am-r37-mok-world", ERROR, "model.backend.dispatcher",
    "dispatcher mok needs a world size divisible by 4", automodel=("R37",))
FLEX_DISPATCHER_ONE_GPU = register(
    "am-r37-flex-dispatcher-one-gpu", WARNING, "model.backend.dispatcher",
    "deepep / hybridep / uccl_ep on a single GPU fall back to plain grouped experts", automodel=("R37",))
TP_DIVIDES_HEADS = register(
    "am-r24-tp-divides-heads", ERROR, "distributed.tp_size",
    "tp must divide the attention and the key/value head counts", automodel=("R24",), needs=("model",))
EP_NEEDS_MOE = register(
    "am-r22-ep-needs-moe", ERROR, "distributed.ep_size",
    "ep > 1 needs one of AutoModel's own MoE classes (a dense model, or Mixtral on Hugging Face's class, has no EP)",
    automodel=("R22",), needs=("model",))
TP_PLAN = register(
    "am-r22-tp-plan", ERROR, "distributed.tp_size",
    "tp > 1 needs a model class with a tensor-parallel plan (AutoModel's own MoE classes have none)",
    automodel=("R22",), needs=("model",))
EP_DIVIDES_EXPERTS = register(
    "am-r26-ep-divides-experts", ERROR, "distributed.ep_size",
    "ep must divide the number of routed experts", automodel=("R26",), needs=("model",))
EXPERT_SHARD_EVEN = register(
    "am-expert-shard-even", ERROR, "distributed.ep_size",
    "expert data parallelism (a stage's ranks / ep) must divide the experts' hidden size and width: AutoModel shards "
    "expert weights on dim 1 and FSDP2 refuses an uneven split there", needs=("model",))
STAGES_EXCEED_LAYERS = register(
    "am-r34-stages-exceed-layers", ERROR, "distributed.pp_size",
    "pipeline stages (pp · stages per rank) cannot exceed the layer count", automodel=("R34",), needs=("model",))
VPP_WHOLE_LAYERS = register(
    "pp-vpp-whole-layers", ERROR, "distributed.pipeline.layers_per_stage",
    "stages per rank must be a count some whole layers_per_stage makes (ceil(layers / layers_per_stage) = pp·vpp)",
    needs=("model",))
PP_TIED_EMBEDDINGS = register(
    "am-r36-pp-tied-embeddings", ERROR, "distributed.pp_size",
    "a model with tied input/output embeddings cannot be pipelined", automodel=("R36",), needs=("model",))
CP_ATTENTION = register(
    "am-r22-cp-attention", ERROR, "distributed.cp_size",
    "context parallelism on AutoModel's own (non-hybrid) model classes needs the TE (or Magi) attention backend",
    automodel=("R22",))
CP_PACKING_SUPPORT = register(
    "am-r20-cp-packing-support", ERROR, "distributed.cp_size",
    "cp > 1 with packed sequences needs a model with packed-CP support (AutoModel TE attention)",
    automodel=("R20",), needs=("model", "training"))
PACK_DIVISIBLE_BY_2CP = register(
    "pack-seq-divisible-by-2cp", ERROR, "packed_sequence.packed_sequence_size",
    "with cp > 1 the packed sequence length must be divisible by 2·cp (THD context-parallel chunks)",
    needs=("training",))
CP_SEQ_PADDED = register(
    "cp-seq-padded", WARNING, "distributed.cp_size",
    "with cp > 1 AutoModel pads each unpacked sequence to a multiple of 2·cp: the padding is computed and wasted",
    needs=("training",))
DISPATCHER_PACKAGE = register(
    "moe-dispatcher-package", WARNING, "model.backend.dispatcher",
    "deepep and hybridep need the deep_ep package (not a dependency of nemo-automodel itself)")
DISPATCHER_GPU = register(
    "moe-dispatcher-gpu", WARNING, "model.backend.dispatcher",
    "DeepEP runs on Ampere, Hopper, B200 and B300, not on GB200/GB300 NVL72 racks (HybridEP does)", needs=("cluster",))
TP_CROSSES_NODE = register(
    "topo-tp-crosses-node", WARNING, "distributed.tp_size",
    "tensor-parallel groups should stay inside one node", needs=("cluster",))
EP_LEAVES_NVLINK = register(
    "topo-ep-leaves-nvlink", WARNING, "distributed.ep_size",
    "expert-parallel groups should stay inside one NVLink domain", needs=("cluster",))

# ---------------------------------------------------------------------------------------------------
# Recipe rules (rules/recipe.py): judged from the recipe mapping itself.
# ---------------------------------------------------------------------------------------------------
RECIPE_TARGET = register(
    "am-r1-recipe-target", WARNING, "recipe",
    "the `automodel` CLI needs the recipe class in `recipe:` (a recipe script run with -c does not)", automodel=("R1",))
RECIPE_CLASS = register(
    "am-recipe-class-unknown", ERROR, "recipe",
    "a bare class name in `recipe:` must be one of AutoModel's recipe classes (the `automodel` CLI exits 1 at "
    "start-up otherwise)")
ENV_VAR = register(
    "am-r2-env-var", WARNING, "",
    "every ${VAR} without a default must be set where the job starts (a warning: the launch environment may "
    "differ from the one validating)", automodel=("R2",))
TARGET_PATH = register(
    "am-target-path", ERROR, "",
    "a _target_ or *_fn path must resolve: AutoModel imports every one while it loads the config (ImportError)")
SECTION_MISSPELLED = register(
    "am-section-misspelled", WARNING, "",
    "a top-level key AutoModel does not read, spelled like a section it does: AutoModel ignores it without a "
    "word, so the section it meant keeps its defaults")
SECTION_MISSING = register(
    "am-section-missing", ERROR, "",
    "TrainFinetuneRecipeForNextTokenPrediction and its subclasses build the model from `model:` and the optimizer "
    "from `optimizer:` unconditionally (train_ft.py setup): without one, setup fails")
SECTION_UNKNOWN_KEY = register(
    "am-section-unknown-key", ERROR, "",
    "TrainFinetuneRecipeForNextTokenPrediction builds lr_scheduler, checkpoint and each data loader into closed "
    "config objects: any other key is a TypeError at setup")
DIST_BACKEND = register(
    "am-dist-backend", ERROR, "dist_env.backend",
    "dist_env.backend is a process-group backend torch knows (init_process_group refuses another name)")
SIGNAL_UNKNOWN = register(
    "am-preemption-signal", ERROR, "step_scheduler.preemption_signal",
    "each preemption signal is a signal name or number (StepSchedulerConfig.build resolves them at start-up)")
RNG_UNREAD = register(
    "am-rng-unread", WARNING, "rng.seed",
    "no AutoModel 0.7.0 recipe reads an `rng:` section: they seed from the top-level `seed:` (default 42)")
DISTRIBUTED_MISSING = register(
    "am-distributed-missing", ERROR, "", "the recipe needs a distributed: section (AutoModel reads cfg.distributed)")
UNKNOWN_STRATEGY = register(
    "am-r3-unknown-strategy", ERROR, "distributed.strategy",
    "strategy must be fsdp2, megatron_fsdp (megatron-fsdp, mfsdp) or ddp", automodel=("R3",))
PIPELINE_UNKNOWN_KEY = register(
    "am-pipeline-unknown-key", ERROR, "distributed.pipeline", "a key PipelineConfig does not accept")
MOE_UNKNOWN_KEY = register(
    "am-moe-unknown-key", ERROR, "distributed.moe", "a key MoEParallelizerConfig does not accept")
AC_VALUE = register(
    "am-r4-ac-value", ERROR, "distributed.activation_checkpointing",
    "activation_checkpointing must be a boolean, 'full' or 'selective'", automodel=("R4",))
SELECTIVE_AC = register(
    "am-r5-selective-ac", ERROR, "distributed.activation_checkpointing",
    "selective activation checkpointing works only with fsdp2 and ddp", automodel=("R5",))
PIPELINE_MISSING = register(
    "am-r6-pipeline-missing", ERROR, "distributed.pp_size",
    "pp_size > 1 needs a distributed.pipeline block", automodel=("R6",))
PIPELINE_IGNORED = register(
    "am-r6-pipeline-ignored", WARNING, "distributed.pipeline",
    "a pipeline block with pp_size <= 1 is ignored", automodel=("R6",))
AC_SCOPE = register(
    "am-r7-ac-scope", ERROR, "distributed.activation_checkpointing_scope",
    "activation_checkpointing_scope takes all | language | vision | audio | multimodal", automodel=("R7",))
MULTIMODAL = register(
    "am-r8-multimodal", ERROR, "distributed.multimodal",
    "frozen_sharding is root | per_layer | replicate; frame_sharding.mesh_dims must be [cp]", automodel=("R8",))
DTYPE_STRING = register(
    "am-dtype-string", ERROR, "distributed.mp_policy", "dtype strings must be ones torch knows (bf16, not fp32)")
SCHEDULE_NAME = register(
    "am-r32-schedule-name", ERROR, "distributed.pipeline.pp_schedule",
    "pp_schedule must be a torch schedule name", automodel=("R31", "R32"))
VIRTUAL_STAGES = register(
    "am-r33-virtual-stages", ERROR, "distributed.pipeline.layers_per_stage",
    "layers_per_stage must give a stage count divisible by pp (or set round_virtual_stages_to_pp_multiple)",
    automodel=("R33",), needs=("model",))
ASYNC_TP_NEEDS_SP = register(
    "am-r23-async-tp-needs-sp", ERROR, "distributed.enable_async_tensor_parallel",
    "enable_async_tensor_parallel needs sequence_parallel on the dense TP path", automodel=("R23",))
MOE_ASYNC_TP = register(
    "am-r27-moe-async-tp", ERROR, "distributed.enable_async_tensor_parallel",
    "enable_async_tensor_parallel is not supported on the MoE TP path (ep > 1 with tp > 1)", automodel=("R27",))
EMBEDDING_REPAIR_PP = register(
    "am-r21-embedding-repair-pp", ERROR, "embedding_row_repair",
    "embedding_row_repair does not work with pipeline parallelism", automodel=("R21",))
TE_FP8_BACKEND = register(
    "am-r38-te-fp8", ERROR, "model.backend.te_fp8",
    "te_fp8 needs linear: te or experts: te", automodel=("R38",))
CUDA_GRAPH = register(
    "am-r38-cuda-graph", ERROR, "model.backend.cuda_graph.modules",
    "cuda_graph.modules entries and their backend requirements", automodel=("R38",))
MOK_CONFIG = register(
    "am-r38-mok-config", ERROR, "model.backend.mok",
    "MoK SM counts positive and even; minibatch a multiple of 256; macrobatch of minibatch; chunk bytes of 16",
    automodel=("R38",))
STEP_SCHEDULER_POSITIVE = register(
    "am-r39-step-scheduler-positive", ERROR, "step_scheduler",
    "step_scheduler batch sizes and step counts must be positive", automodel=("R39",))
MOCK_BATCH_SIZE = register(
    "am-mock-batch-size", ERROR, "dataset.batch_size",
    "MockIterableDataset yields batches of its own batch_size, which must equal step_scheduler.local_batch_size")
PACKING_STRATEGY = register(
    "am-r40-packing-strategy", ERROR, "packed_sequence.packing_strategy",
    "packing_strategy is thd, neat or a dotted path", automodel=("R40",))
CHECKPOINT = register(
    "am-r41-checkpoint", ERROR, "checkpoint", "CheckpointingConfig value checks", automodel=("R41",))
KD_MESHES = register(
    "am-r42-kd-meshes", ERROR, "separate_meshes",
    "knowledge distillation with separate meshes: explicit dp_size on both, student + teacher ranks = world",
    automodel=("R42",))
MODEL_PATH = register(
    "am-model-path", ERROR, "model.pretrained_model_name_or_path",
    "the model must be a hub id or a model folder from_pretrained reads (not a config.json file); a relative path "
    "is read from where the job runs (a warning)")
DIST_ENV_TIMEOUT = register(
    "dist-env-timeout", WARNING, "dist_env.timeout_minutes",
    "multi-node runs need dist_env.timeout_minutes well above AutoModel's 1-minute default")
DIST_ENV_TIMEOUT_VALUE = register(
    "dist-env-timeout-value", ERROR, "dist_env.timeout_minutes",
    "dist_env.timeout_minutes must be a finite number of minutes > 0 that torch can hold (timedelta, int64 µs)")
DDP_DP_SIZE_IGNORED = register(
    "ddp-dp-size-ignored", WARNING, "distributed.dp_size", "ddp ignores dp_size and uses every rank")
SCHEMA = register(
    "schema", ERROR, "", "the recipe breaks the AutoModel recipe schema (`automodel-dist schema recipe`)")

# ---------------------------------------------------------------------------------------------------
# Launch rules (rules/launch.py): the recipe on several nodes, and the sbatch script that launches it.
# A rule with two severities registers the worse; the milder case passes its own.
# ---------------------------------------------------------------------------------------------------
NTASKS_PER_NODE = register(
    "launch-ntasks-per-node", ERROR, SCRIPT,
    "one torchrun per node: several tasks per node (--ntasks-per-node, or --ntasks over --nodes) with torchrun "
    "start several launchers on one rendezvous port")
SCRIPT_NODES = register(
    "launch-script-nodes", ERROR, SCRIPT,
    "the node count the script asks Slurm for must be the one the recipe is judged (and sized) for")
PREEMPTION_SIGNAL = register(
    "launch-preemption-signal", ERROR, "step_scheduler.preemption_signal",
    "a script that has Slurm send SIGUSR1 needs a recipe whose preemption_signal handles SIGUSR1")
NODE_LOCAL_CACHE = register(
    "launch-node-local-cache", ERROR, "checkpoint.checkpoint_dir",
    "on several nodes, checkpoints (error) and the recipe and caches the script names (warning) must be on "
    "storage every node mounts")
EP_NVLINK = register(
    "launch-ep-nvlink", ERROR, "model.backend.dispatcher",
    "EP groups beyond the NVLink domain: mok cannot span domains (error); hybridep needs the domain size "
    "exported by the script (warning)", needs=("cluster",))
SBATCH_REJECTED = register(
    "launch-sbatch-rejected", ERROR, SCRIPT,
    "sbatch refuses a script that is empty or blank, lacks a #! first line, holds a NUL or has DOS line breaks")
ENV_REASSIGNED = register(
    "launch-env-reassigned", WARNING, SCRIPT,
    "a variable the launch script sets twice to different values keeps the later one (a launcher.env entry "
    "overriding the value the plan set)")
SBATCH_SYNTAX = register(
    "launch-sbatch-syntax", ERROR, SCRIPT, "the launch script must parse as a shell script (bash -n)")
NO_TORCHRUN = register(
    "launch-no-torchrun", ERROR, SCRIPT,
    "the launch script must start torchrun (AutoModel's CLI alone starts a one-node job on every node, or nothing)")
LAUNCHER_SECTION = register(
    "launch-launcher-section", ERROR, "skypilot",
    "a recipe the script runs through nemo_automodel.cli.app must not carry a skypilot: or nemo_run: section")

# ---------------------------------------------------------------------------------------------------
# The model-level dry-run (verify/model_dryrun.py): AutoModel's own build, on meta.
# ---------------------------------------------------------------------------------------------------
MODEL_BUILD = register(
    "am-model-build", ERROR, "model",
    "AutoModel raised while building the model, in a way no other rule predicts (its message says what)")
MODEL_STATES_FIT = register(
    "model-states-fit", ERROR, "distributed",
    "the parameters, gradients and optimizer states a rank holds as AutoModel builds them must fit the GPU, "
    "before any activation", needs=("cluster",))
MODEL_PLAN = register(
    "model-plan-unmatched", ERROR, "distributed.tp_size",
    "a TP or EP size whose plan sharded no parameter of the real model (the plan matched no module)")

# ---------------------------------------------------------------------------------------------------
# validate.py: cost model and what could not be judged.
# ---------------------------------------------------------------------------------------------------
MEMORY_FIT = register(
    "memory-fit", ERROR, "distributed", "the estimated peak memory must fit the GPU", needs=("model", "cluster"))
SKIPPED = register("skipped", NOTE, "", "a check that could not be judged, and why")

"""Layout: the compiler's IR for one distributed configuration, and the sizes derived from it.

A Layout is what a recipe's `distributed:`, `step_scheduler:` batch fields and MoE backend say, in
canonical form. The planner produces Layouts; the AutoModel target writes and reads them
(`parse(emit(layout)) == layout`); rules and the cost model judge them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

STRATEGIES = ("fsdp2", "megatron_fsdp", "ddp")

# torch pipeline schedule names, lower-case, as AutoModel resolves them (reference/automodel.md §3.4).
SINGLE_STAGE_SCHEDULES = ("1f1b", "gpipe")
MULTI_STAGE_SCHEDULES = ("interleaved1f1b", "loopedbfs", "interleavedzerobubble", "zbvzerobubble", "dualpipev")
V_SCHEDULES = ("zbvzerobubble", "dualpipev")
PP_SCHEDULES = (*SINGLE_STAGE_SCHEDULES, *MULTI_STAGE_SCHEDULES, "pipelineschedulesingle", "pipelineschedulemulti")


def is_multi_stage(schedule: str | None) -> bool:
    """Whether torch runs several stages per pp rank for this schedule (its PipelineScheduleMulti family)."""
    return schedule in MULTI_STAGE_SCHEDULES or schedule == "pipelineschedulemulti"

# AutoModel's MoE token dispatchers beyond plain `torch`: the first three do inter-node all-to-all; MoK
# fuses dispatch and combine inside one NVLink domain.
INTER_NODE_DISPATCHERS = ("deepep", "hybridep", "uccl_ep")
FLEX_DISPATCHERS = (*INTER_NODE_DISPATCHERS, "mok")

# Activation checkpointing as AutoModel applies it (reference/automodel.md §3.2): "full" recomputes each
# decoder layer from its input; "selective" wraps each layer in torch's op-level policy (it keeps attention,
# every other matmul, top-k and collective outputs, FSDP2 and DDP only); "off" keeps every activation.
# Ordered by the memory they keep, least first.
AC_MODES = ("full", "selective", "off")


def ac_mode(value: bool | str) -> str:
    """A checkpointing mode from AutoModel's boolean spelling too (True is "full", False is "off")."""
    if value is True:
        return "full"
    if value is False:
        return "off"
    return value


_AC_LABELS = {"full": "ac", "selective": "sac", "off": "noac"}
# Layout.strategy of a Megatron-Bridge layout: Megatron's DDP with the distributed optimizer.
MEGATRON_STRATEGY = "distributed_optimizer"


@dataclass(frozen=True)
class Layout:
    """One distributed layout on `world_size` GPUs.

    `dp_size` is the recipe's explicit `distributed.dp_size` (None = inferred as W/(tp·cp·pp)), kept so
    that validate can judge a recipe whose explicit value leaves ranks out. `vpp` is the number of
    pipeline stages per pp rank (1 for single-stage schedules). `micro_batch_size` is the pipeline
    micro batch (`distributed.pipeline.pp_microbatch_size`); it equals `local_batch_size` without PP.
    `etp` is Megatron's expert tensor parallelism (the TP of the expert layers, folded with EP over the
    ranks of one pipeline stage); AutoModel has none, so it stays 1 there. `activation_checkpointing` is one
    of `AC_MODES` (a bool is read as AutoModel reads it: True is "full").
    """

    world_size: int
    strategy: str = "fsdp2"
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    dp_replicate: int = 1
    dp_size: int | None = None
    vpp: int = 1
    pp_schedule: str | None = None
    activation_checkpointing: str = "off"
    sequence_parallel: bool = False
    global_batch_size: int = 1
    local_batch_size: int = 1
    micro_batch_size: int = 1
    dispatcher: str | None = None
    etp: int = 1

    def __post_init__(self) -> None:
        if isinstance(self.activation_checkpointing, bool):
            object.__setattr__(self, "activation_checkpointing", ac_mode(self.activation_checkpointing))
        # computed once: the cost model's shard sizes read it dozens of times per layout estimated
        object.__setattr__(self, "_dp", self._data_parallel_size())

    @property
    def checkpointed(self) -> bool:
        """Whether any activation checkpointing is asked for (full or selective)."""
        return self.activation_checkpointing != "off"

    @property
    def dp(self) -> int:
        """Data-parallel size: explicit dp_size, else W // (tp·cp·pp) (MegatronFSDP: W // (tp·cp))."""
        return self._dp

    def _data_parallel_size(self) -> int:
        if self.dp_size is not None and self.dp_size > 0:
            return self.dp_size
        if self.strategy == "ddp":
            return self.world_size
        denom = self.tp * self.cp * (1 if self.strategy == "megatron_fsdp" else self.pp)
        return max(self.world_size // denom, 0) if denom > 0 else 0

    @property
    def dp_shard(self) -> int:
        return self.dp // self.dp_replicate if self.dp_replicate > 0 else 0

    @property
    def non_pp_size(self) -> int:
        """Ranks in one pipeline stage: dp·cp·tp, the size the MoE mesh is carved from."""
        return self.dp * self.cp * self.tp

    @property
    def ep_shard(self) -> int:
        """Expert data parallelism: the ranks of one stage over ep·etp (1 without EP)."""
        if self.ep <= 1:
            return 1
        group = self.ep * max(self.etp, 1)
        return self.non_pp_size // group if group < self.non_pp_size else 1

    @property
    def mesh_size(self) -> int:
        """Ranks the layout's mesh covers: pp·dp·cp·tp (must equal the world size)."""
        if self.strategy == "ddp":
            return self.world_size
        pp = 1 if self.strategy == "megatron_fsdp" else self.pp
        return pp * self.dp * self.cp * self.tp

    @property
    def grad_accumulation(self) -> int:
        denom = self.local_batch_size * self.dp
        return self.global_batch_size // denom if denom > 0 else 0

    @property
    def n_microbatches(self) -> int:
        """Pipeline micro batches per step of one DP rank (1 without PP)."""
        if self.pp <= 1:
            return 1
        return self.local_batch_size // self.micro_batch_size if self.micro_batch_size > 0 else 0

    @property
    def num_stages(self) -> int:
        return self.pp * self.vpp

    def with_(self, **changes: object) -> Layout:
        return replace(self, **changes)

    def short(self) -> str:
        """Compact human label in the stack's own terms: AutoModel's, e.g. 'fsdp2 tp2 pp4v2 cp1 ep8 dpr1 dp16 ac
        lbs2 mbs1' (sac: selective), or Megatron's for a Megatron layout (`megatron_short`)."""
        if self.strategy == MEGATRON_STRATEGY:
            return self.megatron_short()
        parts = [self.strategy, f"tp{self.tp}", f"pp{self.pp}" + (f"v{self.vpp}" if self.vpp > 1 else ""),
                 f"cp{self.cp}", f"ep{self.ep}", f"dpr{self.dp_replicate}", f"dp{self.dp}",
                 _AC_LABELS[self.activation_checkpointing], f"lbs{self.local_batch_size}"]
        if self.pp > 1:
            parts.append(f"mbs{self.micro_batch_size}")
        if self.sequence_parallel:
            parts.append("sp")
        if self.etp > 1:
            parts.append(f"etp{self.etp}")
        return " ".join(parts)

    def megatron_short(self) -> str:
        """Megatron's terms, as its cards write a layout: 'TP2 PP8 VPP4 CP1 EP16 DP16 EDP2 SP MBS1', with ETP when
        above 1, EDP (expert data parallelism) with EP, and the recompute granularity when there is one."""
        parts = [f"TP{self.tp}", f"PP{self.pp}", *([f"VPP{self.vpp}"] if self.vpp > 1 else []), f"CP{self.cp}",
                 f"EP{self.ep}", *([f"ETP{self.etp}"] if self.etp > 1 else []), f"DP{self.dp}",
                 *([f"EDP{self.ep_shard}"] if self.ep > 1 else []), *(["SP"] if self.sequence_parallel else []),
                 *([f"recompute:{self.activation_checkpointing}"] if self.checkpointed else []),
                 f"MBS{self.micro_batch_size}"]
        return " ".join(parts)

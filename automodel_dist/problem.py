"""What the planner solves: a model on a cluster for a training job, under the user's pins."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from automodel_dist.catalog.specs import ClusterSpec, ModelSpec
from automodel_dist.layout import ac_mode

if TYPE_CHECKING:
    from automodel_dist.cost.memory import RecipeOptions


DEFAULT_PEFT_RANK = 16  # the intent schema's LoRA rank when a peft intent gives none


@dataclass(frozen=True)
class TrainingSpec:
    """The job: task, sequence length, global batch, packing, precision, LoRA rank (peft only), and whether
    it starts from the published weights (`init` pretrained) or from random ones (from_scratch)."""

    task: str = "sft"
    seq_length: int = 4096
    global_batch_size: int = 32
    packed_sequences: bool = False
    precision: str = "bf16"
    peft_rank: int | None = None
    init: str = "pretrained"

    @property
    def is_peft(self) -> bool:
        return self.task == "peft"

    @property
    def lora_rank(self) -> int:
        """The LoRA rank a peft job trains (the intent's, else the default)."""
        return self.peft_rank or DEFAULT_PEFT_RANK


@dataclass(frozen=True)
class Pins:
    """The intent's `parallelism:` pins. None = auto; a tuple = the allowed values."""

    strategy: tuple[str, ...] | None = None
    tp: tuple[int, ...] | None = None
    pp: tuple[int, ...] | None = None
    vpp: tuple[int, ...] | None = None
    cp: tuple[int, ...] | None = None
    ep: tuple[int, ...] | None = None
    dp_replicate: tuple[int, ...] | None = None
    activation_checkpointing: tuple[str, ...] | None = None  # layout.AC_MODES; intents' true/false read as full/off
    local_batch_size: tuple[int, ...] | None = None
    micro_batch_size: tuple[int, ...] | None = None
    dispatcher: tuple[str, ...] | None = None  # MoE token dispatcher, for layouts with ep > 1

    def __post_init__(self) -> None:
        if self.activation_checkpointing is not None:
            object.__setattr__(self, "activation_checkpointing",
                               tuple(sorted({ac_mode(v) for v in self.activation_checkpointing})))

    def allows(self, name: str, value: object) -> bool:
        allowed = getattr(self, name)
        return allowed is None or value in allowed


@dataclass(frozen=True)
class Problem:
    """A resolved intent: everything the planner and the cost model need, no file positions."""

    model: ModelSpec
    cluster: ClusterSpec
    training: TrainingSpec
    pins: Pins = field(default_factory=Pins)
    objective: str = "throughput"
    memory_headroom: float = 0.1
    # The settings outside the layout that a base recipe fixes (its reduce dtype, loss, weight dtype...):
    # the estimates start from them, so the compiled header says what the merged recipe runs. None: AutoModel's.
    recipe_options: RecipeOptions | None = None

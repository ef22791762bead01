"""Which MoE token dispatcher a layout gets, and why (one function serves the planner and the emitter).

Sources (reference/megatron-bridge.md): §7 (HybridEP is the first tuned candidate on GB200/GB300 NVL72;
DeepEP when cross-node EP is visible), §5 (measured rows: DeepSeek-V3 on H100 and B200 use DeepEP, on
GB200 HybridEP) and Appendix B (DeepEP runs on compute capability 8.x/9.x and on B200/B300; HybridEP on
8.x/9.x/10.x; GB200/GB300 are not DeepEP-eligible). AutoModel's `torch` dispatcher is the DTensor path
and needs no extra package (reference/automodel.md §6).
"""

from __future__ import annotations

from dataclasses import dataclass

from automodel_dist.catalog.specs import ClusterSpec, GpuSpec, ModelSpec
from automodel_dist.targets.automodel.model_classes import automodel_moe


@dataclass(frozen=True)
class DispatcherChoice:
    name: str | None
    reason: str


def capability_major(capability: str) -> int:
    """The GPU generation from a compute capability ("9.0" -> 9); 0 when it is missing or malformed."""
    try:
        return int(str(capability).split(".")[0])
    except ValueError:
        return 0


def ep_group_in_domain(ep: int, domain: int, world_size: int) -> bool:
    """Blocks of `ep` consecutive ranks each stay inside a domain of `domain` ranks.

    EP groups are such blocks, and so are TP and TP·CP groups: the planner and the rules ask the same
    question of those (`groups_leaving_node`, the TP-inside-a-node rule).
    """
    return ep <= 1 or world_size <= domain or (ep <= domain and domain % ep == 0)


def dispatcher_runs_on(dispatcher: str, gpu: GpuSpec) -> bool:
    """Whether DeepEP / HybridEP kernels run on this GPU (other dispatchers: always).

    DeepEP: compute capability 8.x/9.x, and B200/B300 nodes but not GB200/GB300 racks; HybridEP: 8.x-10.x.
    """
    major = capability_major(gpu.compute_capability)
    if dispatcher == "deepep":
        return major in (8, 9) or (major == 10 and not gpu.rack_scale and "gb" not in gpu.name.lower())
    if dispatcher == "hybridep":
        return major in (8, 9, 10)
    return True


def choose_dispatcher(model: ModelSpec, cluster: ClusterSpec, ep: int) -> DispatcherChoice:
    """Dense, or MoE on a Hugging Face class: None. AutoModel's MoE without EP: torch. With EP: by GPU
    generation and EP locality."""
    if not model.is_moe:
        return DispatcherChoice(None, "dense model")
    if not automodel_moe(model):
        return DispatcherChoice(None, "a Hugging Face MoE class: AutoModel's token dispatchers do not apply")
    if ep <= 1:
        return DispatcherChoice("torch", "no expert parallelism: experts are FSDP-sharded, no token exchange")
    gpu = cluster.gpu
    deepep_ok = dispatcher_runs_on("deepep", gpu)
    hybridep_ok = dispatcher_runs_on("hybridep", gpu)
    in_domain = ep_group_in_domain(ep, cluster.nvlink_domain, cluster.world_size)
    if gpu.nvlink_domain <= 1 or not hybridep_ok:
        return DispatcherChoice("torch", f"{gpu.name} has no NVLink-capable DeepEP/HybridEP support")
    if gpu.rack_scale:
        return DispatcherChoice("hybridep", f"NVL{gpu.nvlink_domain} rack: HybridEP is the topology-aware "
                                "dispatcher for rack-scale NVLink (DeepEP does not run on it)")
    if in_domain:
        return DispatcherChoice("hybridep", f"EP={ep} stays inside the {cluster.nvlink_domain}-GPU NVLink "
                                "domain: HybridEP's NVLink path")
    if deepep_ok:
        return DispatcherChoice("deepep", f"EP={ep} crosses the {cluster.nvlink_domain}-GPU NVLink domain: "
                                "DeepEP's internode kernels (measured H100/B200 MoE layouts)")
    return DispatcherChoice("hybridep", f"EP={ep} crosses nodes and DeepEP does not run on {gpu.name}")

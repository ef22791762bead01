"""Model-level dry-run: AutoModel's own code builds the recipe's model on meta, one rank per pipeline stage.

recipe -> the model it trains (catalog preset or config.json, written out with every layer at real width)
-> a worker process (verify/model_worker.py) builds it under torch's fake process group for the chosen
ranks -> per rank: parameter bytes as allocated (FSDP2's padded shards, MegatronFSDP's flat-buffer shards),
the gradient and optimizer bytes they imply, the layers and outer modules it holds, whether TP and EP
sharded anything; every error AutoModel raises becomes a located finding under the rule that predicts it
(or `am-model-build`).

This module never imports torch: the worker does. Without the `oracle` extra it is an input error.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from automodel_dist.catalog.hf_export import hf_config_dict
from automodel_dist.catalog.models import resolve_model
from automodel_dist.catalog.params import param_counts
from automodel_dist.catalog.specs import GpuSpec, ModelSpec
from automodel_dist.cost.memory import GIB
from automodel_dist.errors import InputError
from automodel_dist.findings import ERROR, BySeverity, Finding, locate_all
from automodel_dist.layout import Layout
from automodel_dist.pipeline_stages import pipeline_split
from automodel_dist.rules import registry as r
from automodel_dist.targets.automodel.config import resolve_config
from automodel_dist.targets.automodel.model_classes import model_class
from automodel_dist.targets.automodel.parse import RecipeValueError, layout_from_config, section
from automodel_dist.targets.automodel.recipe_model import recipe_model
from automodel_dist.verify.mesh import judge_mesh_stage
from automodel_dist.yamlio import as_mapping, load_document, to_plain

ALL_RANKS_LIMIT = 64  # --all-ranks beyond this would take minutes (each rank re-initialises the fake group)
ADAM_STATES = 2        # AdamW keeps m and v, each in the parameter's dtype
DEFAULT_SEQ = 4096
WORKER_BASELINE_GIB = 0.5  # the worker with torch and AutoModel imported, before any weight
# AutoModel's error text -> the rule that predicts it (the first match wins), and the key it points at.
ERROR_RULES: tuple[tuple[str, r.Rule], ...] = (
    (r"Tensor parallelism \(tp_size=", r.TP_PLAN),
    (r"Expert parallelism \(ep_size=", r.EP_NEEDS_MOE),
    (r"n_routed_experts \d+ must be divisible", r.EP_DIVIDES_EXPERTS),
    (r"must be divisible by TP size", r.TP_DIVIDES_HEADS),
    (r"non_pp_size=", r.EP_DIVIDES_NON_PP),
    (r"world_size \(\d+\) must be divisible", r.WORLD_DIVISIBLE),
    (r"Number of stages \(\d+\) cannot exceed", r.STAGES_EXCEED_LAYERS),
    (r"tie_word_embeddings", r.PP_TIED_EMBEDDINGS),
    (r"(Single stage|Multi-stage) schedule requires", r.STAGES_PER_RANK),
    (r"Number of virtual stages", r.VIRTUAL_STAGES),
    (r"pp_batch_size \d+ // pp_microbatch_size", r.PP_MICROBATCHES),
    (r"megatron_fsdp_unit_modules was not provided", r.MFSDP_MOE),
)
ORACLE_MISSING = ("dry-run --model needs AutoModel itself: pip install 'automodel-dist[oracle]' "
                  "(nemo-automodel 0.7.0 with its dependencies), then pip uninstall triton")


@dataclass
class RankModel:
    """What one rank holds after AutoModel's build: bytes as allocated (FSDP2's padded shards, MegatronFSDP's
    flat-buffer shards), as the local tensors hold them (unpadded), and as an even split of every parameter
    would (`even`, what a formula gives)."""

    rank: int
    pp_rank: int
    ok: bool
    model_class: str = ""
    param_bytes: int = 0
    param_bytes_unpadded: int = 0
    param_bytes_even: float = 0.0
    grad_bytes: int = 0
    optimizer_bytes: int = 0
    layers: list[int] = field(default_factory=list)
    outer: list[str] = field(default_factory=list)
    stages: int = 0
    plans: dict[str, int] = field(default_factory=dict)
    checkpointing: dict[str, int] = field(default_factory=dict)  # modules wrapped, of them selective blocks
    error: str = ""
    seconds: float = 0.0

    @property
    def states_bytes(self) -> int:
        """Parameters, gradients and optimizer states, as allocated."""
        return self.param_bytes + self.grad_bytes + self.optimizer_bytes

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class ModelReport(BySeverity):
    """The ranks built, and every finding (AutoModel's errors located in the recipe, plan checks)."""

    world_size: int
    ranks: list[RankModel] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    source: str = ""
    model: str = ""
    timing: dict[str, float] = field(default_factory=dict)
    peak_rss_mb: int = 0

    @property
    def ok(self) -> bool:
        return not self.errors

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "source": self.source, "model": self.model, "world_size": self.world_size,
                "ranks": [rank.to_json() for rank in self.ranks], "findings": [f.to_json() for f in self.findings]}


def require_oracle() -> None:
    """One line and exit 2 when AutoModel (the `oracle` extra) is not installed."""
    for module in ("torch", "nemo_automodel", "transformers"):
        if importlib.util.find_spec(module) is None:
            raise InputError(ORACLE_MISSING)


class ModelWorker:
    """A running worker process (imports AutoModel once, ~8 s); `build` sends one request, waits for its answer."""

    def __init__(self) -> None:
        require_oracle()
        root = Path(__file__).resolve().parents[2]
        # AutoModel's chatter; its tail explains a dead worker (closed in close())
        self.log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115
        self.proc = subprocess.Popen([sys.executable, "-m", "automodel_dist.verify.model_worker"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                     text=True, cwd=root)
        ready = self._read()
        self.import_s = float(ready.get("import_s", 0.0))

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            self.log.seek(0)
            tail = "\n".join(self.log.read().splitlines()[-5:])
            raise RuntimeError(f"the AutoModel worker died (exit {self.proc.wait(timeout=60)}):\n{tail}")
        return json.loads(line)

    def build(self, request: Mapping[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)
        self.log.close()

    def __enter__(self) -> ModelWorker:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def stage_ranks(layout: Layout) -> list[int]:
    """The first rank of every pipeline stage (pp is the outermost mesh axis)."""
    per_stage = layout.world_size // max(layout.pp, 1)
    return [stage * per_stage for stage in range(max(layout.pp, 1))]


def model_request(config: Mapping[str, Any], layout: Layout, spec: ModelSpec, ranks: Sequence[int],
                  seq_length: int = 0) -> dict[str, Any]:
    """What the worker needs to build the recipe's model: its config.json, the distributed section, the
    backend and PEFT settings, and what the recipe sets on the pipeline config before building."""
    model = as_mapping(config.get("model"))
    cls = model_class(spec.family)
    backend = None
    attn = None
    if cls is not None and cls.custom:  # AutoModel's own classes take a BackendConfig
        backend = {k: v for k, v in as_mapping(model.get("backend")).items() if k != "_target_"}
        attn = backend.get("attn", "te")  # on a GPU with Transformer Engine, te is the default
    peft = section(config, "peft")
    pipeline = None
    if layout.pp > 1:
        pipeline = {"pp_batch_size": layout.local_batch_size, "pp_microbatch_size": layout.micro_batch_size,
                    "pp_seq_len": seq_length or DEFAULT_SEQ}
    return {"config": hf_config_dict(spec), "distributed": to_plain(config.get("distributed") or {}),
            "world_size": layout.world_size, "ranks": list(ranks), "backend": backend, "attn": attn,
            "peft": {k: v for k, v in peft.items() if k != "_target_"} or None, "pipeline": pipeline}


def read_answer(answer: Mapping[str, Any], layout: Layout) -> tuple[list[RankModel], list[Finding]]:
    """The worker's answer as ranks and findings (one finding per distinct AutoModel error)."""
    per_stage = layout.world_size // max(layout.pp, 1)
    ranks, findings, seen = [], [], set()
    if answer.get("error"):
        findings.append(r.MODEL_BUILD.finding(f"the AutoModel worker could not serve the request: {answer['error']}",
                                              path="model", hint="report this: it is not a recipe problem"))
    for key, built in answer.get("ranks", {}).items():
        rank = int(key)
        seconds = float(answer.get("seconds", {}).get(key, 0.0))
        if not built["ok"]:
            ranks.append(RankModel(rank, rank // per_stage, False, error=built["error"], seconds=seconds))
            if built["error"] not in seen:
                seen.add(built["error"])
                findings.append(error_finding(built["error"], rank, built.get("stage", "model")))
            continue
        params = built["params"]
        trainable = params["trainable_padded"]  # MegatronFSDP: its main weights, with their own gradient buffer
        ranks.append(RankModel(rank, rank // per_stage, True, built["class"], params["padded"], params["unpadded"],
                               params["even"], params.get("grads", trainable), ADAM_STATES * trainable,
                               built["layers"], built["outer"], built["stages"], built["plans"], built["checkpointing"],
                               seconds=seconds))
    findings += plan_findings([rank.plans for rank in ranks if rank.ok])
    return ranks, findings


def error_finding(error: str, rank: int, stage: str) -> Finding:
    """AutoModel's error under the rule that predicts it; its first line in the message, all of it beside."""
    rule = next((rule for pattern, rule in ERROR_RULES if re.search(pattern, error)), r.MODEL_BUILD)
    head = error.splitlines()[0]
    bullet = next((line.strip(" -") for line in error.splitlines()[1:] if line.strip().startswith("- ")), "")
    what = f"{head} {bullet}".strip() if head.endswith(":") else head
    return rule.finding(f"AutoModel refused to build the {'meshes' if stage == 'mesh' else 'model'} on rank {rank}: "
                        f"{what}", hint=rule.summary, automodel_message=error, severity="error")


def plan_findings(plans: Sequence[Mapping[str, int]]) -> list[Finding]:
    """A TP or EP size whose plan sharded no parameter on any rank built matched no module of the real model
    (one stage may hold no experts: DeepSeek's first layers are dense)."""
    out = []
    for axis in ("tp", "ep"):
        size = max((plan.get(f"{axis}_size", 1) for plan in plans), default=1)
        if size > 1 and not any(plan.get(f"{axis}_sharded", 0) for plan in plans):
            out.append(r.MODEL_PLAN.finding(
                f"{axis}_size={size}, but no parameter of the ranks built is sharded over {axis}: the "
                f"{'tensor' if axis == 'tp' else 'expert'}-parallel plan matched no module of the model",
                path=f"distributed.{axis}_size", hint=f"set {axis}_size: 1, or give a plan that names the model's "
                "modules (distributed.tp_plan)"))
    return out


def build_model_dry_run(source: str | Path | Mapping[str, Any], *, world_size: int, gpus_per_node: int = 8,
                        ranks: Sequence[int] | None = None, all_ranks: bool = False, model: Any = None,
                        worker: ModelWorker | None = None, gpu: GpuSpec | None = None) -> ModelReport:
    """Build the recipe's model with AutoModel's own code on meta for one rank of every pipeline stage
    (or `ranks`, or every rank with `all_ranks`); needs the `oracle` extra. `worker` reuses a running one. With
    `gpu`, a rank whose built model states alone pass its memory is an error."""
    doc = load_document(source, what="recipe")
    config, _missing = resolve_config(doc.data)
    spec = _model(config, model)
    # what AutoModel refuses before it builds the model (a null distributed section, sizes that make no
    # meshes) is the mesh dry-run's verdict: nothing is built, as AutoModel builds nothing
    _layout, mesh_findings = judge_mesh_stage(doc, world_size=world_size, gpus_per_node=gpus_per_node)
    if any(finding.severity == ERROR for finding in mesh_findings):
        return ModelReport(world_size=world_size, source=doc.filename, model=spec.name, findings=mesh_findings)
    try:
        layout = layout_from_config(config, world_size=world_size, model=spec)
    except RecipeValueError as exc:
        raise exc.located(doc) from None
    check_host_memory(config, layout, spec, where=doc.where("distributed.strategy"))
    chosen = _ranks(layout, ranks, all_ranks)
    seq = int(as_mapping(config.get("packed_sequence")).get("packed_sequence_size") or 0)
    request = model_request(config, layout, spec, chosen, seq)
    own = worker is None
    worker = worker or ModelWorker()
    try:
        answer = worker.build(request)
    finally:
        if own:
            worker.close()
    built, findings = read_answer(answer, layout)
    if gpu is not None:
        findings += states_fit_findings(built, gpu)
    report = ModelReport(world_size=world_size, ranks=built, findings=locate_all(doc, findings),
                         source=doc.filename, model=spec.name, peak_rss_mb=int(answer.get("peak_rss_mb", 0)))
    report.timing = {"import": worker.import_s, "build": sum(rank.seconds for rank in built)}
    return report


def states_fit_findings(ranks: Sequence[RankModel], gpu: GpuSpec) -> list[Finding]:
    """The most loaded built rank whose parameters, gradients and optimizer states (as allocated: FSDP2's padded
    shards) pass the GPU's memory on their own: the run cannot start its first step, whatever the estimate said."""
    built = [rank for rank in ranks if rank.ok]
    if not built:
        return []
    worst = max(built, key=lambda rank: rank.states_bytes)
    held = worst.states_bytes / GIB
    if held <= gpu.hbm_gib:
        return []
    padded = worst.param_bytes / max(worst.param_bytes_even, 1.0)
    why = (f"; its weight shards are {padded:.1f}x an even split (FSDP2 pads each tensor's dim-0 chunks: a tensor of "
           "fewer rows than ranks, such as stacked experts, leaves whole rows on each)" if padded > 1.1 else "")
    return [r.MODEL_STATES_FIT.finding(
        f"rank {worst.rank} holds {held:.1f} GiB of parameters, gradients and optimizer states as AutoModel built "
        f"them, more than {gpu.name}'s {gpu.hbm_gib:g} GiB before any activation{why}",
        hint="shard over more ranks (dp, tp, ep), or use expert parallelism for the experts")]


def host_memory_needed_gib(config: Mapping[str, Any], layout: Layout, spec: ModelSpec) -> float | None:
    """Host memory a DDP build takes: AutoModel's DDP path materializes the whole model's weights (in the
    recipe's dtype) on every rank it builds, one rank at a time; the other strategies are built on meta
    (None). Measured: Llama-3.2-1B's worker peaks at 2.5 GB, its bf16 weights plus the worker itself."""
    if layout.strategy != "ddp":
        return None
    dtype = str(as_mapping(config.get("model")).get("torch_dtype") or "bfloat16").lower().removeprefix("torch.")
    weight_bytes = 4 if dtype in ("float32", "float", "fp32") else 2
    return param_counts(spec).total * weight_bytes / 2**30 + WORKER_BASELINE_GIB


def available_host_gib() -> float | None:
    """MemAvailable of this machine (Linux), None where it cannot be read."""
    try:
        text = Path("/proc/meminfo").read_text(encoding="ascii")
    except OSError:
        return None
    match = re.search(r"^MemAvailable:\s+(\d+) kB", text, re.MULTILINE)
    return int(match.group(1)) / 2**20 if match else None


def check_host_memory(config: Mapping[str, Any], layout: Layout, spec: ModelSpec, *, where: str) -> None:
    """Refuse a build that would exhaust this machine's memory (the kernel would kill the worker, or worse,
    the user's other work) with what it needs and what to do instead."""
    needed, available = host_memory_needed_gib(config, layout, spec), available_host_gib()
    if needed is None or available is None or needed <= available:
        return
    raise InputError(f"the model-level dry-run of a DDP recipe builds the whole model in this machine's memory, "
                     f"as AutoModel's DDP does: about {needed:.1f} GiB for {spec.name}, and {available:.1f} GiB "
                     "are available", where=where,
                     hint="run it on a machine with that much free memory, or check the meshes without building the "
                          "model (dry-run without --model); FSDP2 and MegatronFSDP recipes are built on meta")


def _model(config: Mapping[str, Any], model: Any) -> ModelSpec:
    if model is not None:
        return resolve_model(model, where="--model")
    resolved = recipe_model(config)
    if resolved.spec is None:
        raise InputError(f"{resolved.reason}: the model-level dry-run needs the architecture", where=resolved.path,
                         hint=resolved.hint or "pass --model with a preset id or a config.json folder")
    return resolved.spec


def _ranks(layout: Layout, ranks: Sequence[int] | None, all_ranks: bool) -> list[int]:
    world = layout.world_size
    if all_ranks:
        if world > ALL_RANKS_LIMIT:
            raise InputError(f"--all-ranks builds every rank, one at a time; {world} ranks is more than "
                             f"{ALL_RANKS_LIMIT}", hint="use --rank R, or the default (one rank per pipeline stage)")
        return list(range(world))
    if ranks:
        for rank in ranks:
            if not 0 <= rank < world:
                raise InputError(f"--rank {rank} is outside the world of {world} ranks (valid: 0 to {world - 1})",
                                 hint="pick a rank below nodes × gpus-per-node")
        return list(ranks)
    return stage_ranks(layout)


def stage_layers(layout: Layout, spec: ModelSpec, pp_rank: int) -> list[int]:
    """The decoder layers AutoModel's split gives pp rank `pp_rank` (for comparing with what was built)."""
    share = pipeline_split(spec.num_layers, layout.pp, layout.vpp if layout.pp > 1 else 1, layout.pp_schedule)
    return [i for start, end in share[pp_rank].layer_spans for i in range(start, end)]


def layer_ranges(layers: Sequence[int]) -> str:
    """[0, 1, 2, 5, 6] -> '0-2, 5-6'."""
    spans: list[list[int]] = []
    for index in layers:
        if spans and index == spans[-1][1] + 1:
            spans[-1][1] = index
        else:
            spans.append([index, index])
    return ", ".join(f"{a}-{b}" if a != b else str(a) for a, b in spans) or "-"


def checkpointed_text(counts: Mapping[str, int]) -> str:
    """What AutoModel's build checkpointed: '28 selective' (whole blocks under the op-level policy), '28'
    (checkpoint wrappers: full), or '-'."""
    wrapped, selective = counts.get("wrapped", 0), counts.get("selective", 0)
    if not wrapped:
        return "-"
    return f"{selective} selective" if selective == wrapped else str(wrapped)


def render_model_report(report: ModelReport, fmt: str = "text") -> str:
    """Text: one line per rank built (bytes as allocated, GiB), then the findings as validate prints them."""
    from automodel_dist.findings import Report
    from automodel_dist.report import render_report

    if fmt == "json":
        return json.dumps(report.to_json(), indent=2) + "\n"
    gib = float(1 << 30)
    lines = [f"model-level dry-run: {report.model} on {report.world_size} ranks (AutoModel's own build on the meta "
             "device, torch fake process group; bytes as FSDP2 or MegatronFSDP allocates them)",
             f"{'rank':>5} {'stage':>5}  {'class':<24} {'layers':<14} {'also':<26} {'params':>9} {'grads':>9} "
             f"{'optimizer':>9}  sharded tp/ep  checkpointed"]
    for rank in report.ranks:
        if not rank.ok:
            lines.append(f"{rank.rank:>5} {rank.pp_rank:>5}  failed: {rank.error.splitlines()[0]}")
            continue
        sharded = f"{rank.plans.get('tp_sharded', 0)}/{rank.plans.get('ep_sharded', 0)}"
        sizes = " ".join(f"{value / gib:>8.3f}G" for value in (rank.param_bytes, rank.grad_bytes,
                                                                  rank.optimizer_bytes))
        lines.append(f"{rank.rank:>5} {rank.pp_rank:>5}  {rank.model_class:<24} {layer_ranges(rank.layers):<14} "
                     f"{','.join(rank.outer) or '-':<26} {sizes}  {sharded:<13}  "
                     f"{checkpointed_text(rank.checkpointing)}")
    findings = render_report(Report(findings=report.findings, source=report.source), fmt="text")
    return "\n".join(lines) + "\n" + findings

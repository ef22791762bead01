"""validate: judge an existing AutoModel recipe before launch, with the same rules the planner prunes with.

recipe.yaml -> AutoModel's loading (env vars, value translation) -> recipe rules -> Layout -> layout rules
(+ model, cluster, packing) -> cost model (with a GPU) -> launch rules (+ sbatch script) -> schema -> Report,
every finding at its line:col. The schema runs last so that it adds only what no rule already said about a
key. A check that cannot be judged is skipped with a note; bad input is an InputError (exit 2).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from automodel_dist.catalog.models import resolve_model
from automodel_dist.catalog.specs import ClusterSpec, GpuSpec, ModelSpec
from automodel_dist.errors import InputError
from automodel_dist.findings import NOTE, WARNING, Finding, Report, locate_all
from automodel_dist.layout import Layout
from automodel_dist.limits import RECIPE_SIZES, check_sizes, check_text_size, check_world, read_text_file
from automodel_dist.problem import Problem, TrainingSpec
from automodel_dist.resources import RECIPE_SCHEMA
from automodel_dist.rules import check_layout
from automodel_dist.rules import registry as r
from automodel_dist.rules.launch import check_launch
from automodel_dist.rules.layout import check_cp_attention, check_cp_packing, check_cp_padding
from automodel_dist.rules.recipe import BLOCKING_RULES, check_recipe, kd_mesh_sizes
from automodel_dist.shell_syntax import script_syntax
from automodel_dist.targets import AUTOMODEL, MEGATRON_BRIDGE, check_target
from automodel_dist.targets.automodel.config import EnvSecrets, MissingEnvVar, resolve_config
from automodel_dist.targets.automodel.parse import RecipeValueError, layout_from_config, training_from_config
from automodel_dist.targets.automodel.recipe_model import recipe_model
from automodel_dist.yamlio import Document, as_mapping, join_path, load_document, split_path

if TYPE_CHECKING:
    from automodel_dist.cost.estimate import Estimate


def validate_recipe(source: str | Path | Mapping[str, Any], *, world_size: int, gpus_per_node: int = 8,
                    model: Any = None, gpu: GpuSpec | str | None = None, sbatch: str | Path | None = None,
                    target: str = AUTOMODEL, recipe_function: str | None = None) -> Report:
    """Every problem AutoModel would hit at start-up with this recipe on `world_size` GPUs, and more.

    `sbatch` is the Slurm script that launches the recipe (a path, or its text when it has a newline):
    the launch rules then judge the script too, its findings at the script's lines.
    With `target="megatron-bridge"`, `source` is an override set (YAML, or a Hydra `key=value` list) for the
    recipe function `recipe_function` (e.g. "deepseek_v3_pretrain_config"), judged by Megatron's rules.
    """
    if check_target(target) == MEGATRON_BRIDGE:
        from automodel_dist.targets.megatron_bridge.compile import validate_overrides

        return validate_overrides(source, recipe=recipe_function, world_size=world_size,
                                  gpus_per_node=gpus_per_node, model=model, gpu=gpu, sbatch=sbatch)
    if recipe_function is not None:
        raise InputError("recipe_function names a Megatron-Bridge recipe function; an AutoModel recipe has none",
                         where="recipe_function", hint="pass target='megatron-bridge', or drop recipe_function")
    check_world(world_size, gpus_per_node)
    sbatch_text, sbatch_file = read_sbatch(sbatch)
    doc = load_document(source, what="recipe")
    refuse_megatron_overrides(doc)
    secrets = EnvSecrets()
    config, missing = resolve_config(doc.data, secrets=secrets)
    with redacting(secrets):
        check_sizes(config, RECIPE_SIZES, doc.where)
        report = _judge_recipe(doc, config, missing, world_size=world_size, gpus_per_node=gpus_per_node,
                               model=model, gpu=gpu, sbatch_text=sbatch_text, sbatch_file=sbatch_file)
    report.findings = redacted(report.findings, secrets)
    return report


def refuse_megatron_overrides(doc: Document) -> None:
    """A Megatron-Bridge override set given where an AutoModel recipe goes is bad input naming the key that
    shows it, not a list of AutoModel errors about a file it was never meant to be."""
    from automodel_dist.targets.megatron_bridge.parse import megatron_key

    key = megatron_key(doc.data)
    if key is not None:
        raise InputError(f"this is a Megatron-Bridge override set ({key} is Megatron's key; an AutoModel recipe "
                         "has a distributed: section), not an AutoModel recipe", where=doc.where(key),
                         hint="validate it with --target megatron-bridge (its `# recipe:` line, or --recipe, names "
                         "the recipe function)")


@contextmanager
def redacting(secrets: EnvSecrets) -> Iterator[None]:
    """An InputError raised inside names `${VAR}`, never the value the environment gave it."""
    try:
        yield
    except InputError as exc:
        raise InputError(secrets.redact(exc.message) or "", where=exc.where, hint=secrets.redact(exc.hint)) from None


def redacted(findings: list[Finding], secrets: EnvSecrets) -> list[Finding]:
    """Findings whose message, hint and AutoModel message name `${VAR}`, never its value."""
    return [replace(f, message=secrets.redact(f.message), hint=secrets.redact(f.hint),
                    automodel_message=secrets.redact(f.automodel_message)) for f in findings]


def _judge_recipe(doc: Document, config: Any, missing: list[MissingEnvVar], *, world_size: int, gpus_per_node: int,
                  model: Any, gpu: GpuSpec | str | None, sbatch_text: str | None, sbatch_file: str | None) -> Report:
    if is_diffusion_recipe(config):
        return Report(findings=_located(doc, [r.SKIPPED.finding(
            "a diffusion recipe (fsdp:/ddp:/flow_matching: sections, no distributed:): AutoModel's diffusion trainer "
            "reads a different schema, which validate does not judge", path="")]), source=doc.filename)
    findings: list[Finding] = env_var_findings(missing) + duplicate_key_findings(doc)
    spec = _model(config, model, findings)
    gpu_spec = _gpu(gpu)
    findings += check_recipe(config, world_size=world_size, gpus_per_node=gpus_per_node, model=spec)
    cluster = _cluster(gpu_spec, world_size, gpus_per_node)
    layout: Layout | None = None
    if any(f.rule in BLOCKING_RULES for f in findings):
        findings.append(r.SKIPPED.finding("layout rules skipped: the distributed section cannot be read until "
                                          "the errors above are fixed", path="distributed"))
    else:
        layout, layout_findings = _judge_layouts(doc, config, world_size, spec, cluster, gpu_spec)
        findings += layout_findings
    # The dispatcher-locality launch rule can fail a recipe, so it runs only when --gpu says how large the
    # NVLink domain really is (a GB200 rack is 72 GPUs; the nominal domain without --gpu is one node).
    if layout is not None and layout.ep > 1 and gpu_spec is None:
        findings.append(r.SKIPPED.finding("the MoE dispatcher was not checked against the NVLink domain (no GPU)",
                                          path="model.backend.dispatcher", hint="pass --gpu, e.g. --gpu gb200-nvl72"))
    findings += check_launch(config, world_size=world_size, gpus_per_node=gpus_per_node, sbatch_text=sbatch_text,
                             sbatch_file=sbatch_file, layout=layout if gpu_spec else None,
                             nvlink_domain=cluster.nvlink_domain,
                             sbatch_syntax=script_syntax(sbatch_text) if sbatch_text is not None else None)
    findings += _schema_findings(config, findings)
    return Report(findings=_located(doc, findings), source=doc.filename)


def read_sbatch(sbatch: str | Path | None) -> tuple[str | None, str | None]:
    """(text, file name) of the launch script: a Path or a one-line string is a path, other text the script."""
    if sbatch is None:
        return None, None
    if not isinstance(sbatch, (str, Path)):
        raise InputError(f"sbatch must be a path or the script's text, not {type(sbatch).__name__}",
                         hint="pass the path of the Slurm script that launches the recipe")
    if isinstance(sbatch, str) and "\n" in sbatch:
        check_text_size(sbatch, what="sbatch script", where="<sbatch>")
        return sbatch, "<sbatch>"
    text = read_text_file(sbatch, what="sbatch script", expected="the Slurm script that launches the recipe")
    return text, str(sbatch)


def env_var_findings(missing: list[MissingEnvVar]) -> list[Finding]:
    """A warning per unset `${VAR}` without a default: the job's environment may well set it."""
    return [r.ENV_VAR.finding(f"environment variable {m.name} is not set here and {m.token} has no default: "
                              "AutoModel fails at load unless it is set where the job runs (judged with the "
                              "key's default)", path=join_path(m.path),
                              hint=f"export {m.name}=... or write ${{{m.name},DEFAULT}}",
                              automodel_message=m.automodel_message)
            for m in missing]


def duplicate_key_findings(doc: Document, rule: r.Rule = r.SCHEMA, *, severity: str = WARNING,
                           outcome: str = "AutoModel keeps the later value and ignores this one") -> list[Finding]:
    """A finding at each key written twice in one mapping (at the earlier one), saying what the framework does with
    the file (`outcome`): AutoModel's PyYAML loads it and silently ignores the earlier value (a warning); a target
    whose loader refuses the file passes its own rule and words."""
    return [rule.finding(f"key {dup.key!r} is written again later in the same mapping: {outcome}", path="",
                         severity=severity, hint="delete one of the two").located(dup.line, dup.col)
            for dup in doc.duplicate_keys]


_WORLD_HEADER = re.compile(r"^#\s*world\s*:(.*)$", re.IGNORECASE)
_WORLD_VALUE = re.compile(r"^\s*(\d+)\s*[xX]\s*(\d+)\s*(?:#.*)?$")


_RECIPE_HEADER = re.compile(r"^#\s*recipe:\s*([A-Za-z_][A-Za-z0-9_]*)\s*$")
_GPU_HEADER = re.compile(r"^#\s*gpu:\s*([A-Za-z0-9._-]+)\s*(?:#.*)?$")


def _header_match(text: str, pattern: re.Pattern[str]) -> tuple[int, re.Match[str]] | None:
    """(1-based line, match) of the first line of the comments that open a file matching `pattern`."""
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            return None  # the opening comment block is over
        match = pattern.match(stripped)
        if match:
            return number, match
    return None


def header_world(text: str, path: str = "<recipe>") -> tuple[int, int] | None:
    """(nodes, GPUs per node) from a `# world: NODES x GPUS` line in the comments that open a recipe; a
    `# world:` line that says something else is bad input at that line (a silent 1 x 8 would judge
    the recipe on another world than the one it states).

    A recipe that says where it runs can be validated without flags (the pre-commit hook does this);
    `compile` writes the line into every recipe's header (and every Megatron-Bridge override set's).
    """
    found = _header_match(text, _WORLD_HEADER)
    if found is None:
        return None
    line, match = found
    value = _WORLD_VALUE.match(match[1])
    if value is None or int(value[1]) < 1 or int(value[2]) < 1:
        raise InputError(f"the `# world:` header line says {match[1].strip()!r}, not NODES x GPUS_PER_NODE "
                         "(both at least 1)", where=f"{path}:{line}:1",
                         hint="write e.g. `# world: 2 x 8`, or pass --nodes and --gpus-per-node")
    return int(value[1]), int(value[2])


def stated_world(nodes: int | None, gpus_per_node: int | None, text: str, path: str) -> tuple[int, int] | None:
    """(nodes, GPUs per node): each from its flag, else from the file's `# world:` header line, else 1 and 8;
    None when neither flag nor header says anything."""
    header = header_world(text, path) if nodes is None or gpus_per_node is None else None
    if header is None and nodes is None and gpus_per_node is None:
        return None
    header_nodes, header_gpus = header or (1, 8)
    return nodes or header_nodes, gpus_per_node or header_gpus


def _header_value(text: str, pattern: re.Pattern[str]) -> tuple[str, int] | None:
    """(the name `pattern` captures, 1-based line) of the first header line it matches."""
    found = _header_match(text, pattern)
    if found is None:
        return None
    line, match = found
    return match[1], line


def header_gpu(text: str) -> tuple[str, int] | None:
    """(GPU preset, 1-based line) of the first `# gpu: NAME` line opening a recipe or override set (`compile`
    writes it beside `# world:`), so the memory and dispatcher rules judge the file without a --gpu flag."""
    return _header_value(text, _GPU_HEADER)


def header_gpu_spec(text: str, path: str) -> GpuSpec | None:
    """The GPU preset the file's `# gpu: NAME` header line names, resolved (an unknown name is bad input at that
    line of `path`), else None."""
    from automodel_dist.catalog.hardware import resolve_gpu

    named = header_gpu(text)
    return None if named is None else resolve_gpu(named[0], where=f"{path}:{named[1]}:1")


def header_recipe(text: str) -> str | None:
    """The Megatron-Bridge recipe function from a `# recipe: NAME` line opening an override set."""
    found = header_recipe_at(text)
    return found[0] if found else None


def header_recipe_at(text: str) -> tuple[str, int] | None:
    """(recipe function, 1-based line) of the `# recipe: NAME` line opening an override set."""
    return _header_value(text, _RECIPE_HEADER)


def is_diffusion_recipe(config: Mapping[str, Any]) -> bool:
    """AutoModel's diffusion recipes (recipes/diffusion/train.py) use `fsdp:` / `ddp:`, not `distributed:`."""
    return "distributed" not in config and any(key in config for key in ("fsdp", "ddp", "flow_matching"))


def _model(config: Mapping[str, Any], model: Any, findings: list[Finding]) -> ModelSpec | None:
    """--model (an unknown one is an input error), else the model the recipe's `model:` section builds
    (its id, reshaped by its config overrides, or its inline config); one we cannot read is only a note."""
    if model is not None:
        return resolve_model(model, where="--model")
    resolved = recipe_model(config)
    if resolved.spec is None:
        findings.append(r.SKIPPED.finding(
            f"{resolved.reason}: model-aware rules (heads, experts, layers, tied embeddings) skipped",
            path=resolved.path, hint=resolved.hint))
    return resolved.spec


def _gpu(gpu: GpuSpec | str | None) -> GpuSpec | None:
    from automodel_dist.catalog.hardware import resolve_gpu

    return resolve_gpu(gpu, where="--gpu")


def _cluster(gpu: GpuSpec | None, world_size: int, gpus_per_node: int) -> ClusterSpec:
    """The cluster the recipe runs on; without --gpu, a nominal GPU whose NVLink domain is one node."""
    node_gpu = gpu or GpuSpec(name="unspecified", hbm_gib=0.0, gpus_per_node=gpus_per_node,
                              nvlink_domain=gpus_per_node, tflops_bf16=0.0, tflops_fp8=0.0, nvlink_gbps=0.0,
                              internode_gbps=0.0, compute_capability="")
    return ClusterSpec(gpu=node_gpu, nodes=-(-world_size // gpus_per_node), gpus_per_node=gpus_per_node)


def _judge_layouts(doc: Document, config: Mapping[str, Any], world_size: int, spec: ModelSpec | None,
                   cluster: ClusterSpec, gpu: GpuSpec | None) -> tuple[Layout, list[Finding]]:
    """The recipe's layout and the layout rules' findings on it; with distillation on separate meshes, on
    both meshes (each on its own ranks; whether they add up to the world is rule am-r42-kd-meshes)."""
    kd = kd_mesh_sizes(config)
    try:
        layout = layout_from_config(config, world_size=kd[0] if kd else world_size, model=spec)
        training = training_from_config(config, global_batch_size=layout.global_batch_size)
    except RecipeValueError as exc:
        raise exc.located(doc) from None
    findings = _layout_findings(config, layout, training, spec, cluster, gpu)
    if kd:
        try:
            teacher = layout_from_config({"distributed": config["teacher_distributed"]}, world_size=kd[1])
        except RecipeValueError as exc:
            raise exc.located(doc, prefix="teacher_") from None
        findings += [replace(f, path=f"teacher_{f.path}") for f in check_layout(teacher)
                     if f.path.startswith("distributed")]
    return layout, findings


def _layout_findings(config: Mapping[str, Any], layout: Layout, training: TrainingSpec, spec: ModelSpec | None,
                     cluster: ClusterSpec, gpu: GpuSpec | None) -> list[Finding]:
    findings = check_layout(layout, model=spec, cluster=cluster)
    if gpu is None:  # the NVLink domain is only assumed to be one node (a GB200 rack spans 72 GPUs)
        findings = [_unknown_domain(f) if f.rule == r.EP_LEAVES_NVLINK.id else f for f in findings]
    model_section = as_mapping(config.get("model"))
    backend_attn = as_mapping(model_section.get("backend")).get("attn")
    backend_attn = backend_attn if isinstance(backend_attn, str) else None
    if layout.cp > 1 and spec is not None:
        check_cp_attention(layout, spec, backend_attn, findings)
    if training.packed_sequences and layout.cp > 1:
        hf_attn = model_section.get("attn_implementation")
        check_cp_packing(layout, spec, training, findings, backend_attn=backend_attn,
                         hf_attn=hf_attn if isinstance(hf_attn, str) else None)
        if spec is None:
            findings.append(r.SKIPPED.finding("packed sequences with cp > 1: model support not checked (no model)",
                                              path="distributed.cp_size", hint="pass --model"))
    elif layout.cp > 1:
        check_cp_padding(layout, training, findings)
    findings += _memory_findings(config, layout, spec, cluster, training, gpu)
    return findings


def _unknown_domain(finding: Finding) -> Finding:
    """Without --gpu the NVLink domain is a guess (one node), so leaving it is a note, not a warning."""
    return replace(finding, severity=NOTE, message=f"{finding.message} (assuming the NVLink domain is one node; "
                   "a GB200 NVL72 rack spans 72 GPUs)", hint=f"pass --gpu to judge it; {finding.hint}")


def _memory_findings(config: Mapping[str, Any], layout: Layout, spec: ModelSpec | None, cluster: ClusterSpec,
                     training: TrainingSpec, gpu: GpuSpec | None) -> list[Finding]:
    """With --gpu: does the estimated peak fit the HBM? (needs the model and a sequence length; the
    recipe's own deferred-sync, reduce dtype, loss and checkpointing settings are taken into account)."""
    if gpu is None:
        return []
    missing = [(what, fix) for what, fix, ok in (
        ("no model", "pass --model", spec is not None),
        ("no sequence length", "set packed_sequence.packed_sequence_size or dataset.seq_length",
         training.seq_length > 0)) if not ok]
    if missing:
        return [r.SKIPPED.finding(f"memory fit not estimated: {' and '.join(w for w, _ in missing)}",
                                  path="distributed", hint="; ".join(f for _, f in missing))]
    from automodel_dist.cost.model import estimate_layout
    from automodel_dist.cost.recipe import recipe_options

    options = recipe_options(config)
    estimate = estimate_layout(Problem(model=spec, cluster=cluster, training=training, memory_headroom=0.0), layout,
                               options=options)
    if estimate.fits:
        return []
    remedies = _checkpointing_remedy(layout)
    if options.defer_grad_sync and layout.grad_accumulation > 1 and largest_parts(estimate)[0][0] == "gradients":
        remedies.append("set distributed.defer_fsdp_grad_sync: false (deferred sync holds unsharded gradients "
                        f"across the {layout.grad_accumulation} accumulation steps)")
    if layout.local_batch_size > 1:
        remedies.append("lower step_scheduler.local_batch_size")
    remedies.append("shard more (tp, pp, cp, ep); `automodel-dist compile` searches these for you")
    return [memory_fit_finding(estimate, gpu, remedies)]


def largest_parts(estimate: Estimate) -> list[tuple[str, float]]:
    """The three largest parts of the estimated peak (name, GiB)."""
    return sorted(estimate.memory.items(), key=lambda kv: -kv[1])[:3]


def memory_fit_finding(estimate: Estimate, gpu: GpuSpec, remedies: list[str], path: str | None = None) -> Finding:
    """The memory-fit error for an estimate whose peak exceeds the GPU's memory (`path`: the rule's by default)."""
    parts = ", ".join(f"{name} {gib:.1f}" for name, gib in largest_parts(estimate))
    return r.MEMORY_FIT.finding(
        f"estimated peak {estimate.memory_gib:.1f} GiB per GPU exceeds the {gpu.name}'s {gpu.hbm_gib:.0f} GiB "
        f"(largest parts, GiB: {parts})", hint="; ".join(remedies), path=path)


def _checkpointing_remedy(layout: Layout) -> list[str]:
    """What checkpointing would save: full keeps only each layer's input; selective (fsdp2/ddp) keeps more."""
    if layout.activation_checkpointing == "full":
        return []
    full = "set distributed.activation_checkpointing: true (full: keeps only each layer's input)"
    if layout.activation_checkpointing == "off" and layout.strategy in ("fsdp2", "ddp"):
        return [full + ", or selective (more memory than full, less recompute)"]
    return [full]


def _schema_findings(config: Mapping[str, Any], findings: list[Finding]) -> list[Finding]:
    """Schema violations the rules above did not already report (the schema owns shapes and enums)."""
    from automodel_dist.schema_check import schema_issues

    # A finding covers its own key and, below the top level, everything under it (a rule that judged
    # `distributed.pipeline` already said what is wrong inside it); a top-level path covers only itself.
    # A skipped-check note judged nothing, so it covers nothing.
    covered = {split_path(f.path) for f in findings if f.path and f.rule != r.SKIPPED.id}
    out = []
    for issue in schema_issues(Document(data=_schema_view(config), filename="<recipe>"), RECIPE_SCHEMA):
        if any(issue.path == p or (len(p) > 1 and issue.path[:len(p)] == p) for p in covered):
            continue
        out.append(r.SCHEMA.finding(issue.message, path=join_path(issue.path), hint=issue.hint,
                                    severity=issue.severity))
    return out


def _schema_view(config: Mapping[str, Any]) -> dict[str, Any]:
    """The config as AutoModel compares it: strategy, AC words and schedule names are case-insensitive."""
    view = dict(config)
    dist = config.get("distributed")
    if isinstance(dist, Mapping):
        dist = dict(dist)
        for key in ("strategy", "activation_checkpointing"):
            if isinstance(dist.get(key), str):
                dist[key] = dist[key].lower()
        pipeline = dist.get("pipeline")
        if isinstance(pipeline, Mapping) and isinstance(pipeline.get("pp_schedule"), str):
            dist["pipeline"] = {**pipeline, "pp_schedule": pipeline["pp_schedule"].lower()}
        view["distributed"] = dist
    return view


def _located(doc: Document, findings: list[Finding]) -> list[Finding]:
    """Each finding at the line:col of its key, in file order (the recipe's, then the launch script's)."""
    located = locate_all(doc, findings)
    return sorted(located, key=lambda f: (f.file is not None, f.line is None, f.line or 0, f.col or 0))

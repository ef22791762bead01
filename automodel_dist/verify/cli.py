"""`automodel-dist dry-run`: a recipe (with --nodes) or an intent (compiled first) to its device meshes."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from automodel_dist.errors import InputError
from automodel_dist.validate import header_gpu_spec, refuse_megatron_overrides, stated_world
from automodel_dist.verify.mesh import MeshReport, build_document_meshes, build_meshes
from automodel_dist.yamlio import Document, load_document, source_text

if TYPE_CHECKING:
    from automodel_dist.compiler import CompileResult


def is_intent(data: Any) -> bool:
    """An intent names `hardware:` or `training:` at the top level and has no `distributed:` section."""
    return isinstance(data, Mapping) and ("hardware" in data or "training" in data) and "distributed" not in data


def _check_rank(rank: int, world_size: int) -> None:
    if not 0 <= rank < world_size:
        raise InputError(f"--rank {rank} is outside the world of {world_size} ranks (valid: 0 to {world_size - 1})",
                         hint="pick a rank below nodes × gpus-per-node")


def _recipe_text(args: argparse.Namespace) -> str:
    return source_text(args.source, what="dry-run input")[0]


def _recipe_world(args: argparse.Namespace, text: str) -> tuple[int, int]:
    """(world size, GPUs per node) of a recipe (its `text`): the flags', else its `# world: N x G` header line's
    (as validate reads it); a recipe that says neither needs --nodes."""
    stated = stated_world(args.nodes, args.gpus_per_node, text, str(args.source))
    if stated is None:
        raise InputError("the recipe does not say how many GPUs it runs on (no `# world: N x G` header line), so "
                         "dry-run needs --nodes", where=str(args.source),
                         hint="add --nodes N (and --gpus-per-node G when nodes do not have 8 GPUs)")
    nodes, gpus_per_node = stated
    return nodes * gpus_per_node, gpus_per_node


def _recipe_meshes(args: argparse.Namespace, doc: Document) -> MeshReport:
    world_size, gpus_per_node = _recipe_world(args, _recipe_text(args))
    _check_rank(args.rank, world_size)
    return build_document_meshes(doc, world_size=world_size, gpus_per_node=gpus_per_node)


def _compile(args: argparse.Namespace) -> CompileResult:
    """The intent compiled (--nodes / --gpus-per-node override its hardware); by path, so its errors and
    base_recipe are file-relative."""
    from automodel_dist.compiler import compile_intent

    overrides = [f"hardware.{key}={value}" for key, value in (("nodes", args.nodes),
                 ("gpus_per_node", args.gpus_per_node)) if value is not None]
    return compile_intent(args.source, overrides)


def _intent_meshes(args: argparse.Namespace) -> tuple[MeshReport, CompileResult]:
    """Compile the intent, then build its recipe's meshes."""
    result = _compile(args)
    cluster = result.problem.cluster
    _check_rank(args.rank, cluster.world_size)
    report = build_meshes(result.recipe, world_size=cluster.world_size, gpus_per_node=cluster.gpus_per_node,
                          nvlink_domain=cluster.nvlink_domain, gpu=cluster.gpu)
    report.source = f"{args.source} (compiled)"
    return report, result


def _world(args: argparse.Namespace, doc: Document) -> tuple[Any, int, int, Any]:
    """(recipe source, world size, GPUs per node, GPU or None): a recipe as given (its world from the flags or
    its `# world:` line, its GPU from its `# gpu:` line), an intent compiled."""
    if is_intent(doc.data):
        result = _compile(args)
        cluster = result.problem.cluster
        return result.recipe, cluster.world_size, cluster.gpus_per_node, cluster.gpu
    text = _recipe_text(args)
    world_size, gpus_per_node = _recipe_world(args, text)
    return args.source, world_size, gpus_per_node, header_gpu_spec(text, str(args.source))


def run_model_dry_run(args: argparse.Namespace) -> int:
    """dry-run --model: AutoModel builds the model (exit 0), or refuses (1, its errors as findings)."""
    from automodel_dist.verify.model_dryrun import build_model_dry_run, render_model_report, require_oracle

    require_oracle()
    doc = load_document(args.source, what="dry-run input")
    refuse_megatron_overrides(doc)
    source, world_size, gpus_per_node, gpu = _world(args, doc)
    report = build_model_dry_run(source, world_size=world_size, gpus_per_node=gpus_per_node, gpu=gpu,
                                 ranks=None if args.rank is None else [args.rank], all_ranks=args.all_ranks)
    if is_intent(doc.data):
        report.source = f"{args.source} (compiled)"
    sys.stdout.write(render_model_report(report, fmt=args.format))
    if args.format == "text":  # timings vary run to run, so they stay out of stdout
        print(f"dry-run --model: AutoModel import {report.timing['import']:.1f} s, {len(report.ranks)} rank(s) built "
              f"in {report.timing['build']:.1f} s, worker peak RSS {report.peak_rss_mb} MB", file=sys.stderr)
    return 0 if report.ok else 1


def run_dry_run(args: argparse.Namespace) -> int:
    """Exit 0 when the meshes build, 1 when the rules say they cannot; bad input raises InputError (2)."""
    from automodel_dist.verify.render import render_json, render_text
    from automodel_dist.verify.torch_build import require_torch

    if args.model:
        return run_model_dry_run(args)
    if args.all_ranks:
        raise InputError("--all-ranks is for the model-level dry-run", hint="add --model, or use --rank R")
    args.rank = args.rank or 0
    start = time.perf_counter()
    doc = load_document(args.source, what="dry-run input")  # bad input fails before torch is imported
    refuse_megatron_overrides(doc)  # dry-run builds AutoModel's meshes
    if is_intent(doc.data):
        require_torch()  # before the compile, whose work is wasted without torch
        report, result = _intent_meshes(args)
    else:
        report, result = _recipe_meshes(args, doc), None  # checks the world size, then imports torch
    render = render_json if args.format == "json" else render_text
    sys.stdout.write(render(report, rank=args.rank))
    if args.html:
        from automodel_dist.cli import write_html_report
        from automodel_dist.html_report import from_dry_run

        inputs = [args.source, *(result.inputs if result is not None else ())]
        write_html_report(args.html, from_dry_run(report, result, top=args.top), inputs=inputs, force=args.force)
    if args.format == "text" and report.built:  # timings vary run to run, so they stay out of stdout
        print(f"dry-run took {time.perf_counter() - start:.2f} s (torch mesh build "
              f"{report.timing.get('torch_build', 0.0):.3f} s)", file=sys.stderr)
    return 0 if report.ok else 1

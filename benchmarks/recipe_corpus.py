"""Validate and dry-run every AutoModel recipe in a folder at the world size it is run at.

    python benchmarks/recipe_corpus.py FOLDER [--no-dry-run] [--verbose]

A false rejection of a real recipe is a bug, so this is how a maintainer re-checks a corpus of real
recipes (e.g. a checkout's `examples/`). The world size of each recipe comes from, in order:

1. its `ci:` block: `nodes` x GPUs per node (`ci.nproc_per_node`, else 4 for `cluster_tag: gb200`,
   else what a comment says for that node count, "32 nodes x 4 GB200 GPUs", else 8);
2. its launcher section: `skypilot.num_nodes` x the count in `skypilot.accelerators` ("H100:8"),
   `nemo_run.nodes` x `nemo_run.devices`;
3. `benchmark.num_gpus` (over `benchmark.num_nodes` nodes), else `benchmark.num_nodes` x 8;
4. its comments: "N nodes x G GPUs", "N GPUs / M nodes", "on N GPUs", "--nproc-per-node G" (x "N nodes" when said);
5. otherwise 8 (one node).
Unless the size came from `ci:`, a recipe that fails on world-size arithmetic only is judged again at the
smallest world size at which its distributed section is coherent (marked `fitted` and counted).

AutoModel's CI also runs a recipe with the overrides its `ci:` block names (`ci.local_batch_size` ->
step_scheduler.local_batch_size, `ci.ep_size` -> distributed.ep_size, `ci.max_steps`); they are applied
the same way here.

Each recipe is also checked against the recipe JSON Schema alone, as an editor or check-jsonschema sees the
file; the schema must never reject a recipe that `validate` accepts (the summary counts both verdicts).

Per recipe it prints the world size, where it came from, the error and warning counts, the error rule
ids, the schema's verdict and whether the meshes were built; then a summary. Exit 0 when every recipe
validates clean and the schema rejects none that validate accepts.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from automodel_dist.errors import AutomodelDistError
from automodel_dist.findings import ERROR
from automodel_dist.resources import RECIPE_SCHEMA
from automodel_dist.schema_check import schema_issues
from automodel_dist.validate import is_diffusion_recipe, validate_recipe
from automodel_dist.yamlio import load_document

DEFAULT_GPUS_PER_NODE = 8
GB200_GPUS_PER_NODE = 4
# Rules whose verdict depends on the world size alone (the fallback search clears these).
WORLD_RULES = frozenset({"am-r9-world-divisible", "mesh-world-product", "am-r12-dp-replicate-multiple",
                         "am-r12-dp-replicate-below-dp", "am-r13-ep-divides-non-pp", "am-r39-gbs-divisible",
                         "am-r37-mok-world", "am-r42-kd-meshes"})
FALLBACK_WORLDS = (*range(1, 8), *(8 * n for n in range(1, 1025)))
_NODES_X_GPUS = re.compile(r"\b(\d+)\s*nodes?\s*[x×*]\s*(\d+)\s*(?:gpus?|h100|b200|gb200)?", re.IGNORECASE)
_NPROC = re.compile(r"--nproc[-_]per[-_]node[= ](\d+)")
_NNODES = re.compile(r"--nnodes[= ](\d+)")
_NODES = re.compile(r"\b(\d+)[\s-]*nodes?\b", re.IGNORECASE)
_GPUS_OVER_NODES = re.compile(r"\b(\d+)\s*GPUs?\s*/\s*(\d+)\s*nodes?\b", re.IGNORECASE)
_ON_GPUS = re.compile(r"\bon\s+(\d+)\s*(?:x\s*)?(?:h100|b200|gb200|a100)?\s*gpus\b", re.IGNORECASE)


@dataclass
class World:
    """The world a recipe runs on, and where that came from."""

    size: int
    gpus_per_node: int
    source: str


@dataclass
class Outcome:
    path: Path
    world: World
    run: Path | dict[str, Any] | None = None  # what validate and dry-run judge: `as_run(path)`
    errors: list[str] = field(default_factory=list)
    warnings: int = 0
    built: bool | None = None
    input_error: str = ""
    diffusion: bool = False  # another trainer's schema: validate notes it, there are no meshes to build
    schema_errors: list[str] = field(default_factory=list)  # dotted keys the JSON Schema alone rejects

    @property
    def clean(self) -> bool:
        return not self.errors and not self.input_error

    @property
    def schema_only(self) -> bool:
        """The schema rejects what validate accepts: a false rejection in every editor and schema checker."""
        return bool(self.schema_errors) and self.clean


def world_from_recipe(text: str, config: Mapping[str, Any]) -> World | None:
    """The world size the recipe says it runs at, or None when it does not say."""
    comments = "\n".join(line.split("#", 1)[1] for line in text.splitlines() if "#" in line)
    stated = _NODES_X_GPUS.search(comments)
    ci = config.get("ci")
    if isinstance(ci, Mapping) and any(isinstance(ci.get(k), int) for k in ("nodes", "nproc_per_node")):
        nodes, gpn = ci.get("nodes", 1), ci.get("nproc_per_node")
        if not isinstance(gpn, int):
            gpn = GB200_GPUS_PER_NODE if str(ci.get("cluster_tag", "")).lower() == "gb200" else DEFAULT_GPUS_PER_NODE
            if "cluster_tag" not in ci and stated and int(stated[1]) == nodes:  # "32 nodes x 4 GB200 GPUs"
                gpn = int(stated[2])
        if isinstance(nodes, int) and nodes > 0 and gpn > 0:
            return World(nodes * gpn, gpn, "ci")
    launcher = _launcher_world(config)
    if launcher is not None:
        return launcher
    bench = config.get("benchmark")
    if isinstance(bench, Mapping) and isinstance(bench.get("num_nodes"), int) and bench["num_nodes"] > 0:
        nodes, gpus = bench["num_nodes"], bench.get("num_gpus")
        if isinstance(gpus, int) and gpus > 0 and gpus % nodes == 0:
            return World(gpus, gpus // nodes, "benchmark")
        return World(nodes * DEFAULT_GPUS_PER_NODE, DEFAULT_GPUS_PER_NODE, "benchmark")
    if stated:
        nodes, gpn = int(stated[1]), int(stated[2])
        return World(nodes * gpn, gpn, "comment")
    if (m := _GPUS_OVER_NODES.search(comments)) and int(m[1]) % int(m[2]) == 0:
        return World(int(m[1]), int(m[1]) // int(m[2]), "comment")
    if m := _ON_GPUS.search(comments):
        size = int(m[1])
        return World(size, min(size, DEFAULT_GPUS_PER_NODE), "comment")
    if m := _NPROC.search(comments):
        gpn = int(m[1])
        nodes = next((int(n[1]) for n in (_NNODES.search(comments), _NODES.search(comments)) if n), 1)
        return World(nodes * gpn, gpn, "comment")
    return None


# `ci:` keys AutoModel's CI generator turns into overrides of the recipe (tests/ci_tests/utils/generate_ci_tests.py).
CI_OVERRIDES = {"local_batch_size": ("step_scheduler", "local_batch_size"), "ep_size": ("distributed", "ep_size"),
                "max_steps": ("step_scheduler", "max_steps")}


def as_run(path: Path) -> Path | dict[str, Any]:
    """The recipe as CI runs it: the file itself, or its mapping with the `ci:` overrides applied."""
    config = load_document(path, what="recipe").plain()
    ci = config.get("ci") if isinstance(config, Mapping) else None
    if not isinstance(ci, Mapping) or not any(key in ci for key in CI_OVERRIDES):
        return path
    for key, (section, field_name) in CI_OVERRIDES.items():
        if key in ci and isinstance(config.get(section), Mapping):
            config[section] = {**config[section], field_name: ci[key]}
    return config


def _launcher_world(config: Mapping[str, Any]) -> World | None:
    sky, run = config.get("skypilot"), config.get("nemo_run")
    if isinstance(sky, Mapping) and isinstance(sky.get("accelerators"), str):
        count = sky["accelerators"].rpartition(":")[2]
        nodes = sky.get("num_nodes", 1)
        if count.isdigit() and isinstance(nodes, int) and nodes > 0:
            return World(nodes * int(count), int(count), "skypilot")
    if isinstance(run, Mapping) and isinstance(run.get("devices"), int) and run["devices"] > 0:
        nodes = run.get("nodes", 1)
        if isinstance(nodes, int) and nodes > 0:
            return World(nodes * run["devices"], run["devices"], "nemo_run")
    return None


def _judge(path: Path, run: Path | dict[str, Any], world: World) -> Outcome:
    outcome = Outcome(path=path, world=world, run=run)
    try:
        report = validate_recipe(run, world_size=world.size, gpus_per_node=world.gpus_per_node)
    except AutomodelDistError as exc:
        outcome.input_error = str(exc)
        return outcome
    outcome.errors = sorted({f.rule for f in report.errors})
    outcome.warnings = len(report.warnings)
    return outcome


def schema_errors(path: Path) -> list[str]:
    """The dotted keys where the recipe file, as written, breaks the recipe schema (errors, not warnings)."""
    issues = schema_issues(load_document(path, what="recipe"), RECIPE_SCHEMA)
    return sorted({issue.dotted for issue in issues if issue.severity == ERROR})


def judge_recipe(path: Path) -> Outcome:
    """Validate one recipe at its world size (fitted when a size not from `ci:` fails on world arithmetic),
    and check it against the schema alone."""
    outcome = _validated(path)
    if not outcome.input_error:
        outcome.schema_errors = schema_errors(path)
    return outcome


def _validated(path: Path) -> Outcome:
    text = path.read_text(encoding="utf-8", errors="replace")
    default = World(DEFAULT_GPUS_PER_NODE, DEFAULT_GPUS_PER_NODE, "default")
    try:
        config = load_document(text, what="recipe").plain()
    except AutomodelDistError as exc:
        return Outcome(path=path, world=default, input_error=str(exc))
    config = config if isinstance(config, Mapping) else {}
    world, diffusion = world_from_recipe(text, config) or default, is_diffusion_recipe(config)
    try:
        run = as_run(path)  # once: the fallback search below judges it at up to a thousand world sizes
    except AutomodelDistError as exc:
        return Outcome(path=path, world=world, input_error=str(exc), diffusion=diffusion)
    outcome = _judge(path, run, world)
    outcome.diffusion = diffusion
    if outcome.world.source != "ci" and outcome.errors and set(outcome.errors) <= WORLD_RULES:
        for size in FALLBACK_WORLDS:
            fitted = _judge(path, run, World(size, min(size, DEFAULT_GPUS_PER_NODE), "fitted"))
            if not WORLD_RULES & set(fitted.errors):
                return fitted
    return outcome


def dry_run(outcome: Outcome) -> bool:
    """Whether the meshes of a recipe `judge_recipe` found clean build at its world size."""
    from automodel_dist.verify.mesh import build_meshes

    try:
        report = build_meshes(outcome.run, world_size=outcome.world.size,
                              gpus_per_node=outcome.world.gpus_per_node)
    except AutomodelDistError:
        return False
    return report.ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="folder searched recursively for *.yaml recipes")
    parser.add_argument("--no-dry-run", action="store_true", help="validate only; do not build the meshes")
    parser.add_argument("--verbose", action="store_true", help="print input errors in full")
    args = parser.parse_args(argv)
    if not args.folder.is_dir():
        parser.error(f"{args.folder} is not a folder")
    paths = sorted(p for p in args.folder.rglob("*.y*ml") if p.suffix in (".yaml", ".yml"))
    outcomes: list[Outcome] = []
    for path in paths:
        outcome = judge_recipe(path)
        if not args.no_dry_run and outcome.clean and not outcome.diffusion:
            outcome.built = dry_run(outcome)
        outcomes.append(outcome)
        name = path.relative_to(args.folder)
        verdict = "ok" if outcome.clean else ("INPUT ERROR" if outcome.input_error else "ERRORS")
        built = " (diffusion: not judged)" if outcome.diffusion else (
            "" if outcome.built is None else (" built" if outcome.built else " NOT BUILT"))
        detail = " ".join(outcome.errors)
        if outcome.schema_errors:
            detail += f" schema rejects: {' '.join(outcome.schema_errors)}"
        if outcome.input_error:
            detail = outcome.input_error if args.verbose else outcome.input_error.splitlines()[0][:160]
        print(f"{name}: world {outcome.world.size} ({outcome.world.source}) {verdict} "
              f"errors={len(outcome.errors)} warnings={outcome.warnings}{built} {detail}".rstrip())
    clean = sum(o.clean and not o.diffusion for o in outcomes)
    diffusion = sum(o.diffusion for o in outcomes)
    built = sum(bool(o.built) for o in outcomes)
    fitted = sum(o.world.source == "fitted" for o in outcomes)
    rules = Counter(rule for o in outcomes for rule in o.errors)
    print(f"\n{len(outcomes)} recipes ({diffusion} diffusion, not judged): {clean} validate clean, "
          f"{sum(bool(o.input_error) for o in outcomes)} input errors"
          + ("" if args.no_dry_run else f", {built} dry-run built")
          + f"; {fitted} needed a fitted world size")
    for rule, count in rules.most_common():
        print(f"  {rule}: {count}")
    schema_rejects = sum(bool(o.schema_errors) for o in outcomes)
    schema_only = [o for o in outcomes if o.schema_only]
    print(f"recipe schema: {schema_rejects} rejected, {len(schema_only)} of them accepted by validate"
          + "".join(f"\n  schema only: {o.path.relative_to(args.folder)} {' '.join(o.schema_errors)}"
                    for o in schema_only))
    return 0 if clean + diffusion == len(outcomes) and not schema_only else 1


if __name__ == "__main__":
    sys.exit(main())

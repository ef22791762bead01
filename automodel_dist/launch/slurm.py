"""The sbatch script that runs a compiled recipe across nodes, AutoModel's way.

AutoModel has no multi-node launcher of its own: its `slurm.sub` runs one `torchrun` per node
(`--ntasks-per-node=1`) with a c10d rendezvous on the first node, each worker running
`-m nemo_automodel.cli.app <recipe>` in-process (reference/automodel.md §8.2). This module writes that
script from the plan, with the run directory (the recipe's folder, which every node must see) as the
working directory, caches on shared storage, and SIGUSR1 forwarded to the workers so a preempted or
timed-out job checkpoints first.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from automodel_dist.errors import InputError
from automodel_dist.launch.environment import EnvVar, run_environment
from automodel_dist.launch.recipe_settings import RecipeSetting, timeout_settings
from automodel_dist.launch.settings import LauncherSettings
from automodel_dist.layout import Layout
from automodel_dist.output import WRITTEN_BY_MARKER
from automodel_dist.problem import Problem
from automodel_dist.resources import INTENT_SCHEMA
from automodel_dist.rules.launch import handles_sigusr1
from automodel_dist.schema_check import load_schema, matches_pattern
from automodel_dist.textsafe import one_line

MASTER_PORT = 13742  # slurm.sub's default rendezvous port
PREEMPTION_WARNING_SECONDS = 300  # slurm.sub: USR1 five minutes before the time limit
WORKER_PATTERN = "-u -m nemo_automodel[.]cli[.]app"  # torchrun starts each worker as `python -u -m <module>`


def slurm_recipe_settings(problem: Problem, layout: Layout) -> list[RecipeSetting]:
    """What the recipe needs to run under this script: a SIGUSR1 handler and a timeout fit for the scale."""
    preemption = RecipeSetting(
        "step_scheduler.preemption_signal", ["SIGUSR1", "SIGTERM"],
        f"Slurm sends USR1 {PREEMPTION_WARNING_SECONDS}s before the time limit; SIGTERM on scancel",
        handles_sigusr1)
    return [preemption, *timeout_settings(problem, layout)]


def _exports(env: list[EnvVar]) -> list[str]:
    """`export` lines, each group of variables under its reason; `default_only` ones as ${NAME:-value}."""
    lines: list[str] = []
    for i, var in enumerate(env):
        if var.why and (i == 0 or env[i - 1].why != var.why):
            lines.append(f"# {var.why[0].upper()}{var.why[1:]}")
            if var.default_only:
                lines.append("# (${NAME:-value}: a value exported when the job was submitted wins)")
        value = f'"${{{var.name}:-{var.value}}}"' if var.default_only else shlex.quote(var.value)
        lines.append(f"export {var.name}={value}")
    return lines


def _mounts(settings: LauncherSettings, run_dir: Path, cache_dir: str) -> str:
    """The user's mounts, plus the run and cache folders at the same path when no mount covers them."""
    mounts = list(settings.container_mounts)
    for folder in (str(run_dir), cache_dir):
        covered = any(folder == m.split(":")[1] or folder.startswith(m.split(":")[1].rstrip("/") + "/")
                      for m in mounts)
        if not covered:
            mounts.append(f"{folder}:{folder}")
    return ",".join(mounts)


def _check_recipe_path(recipe_path: Path) -> None:
    """The log paths in #SBATCH --output/--error lie in the recipe's folder, and those lines cannot quote; the
    container mounts list the folder between ':' and ','; the script names the recipe. So the recipe's path
    takes the form the intent schema gives cache_dir (no newline, quote, space, '%', ':' or ',')."""
    schema = load_schema(INTENT_SCHEMA)["properties"]["launcher"]["properties"]["cache_dir"]
    text = str(recipe_path)
    if not matches_pattern(schema["pattern"], text):
        raise InputError(f"the recipe's path (and the run directory it names) cannot be written into #SBATCH "
                         f"lines and container mounts: it must be {schema['x-format']}", where=one_line(text),
                         hint="write the recipe (-o) to a path that has no spaces, quotes, '%', ':' or ','")


def render_sbatch(problem: Problem, layout: Layout, settings: LauncherSettings, recipe_path: Path,
                  recipe: Mapping[str, Any]) -> str:
    """The sbatch script for `recipe_path` (absolute), run on `problem.cluster` with `layout`."""
    cluster = problem.cluster
    nodes, gpus = cluster.nodes, cluster.gpus_per_node
    run_dir = recipe_path.parent
    _check_recipe_path(recipe_path)
    cache_dir = settings.cache_dir or str(run_dir / "cache")
    logs = run_dir / "logs"
    # Comments carry user text escaped onto one line; #SBATCH values passed the intent schema's patterns
    # and are quoted as the shell would (sbatch reads quotes the same way), though none of them needs it.
    header = [
        "#!/bin/bash",
        f"# Launch {one_line(problem.model.name)} ({problem.training.task}) on {nodes} x {gpus} "
        f"{one_line(cluster.gpu.name)}:",
        f"#   layout {layout.short()}",
        f"# {WRITTEN_BY_MARKER} compile --launcher slurm. Submit with: sbatch <this file>",
        f"#SBATCH --job-name={shlex.quote(settings.job_name)}",
        f"#SBATCH --nodes={nodes}",
        "#SBATCH --ntasks-per-node=1",
        f"#SBATCH --gpus-per-node={gpus}",
    ]
    if gpus == cluster.gpu.gpus_per_node:
        header.append("#SBATCH --exclusive")
    header += [f"#SBATCH --{key}={shlex.quote(value)}" for key, value in
               (("account", settings.account), ("partition", settings.partition), ("time", settings.time))
               if value]
    header += [
        f"#SBATCH --output={logs}/%x_%j.out",
        f"#SBATCH --error={logs}/%x_%j.err",
        f"#SBATCH --signal=B:USR1@{PREEMPTION_WARNING_SECONDS}",
    ]
    body = [
        "",
        "# The layout was planned for this node count.",
        f"if [ \"${{SLURM_NNODES:-0}}\" -ne {nodes} ]; then",
        f"    echo \"error: the recipe's layout is for {nodes} nodes x {gpus} GPUs, this job has "
        "${SLURM_NNODES:-no} nodes; recompile with hardware.nodes=${SLURM_NNODES:-N}\" >&2",
        "    exit 1",
        "fi",
        "",
        f"RUN_DIR={shlex.quote(str(run_dir))}",
        f"export RECIPE={shlex.quote(str(recipe_path))}",
        f"CACHE_DIR={shlex.quote(cache_dir)}",
        "",
        "MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)",
        "export MASTER_ADDR",
        f"export MASTER_PORT=\"${{MASTER_PORT:-{MASTER_PORT}}}\"",
        "",
        *_exports(run_environment(problem, layout, recipe, "$CACHE_DIR")),
    ]
    if settings.env:
        body.append("# From the intent's launcher.env, literally (no expansion)")
        for name, value in settings.env:
            if "$" in value or "`" in value:
                body.append("# shellcheck disable=SC2016  # literal on purpose")
            body.append(f"export {name}={shlex.quote(value)}")
    body += [
        "# Secrets come from the submitting shell (sbatch passes its environment on); never write them here.",
        "for secret in HF_TOKEN WANDB_API_KEY; do",
        "    [ -n \"${!secret:-}\" ] || echo \"note: $secret is not set\" >&2",
        "done",
        "",
        "# Slurm sends USR1 before the time limit. Pass it to this node's training workers (not to torchrun,",
        "# which would exit): AutoModel's signal handler shares the flag across ranks and checkpoints.",
        "# shellcheck disable=SC2317  # invoked by the trap",
        "forward_usr1() {",
        "    echo \"$(date -u +%FT%TZ) USR1 from Slurm: asking the training workers to checkpoint\" >&2",
        "    local pid",
        f"    for pid in $(pgrep -u \"$(id -u)\" -f -- '{WORKER_PATTERN}'); do",
        "        kill -USR1 \"$pid\" 2>/dev/null || true",
        "    done",
        "}",
        "trap forward_usr1 USR1",
        "",
    ]
    container = []
    if settings.container_image:
        container = [f"--container-image={shlex.quote(settings.container_image)}",
                     f"--container-mounts={shlex.quote(_mounts(settings, run_dir, cache_dir))}",
                     "--container-workdir=\"$RUN_DIR\"",
                     "--no-container-mount-home"]
    torchrun = (f"exec torchrun --nnodes=\"$SLURM_NNODES\" --nproc_per_node={gpus} --node_rank=\"$SLURM_NODEID\" "
                "--rdzv_backend=c10d --rdzv_endpoint=\"$MASTER_ADDR:$MASTER_PORT\" "
                "-m nemo_automodel.cli.app \"$RECIPE\"")
    srun = ["srun", "--ntasks-per-node=1", "--kill-on-bad-exit=1", "--export=ALL", "--chdir=\"$RUN_DIR\"",
            *container]
    body += [
        "# One task per node, running one torchrun for all its GPUs (several torchrun per node: EADDRINUSE).",
        "# The single quotes keep $SLURM_NODEID and friends for each node's own shell to expand.",
        "# shellcheck disable=SC2016",
        " \\\n    ".join([*srun, f"bash -c '{torchrun}'"]) + " &",
        "SRUN_PID=$!",
        "# A USR1 interrupts wait; wait again until srun itself has exited, then report its status.",
        "while :; do",
        "    wait \"$SRUN_PID\"",
        "    status=$?",
        "    kill -0 \"$SRUN_PID\" 2>/dev/null || break",
        "done",
        "echo \"srun exited with status $status\" >&2",
        "exit \"$status\"",
    ]
    return "\n".join(header + body) + "\n"

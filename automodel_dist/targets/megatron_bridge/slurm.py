"""The sbatch script that runs a compiled Megatron-Bridge override set: the multi-node card's launch.

srun-native (megatron-bridge.md §8): one task per GPU (`--ntasks-per-node` = GPUs per node), no torchrun
inside a task; Megatron-Bridge derives RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR / MASTER_PORT from
Slurm's variables, so the script sets none of them. The container (pyxis/enroot) gets the intent's image
and mounts plus `--no-container-mount-home` (an srun flag, not an #SBATCH one); HF_HOME and UV_CACHE_DIR sit
in the intent's `launcher.cache_dir` (mounted at the same path), else with NEMO_HOME on the shared run folder
(never the container-local /root/.cache); secrets come from the submitting shell. Every value that reaches the
script is validated (names), shell-quoted (values) or escaped onto one line (comments), and the script must pass
`bash -n` before it is written.
"""

from __future__ import annotations

import re
import shlex

from automodel_dist.errors import InputError, ValidationFailed
from automodel_dist.findings import ERROR, Report
from automodel_dist.launch.settings import launcher_settings
from automodel_dist.report import print_warnings
from automodel_dist.shell_syntax import script_syntax
from automodel_dist.targets.megatron_bridge.compile import RUNNER, MegatronCompileResult, reads_checkpoint_env
from automodel_dist.targets.megatron_bridge.fields import known_recipe
from automodel_dist.targets.megatron_bridge.overrides import PRETRAINED_ENV
from automodel_dist.targets.megatron_bridge.parse import flat_overrides
from automodel_dist.targets.megatron_bridge.recipes import IDENTIFIER
from automodel_dist.targets.megatron_bridge.rules import check_sbatch
from automodel_dist.targets.megatron_bridge.script_overrides import check_script_overrides
from automodel_dist.textsafe import one_line

WORKDIR = "/opt/Megatron-Bridge"           # where the NeMo container keeps the checkout
_DIRECTIVE_VALUE = re.compile(r"[A-Za-z0-9_.,:@+=-]+")  # what an #SBATCH line can carry unquoted


def _checked_identifier(value: str, what: str) -> str:
    if not IDENTIFIER.fullmatch(value):
        raise InputError(f"{what} {value!r} is not a Python identifier", hint="e.g. deepseek_v3_pretrain_config")
    return value


def _checked_directive(value: str, what: str) -> str:
    """#SBATCH lines cannot quote: a value with spaces, newlines or shell characters is refused."""
    if not _DIRECTIVE_VALUE.fullmatch(value):
        raise InputError(f"launcher.{what} {value!r} cannot go on an #SBATCH line",
                         where=f"launcher.{what}", hint="letters, digits and _ . , : @ + = - only")
    return value


def launch_script(result: MegatronCompileResult, overrides_name: str) -> str:
    """The sbatch script launching `result`'s override set (written beside it as `overrides_name`)."""
    problem = result.problem
    cluster = problem.cluster
    nodes, gpus = cluster.nodes, cluster.gpus_per_node
    settings = launcher_settings(getattr(result.intent, "launcher", None), problem, stack="mbridge")
    recipe = _checked_identifier(result.recipe_function, "recipe function")
    job = _checked_directive(settings.job_name, "job_name")
    # comments carry user text (the model's and the override file's names) escaped onto one line
    header = [
        "#!/bin/bash",
        f"# Launch {recipe} ({one_line(problem.model.name)}) on {nodes} x {gpus} {one_line(cluster.gpu.name)} "
        "with Megatron-Bridge.",
        f"#   layout {result.layout.short()}; overrides: {one_line(overrides_name)} (the same key=value pairs as "
        "below)",
        "# Written by automodel-dist compile --target megatron-bridge --launcher slurm. Submit: sbatch <this file>",
        f"#SBATCH --job-name={job}",
        f"#SBATCH --nodes={nodes}",
        f"#SBATCH --ntasks-per-node={gpus}",
        f"#SBATCH --gpus-per-node={gpus}",
        "#SBATCH --exclusive",
        *[f"#SBATCH --{key}={_checked_directive(value, key)}" for key, value in
          (("account", settings.account), ("partition", settings.partition), ("time", settings.time)) if value],
        "#SBATCH --output=%x_%j.log",
        "",
        "set -euo pipefail",
        "",
        "# The layout was planned for this node count.",
        f"if [ \"${{SLURM_NNODES:-0}}\" -ne {nodes} ]; then",
        f"    echo \"error: the overrides are for {nodes} nodes x {gpus} GPUs, this job has ${{SLURM_NNODES:-no}} "
        "nodes; recompile with hardware.nodes=${SLURM_NNODES:-N}\" >&2",
        "    exit 1",
        "fi",
        "",
        "# Shared storage every node mounts: the submit folder (NEMO_HOME for packed data; the caches unless the",
        "# intent's launcher.cache_dir names their folder).",
        "SHARED_DIR=\"${SLURM_SUBMIT_DIR:-$PWD}\"",
        *_cache_exports(settings.cache_dir),
        "export NEMO_HOME=\"$SHARED_DIR/nemo_home\"",
        "",
    ]
    env = []
    for name, value, why in result.env:
        env += [f"# {why}", f"export {_checked_identifier(name, 'environment variable')}={shlex.quote(value)}"]
    env.append("export NCCL_NVLS_ENABLE=0  # the multi-node card's training environment")
    for name, value in settings.env:
        env.append(f"export {_checked_identifier(name, 'environment variable')}={shlex.quote(value)}"
                   "  # from the intent's launcher.env")
    if result.override is not None and reads_checkpoint_env(result.override):
        env += [f"# The fine-tune loads the pretrained weights from a Megatron checkpoint: the override set reads "
                f"{PRETRAINED_ENV}.",
                f": \"${{{PRETRAINED_ENV}:?set {PRETRAINED_ENV} to the Megatron checkpoint imported from the "
                "Hugging Face weights}\""]
    env += [
        "# Secrets come from the submitting shell (sbatch passes its environment on); never write them here.",
        "for secret in HF_TOKEN WANDB_API_KEY; do",
        "    [ -n \"${!secret:-}\" ] || echo \"note: $secret is not set\" >&2",
        "done",
        "",
        "# The override set, one key=value per argument (Hydra syntax, shell-quoted).",
        *(["# shellcheck disable=SC2016  # ${oc.env:...} is resolved by Megatron-Bridge's config, not the shell"]
          if any("${" in item for item in result.hydra) else []),
        "OVERRIDES=(",
        *[f"    {shlex.quote(item)}" for item in result.hydra],
        ")",
        "",
    ]
    srun = ["srun", "--mpi=pmix", "--kill-on-bad-exit=1", "--export=ALL"]
    if settings.container_image:
        mounts = [*settings.container_mounts, *([f"{settings.cache_dir}:{settings.cache_dir}"]
                                                if settings.cache_dir else [])]
        user_mounts = shlex.quote(",".join(mounts) + ",") if mounts else ""
        srun += [f"--container-image={shlex.quote(settings.container_image)}",
                 f"--container-mounts={user_mounts}\"$SHARED_DIR:$SHARED_DIR\"", f"--container-workdir={WORKDIR}",
                 "--no-container-mount-home"]
    else:
        env.append("# No launcher.container_image in the intent: runs in the nodes' own environment from "
                   f"{WORKDIR}.")
        srun += [f"--chdir={WORKDIR}"]
    run = [*srun, f"python {RUNNER} --recipe {recipe} \"${{OVERRIDES[@]}}\""]
    body = ["# One task per GPU; Megatron-Bridge reads its rank, world size and rendezvous from Slurm (no torchrun).",
            " \\\n    ".join(run)]
    script = "\n".join(header + env + body) + "\n"
    findings = check_sbatch(script, gpus_per_node=gpus, multi_node=nodes > 1, syntax=script_syntax(script))
    findings += check_script_overrides(script, flat_overrides(result.recipe), known_recipe(recipe), None)
    errors = [f for f in findings if f.severity == ERROR]
    if errors:  # never write a launch the target's own rules reject
        raise ValidationFailed("the launch script breaks " + "; ".join(f"{f.rule}: {f.message}" for f in errors),
                               report=Report(findings=errors))
    print_warnings(findings)
    return script


def _cache_exports(cache_dir: str | None) -> list[str]:
    """HF_HOME and UV_CACHE_DIR under the intent's cache folder (quoted, so the launch rules can judge where it
    lies), else under the shared run folder."""
    if cache_dir is None:
        return ["export HF_HOME=\"$SHARED_DIR/hf_home\"", "export UV_CACHE_DIR=\"$SHARED_DIR/uv_cache\""]
    return [f"export HF_HOME={shlex.quote(cache_dir + '/hf_home')}",
            f"export UV_CACHE_DIR={shlex.quote(cache_dir + '/uv_cache')}"]


"""Shared pieces of the launch tests: plans built from real presets, a CompileResult stand-in, and
readers that take a generated sbatch script apart again."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from automodel_dist.catalog.hardware import get_gpu
from automodel_dist.catalog.models import resolve_model
from automodel_dist.catalog.specs import ClusterSpec
from automodel_dist.layout import Layout
from automodel_dist.problem import Problem, TrainingSpec

# A compiled recipe starts with the compiler's header (the output writer overwrites files that have it).
BASE_RECIPE = """\
# AutoModel recipe compiled by automodel-dist: a stand-in for the compiler's header
recipe: TrainFinetuneRecipeForNextTokenPrediction  # the base recipe's own comment
step_scheduler:
  global_batch_size: 64
  local_batch_size: 2
distributed:
  strategy: fsdp2
"""
# Hand-written launch scripts for the launch rules: torchrun under Slurm with {tasks} tasks per node,
# and one that has Slurm send SIGUSR1 five minutes before the time limit.
TORCHRUN_SBATCH = """\
#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node={tasks}
#SBATCH --gpus-per-node=8
srun bash -c 'torchrun --nproc_per_node=8 --nnodes=2 -m nemo_automodel.cli.app recipe.yaml'
"""
LAUNCH_LINE = "srun bash -c 'torchrun --nproc_per_node=8 -m nemo_automodel.cli.app recipe.yaml'\n"
USR1_SBATCH = "#!/bin/bash\n#SBATCH --signal=B:USR1@300\n" + LAUNCH_LINE


@dataclass
class FakeIntent:
    launcher: dict[str, Any] | None = None


@dataclass
class FakeResult:
    """The four CompileResult attributes write_launch_files reads."""

    problem: Problem
    layout: Layout
    yaml: str
    intent: FakeIntent = field(default_factory=FakeIntent)


def make_problem(model: str, gpu: str, nodes: int, gpus_per_node: int | None = None) -> Problem:
    spec = get_gpu(gpu)
    cluster = ClusterSpec(gpu=spec, nodes=nodes, gpus_per_node=gpus_per_node or spec.gpus_per_node)
    return Problem(model=resolve_model(model), cluster=cluster, training=TrainingSpec(global_batch_size=64))


def make_result(problem: Problem, *, launcher: dict[str, Any] | None = None, recipe: str = BASE_RECIPE,
                **layout: Any) -> FakeResult:
    lay = Layout(world_size=problem.cluster.world_size, global_batch_size=64, local_batch_size=2, **layout)
    return FakeResult(problem, lay, recipe, FakeIntent(launcher))


def sbatch_directives(text: str) -> dict[str, str]:
    """`#SBATCH --key=value` lines as {key: value}."""
    return dict(re.findall(r"^#SBATCH --([a-z-]+)(?:=(\S*))?$", text, flags=re.M))


def torchrun_flags(text: str) -> dict[str, str]:
    """The flags of the one torchrun command in the script."""
    lines = [line for line in text.splitlines() if "exec torchrun" in line]
    assert len(lines) == 1, lines
    return dict(re.findall(r"--([a-z_]+)=(\"[^\"]*\"|\S+)", lines[0].split("exec torchrun", 1)[1]))


def assigned(text: str, name: str) -> str:
    match = re.search(rf"^(?:export )?{name}=(\S+)$", text, flags=re.M)
    assert match, f"{name} is not set in the script"
    return match.group(1)


def shellcheck(path: Path) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("shellcheck")
    assert exe, "shellcheck is missing: scripts/setup-env.sh installs it"
    return subprocess.run([exe, "--severity=style", str(path)], capture_output=True, text=True, check=False)


def bash_syntax(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True, check=False)

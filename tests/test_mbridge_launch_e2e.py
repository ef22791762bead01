"""The megatron-bridge launch script of a LoRA fine-tune, run under bash with a stub `srun` on PATH: it
stops before launching when PRETRAINED_CHECKPOINT is unset, and otherwise hands the recipe runner every
override as one argument, `${oc.env:...}` untouched by the shell (Megatron-Bridge resolves it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from automodel_dist.cli import main
from automodel_dist.compiler import compile_intent

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "intents"
LORA = EXAMPLES / "llama-3.1-8b-lora-8xh100.yaml"
# srun stub: record the arguments of the command it would start (after its own options).
SRUN = """#!/bin/sh
exec {python} -c 'import json, sys; json.dump(sys.argv[1:], open("srun-args.json", "w"))' "$@"
"""


@pytest.fixture
def launch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[Path, dict[str, str]]:
    out = tmp_path / "run" / "overrides.yaml"
    assert main(["compile", str(LORA), "--target", "megatron-bridge", "-o", str(out), "--launcher", "slurm"]) == 0
    capsys.readouterr()
    stubs = tmp_path / "bin"
    stubs.mkdir()
    (stubs / "srun").write_text(SRUN.format(python=sys.executable))
    (stubs / "srun").chmod(0o755)
    env = {"PATH": f"{stubs}:{os.environ['PATH']}", "SLURM_NNODES": "1", "SLURM_SUBMIT_DIR": str(tmp_path),
           "HOME": str(tmp_path)}
    return out.parent / "launch.sbatch", env


def test_the_launch_needs_the_checkpoint(launch: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    script, env = launch
    done = subprocess.run(["bash", str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "PRETRAINED_CHECKPOINT" in done.stderr
    assert not (tmp_path / "srun-args.json").exists()  # nothing was launched


def test_the_runner_gets_each_override_as_written(launch: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    script, env = launch
    done = subprocess.run(["bash", str(script)], cwd=tmp_path, env={**env, "PRETRAINED_CHECKPOINT": "/ckpt"},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    args = json.loads((tmp_path / "srun-args.json").read_text())
    runner = args.index("scripts/training/run_recipe.py")
    assert args[runner + 1: runner + 3] == ["--recipe", "llama31_8b_peft_config"]
    overrides = args[runner + 3:]
    assert overrides == list(compile_intent(LORA, target="megatron-bridge").hydra)  # every one, as compiled
    assert "checkpoint.pretrained_checkpoint='${oc.env:PRETRAINED_CHECKPOINT}'" in overrides
    assert "+peft.dim=32" in overrides and "+peft.alpha=64" in overrides
    assert "model.cuda_graph_scope=[]" in overrides

"""Each launch rule: a config that trips it, and its nearest valid neighbour that does not."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest
from launch_support import TORCHRUN_SBATCH, USR1_SBATCH
from nemo_automodel.components.training.signal_handler import resolve_signal

from automodel_dist.cli import main
from automodel_dist.findings import Finding
from automodel_dist.layout import Layout
from automodel_dist.rules.launch import (
    check_launch,
    handles_sigusr1,
    names_sigusr1,
    sbatch_env,
)
from automodel_dist.shell_syntax import script_syntax

SRUN_NATIVE_SBATCH = """\
#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=8
srun python pretrain.py  # one process per GPU, no torchrun
"""
GOOD_RECIPE: dict[str, Any] = {"step_scheduler": {"preemption_signal": ["SIGUSR1", "SIGTERM"]}}


def _rules(findings: list[Finding]) -> dict[str, Finding]:
    return {f.rule: f for f in findings}


def _check(recipe: dict[str, Any] | None = None, *, nodes: int = 2, sbatch: str | None = None,
           **kwargs: Any) -> dict[str, Finding]:
    syntax = script_syntax(sbatch) if sbatch is not None else None  # what validate hands the rules
    return _rules(check_launch(recipe if recipe is not None else GOOD_RECIPE, world_size=8 * nodes,
                               gpus_per_node=8, sbatch_text=sbatch, sbatch_syntax=syntax, **kwargs))


# --- several torchrun launchers per node -------------------------------------------------------------

def test_eight_torchrun_tasks_per_node_is_an_error_on_its_line() -> None:
    finding = _check(sbatch=TORCHRUN_SBATCH.format(tasks=8))["launch-ntasks-per-node"]
    assert finding.severity == "error"
    assert "EADDRINUSE" in finding.message and "--ntasks-per-node=1" in finding.hint
    assert finding.line == 3


def test_srun_flag_with_several_tasks_is_caught_too() -> None:
    text = "#!/bin/bash\nsrun --ntasks-per-node=4 torchrun --nproc_per_node=8 -m nemo_automodel.cli.app r.yaml\n"
    assert _check(sbatch=text)["launch-ntasks-per-node"].line == 2


@pytest.mark.parametrize("text", [TORCHRUN_SBATCH.format(tasks=1), SRUN_NATIVE_SBATCH,
                                  "#!/bin/bash\n#SBATCH --ntasks-per-node=8\n# torchrun is only mentioned here\n"])
def test_one_torchrun_per_node_or_no_torchrun_is_fine(text: str) -> None:
    assert "launch-ntasks-per-node" not in _check(sbatch=text)


# --- caches and checkpoints on node-local disks ------------------------------------------------------

@pytest.mark.parametrize("lines", [
    "export HF_HOME=/tmp/hf",
    "export HF_DATASETS_CACHE=/raid/datasets",
    'CACHE_DIR=/local/cache\nexport TRITON_CACHE_DIR="${TRITON_CACHE_DIR:-$CACHE_DIR/triton}"',
    "export NEMO_HOME=/root/.cache/nemo",
    "export RECIPE=/tmp/run/recipe.yaml",
])
def test_node_local_cache_on_several_nodes_warns(lines: str) -> None:
    finding = _check(sbatch="#!/bin/bash\n" + lines + "\n")["launch-node-local-cache"]
    assert finding.severity == "warning" and "node-local" in finding.message
    assert finding.line == lines.count("\n") + 2, "at the script line that sets it"


@pytest.mark.parametrize(("lines", "nodes"), [
    ("export HF_HOME=/lustre/hf", 2),
    ("export RECIPE=/lustre/run/recipe.yaml", 2),
    ('CACHE_DIR=/lustre/cache\nexport HF_HOME="${HF_HOME:-$CACHE_DIR/huggingface}"', 2),
    ("export HF_HOME=/tmpfs-is-not-tmp/hf", 2),
    ("export HF_HOME=/tmp/hf", 1),
])
def test_shared_cache_or_a_single_node_is_fine(lines: str, nodes: int) -> None:
    assert "launch-node-local-cache" not in _check(nodes=nodes, sbatch="#!/bin/bash\n" + lines + "\n")


@pytest.mark.parametrize(("lines", "line"), [
    ("export NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN=16\nexport NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN=8", 3),
    ('export HF_HOME="${HF_HOME:-/lustre/hf}"\nexport OTHER=1\nexport HF_HOME=/lustre/mine', 4),
])
def test_a_variable_set_twice_to_different_values_warns_at_the_later_line(lines: str, line: int) -> None:
    finding = _check(sbatch="#!/bin/bash\n" + lines + "\n")["launch-env-reassigned"]
    assert finding.severity == "warning" and finding.line == line and "the later value wins" in finding.message


@pytest.mark.parametrize("lines", [
    "export PYTHONPATH=/opt/a\nexport PYTHONPATH=$PYTHONPATH:/opt/b",  # builds on the first
    'export PATH="/opt/bin:${PATH}"\nexport PATH="/more:${PATH}"',
    "export CUDA_DEVICE_MAX_CONNECTIONS=32\nexport CUDA_DEVICE_MAX_CONNECTIONS=32",  # the same value
    'if [ -n "${DEBUG:-}" ]; then\n  export NCCL_DEBUG=INFO\nelse\n  export NCCL_DEBUG=WARN\nfi',  # branches
    "setup() {\n  export NCCL_DEBUG=WARN\n}\nexport NCCL_DEBUG=INFO\nsetup",  # a function's own value
    "CUDA_VISIBLE_DEVICES=0 python a.py\nCUDA_VISIBLE_DEVICES=1 python b.py",  # per-command prefixes
    "ATTEMPT=0\nwhile true; do\n  ATTEMPT=$((ATTEMPT + 1))\n  break\ndone",  # a loop counter
    "export NODE=$(hostname)\nexport NODE=$(hostname -s)",  # computed when the script runs
])
def test_building_on_a_variable_or_repeating_its_value_is_fine(lines: str) -> None:
    assert "launch-env-reassigned" not in _check(sbatch="#!/bin/bash\n" + lines + "\n")


def test_node_local_checkpoint_dir_is_an_error() -> None:
    recipe = {**GOOD_RECIPE, "checkpoint": {"enabled": True, "checkpoint_dir": "/tmp/ckpt"}}
    finding = _check(recipe)["launch-node-local-cache"]
    assert finding.severity == "error" and finding.path == "checkpoint.checkpoint_dir"


@pytest.mark.parametrize(("checkpoint", "nodes"), [
    ({"checkpoint_dir": "checkpoints/"}, 2),
    ({"checkpoint_dir": "/lustre/ckpt"}, 2),
    ({"enabled": False, "checkpoint_dir": "/tmp/ckpt"}, 2),
    ({"checkpoint_dir": "/tmp/ckpt"}, 1),
])
def test_shared_disabled_or_single_node_checkpoints_are_fine(checkpoint: dict, nodes: int) -> None:
    assert "launch-node-local-cache" not in _check({**GOOD_RECIPE, "checkpoint": checkpoint}, nodes=nodes)


def test_sbatch_env_reads_defaults_and_references() -> None:
    env = sbatch_env('A=/x\nexport B="${B:-$A/y}"\nexport C=${A}/z\nexport D=plain # note\n')
    assert env == {"A": "/x", "B": "/x/y", "C": "/x/z", "D": "plain"}


# --- EP groups and the dispatcher's NVLink needs ------------------------------------------------------

def test_mok_beyond_the_nvlink_domain_is_an_error() -> None:
    layout = Layout(world_size=16, ep=16, dispatcher="mok")
    finding = _check(layout=layout, nvlink_domain=8)["launch-ep-nvlink"]
    assert finding.severity == "error" and finding.path == "model.backend.dispatcher"
    assert "8-GPU NVLink domain" in finding.message and "MoK" in finding.message


@pytest.mark.parametrize(("world", "ep", "domain"), [(16, 8, 8), (64, 64, 72)])
def test_mok_inside_the_nvlink_domain_is_fine(world: int, ep: int, domain: int) -> None:
    layout = Layout(world_size=world, ep=ep, dispatcher="mok")
    findings = check_launch(GOOD_RECIPE, world_size=world, gpus_per_node=4 if domain == 72 else 8,
                            layout=layout, nvlink_domain=domain)
    assert "launch-ep-nvlink" not in _rules(findings)


def test_mok_on_two_nvl72_racks_crosses_the_rack_edge() -> None:
    # 128 GPUs fill rack 1 (ranks 0-71) and part of rack 2: the EP group 64..127 spans both racks.
    layout = Layout(world_size=128, ep=64, dispatcher="mok")
    findings = check_launch(GOOD_RECIPE, world_size=128, gpus_per_node=4, layout=layout, nvlink_domain=72)
    assert _rules(findings)["launch-ep-nvlink"].severity == "error"


@pytest.mark.parametrize("dispatcher", ["deepep", "torch", "uccl_ep", None])
def test_other_dispatchers_across_nodes_are_left_to_the_topology_rule(dispatcher: str | None) -> None:
    layout = Layout(world_size=16, ep=16, dispatcher=dispatcher)
    assert "launch-ep-nvlink" not in _check(layout=layout, sbatch="#!/bin/bash\n")


def test_hybridep_across_domains_needs_the_domain_size_in_the_script() -> None:
    layout = Layout(world_size=16, ep=16, dispatcher="hybridep")
    assert "is not set" in _check(layout=layout, sbatch="#!/bin/bash\n")["launch-ep-nvlink"].message
    wrong = "#!/bin/bash\nexport NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN=72\n"
    assert "is 72" in _check(layout=layout, sbatch=wrong)["launch-ep-nvlink"].message
    right = "#!/bin/bash\nexport NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN=8\n"
    assert "launch-ep-nvlink" not in _check(layout=layout, sbatch=right)
    assert "launch-ep-nvlink" not in _check(layout=layout)


# --- preemption signal ------------------------------------------------------------------------------

@pytest.mark.parametrize("value", [None, "SIGTERM", ["SIGTERM"], 15])
@pytest.mark.parametrize("directive", ["B:USR1@300", "USR1@120", "B:SIGUSR1@300", "B:10@300"])
def test_usr1_from_slurm_without_a_usr1_handler_is_an_error(value: object, directive: str) -> None:
    step = {} if value is None else {"preemption_signal": value}
    sbatch = USR1_SBATCH.replace("B:USR1@300", directive)
    finding = _check({**GOOD_RECIPE, "step_scheduler": step}, sbatch=sbatch)["launch-preemption-signal"]
    assert finding.severity == "error" and finding.path == "step_scheduler.preemption_signal"


@pytest.mark.parametrize(("value", "sbatch"), [
    (["SIGUSR1", "SIGTERM"], USR1_SBATCH), ("usr1", USR1_SBATCH), (10, USR1_SBATCH),
    ("SIGTERM", "#!/bin/bash\nsrun true\n"),
    ("SIGTERM", "#!/bin/bash\n#SBATCH --signal=B:USR2@300\nsrun true\n"),
])
def test_usr1_handled_or_not_sent_is_fine(value: object, sbatch: str) -> None:
    recipe = {**GOOD_RECIPE, "step_scheduler": {"preemption_signal": value}}
    assert "launch-preemption-signal" not in _check(recipe, sbatch=sbatch)


@pytest.mark.parametrize("value", ["SIGUSR1", "sigusr1", "USR1", "usr1", "10", 10, "SIGUSR2", "SIGTERM", "15", 15,
                                   "USR2", 12])
def test_signal_names_resolve_like_automodel(value: object) -> None:
    try:
        automodel_says = resolve_signal(value) == signal.SIGUSR1
    except ValueError:  # AutoModel refuses it (e.g. a number written as a string)
        automodel_says = False
    assert names_sigusr1(value) == automodel_says


def test_a_list_handles_usr1_when_any_entry_does() -> None:
    assert handles_sigusr1(["SIGTERM", "usr1"]) and not handles_sigusr1(["SIGTERM"]) and not handles_sigusr1(None)


# --- a launcher section in a recipe that torchrun runs ----------------------------------------------

@pytest.mark.parametrize("section", ["skypilot", "nemo_run"])
def test_launcher_section_under_torchrun_is_an_error(section: str) -> None:
    recipe = {**GOOD_RECIPE, section: {"cloud": "aws"} if section == "skypilot" else {"executor": "local"}}
    finding = _check(recipe, sbatch=TORCHRUN_SBATCH.format(tasks=1))["launch-launcher-section"]
    assert finding.severity == "error" and finding.path == section


@pytest.mark.parametrize(("recipe", "sbatch"), [
    ({**GOOD_RECIPE, "skypilot": {"cloud": "aws"}}, None),              # SkyPilot launches it: fine
    ({**GOOD_RECIPE, "skypilot": None}, TORCHRUN_SBATCH.format(tasks=1)),  # an empty section is not popped
    (GOOD_RECIPE, TORCHRUN_SBATCH.format(tasks=1)),
])
def test_no_launcher_section_or_no_torchrun_script_is_fine(recipe: dict, sbatch: str | None) -> None:
    assert "launch-launcher-section" not in _check(recipe, sbatch=sbatch)


# --- start-up failures of the script itself ----------------------------------------------------------------
@pytest.mark.parametrize(("text", "rule", "line"), [
    ("", "launch-sbatch-rejected", 1),
    ("\n\n  \n", "launch-sbatch-rejected", 1),
    ("srun torchrun -m nemo_automodel.cli.app r.yaml\n", "launch-sbatch-rejected", 1),
    ("#!/bin/bash\nsrun torchrun x\0\n", "launch-sbatch-rejected", 2),
    ("#!/bin/bash\r\nsrun torchrun -m nemo_automodel.cli.app r.yaml\r\n", "launch-sbatch-rejected", 1),
    ("#!/bin/bash\nfor n in 1 2; do\n  srun torchrun x\n", "launch-sbatch-syntax", 3),
    ("#!/usr/bin/env bash\necho \"unclosed\nsrun torchrun x\n", "launch-sbatch-syntax", 2),  # where the quote opens
    ("#!/bin/bash\n#SBATCH --nodes=2\n# torchrun is commented out\nsrun python train.py\n", "launch-no-torchrun", 4),
    ("#!/bin/bash\nsrun automodel recipe.yaml\n", "launch-no-torchrun", 2),  # on two nodes: two worlds
])
def test_a_script_that_cannot_start_is_an_error_at_its_line(text: str, rule: str, line: int) -> None:
    finding = _check(sbatch=text)[rule]
    assert finding.severity == "error" and finding.line == line and finding.hint


@pytest.mark.parametrize("text", [
    TORCHRUN_SBATCH.format(tasks=1),
    "#!/bin/sh\nsrun python -m torch.distributed.run --nproc_per_node=8 -m nemo_automodel.cli.app r.yaml\n",
    SRUN_NATIVE_SBATCH.replace("srun python", "srun env RANK=\\$SLURM_PROCID python"),
    "#!/usr/bin/env python3\nimport subprocess\nsubprocess.run(['srun', 'torchrun', 'x'])\n",  # no bash -n
])
def test_a_script_that_starts_is_not_flagged(text: str) -> None:
    found = _check(sbatch=text)
    assert not {"launch-sbatch-rejected", "launch-sbatch-syntax", "launch-no-torchrun"} & set(found)


def test_the_automodel_cli_alone_is_fine_on_one_node() -> None:
    assert "launch-no-torchrun" not in _check(nodes=1, sbatch="#!/bin/bash\nsrun automodel recipe.yaml\n")


def test_without_bash_the_syntax_check_says_it_was_not_made(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("automodel_dist.shell_syntax.shutil.which", lambda name: None)
    found = _check(sbatch="#!/bin/bash\nif true; then\n" + TORCHRUN_SBATCH.format(tasks=1))
    assert "launch-sbatch-syntax" not in found
    assert "bash is not installed" in found["skipped"].message and found["skipped"].line == 1


@pytest.mark.parametrize(("text", "rule", "where"), [
    ("", "launch-sbatch-rejected", ":1:1"),
    ("#!/bin/bash\nif true; then\nsrun torchrun x\n", "launch-sbatch-syntax", ":3:1"),
    ("#!/bin/bash\nsrun python train.py\n", "launch-no-torchrun", ":2:1"),
])
def test_validate_cli_locates_start_up_failures_in_the_script(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                               text: str, rule: str, where: str) -> None:
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("recipe: TrainFinetuneRecipeForNextTokenPrediction\nstep_scheduler:\n  global_batch_size: 64\n"
                      "  local_batch_size: 1\n  preemption_signal: [SIGUSR1, SIGTERM]\ndist_env:\n"
                      "  timeout_minutes: 30\ndistributed:\n  strategy: fsdp2\n")
    script = tmp_path / "launch.sbatch"
    script.write_text(text)
    assert main(["validate", str(recipe), "--nodes", "2", "--sbatch", str(script)]) == 1
    out = capsys.readouterr().out
    assert f"{script}{where}: error [{rule}]" in out

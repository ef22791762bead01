"""The sbatch script and the recipe settings `compile --launcher slurm` writes, read back against the plan."""

from __future__ import annotations

import re
import signal
import subprocess
from pathlib import Path

import pytest
from launch_support import (
    BASE_RECIPE,
    assigned,
    bash_syntax,
    make_problem,
    make_result,
    sbatch_directives,
    shellcheck,
    torchrun_flags,
)
from nemo_automodel.components.training.signal_handler import resolve_signal

from automodel_dist.cli import main
from automodel_dist.errors import InputError, ValidationFailed
from automodel_dist.launch import write_launch_files
from automodel_dist.launch.settings import launcher_settings
from automodel_dist.launch.slurm import render_sbatch
from automodel_dist.output import RECIPE_MARKER
from automodel_dist.rules.launch import check_launch, is_node_local
from automodel_dist.rules.recipe import check_recipe
from automodel_dist.textsafe import one_line
from automodel_dist.yamlio import load_document

SHARED = {"cache_dir": "/lustre/cache", "account": "llm-team", "partition": "batch", "time": "1-00:00:00"}
CONTAINER = {**SHARED, "container_image": "nvcr.io/nvidia/nemo-automodel:25.11",
             "container_mounts": ["/lustre/data:/data"], "env": {"NCCL_DEBUG": "WARN", "NOTE": "a $b 'c'"}}

# (id, model, gpu, nodes, gpus_per_node, layout, launcher block, timeout_minutes the emitter picks)
PLANS = [
    ("dense-1node-defaults", "llama-3.1-8b", "h100-80gb", 1, None, {}, None, 10),
    ("dense-half-node", "llama-3.1-8b", "h100-80gb", 1, 4, {"tp": 2}, SHARED, 10),
    ("moe-2nodes-hybridep-container", "qwen3-30b-a3b", "h100-80gb", 2, None,
     {"ep": 8, "dispatcher": "hybridep"}, CONTAINER, 30),
    ("moe-nvl72-mok", "deepseek-v3", "gb200-nvl72", 16, None, {"ep": 64, "dispatcher": "mok"}, SHARED, 30),
    ("dense-4nodes-tp-pp", "llama-3.1-70b", "a100-80gb", 4, None, {"tp": 8, "pp": 2}, SHARED, 20),
]
IDS = [plan[0] for plan in PLANS]


def _mounts(text: str) -> list[str]:
    match = re.search(r"--container-mounts=(\S+)", text)
    assert match
    return match.group(1).split(",")


def _compile(tmp_path: Path, plan: tuple) -> tuple[object, Path, str]:
    _, model, gpu, nodes, gpn, layout, launcher, _ = plan
    result = make_result(make_problem(model, gpu, nodes, gpn), launcher=launcher, **layout)
    recipe_path = tmp_path / "run" / "recipe.yaml"
    recipe_path.parent.mkdir()
    recipe_path.write_text(f"# {RECIPE_MARKER}: an earlier compile, replaced\n")
    written = write_launch_files(result, recipe_path, "slurm")
    assert written == [str(tmp_path / "run" / "launch.sbatch")]
    return result, recipe_path, Path(written[0]).read_text()


@pytest.mark.parametrize("plan", PLANS, ids=IDS)
def test_script_is_valid_bash_and_shellcheck_clean(tmp_path: Path, plan: tuple) -> None:
    _compile(tmp_path, plan)
    script = tmp_path / "run" / "launch.sbatch"
    syntax = bash_syntax(script)
    assert syntax.returncode == 0, syntax.stderr
    lint = shellcheck(script)
    assert lint.returncode == 0, lint.stdout


@pytest.mark.parametrize("plan", PLANS, ids=IDS)
def test_script_matches_the_plan(tmp_path: Path, plan: tuple) -> None:
    result, recipe_path, text = _compile(tmp_path, plan)
    cluster = result.problem.cluster
    sbatch = sbatch_directives(text)
    assert sbatch["nodes"] == str(cluster.nodes)
    assert sbatch["gpus-per-node"] == str(cluster.gpus_per_node)
    assert sbatch["ntasks-per-node"] == "1"
    assert sbatch["signal"] == "B:USR1@300"
    assert ("exclusive" in sbatch) == (cluster.gpus_per_node == cluster.gpu.gpus_per_node)
    assert sbatch["output"].startswith(str(recipe_path.parent / "logs"))
    assert (recipe_path.parent / "logs").is_dir(), "Slurm does not create the log folder itself"
    flags = torchrun_flags(text)
    assert flags["nproc_per_node"] == str(cluster.gpus_per_node)
    assert flags["nnodes"] == '"$SLURM_NNODES"'
    assert flags["node_rank"] == '"$SLURM_NODEID"'
    assert flags["rdzv_backend"] == "c10d"
    assert flags["rdzv_endpoint"] == '"$MASTER_ADDR:$MASTER_PORT"'
    assert '-m nemo_automodel.cli.app "$RECIPE"' in text
    assert assigned(text, "RECIPE") == str(recipe_path)
    assert f'-ne {cluster.nodes} ]' in text, "the node-count guard must name the plan's node count"
    launcher = plan[6] or {}
    for key in ("account", "partition", "time"):
        assert sbatch.get(key) == launcher.get(key, "04:00:00" if key == "time" else None)


@pytest.mark.parametrize("plan", PLANS, ids=IDS)
def test_recipe_carries_the_slurm_settings(tmp_path: Path, plan: tuple) -> None:
    _, recipe_path, _ = _compile(tmp_path, plan)
    text = recipe_path.read_text()
    recipe = load_document(recipe_path).plain()
    signals = [resolve_signal(s) for s in recipe["step_scheduler"]["preemption_signal"]]
    assert signal.SIGUSR1 in signals and signal.SIGTERM in signals
    assert recipe.get("dist_env", {}).get("timeout_minutes") == plan[7]
    assert "# the base recipe's own comment" in text
    assert "Slurm sends USR1" in text, "a chosen value carries its reason"
    assert recipe["step_scheduler"]["global_batch_size"] == 64


@pytest.mark.parametrize("plan", PLANS, ids=IDS)
def test_written_launch_passes_the_launch_rules(tmp_path: Path, plan: tuple) -> None:
    result, recipe_path, text = _compile(tmp_path, plan)
    cluster = result.problem.cluster
    findings = check_launch(load_document(recipe_path).plain(), world_size=cluster.world_size,
                            gpus_per_node=cluster.gpus_per_node, sbatch_text=text,
                            layout=result.layout, nvlink_domain=cluster.nvlink_domain)
    # pytest's temporary folder is node-local by name: on several nodes the recipe there draws one
    # warning, and so does the default cache folder beside it (plans without a shared cache_dir).
    about_recipe = [f for f in findings if f"recipe {recipe_path} " in f.message]
    assert len(about_recipe) == int(cluster.nodes > 1 and is_node_local(str(recipe_path)))
    rest = [f for f in findings if f not in about_recipe]
    if plan[6] and plan[6].get("cache_dir"):
        assert rest == []
    else:
        assert all(f.severity == "warning" and f.rule == "launch-node-local-cache" for f in rest)
    recipe_rules = check_recipe(load_document(recipe_path).plain(), world_size=cluster.world_size,
                                gpus_per_node=cluster.gpus_per_node, model=result.problem.model)
    assert "dist-env-timeout" not in {f.rule for f in recipe_rules}


def test_existing_recipe_values_that_already_work_are_kept(tmp_path: Path) -> None:
    recipe = BASE_RECIPE.replace("  local_batch_size: 2\n", "  local_batch_size: 2\n  preemption_signal: usr1\n")
    recipe += "dist_env:\n  backend: nccl\n  timeout_minutes: 60  # ours\n"
    result = make_result(make_problem("qwen3-30b-a3b", "h100-80gb", 2), recipe=recipe, ep=8)
    path = tmp_path / "recipe.yaml"
    write_launch_files(result, path, "slurm")
    text = path.read_text()
    assert "preemption_signal: usr1\n" in text
    assert "timeout_minutes: 60  # ours" in text


def test_too_short_timeout_and_missing_usr1_are_replaced(tmp_path: Path) -> None:
    recipe = BASE_RECIPE + "dist_env:\n  timeout_minutes: 5\n"
    recipe = recipe.replace("  local_batch_size: 2\n", "  local_batch_size: 2\n  preemption_signal: SIGTERM\n")
    result = make_result(make_problem("qwen3-30b-a3b", "h100-80gb", 2), recipe=recipe, ep=8)
    path = tmp_path / "recipe.yaml"
    write_launch_files(result, path, "slurm")
    plain = load_document(path).plain()
    assert plain["dist_env"]["timeout_minutes"] == 30
    assert plain["step_scheduler"]["preemption_signal"] == ["SIGUSR1", "SIGTERM"]


def test_same_plan_same_bytes(tmp_path: Path) -> None:
    outputs = []
    for _ in range(2):
        result = make_result(make_problem("qwen3-30b-a3b", "h100-80gb", 2), launcher=CONTAINER,
                             ep=8, dispatcher="hybridep")
        write_launch_files(result, tmp_path / "recipe.yaml", "slurm")
        outputs.append(((tmp_path / "recipe.yaml").read_bytes(), (tmp_path / "launch.sbatch").read_bytes()))
    assert outputs[0] == outputs[1]


def test_container_flags_and_mounts(tmp_path: Path) -> None:
    _, recipe_path, text = _compile(tmp_path, PLANS[2])
    run_dir = str(recipe_path.parent)
    mounts = _mounts(text)
    assert mounts == ["/lustre/data:/data", f"{run_dir}:{run_dir}", "/lustre/cache:/lustre/cache"]
    assert "--container-image=nvcr.io/nvidia/nemo-automodel:25.11" in text
    assert '--container-workdir="$RUN_DIR"' in text and "--no-container-mount-home" in text


def test_a_mount_that_covers_the_cache_is_not_repeated(tmp_path: Path) -> None:
    launcher = {**CONTAINER, "container_mounts": ["/lustre:/lustre"]}
    result = make_result(make_problem("llama-3.1-8b", "h100-80gb", 2), launcher=launcher)
    write_launch_files(result, tmp_path / "recipe.yaml", "slurm")
    mounts = _mounts((tmp_path / "launch.sbatch").read_text())
    assert mounts == ["/lustre:/lustre", f"{tmp_path}:{tmp_path}"]


def test_bare_metal_has_no_pyxis_flags(tmp_path: Path) -> None:
    _, _, text = _compile(tmp_path, PLANS[4])
    assert "--container" not in text


def test_environment_for_large_runs(tmp_path: Path) -> None:
    _, _, text = _compile(tmp_path, PLANS[2])
    assert assigned(text, "PYTORCH_CUDA_ALLOC_CONF") == "expandable_segments:True"
    assert assigned(text, "NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN") == "8"
    assert assigned(text, "HF_HOME") == '"${HF_HOME:-$CACHE_DIR/huggingface}"'
    assert assigned(text, "CACHE_DIR") == "/lustre/cache"
    exports = "\n".join(line for line in text.splitlines() if line.startswith(("export", "CACHE_DIR=")))
    env = subprocess.run(["env", "-i", "bash", "-c", exports + '\nprintf "%s|%s|%s|%s" "$HF_HOME" '
                          '"$TRITON_CACHE_DIR" "$NOTE" "$NEMO_HYBRIDEP_JIT_CACHE"'],
                         capture_output=True, text=True, check=True).stdout
    assert env == "/lustre/cache/huggingface|/lustre/cache/triton|a $b 'c'|/lustre/cache/hybridep_jit"


def test_nvl72_hybridep_domain_is_the_jobs_share_of_the_rack(tmp_path: Path) -> None:
    result = make_result(make_problem("qwen3-30b-a3b", "gb200-nvl72", 2), launcher=SHARED, ep=8,
                         dispatcher="hybridep")
    write_launch_files(result, tmp_path / "recipe.yaml", "slurm")
    assert assigned((tmp_path / "launch.sbatch").read_text(), "NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN") == "8"


def test_nccl_user_buffers_and_cuda_graphs_change_the_allocator_settings(tmp_path: Path) -> None:
    problem = make_problem("qwen3-30b-a3b", "h100-80gb", 1)
    settings = launcher_settings(SHARED, problem)
    with_ub = load_document(BASE_RECIPE + "  nccl_ub: true\n").data
    text = render_sbatch(problem, make_result(problem).layout, settings, tmp_path / "r.yaml", with_ub)
    assert "export PYTORCH_CUDA_ALLOC_CONF" not in text
    graphs = load_document(BASE_RECIPE + "model:\n  backend:\n    cuda_graph:\n      modules: [attn]\n").data
    text = render_sbatch(problem, make_result(problem).layout, settings, tmp_path / "r.yaml", graphs)
    assert assigned(text, "NCCL_GRAPH_REGISTER") == "0"
    assert "export NCCL_GRAPH_REGISTER" not in render_sbatch(problem, make_result(problem).layout, settings,
                                                             tmp_path / "r.yaml", load_document(BASE_RECIPE).data)


def test_run_directory_with_spaces_is_refused(tmp_path: Path) -> None:
    result = make_result(make_problem("llama-3.1-8b", "h100-80gb", 2))
    with pytest.raises(InputError, match="cannot be written into #SBATCH"):
        write_launch_files(result, tmp_path / "my run" / "recipe.yaml", "slurm")


def test_a_launch_that_breaks_its_own_rules_is_not_written(tmp_path: Path) -> None:
    recipe = BASE_RECIPE + "checkpoint:\n  checkpoint_dir: /raid/ckpt\n"
    result = make_result(make_problem("llama-3.1-8b", "h100-80gb", 2), recipe=recipe, launcher=SHARED)
    with pytest.raises(ValidationFailed, match="node-local"):
        write_launch_files(result, tmp_path / "recipe.yaml", "slurm")
    assert not (tmp_path / "launch.sbatch").exists()


def test_a_base_recipe_with_a_skypilot_section_is_not_launched_by_slurm(tmp_path: Path) -> None:
    result = make_result(make_problem("llama-3.1-8b", "h100-80gb", 2), launcher=SHARED,
                         recipe=BASE_RECIPE + "skypilot:\n  cloud: aws\n")
    with pytest.raises(ValidationFailed, match="skypilot"):
        write_launch_files(result, tmp_path / "recipe.yaml", "slurm")


def test_cli_refuses_launcher_with_json_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["compile", str(tmp_path / "intent.yaml"), "-o", str(tmp_path / "r.yaml"),
                 "--launcher", "slurm", "--format", "json"])
    assert code == 2
    assert "--format json" in capsys.readouterr().err


def test_cli_refuses_launcher_without_output_before_compiling(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """The flags are judged first: the intent (here not even written) is never compiled for nothing."""
    code = main(["compile", str(tmp_path / "intent.yaml"), "--launcher", "slurm"])
    assert code == 2
    err = capsys.readouterr().err
    assert "--launcher needs -o/--output" in err and "add -o run/recipe.yaml" in err


@pytest.mark.parametrize("folder", ["my run", "run%1", "run\ntouch x", "a:b", "it's", "run\u2028x", "$(id)"])
def test_a_run_directory_sbatch_lines_cannot_carry_is_refused(tmp_path: Path, folder: str) -> None:
    result = make_result(make_problem("llama-3.1-8b", "h100-80gb", 2), launcher=SHARED)
    recipe = tmp_path / folder / "recipe.yaml"
    with pytest.raises(InputError, match="cannot be written into #SBATCH") as caught:
        write_launch_files(result, recipe, "slurm")
    assert caught.value.where.endswith(one_line(f"{folder}/recipe.yaml")) and caught.value.hint
    assert not recipe.parent.exists()  # refused before anything is written


@pytest.mark.parametrize("name", ["recipe\n.yaml", "re'cipe.yaml", "my recipe.yaml"])
def test_a_recipe_file_name_the_script_cannot_carry_is_refused(tmp_path: Path, name: str) -> None:
    result = make_result(make_problem("llama-3.1-8b", "h100-80gb", 2), launcher=SHARED)
    with pytest.raises(InputError, match="cannot be written into #SBATCH"):
        write_launch_files(result, tmp_path / "run" / name, "slurm")
    assert not (tmp_path / "run").exists()

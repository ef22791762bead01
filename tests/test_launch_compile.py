"""`automodel-dist compile --launcher ...` end to end: the real compiler, the CLI, and validate on the result."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from launch_support import assigned, bash_syntax, sbatch_directives, shellcheck, torchrun_flags
from nemo_automodel.components.launcher.skypilot.config import SkyPilotConfig

from automodel_dist.cli import main
from automodel_dist.compiler import compile_intent
from automodel_dist.errors import InputError
from automodel_dist.intent import load_intent
from automodel_dist.launch import write_launch_files
from automodel_dist.rules.launch import is_node_local
from automodel_dist.validate import validate_recipe
from automodel_dist.yamlio import load_document

EXAMPLES = sorted((Path(__file__).parent.parent / "examples" / "intents").glob("*.yaml"))
INTENT = """\
model: Qwen/Qwen3-30B-A3B
hardware:
  gpu: h100-80gb
  nodes: 2
training:
  task: sft
  seq_length: 4096
  global_batch_size: 256
launcher:
  account: llm-team
  partition: batch
  cache_dir: /lustre/cache
  container_image: nvcr.io/nvidia/nemo-automodel:25.11
  container_mounts: ["/lustre/data:/data"]
{extra}"""


def _compile(tmp_path: Path, launcher: str, extra: str = "") -> tuple[int, Path]:
    intent = tmp_path / "intent.yaml"
    intent.write_text(INTENT.format(extra=extra))
    recipe = tmp_path / "run" / "recipe.yaml"
    return main(["compile", str(intent), "-o", str(recipe), "--launcher", launcher]), recipe


def _launch_findings(recipe: Path) -> list:
    report = validate_recipe(recipe, world_size=16, gpus_per_node=8, gpu="h100-80gb")
    assert report.ok, [f.message for f in report.errors]
    return [f for f in report.findings if f.rule.startswith("launch-") or f.rule == "dist-env-timeout"]


def test_compile_with_slurm_writes_a_script_for_the_plan(tmp_path: Path) -> None:
    code, recipe = _compile(tmp_path, "slurm")
    assert code == 0
    script = recipe.parent / "launch.sbatch"
    assert bash_syntax(script).returncode == 0
    lint = shellcheck(script)
    assert lint.returncode == 0, lint.stdout
    text = script.read_text()
    sbatch = sbatch_directives(text)
    assert (sbatch["nodes"], sbatch["gpus-per-node"], sbatch["ntasks-per-node"]) == ("2", "8", "1")
    assert (sbatch["account"], sbatch["partition"]) == ("llm-team", "batch")
    assert torchrun_flags(text)["nproc_per_node"] == "8"
    assert assigned(text, "RECIPE") == str(recipe.resolve())
    recipe_text = recipe.read_text()
    assert recipe_text.startswith("# AutoModel recipe compiled by automodel-dist"), "the emitter's comments stay"
    plain = load_document(recipe).plain()
    assert plain["step_scheduler"]["preemption_signal"] == ["SIGUSR1", "SIGTERM"]
    assert _launch_findings(recipe) == []


def test_compile_with_skypilot_adds_a_section_automodel_accepts(tmp_path: Path) -> None:
    code, recipe = _compile(tmp_path, "skypilot", "  cloud: aws\n")
    assert code == 0
    assert not (recipe.parent / "launch.sbatch").exists()
    section = load_document(recipe).plain()["skypilot"]
    config = SkyPilotConfig(**section)
    assert (config.cloud, config.accelerators, config.num_nodes) == ("aws", "H100:8", 2)
    assert _launch_findings(recipe) == []


def test_same_intent_same_bytes(tmp_path: Path) -> None:
    outputs = []
    for _ in range(2):
        assert _compile(tmp_path, "slurm")[0] == 0
        outputs.append([(tmp_path / "run" / name).read_bytes() for name in ("recipe.yaml", "launch.sbatch")])
    assert outputs[0] == outputs[1]


def test_skypilot_without_a_cloud_is_a_clear_input_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, recipe = _compile(tmp_path, "skypilot")
    assert code == 2
    err = capsys.readouterr().err
    assert "launcher.cloud" in err and "hint:" in err and "Traceback" not in err
    assert not recipe.exists()  # no recipe left behind without the launch settings it was meant to carry


@pytest.mark.parametrize(("setting", "key"), [
    ('container_mounts: ["data:/data"]', "launcher.container_mounts.0"),
    ('container_mounts: ["/data"]', "launcher.container_mounts.0"),
    ("env: {1BAD: x}", "launcher.env.1BAD"),
    ("time: four hours", "launcher.time"),
    ("job_name: my job", "launcher.job_name"),
    ("acount: typo", "launcher.acount"),
    ("use_spot: sometimes", "launcher.use_spot"),
    ("cloud: oci", "launcher.cloud"),
])
def test_bad_launcher_settings_are_located_input_errors(tmp_path: Path, setting: str, key: str) -> None:
    intent = tmp_path / "intent.yaml"
    intent.write_text(INTENT.format(extra="").replace('  container_mounts: ["/lustre/data:/data"]\n', "")
                      + f"  {setting}\n")
    with pytest.raises(InputError) as info:
        load_intent(intent)
    assert f"intent.yaml:{len(INTENT.splitlines()) - 1}:" in str(info.value)
    assert f"{key}:" in str(info.value)


@pytest.mark.parametrize("intent", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_every_example_compiles_to_a_clean_script(tmp_path: Path, intent: Path) -> None:
    result = compile_intent(intent)
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(result.yaml)
    (script,) = write_launch_files(result, recipe, "slurm")
    assert bash_syntax(Path(script)).returncode == 0
    lint = shellcheck(Path(script))
    assert lint.returncode == 0, lint.stdout
    text = Path(script).read_text()
    cluster = result.problem.cluster
    sbatch = sbatch_directives(text)
    assert (sbatch["nodes"], sbatch["gpus-per-node"]) == (str(cluster.nodes), str(cluster.gpus_per_node))
    assert torchrun_flags(text)["nproc_per_node"] == str(cluster.gpus_per_node)
    if result.layout.dispatcher == "hybridep":
        assert assigned(text, "NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN") == str(cluster.nvlink_domain)
    assert load_document(recipe).plain()["step_scheduler"]["preemption_signal"] == ["SIGUSR1", "SIGTERM"]


# --- validate --sbatch: the script compile wrote, judged with its recipe ------------------------------

def _validate_cli(recipe: Path, sbatch: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str, str]:
    code = main(["validate", str(recipe), "--nodes", "2", "--gpus-per-node", "8", "--gpu", "h100-80gb",
                 "--sbatch", str(sbatch), *extra])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_written_script_validates_clean_with_its_recipe(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    _, recipe = _compile(tmp_path, "slurm")
    script = recipe.parent / "launch.sbatch"
    capsys.readouterr()
    code, out, _ = _validate_cli(recipe, script, capsys)
    assert code == 0, out
    report = validate_recipe(recipe, world_size=16, gpus_per_node=8, gpu="h100-80gb", sbatch=script)
    in_script = [f for f in report.findings if f.file is not None]
    # pytest's temporary folder is node-local by name, so the script's RECIPE line draws the one warning
    # a shared folder would not; nothing else in the script is flagged.
    assert [(f.rule, f.severity, f.file) for f in in_script] == (
        [("launch-node-local-cache", "warning", str(script))] if is_node_local(str(recipe.resolve())) else [])
    lines = script.read_text().splitlines()
    assert all(lines[f.line - 1].startswith(("RECIPE=", "export RECIPE=")) for f in in_script)


def test_several_torchrun_tasks_per_node_in_the_script_fail_validate_at_their_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, recipe = _compile(tmp_path, "slurm")
    text = (recipe.parent / "launch.sbatch").read_text()
    assert "#SBATCH --ntasks-per-node=1\n" in text and "torchrun" in text
    bad = tmp_path / "bad.sbatch"
    bad.write_text(text.replace("#SBATCH --ntasks-per-node=1\n", "#SBATCH --ntasks-per-node=8\n"))
    line = text.splitlines().index("#SBATCH --ntasks-per-node=1") + 1
    capsys.readouterr()
    code, out, _ = _validate_cli(recipe, bad, capsys)
    assert code == 1
    assert f"{bad}:{line}:1: error [launch-ntasks-per-node]" in out and "EADDRINUSE" in out
    code, out, _ = _validate_cli(recipe, bad, capsys, "--format", "json")
    [finding] = [f for f in json.loads(out)["findings"] if f["rule"] == "launch-ntasks-per-node"]
    assert (finding["file"], finding["line"], finding["col"]) == (str(bad), line, 1)
    # The script's text works as well as its path (the API's `sbatch=`), named <sbatch>.
    report = validate_recipe(recipe, world_size=16, gpus_per_node=8, sbatch=bad.read_text())
    [error] = report.errors
    assert (error.rule, error.file, error.line) == ("launch-ntasks-per-node", "<sbatch>", line)


@pytest.mark.parametrize("name", ["missing.sbatch", "."])
def test_an_unreadable_sbatch_path_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str) -> None:
    _, recipe = _compile(tmp_path, "slurm")
    capsys.readouterr()
    code, _, err = _validate_cli(recipe, tmp_path / name, capsys)
    assert code == 2
    assert "sbatch script" in err and "hint:" in err and "Traceback" not in err


def test_an_output_path_that_cannot_be_written_is_bad_input(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """-o naming a folder: exit 2 with the path and the fix, not an IsADirectoryError traceback."""
    intent = tmp_path / "intent.yaml"
    intent.write_text(INTENT.format(extra=""))
    folder = tmp_path / "run"
    folder.mkdir()
    assert main(["compile", str(intent), "-o", str(folder)]) == 2
    err = capsys.readouterr().err
    assert f"{folder}: cannot write {folder}: it is a folder" in err and "hint: pass the path of a file" in err
    assert "Traceback" not in err

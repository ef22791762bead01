"""The CLI with --target megatron-bridge: compile (YAML, Hydra list, JSON, -o, --launcher slurm), validate
(--recipe, exit codes, positions) and explain."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from automodel_dist.cli import main

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "intents"
QWEN = str(EXAMPLES / "qwen3-30b-a3b-16xh100.yaml")
RECIPE = "qwen3_30b_a3b_sft_config"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_compile_writes_yaml_hydra_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, yaml_text, _ = run(capsys, "compile", QWEN, "--target", "megatron-bridge")
    assert code == 0 and yaml_text.startswith(f"# Megatron-Bridge overrides for {RECIPE}")
    code, hydra, _ = run(capsys, "compile", QWEN, "--target", "megatron-bridge", "--format", "hydra")
    lines = [line for line in hydra.splitlines() if not line.startswith("#")]
    assert code == 0 and "model.expert_model_parallel_size=16" in lines
    assert f"# recipe: {RECIPE}" in hydra and "# world: 2 x 8" in hydra
    code, text, _ = run(capsys, "compile", QWEN, "--target", "megatron-bridge", "--format", "json")
    data = json.loads(text)
    assert data["hydra"] == lines and data["recipe_function"] == RECIPE and data["layout"]["etp"] == 1


def test_launcher_writes_a_script_that_passes_shellcheck_and_validate(capsys: pytest.CaptureFixture[str],
                                                                       tmp_path: Path) -> None:
    out = tmp_path / "run" / "overrides.yaml"
    code, _, err = run(capsys, "compile", QWEN, "--target", "megatron-bridge", "-o", str(out), "--launcher", "slurm")
    assert code == 0, err
    script = out.parent / "launch.sbatch"
    text = script.read_text()
    assert "#SBATCH --ntasks-per-node=8" in text and "torchrun --" not in text and "torch.distributed.run" not in text
    assert f"--recipe {RECIPE}" in text and "'model.cuda_graph_scope=[" in text
    shellcheck = shutil.which("shellcheck")
    assert shellcheck, "shellcheck is installed by scripts/setup-env.sh"
    result = subprocess.run([shellcheck, str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout
    code, report, _ = run(capsys, "validate", str(out), "--target", "megatron-bridge", "--recipe", RECIPE,
                          "--nodes", "2", "--gpu", "h100-80gb", "--sbatch", str(script))
    assert code == 0 and "0 error(s)" in report


def test_validate_reports_megatrons_message_at_the_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "o.yaml"
    path.write_text("model:\n  expert_model_parallel_size: 16\n  pipeline_model_parallel_size: 2\n"
                    "comm_overlap:\n  overlap_moe_expert_parallel_comm: true\n")
    code, report, _ = run(capsys, "validate", str(path), "--target", "megatron-bridge", "--recipe",
                          "deepseek_v3_pretrain_config", "--nodes", "2")
    assert code == 1
    assert "world_size (16) is not divisible by expert_tensor_model_pipeline_parallel size (32)" in report
    assert "virtual_pipeline_model_parallel_size must be specified" in report
    assert ":2:" in report  # the EP key's line


@pytest.mark.parametrize(("argv", "text"), [
    (["--target", "megatron-bridge"], "needs --recipe, the recipe function the overrides apply to (the file has no "
                                      "`# recipe: NAME` header line)"),
    (["--recipe", RECIPE], "add --target megatron-bridge"),
])
def test_validate_flag_mistakes_are_bad_input(capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str],
                                              text: str) -> None:
    path = tmp_path / "o.yaml"
    path.write_text("model:\n  tensor_model_parallel_size: 2\n")
    code, _, err = run(capsys, "validate", str(path), *argv)
    assert code == 2 and text in err


def test_a_value_of_the_wrong_type_is_bad_input_at_its_position(capsys: pytest.CaptureFixture[str],
                                                                tmp_path: Path) -> None:
    path = tmp_path / "o.yaml"
    path.write_text("model:\n  tensor_model_parallel_size: two\n")
    code, _, err = run(capsys, "validate", str(path), "--target", "megatron-bridge", "--recipe", RECIPE)
    assert code == 2 and "o.yaml:2:3: model.tensor_model_parallel_size: expected a positive integer, got 'two'" in err


def test_the_hydra_file_is_rewritten_and_validated_like_the_yaml(capsys: pytest.CaptureFixture[str],
                                                                  tmp_path: Path) -> None:
    """compile --format hydra -o: a file the tool knows for its own (rewritten without --force), that validate
    reads back with its recipe and world from its header, every finding at its line."""
    out = tmp_path / "overrides.txt"
    for _ in range(2):
        code, _, err = run(capsys, "compile", QWEN, "--target", "megatron-bridge", "--format", "hydra", "-o", str(out))
        assert code == 0, err
    code, report, _ = run(capsys, "validate", str(out), "--target", "megatron-bridge", "--gpu", "h100-80gb")
    assert code == 0 and "0 error(s)" in report and "0 note(s)" in report
    lines = out.read_text().splitlines()
    ep = next(i for i, line in enumerate(lines, start=1) if line.startswith("model.expert_model_parallel_size="))
    out.write_text("\n".join(line.replace("=16", "=3") if i == ep else line
                             for i, line in enumerate(lines, start=1)) + "\n")
    code, report, _ = run(capsys, "validate", str(out), "--target", "megatron-bridge")
    assert code == 1 and f"overrides.txt:{ep}:1: error [mb-expert-world-divisible]" in report
    out.write_text(out.read_text().replace("model.sequence_parallel=false", "model.sequence_parallel=no"))
    code, _, err = run(capsys, "validate", str(out), "--target", "megatron-bridge")
    assert code == 2 and ":1: model.sequence_parallel: expected true or false, got 'no'" in err


def test_validate_takes_recipe_and_world_from_the_header(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """No --recipe, no --nodes, no --gpu: the compiled file says all three (2 x 8 here; 1 x 8 would break EP 16)."""
    out = tmp_path / "o.yaml"
    assert run(capsys, "compile", QWEN, "--target", "megatron-bridge", "-o", str(out))[0] == 0
    code, report, _ = run(capsys, "validate", str(out), "--target", "megatron-bridge")
    assert code == 0 and "0 error(s)" in report and "no GPU" not in report
    code, report, _ = run(capsys, "validate", str(out), "--target", "megatron-bridge", "--nodes", "1")
    assert code == 1 and "mb-expert-world-divisible" in report  # a flag still wins over the header


def test_a_base_recipe_is_bad_input_for_this_target(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    intent = tmp_path / "i.yaml"
    base = EXAMPLES.parent / "recipes" / "qwen3-30b-a3b-16xh100.yaml"
    intent.write_text(Path(QWEN).read_text() + f"base_recipe: {base}\n")
    line = len(intent.read_text().splitlines())
    code, _, err = run(capsys, "compile", str(intent), "--target", "megatron-bridge")
    assert code == 2 and f"i.yaml:{line}:1: base_recipe is an AutoModel recipe to merge into" in err


@pytest.mark.parametrize("target", ["automodel", "megatron-bridge"])
def test_overrides_may_follow_the_options(capsys: pytest.CaptureFixture[str], target: str) -> None:
    code, text, err = run(capsys, "compile", QWEN, "--target", target, "training.seq_length=2048")
    assert code == 0, err
    assert ("seq_length: 2048" if target == "megatron-bridge" else "seq_len: 2048") in text
    with pytest.raises(SystemExit) as stopped:  # argparse's usage error, as before
        main(["compile", QWEN, "--target", target, "--bogus"])
    assert stopped.value.code == 2 and "unrecognized arguments: --bogus" in capsys.readouterr().err


def test_hydra_format_is_the_megatron_targets(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "compile", QWEN, "--format", "hydra")
    assert code == 2 and "--target megatron-bridge" in err


def test_explain_shows_the_megatron_settings_and_why(capsys: pytest.CaptureFixture[str]) -> None:
    code, text, _ = run(capsys, "explain", QWEN, "training.task=pretrain", "--target", "megatron-bridge", "--top", "3")
    assert code == 0
    assert "winner: TP" in text and "distributed_optimizer" not in text  # Megatron's terms
    assert "recompute: " in text and "checkpointing: " not in text
    assert "comm_overlap.overlap_moe_expert_parallel_comm = true: every prerequisite holds" in text
    assert "env CUDA_DEVICE_MAX_CONNECTIONS=32" in text
    assert "comm_overlap._target_" not in text  # the pretrain recipe builds its own CommOverlapConfig
    code, text, _ = run(capsys, "explain", QWEN, "--target", "megatron-bridge")  # the sft recipe leaves it None
    assert code == 0
    assert "comm_overlap._target_ = megatron.bridge.training.comm_overlap.CommOverlapConfig" in text
    assert "comm_overlap.overlap_moe_expert_parallel_comm = true: every prerequisite holds" in text


TINY = "model:\n  tensor_model_parallel_size: 2\ntrain:\n  global_batch_size: 64\n"
# keys of an sft recipe's dataset (a pretrain recipe's has no packing)
PACKED = "dataset:\n  offline_packing_specs:\n    packed_sequence_size: 4096\n"


@pytest.mark.parametrize(("header", "flag", "where"), [
    ("", "qwen3_8b_sft_confg", "--recipe: "), ("# recipe: qwen3_8b_sft_confg\n", None, "o.yaml:1:1: ")])
def test_a_misspelled_recipe_function_is_bad_input(capsys: pytest.CaptureFixture[str], tmp_path: Path, header: str,
                                                   flag: str | None, where: str) -> None:
    path = tmp_path / "o.yaml"
    path.write_text(header + TINY + PACKED)
    recipe = ["--recipe", flag] if flag else []
    code, _, err = run(capsys, "validate", str(path), "--target", "megatron-bridge", *recipe)
    assert code == 2 and f"{where}Megatron-Bridge 0.6.2 has no recipe function 'qwen3_8b_sft_confg'" in err
    assert "(did you mean 'qwen3_8b_sft_config'?)" in err
    path.write_text(header.replace("confg", "config") + TINY + PACKED)  # the valid neighbour
    code, report, _ = run(capsys, "validate", str(path), "--target", "megatron-bridge",
                          *[r.replace("confg", "config") for r in recipe])
    assert code == 0 and "0 error(s)" in report


@pytest.mark.parametrize(("recipe", "note"), [
    ("zz_unrelated_name", "is no recipe function Megatron-Bridge 0.6.2 exports"),
    ("llama31_8b_sft_2gpu_h100_bf16_config", "is not one this tool knows")])  # Megatron-Bridge has it
def test_a_recipe_function_this_tool_does_not_know_is_a_note(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                             recipe: str, note: str) -> None:
    """Close to no recipe function: judged with the keys no recipe takes (an sft dataset's packing is not one)."""
    path = tmp_path / "o.yaml"
    path.write_text("model:\n  tensor_model_paralel_size: 2\n" + PACKED)
    code, report, _ = run(capsys, "validate", str(path), "--target", "megatron-bridge", "--recipe", recipe)
    assert code == 1 and f"model rules skipped: recipe {recipe} {note}" in report
    assert "[mb-unknown-key] model.tensor_model_paralel_size" in report and "offline_packing_specs" not in report


def test_a_model_without_a_recipe_is_bad_input(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(capsys, "compile", str(EXAMPLES / "mixtral-8x7b-lora-16xh200.yaml"), "--target",
                       "megatron-bridge")
    assert code == 2 and "mixtral-8x7b-lora-16xh200.yaml:3:1: Megatron-Bridge 0.6.2 ships no peft recipe" in err
    intent = tmp_path / "i.yaml"  # a name that spans lines is told on one, at the model key
    intent.write_text("hardware: {gpu: h100-80gb}\ntraining: {seq_length: 4096, global_batch_size: 64}\n"
                      'model:\n  name: "tiny\\nmodel"\n  family: custom\n'
                      "  num_layers: 4\n  hidden_size: 256\n  num_attention_heads: 4\n  num_key_value_heads: 4\n"
                      "  head_dim: 64\n  intermediate_size: 1024\n  vocab_size: 32000\n")
    code, _, err = run(capsys, "compile", str(intent), "--target", "megatron-bridge")
    assert code == 2 and "i.yaml:3:1: Megatron-Bridge 0.6.2 ships no sft recipe for tiny\\nmodel\n" in err


@pytest.mark.parametrize(("folder", "config", "recipe"), [
    ("ckpt", "llama-3.2-1b", "llama32_1b_sft_config"),        # a name no preset has
    ("Qwen3-32B", "qwen3-8b", "qwen3_8b_sft_config"),          # another preset's name: the architecture decides
])
def test_a_model_config_in_any_folder_finds_its_recipe_by_architecture(capsys: pytest.CaptureFixture[str],
                                                                        tmp_path: Path, folder: str, config: str,
                                                                        recipe: str) -> None:
    path = tmp_path / folder
    path.mkdir()
    fixtures = Path(__file__).resolve().parent / "fixtures" / "hf_configs"
    (path / "config.json").write_text((fixtures / config / "config.json").read_text())
    intent = tmp_path / "i.yaml"
    intent.write_text(f"model: {path}\nhardware: {{gpu: h100-80gb}}\n"
                      "training: {task: sft, seq_length: 4096, global_batch_size: 64}\n")
    code, text, err = run(capsys, "compile", str(intent), "--target", "megatron-bridge")
    assert code == 0 and f"# recipe: {recipe}" in text, err


@pytest.mark.parametrize(("changes", "named"), [
    ("  num_routed_experts: 96\n", "num_routed_experts 96 (128)"),
    ("  num_layers: 30\n  num_routed_experts: 96\n", "num_layers 30 (48), num_routed_experts 96"),
])
def test_a_model_the_recipe_does_not_build_is_bad_input(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                        changes: str, named: str) -> None:
    """The override set trains what the recipe function builds: a changed architecture would be planned for one
    model and run with another."""
    intent = tmp_path / "i.yaml"
    text = ("hardware: {gpu: h100-80gb, nodes: 6}\ntraining: {task: pretrain, seq_length: 4096, "
            "global_batch_size: 1152}\nmodel:\n  preset: qwen3-30b-a3b\n")
    intent.write_text(text + changes)
    code, _, err = run(capsys, "compile", str(intent), "--target", "megatron-bridge")
    assert code == 2 and "i.yaml:3:1: qwen3_30b_a3b_pretrain_config builds qwen3-30b-a3b" in err and named in err
    intent.write_text(text)  # the valid neighbour: the preset as the recipe builds it
    code, _, err = run(capsys, "compile", str(intent), "--target", "megatron-bridge")
    assert code == 0, err


def test_a_launcher_value_an_sbatch_line_cannot_carry_is_bad_input(capsys: pytest.CaptureFixture[str],
                                                                    tmp_path: Path) -> None:
    intent = tmp_path / "i.yaml"
    intent.write_text(Path(QWEN).read_text() + "launcher:\n  account: \"acct; rm -rf ~\"\n")
    code, _, err = run(capsys, "compile", str(intent), "--target", "megatron-bridge", "-o",
                       str(tmp_path / "run" / "o.yaml"), "--launcher", "slurm")
    assert code == 2 and "account" in err  # the intent schema refuses it; _checked_directive guards the script
    assert not (tmp_path / "run" / "launch.sbatch").exists()


def test_the_override_file_name_cannot_inject_a_command(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The script's comments name the override file: a newline in that name stays an escape, never a line."""
    out = tmp_path / "run" / "ov\ntouch INJECTED\n#.yaml"
    code, _, err = run(capsys, "compile", QWEN, "--target", "megatron-bridge", "-o", str(out), "--launcher", "slurm")
    assert code == 0, err
    lines = (out.parent / "launch.sbatch").read_text().splitlines()
    assert not any(line.startswith("touch") for line in lines)
    assert any("overrides: ov\\ntouch INJECTED\\n#.yaml" in line for line in lines)
    assert "wrote " in err and "\\ntouch" in err  # the report of what was written stays on one line too


def test_the_launch_keeps_the_users_job_name_and_cache(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    intent = tmp_path / "i.yaml"
    intent.write_text(Path(QWEN).read_text() + "launcher:\n  job_name: my-automodel-run\n  cache_dir: /shared/cache\n"
                      "  container_image: nvcr.io/nvidia/nemo:25.11\n")
    out = tmp_path / "run" / "o.yaml"
    code, _, err = run(capsys, "compile", str(intent), "--target", "megatron-bridge", "-o", str(out),
                       "--launcher", "slurm")
    assert code == 0, err
    text = (out.parent / "launch.sbatch").read_text()
    assert "#SBATCH --job-name=my-automodel-run" in text
    assert "export HF_HOME=/shared/cache/hf_home" in text and "export UV_CACHE_DIR=/shared/cache/uv_cache" in text
    assert "/shared/cache:/shared/cache," in text  # mounted into the container at the same path
    code, _, err = run(capsys, "compile", QWEN, "--target", "megatron-bridge", "-o", str(tmp_path / "d" / "o.yaml"),
                       "--launcher", "slurm")
    default = (tmp_path / "d" / "launch.sbatch").read_text()
    assert code == 0 and "#SBATCH --job-name=mbridge-qwen3-30b-a3b-sft" in default
    assert 'export HF_HOME="$SHARED_DIR/hf_home"' in default


def test_a_node_local_cache_on_several_nodes_is_a_warning(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    intent = tmp_path / "i.yaml"
    intent.write_text(Path(QWEN).read_text() + "launcher:\n  cache_dir: /tmp/cache\n")
    code, _, err = run(capsys, "compile", str(intent), "--target", "megatron-bridge", "-o",
                       str(tmp_path / "run" / "o.yaml"), "--launcher", "slurm")
    assert code == 0 and "warning: HF_HOME=/tmp/cache/hf_home is on node-local storage" in err


@pytest.mark.parametrize(("edit", "message"), [
    (("model.expert_model_parallel_size=16", "model.expert_model_parallel_size=8"),
     "the launch script sets 8 for model.expert_model_parallel_size, where the override file validated with it "
     "has 16"),
    (("    model.expert_model_parallel_size=16\n", ""),
     "the launch script leaves out model.expert_model_parallel_size"),
    (("OVERRIDES=(\n", "OVERRIDES=(\n    +train.global_batch_size=512\n"),
     "Could not append to config. An item is already at 'train.global_batch_size'"),
])
def test_validate_judges_the_override_list_the_script_runs(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                           edit: tuple[str, str], message: str) -> None:
    """The job runs the script's OVERRIDES list, not the file: each difference is an error at the script's line."""
    out = tmp_path / "run" / "overrides.yaml"
    assert run(capsys, "compile", QWEN, "--target", "megatron-bridge", "-o", str(out), "--launcher", "slurm")[0] == 0
    script = out.parent / "launch.sbatch"
    text = script.read_text()
    assert edit[0] in text
    script.write_text(text.replace(edit[0], edit[1], 1))
    code, report, _ = run(capsys, "validate", str(out), "--target", "megatron-bridge", "--sbatch", str(script))
    assert code == 1 and message in report and f"{script}:" in report


def test_launcher_env_that_replaces_a_planned_variable_is_a_warning(capsys: pytest.CaptureFixture[str],
                                                                      tmp_path: Path) -> None:
    intent = tmp_path / "i.yaml"
    intent.write_text("model: Qwen/Qwen3-30B-A3B\nhardware: {gpu: gb200-nvl72, nodes: 4}\n"
                      "training: {task: pretrain, seq_length: 4096, global_batch_size: 512}\n"
                      "launcher:\n  env: {NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN: '8', HF_HUB_OFFLINE: '1'}\n")
    for target in ("megatron-bridge", "automodel"):
        code, _, err = run(capsys, "compile", str(intent), "--target", target, "-o",
                           str(tmp_path / target / "o.yaml"), "--launcher", "slurm")
        assert code == 0, err
        assert "warning: NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN is set to '16'" in err, target
        assert "HF_HUB_OFFLINE" not in err  # a variable the plan does not set is the user's to add


def test_validate_runs_bash_on_the_launch_script(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out = tmp_path / "run" / "overrides.yaml"
    assert run(capsys, "compile", QWEN, "--target", "megatron-bridge", "-o", str(out), "--launcher", "slurm")[0] == 0
    script = out.parent / "launch.sbatch"
    script.write_text(script.read_text().replace("fi\n", "\n", 1))  # the node-count check loses its `fi`
    code, report, _ = run(capsys, "validate", str(out), "--target", "megatron-bridge", "--recipe", RECIPE,
                          "--nodes", "2", "--sbatch", str(script))
    assert code == 1 and "launch-sbatch-syntax" in report and "not valid shell (bash -n)" in report


@pytest.mark.parametrize(("override", "code"), [
    ("training.packed_sequences=false", 2),  # the sft recipe packs: asked otherwise in so many words
    ("training.packed_sequences=true", 0),   # what the recipe does
    (None, 0),                               # left to the default: the recipe decides
])
def test_packing_asked_against_the_recipe_is_bad_input(capsys: pytest.CaptureFixture[str], override: str | None,
                                                       code: int) -> None:
    got, _, err = run(capsys, "compile", QWEN, *([override] if override else []), "--target", "megatron-bridge")
    assert got == code, err
    if code:
        assert "packs sequences offline" in err and "override 'training.packed_sequences=false'" in err


def test_automodel_only_pins_are_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "compile", QWEN, "parallelism.strategy=fsdp2", "--target", "megatron-bridge")
    assert code == 2 and "parallelism.strategy is an AutoModel choice" in err


def test_a_size_past_the_limits_is_bad_input(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "o.yaml"
    path.write_text("model:\n  seq_length: 1000000000000000000\n")
    code, _, err = run(capsys, "validate", str(path), "--target", "megatron-bridge", "--recipe", RECIPE)
    assert code == 2 and "above the limit" in err and "o.yaml:2:" in err


def test_each_target_refuses_the_others_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """An override set given to AutoModel's validate or dry-run, or an AutoModel recipe given to this target's
    validate, is bad input naming the key that shows what it is, not a list of errors about the wrong format."""
    overrides = tmp_path / "o.yaml"
    assert run(capsys, "compile", QWEN, "--target", "megatron-bridge", "-o", str(overrides))[0] == 0
    line = next(i for i, text in enumerate(overrides.read_text().splitlines(), start=1)
                if text.strip().startswith("tensor_model_parallel_size:"))
    for command in (["validate", str(overrides)], ["dry-run", str(overrides), "--nodes", "2"]):
        code, _, err = run(capsys, *command)
        assert code == 2 and f"o.yaml:{line}:3: this is a Megatron-Bridge override set" in err, command
        assert "--target megatron-bridge" in err
    recipe = EXAMPLES.parent / "recipes" / "qwen3-30b-a3b-16xh100.yaml"
    code, _, err = run(capsys, "validate", str(recipe), "--target", "megatron-bridge", "--recipe", RECIPE)
    assert code == 2 and "this is an AutoModel recipe (a distributed: section)" in err


def test_compile_warns_when_the_measured_memory_error_could_take_the_peak_past_the_gpu(capsys, tmp_path) -> None:
    """Megatron MoE peaks measured up to +22% over their estimates (the megatron/moe memory band): Moonlight on
    8 H100 plans a peak that would then pass the GPU. The override file's header and stderr say so with the
    headroom that plans for it (exit 0: the plan holds within the intent's own headroom); with that headroom the
    re-planned peak, so raised, fits and nothing is said."""
    intent = tmp_path / "moonlight.yaml"
    body = ("model: moonshotai/Moonlight-16B-A3B\nhardware:\n  gpu: h100-80gb\n  nodes: 1\n"
            "training:\n  task: pretrain\n  seq_length: 4096\n  global_batch_size: 512\n")
    intent.write_text(body)
    code, out, err = run(capsys, "compile", str(intent), "--target", "megatron-bridge")
    assert code == 0
    header = next(line for line in out.splitlines() if line.startswith("# warning: "))
    assert header.startswith("# warning: measured peaks of runs like this one were up to +")
    assert f"automodel-dist compile: warning: {header.removeprefix('# warning: ')}" in err
    headroom = header.rsplit("memory_headroom: ", 1)[1].split()[0]
    intent.write_text(body + f"memory_headroom: {headroom}\n")
    code, out, err = run(capsys, "compile", str(intent), "--target", "megatron-bridge")
    assert code == 0 and "warning" not in out and "warning" not in err


def test_compile_says_nothing_where_the_measured_memory_error_stays_within_the_gpu(capsys) -> None:
    """AutoModel's peaks follow torchtitan's accounting, measured within -8%..+6%: inside the planner's 10% headroom."""
    code, out, err = run(capsys, "compile", QWEN)
    assert code == 0 and "warning" not in out and "warning" not in err


def test_validate_refuses_a_model_the_recipe_does_not_build(capsys: pytest.CaptureFixture[str],
                                                             tmp_path: Path) -> None:
    """--model names what is judged; Megatron-Bridge runs the recipe function's own model, so a --model that
    builds another network would judge a run that never happens (here: false EP errors for a dense model)."""
    path = tmp_path / "o.yaml"
    code, _, _ = run(capsys, "compile", QWEN, "--target", "megatron-bridge", "-o", str(path))
    assert code == 0
    code, _, err = run(capsys, "validate", str(path), "--target", "megatron-bridge", "--model", "llama-3.1-8b")
    assert code == 2 and f"--model: {RECIPE} builds qwen3-30b-a3b" in err and "num_layers 32 (48)" in err
    code, report, _ = run(capsys, "validate", str(path), "--target", "megatron-bridge", "--model",
                          "Qwen/Qwen3-30B-A3B")  # the recipe's own model, by its Hugging Face id
    assert code == 0, report
    reshaped = tmp_path / "r.yaml"  # an override set that reshapes the model: --model describes the result
    text = path.read_text()
    assert "\nmodel:\n" in text
    reshaped.write_text(text.replace("\nmodel:\n", "\nmodel:\n  num_layers: 24  # half the layers\n", 1))
    code, _, err = run(capsys, "validate", str(reshaped), "--target", "megatron-bridge", "--model", "llama-3.1-8b")
    assert "builds qwen3-30b-a3b" not in err


@pytest.mark.parametrize("target", ["automodel", "megatron-bridge"])
def test_fp8_on_a_gpu_without_it_is_a_warning_in_the_file_and_on_stderr(capsys: pytest.CaptureFixture[str],
                                                                         tmp_path: Path, target: str) -> None:
    intent = tmp_path / "i.yaml"
    intent.write_text("model: llama-3.1-8b\nhardware: {gpu: a100-80gb}\n"
                      "training: {task: pretrain, seq_length: 4096, global_batch_size: 512, precision: fp8}\n")
    said = "precision fp8 was asked for, but a100-80gb has no FP8 tensor cores: this file trains in bf16"
    code, out, err = run(capsys, "compile", str(intent), "--target", target)
    assert code == 0 and f"# warning: {said}\n" in out and f"warning: {said}\n" in err
    intent.write_text(intent.read_text().replace("a100-80gb", "h100-80gb"))  # the neighbour with FP8: no word
    code, out, err = run(capsys, "compile", str(intent), "--target", target)
    assert code == 0 and "precision fp8 was asked for" not in out + err


def test_full_recompute_pinned_on_a_moe_model_runs_without_cuda_graphs(capsys: pytest.CaptureFixture[str],
                                                                       tmp_path: Path) -> None:
    """Per-layer TE graphs refuse full recompute (mb-cuda-graph-full-recompute): the set writes none, where every
    MoE layout was refused before."""
    intent = tmp_path / "i.yaml"
    intent.write_text("model: qwen3-30b-a3b\nhardware: {gpu: h100-80gb, nodes: 4}\n"
                      "training: {task: pretrain, seq_length: 4096, global_batch_size: 512}\n"
                      "parallelism: {activation_checkpointing: full}\n")
    out = tmp_path / "o.yaml"
    code, _, err = run(capsys, "compile", str(intent), "--target", "megatron-bridge", "-o", str(out))
    assert code == 0, err
    text = out.read_text()
    assert "recompute_granularity: full" in text and "cuda_graph_impl: none" in text
    code, report, _ = run(capsys, "validate", str(out), "--target", "megatron-bridge")
    assert code == 0, report


@pytest.mark.parametrize(("value", "code"), [("0", 0), ("-1", 2)])
def test_zero_mtp_layers_is_no_mtp(capsys: pytest.CaptureFixture[str], tmp_path: Path, value: str, code: int) -> None:
    """MCore reads mtp_num_layers 0 as no MTP module (the other sizes start at 1)."""
    path = tmp_path / "o.yaml"
    assert run(capsys, "compile", QWEN, "--target", "megatron-bridge", "-o", str(path))[0] == 0
    path.write_text(path.read_text().replace("\nmodel:\n", f"\nmodel:\n  mtp_num_layers: {value}\n", 1))
    assert run(capsys, "validate", str(path), "--target", "megatron-bridge")[0] == code

"""`automodel-dist validate`: exit codes, JSON, line:col, and every kind of bad input -> a message and exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from automodel_dist.cli import main
from automodel_dist.report import render_report
from automodel_dist.validate import validate_recipe

GOOD = """\
recipe: TrainFinetuneRecipeForNextTokenPrediction
model:
  _target_: nemo_automodel.NeMoAutoModelForCausalLM.from_pretrained
  pretrained_model_name_or_path: meta-llama/Llama-3.1-8B
distributed:
  strategy: fsdp2
  tp_size: 2
  dp_size: none
step_scheduler:
  global_batch_size: 32
  local_batch_size: 1
optimizer:
  _target_: torch.optim.AdamW
  lr: 1.0e-5
"""

# ep_size 3 is on line 8, col 3; global_batch_size on line 11, col 3.
BAD = """\
recipe: TrainFinetuneRecipeForNextTokenPrediction
model:
  pretrained_model_name_or_path: Qwen/Qwen3-30B-A3B
distributed:
  strategy: fsdp2
  tp_size: 2
  # experts over three ranks
  ep_size: 3
step_scheduler:
  local_batch_size: 2
  global_batch_size: 30
optimizer:
  _target_: torch.optim.AdamW
  lr: 1.0e-5
"""


def write(tmp_path: Path, text: str, name: str = "recipe.yaml") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["validate", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_valid_recipe_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, write(tmp_path, GOOD))
    assert code == 0
    assert ": OK: 0 error(s)" in out.splitlines()[-1]


def test_failing_recipe_exits_1_with_located_findings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, BAD)
    code, out, _ = run(capsys, path)
    assert code == 1
    assert f"{path}:8:3: error [am-r13-ep-divides-non-pp] distributed.ep_size: " in out
    assert "  AutoModel says: non_pp_size=8 must be a multiple of ep_size=3" in out
    assert "  fix: valid ep_size values here: 1, 2, 4, 8" in out
    assert f"{path}:11:3: error [am-r39-gbs-divisible] step_scheduler.global_batch_size: " in out
    assert "FAILED: 4 error(s)" in out.splitlines()[-1]  # R13, R22 (no TP plan), R26 (128 experts), R39


def test_json_format(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, write(tmp_path, BAD), "--format", "json")
    assert code == 1
    data = json.loads(out)
    assert data["ok"] is False
    by_rule = {f["rule"]: f for f in data["findings"]}
    ep = by_rule["am-r13-ep-divides-non-pp"]
    assert (ep["line"], ep["col"], ep["severity"], ep["path"]) == (8, 3, "error", "distributed.ep_size")
    assert {"rule", "severity", "path", "line", "col", "message", "hint"} <= set(ep)
    assert by_rule["am-r26-ep-divides-experts"]["line"] == 8
    assert by_rule["am-r39-gbs-divisible"]["line"] == 11


def test_json_ok_with_warnings_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, write(tmp_path, GOOD), "--nodes", "2", "--format", "json")
    data = json.loads(out)
    assert code == 0 and data["ok"] is True
    assert [f["rule"] for f in data["findings"]] == ["dist-env-timeout"]


def test_nested_key_position_and_missing_key_parent(tmp_path: Path) -> None:
    pipeline = "  dp_size: none\n  pp_size: 2\n  pipeline:\n    pp_schedule: zero_bubble\n"
    text = GOOD.replace("  dp_size: none\n", pipeline)
    report = validate_recipe(write(tmp_path, text), world_size=8)
    schedule = next(f for f in report.findings if f.rule == "am-r32-schedule-name")
    assert (schedule.line, schedule.col) == (11, 5)
    micro = next(f for f in report.findings if f.rule == "am-r18-pp-microbatches")
    assert (micro.line, micro.col) == (14, 3)  # step_scheduler.local_batch_size


def test_env_var_is_resolved_and_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AMD_TEST_TP", "4")
    monkeypatch.delenv("AMD_TEST_MISSING", raising=False)
    text = GOOD.replace("tp_size: 2", "tp_size: ${AMD_TEST_TP}").replace(
        "strategy: fsdp2", "strategy: fsdp2\n  ep_size: ${oc.env:AMD_TEST_MISSING,1}\n  cp_size: $AMD_TEST_MISSING")
    report = validate_recipe(write(tmp_path, text), world_size=8)
    [env] = [f for f in report.findings if f.rule == "am-r2-env-var"]
    assert (env.path, env.line) == ("distributed.cp_size", 8)
    assert env.automodel_message == ("Environment variable 'AMD_TEST_MISSING' is not set "
                                     "(required by '$AMD_TEST_MISSING').")
    assert env.severity == "warning"  # the job's environment may set it
    assert report.errors == []  # tp 4 from the environment divides 8; cp falls back to its default


def test_unknown_model_in_recipe_is_a_note(tmp_path: Path) -> None:
    text = GOOD.replace("meta-llama/Llama-3.1-8B", "some-org/not-a-model")
    report = validate_recipe(write(tmp_path, text), world_size=8)
    assert report.ok
    [note] = report.notes
    assert note.rule == "skipped" and "not in the catalog" in note.message and note.line == 4


def test_model_from_a_from_config_recipe(tmp_path: Path) -> None:
    text = BAD.replace("  pretrained_model_name_or_path: Qwen/Qwen3-30B-A3B\n",
                       "  config:\n    pretrained_model_name_or_path: Qwen/Qwen3-30B-A3B\n")
    report = validate_recipe(write(tmp_path, text), world_size=8)
    assert "am-r26-ep-divides-experts" in {f.rule for f in report.errors}  # 128 experts, ep 3: model was found


def test_distillation_meshes_are_judged_on_their_own_ranks(tmp_path: Path) -> None:
    text = GOOD.replace("  tp_size: 2\n  dp_size: none\n", "  dp_size: 4\n") + (
        "separate_meshes: true\nteacher_distributed:\n  dp_size: 2\n  tp_size: 2\n  ep_size: 3\n")
    report = validate_recipe(write(tmp_path, text), world_size=8)
    [error] = report.errors  # the student's 4 ranks are not "ranks left out": the teacher has the other 4
    assert (error.rule, error.path, error.line) == ("am-r13-ep-divides-non-pp", "teacher_distributed.ep_size", 18)


def test_an_unreadable_teacher_size_is_located_in_the_teacher_section(tmp_path: Path) -> None:
    from automodel_dist.errors import InputError

    text = GOOD.replace("  tp_size: 2\n  dp_size: none\n", "  dp_size: 4\n") + (
        "separate_meshes: true\nteacher_distributed:\n  dp_size: 4\n  tp_size: two\n")
    path = write(tmp_path, text)
    with pytest.raises(InputError, match="tp_size must be a positive integer") as caught:
        validate_recipe(path, world_size=8)
    assert caught.value.where == f"{path}:17:3"  # teacher_distributed.tp_size, not the student's section


BAD_INPUTS = {
    "missing file": (None, "recipe file not found"),
    "empty file": ("", "recipe is empty"),
    "yaml syntax": ("distributed:\n  tp_size: [1, 2\n", "YAML syntax error"),
    "list at top": ("- distributed\n- tp_size\n", "must be a YAML mapping"),
    "distributed is a list": ("recipe: X\ndistributed: [fsdp2]\n", "distributed must be a mapping"),
    "size of wrong type": ("recipe: X\ndistributed:\n  tp_size: two\n", "tp_size must be a positive integer"),
    "negative size": ("recipe: X\ndistributed:\n  tp_size: -2\n", "tp_size must be a positive integer"),
    "true size": ("recipe: X\ndistributed:\n  tp_size: true\n", "AutoModel passes True into the device mesh's shape"),
    "negative dp_size": ("recipe: X\ndistributed:\n  dp_size: -4\n", "dp_size must be a positive integer"),
    "zero pp microbatch": ("recipe: X\ndistributed:\n  pp_size: 2\n  pipeline:\n    pp_microbatch_size: 0\n",
                           "pp_microbatch_size must be a positive integer"),
    "batch of wrong type": ("recipe: X\ndistributed: {}\nstep_scheduler:\n  global_batch_size: [64]\n",
                            "global_batch_size must be an integer"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_exits_2_with_a_message(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text, expected = BAD_INPUTS[case]
    path = str(tmp_path / "absent.yaml") if text is None else write(tmp_path, text)
    code, out, err = run(capsys, path)
    assert code == 2
    assert out == ""
    assert expected in err
    assert "Traceback" not in err
    assert path in err  # the message names the file


def test_wrong_type_points_at_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "recipe: X\ndistributed:\n  strategy: fsdp2\n  cp_size: 1.5\n")
    code, _, err = run(capsys, path)
    assert code == 2 and f"{path}:4:3:" in err and "hint:" in err


def test_directory_path_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, str(tmp_path))
    assert code == 2 and "directory" in err and "Traceback" not in err


@pytest.mark.parametrize(("flag", "value", "expected"), [("--model", "no-such-model-xyz", "unknown model"),
                                                          ("--gpu", "tpu-v9", "tpu-v9")])
def test_unknown_preset_option_exits_2(flag: str, value: str, expected: str, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, write(tmp_path, GOOD), flag, value)
    assert code == 2 and out == "" and expected in err and "Traceback" not in err


def test_non_positive_world_is_an_input_error(tmp_path: Path) -> None:
    from automodel_dist.errors import InputError

    with pytest.raises(InputError, match="world size must be a positive integer"):
        validate_recipe(write(tmp_path, GOOD), world_size=0)


def test_render_text_block_format(tmp_path: Path) -> None:
    report = validate_recipe(write(tmp_path, BAD), world_size=8)
    text = render_report(report, "text")
    [line] = [x for x in text.splitlines() if "[am-r13-ep-divides-non-pp]" in x]
    assert line.startswith(f"{tmp_path / 'recipe.yaml'}:8:3: error [am-r13-ep-divides-non-pp] distributed.ep_size: ")
    lines = text.splitlines()
    at = lines.index(line)
    assert lines[at + 1] == "  AutoModel says: non_pp_size=8 must be a multiple of ep_size=3"
    assert lines[at + 2].startswith("  fix: valid ep_size values here: ")
    assert render_report(report, "text") == text  # deterministic


def test_subprocess_bad_input_has_no_traceback(tmp_path: Path) -> None:
    broken = write(tmp_path, "distributed:\n  tp_size: [1\n")
    proc = subprocess.run([sys.executable, "-m", "automodel_dist", "validate", broken],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "YAML syntax error" in proc.stderr and f"{broken}:" in proc.stderr
    assert "Traceback" not in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "automodel_dist", "validate", write(tmp_path, BAD, "bad.yaml"),
                           "--format", "json"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and json.loads(proc.stdout)["ok"] is False


def test_schema_issues_are_kept_unless_a_rule_already_said_it(tmp_path: Path) -> None:
    text = GOOD.replace("  tp_size: 2\n", "  tp_size: 3\n  enable_compile: sometimes\n  sequence_paralel: true\n")
    report = validate_recipe(write(tmp_path, text), world_size=8)
    rules = {(f.rule, f.path) for f in report.errors}
    assert ("am-r9-world-divisible", "distributed") in rules        # a top-level path hides nothing below it
    assert ("schema", "distributed.enable_compile") in rules         # so the schema's type error stays
    assert ("am-r3-unknown-option", "distributed.sequence_paralel") in rules
    assert ("schema", "distributed.sequence_paralel") not in rules   # the typo is reported once, by R3


def test_yaml_1_1_booleans_read_as_automodel_reads_them(tmp_path: Path) -> None:
    """AutoModel loads recipes with PyYAML (YAML 1.1): unquoted on/yes are true, quoted ones stay strings."""
    text = GOOD.replace("  dp_size: none\n", "  dp_size: none\n  enable_async_tensor_parallel: on\n")
    report = validate_recipe(write(tmp_path, text), world_size=8)
    assert [f.rule for f in report.errors] == ["am-r23-async-tp-needs-sp"]
    fixed = text.replace("  dp_size: none\n", "  dp_size: none\n  sequence_parallel: Yes\n")
    assert validate_recipe(write(tmp_path, fixed, "fixed.yaml"), world_size=8).ok
    quoted = text.replace("tensor_parallel: on\n", "tensor_parallel: 'on'\n")
    assert "am-r23-async-tp-needs-sp" not in {f.rule for f in validate_recipe(write(tmp_path, quoted, "q.yaml"),
                                                                              world_size=8).findings}


def test_diffusion_recipes_are_out_of_scope_not_rejected(tmp_path: Path) -> None:
    text = ("model:\n  pretrained_model_name_or_path: some/video-model\nstep_scheduler:\n  global_batch_size: 8\n"
            "  log_every: 2\nfsdp:\n  dp_replicate_size: 2\n  dp_size: 16\nflow_matching:\n  flow_shift: 3.0\n")
    report = validate_recipe(write(tmp_path, text), world_size=32)
    assert report.ok
    [note] = report.findings
    assert note.rule == "skipped" and "diffusion" in note.message


def test_memory_fit_remedy_is_real(tmp_path: Path) -> None:
    """With --gpu the cost model judges the fit, and the remedy it names makes the recipe fit."""
    text = ("recipe: TrainFinetuneRecipeForNextTokenPrediction\n"
            "model:\n  pretrained_model_name_or_path: Qwen/Qwen3-32B\n"
            "distributed:\n  tp_size: 2\n  cp_size: 2\n  activation_checkpointing: true\n"
            "step_scheduler:\n  global_batch_size: 16\n  local_batch_size: 2\n"
            "packed_sequence:\n  packed_sequence_size: 4096\noptimizer:\n  _target_: torch.optim.AdamW\n")
    [finding] = validate_recipe(write(tmp_path, text), world_size=8, gpu="h100-80gb").errors
    assert finding.rule == "memory-fit" and "defer_fsdp_grad_sync: false" in finding.hint
    fixed = text.replace("  activation_checkpointing: true\n",
                         "  activation_checkpointing: true\n  defer_fsdp_grad_sync: false\n")
    assert validate_recipe(write(tmp_path, fixed, "fixed.yaml"), world_size=8, gpu="h100-80gb").ok


# --- the world from the recipe's header, several recipes at once (the pre-commit hook's call) ------------

EP16 = "recipe: TrainFinetuneRecipeForNextTokenPrediction\ndistributed:\n  strategy: fsdp2\n  ep_size: 16\n" \
       "step_scheduler:\n  global_batch_size: 64\n  local_batch_size: 1\nmodel:\n  _target_: my_pkg.build_model\n" \
       "optimizer:\n  _target_: torch.optim.AdamW\n"


@pytest.mark.parametrize(("header", "flags", "ok"), [
    ("# world: 2 x 8\n", [], True),                       # 16 GPUs: ep 16 divides them
    ("", [], False),                                      # no header: one node of 8
    ("# world: 2 x 8\n", ["--nodes", "1"], False),        # flags win over the header
    ("# a comment\n#world: 4 x 4\n", [], True),           # anywhere in the opening comments
    ("seed: 1\n# world: 2 x 8\n", [], False),             # after the first key it is just a comment
    ("# world: 4 x 4\n", ["--nodes", "4"], True),        # a flag replaces its own half: 4 x 4 still
    ("# world: 2 x 16\n", ["--gpus-per-node", "8"], True),  # 2 x 8
    ("# world: 4 x 4\n", ["--gpus-per-node", "2"], False),  # 4 x 2: ep 16 does not divide 8
    ("# World: 2 x 8  # two nodes\n", [], True),          # any case, a comment after it
])
def test_validate_reads_the_world_from_the_recipe_header(tmp_path: Path, header: str, flags: list[str],
                                                         ok: bool) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text(header + EP16, encoding="utf-8")
    assert main(["validate", str(recipe), *flags]) == (0 if ok else 1)


@pytest.mark.parametrize("header", ["# world: 0 x 8\n", "# world: two nodes\n", "# world: 2x\n"])
def test_a_world_header_that_says_something_else_is_bad_input(tmp_path: Path, header: str,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text("# a recipe\n" + header + EP16, encoding="utf-8")
    assert main(["validate", str(recipe)]) == 2
    assert f"{recipe}:2:1: the `# world:` header line says" in capsys.readouterr().err


@pytest.mark.parametrize(("header", "flags", "judged"), [
    ("# world: 2 x 4\n# gpu: gb200-nvl72\n", [], True),            # the header's GPU: the dispatcher is judged
    ("# world: 2 x 4\n", [], False),                                 # no GPU: noted as unchecked
    ("# world: 2 x 4\n# gpu: gb200-nvl72\n", ["--gpu", "h100-80gb"], False),  # the flag wins
    ("# world: 2 x 4\n# gpu: gb200-nvl72  # the rack\n", [], True),   # a comment after the name
])
def test_validate_reads_the_gpu_from_the_recipe_header(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       header: str, flags: list[str], judged: bool) -> None:
    recipe = moe_recipe(tmp_path, "deepep")
    recipe.write_text(header + recipe.read_text(encoding="utf-8"), encoding="utf-8")
    main(["validate", str(recipe), *flags])
    out = capsys.readouterr().out
    assert ("moe-dispatcher-gpu" in out) is judged
    assert ("GPU rules" in out or "no GPU" in out) is (not judged and not flags)


def test_an_unknown_gpu_in_the_header_is_bad_input_at_the_file(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text("# world: 2 x 8\n# gpu: h100-80gbb\n" + EP16, encoding="utf-8")
    assert main(["validate", str(recipe)]) == 2
    err = capsys.readouterr().err
    assert "h100-80gbb" in err and f"{recipe}:2:1" in err


def test_a_compiled_recipe_validates_against_its_own_gpu(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    intent = Path(__file__).resolve().parent.parent / "examples" / "intents" / "qwen3-30b-a3b-16xh100.yaml"
    out = tmp_path / "recipe.yaml"
    assert main(["compile", str(intent), "-o", str(out)]) == 0
    assert "# gpu: h100-80gb" in out.read_text(encoding="utf-8")
    capsys.readouterr()
    assert main(["validate", str(out)]) == 0
    assert "skipped" not in capsys.readouterr().out  # world and GPU from the header: every rule judged


def test_several_recipes_are_judged_each_on_its_own(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good, bad, broken = tmp_path / "good.yaml", tmp_path / "bad.yaml", tmp_path / "broken.yaml"
    good.write_text("# world: 2 x 8\n" + EP16, encoding="utf-8")
    bad.write_text(EP16, encoding="utf-8")
    broken.write_text("distributed: [\n", encoding="utf-8")
    assert main(["validate", str(good), str(bad)]) == 1
    out = capsys.readouterr().out
    assert f"{good}: OK" in out and f"{bad}: FAILED" in out
    assert main(["validate", str(good), str(broken), str(bad)]) == 2  # the worst: a file that cannot be read
    captured = capsys.readouterr()
    assert str(broken) in captured.err and f"{bad}: FAILED" in captured.out
    assert main(["validate", str(good), str(bad), "--format", "json"]) == 1
    assert [r["ok"] for r in json.loads(capsys.readouterr().out)] == [True, False]
    assert main(["validate", str(good), str(bad), "--sbatch", str(good)]) == 2


def test_schema_needs_a_name_or_a_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema"]) == 2 and "schema --write DIR" in capsys.readouterr().err
    assert main(["schema", "recipe", "--write", str(tmp_path / "s")]) == 0
    assert [p.name for p in (tmp_path / "s").iterdir()] == ["automodel-recipe.schema.json"]
    (tmp_path / "file").write_text("", encoding="utf-8")
    assert main(["schema", "--write", str(tmp_path / "file")]) == 2
    assert "cannot write" in capsys.readouterr().err


def moe_recipe(tmp_path: Path, dispatcher: str) -> Path:
    """Qwen3-30B-A3B on 16 GPUs with EP=16 and the given MoE dispatcher."""
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        "recipe: TrainFinetuneRecipeForNextTokenPrediction\n"
        "model:\n  _target_: nemo_automodel.NeMoAutoModelForCausalLM.from_pretrained\n"
        "  pretrained_model_name_or_path: Qwen/Qwen3-30B-A3B\n"
        "  backend:\n    _target_: nemo_automodel.components.models.common.BackendConfig\n"
        f"    dispatcher: {dispatcher}\n"
        "distributed:\n  strategy: fsdp2\n  ep_size: 16\n"
        "step_scheduler:\n  global_batch_size: 64\n  local_batch_size: 1\n"
        "optimizer:\n  _target_: torch.optim.AdamW\n", encoding="utf-8")
    return recipe


def test_deepep_is_judged_against_a_gpu_only_when_one_is_given(tmp_path: Path) -> None:
    """Without --gpu the GPU is nominal (no compute capability): the dispatcher is noted as unchecked, not
    called unable to run; with a GB200 rack it is the rule's warning, with H100 nodes nothing."""
    recipe = moe_recipe(tmp_path, "deepep")

    def rules(gpu: str | None, gpus_per_node: int) -> set[str]:
        report = validate_recipe(recipe, world_size=16, gpus_per_node=gpus_per_node, gpu=gpu)
        return {f.rule for f in report.errors + report.warnings}

    assert "moe-dispatcher-gpu" not in rules(None, 8)
    assert "moe-dispatcher-gpu" not in rules("h100-80gb", 8)
    assert "moe-dispatcher-gpu" in rules("gb200-nvl72", 4)


@pytest.mark.parametrize("gpu", [None, "h100-80gb"])
def test_a_skipped_note_does_not_hide_the_schema_warning_at_its_key(tmp_path: Path, gpu: str | None) -> None:
    """The no-GPU note at model.backend.dispatcher judged nothing: an unknown dispatcher is still a warning."""
    def found(dispatcher: str) -> set[tuple[str, str, str]]:
        report = validate_recipe(moe_recipe(tmp_path, dispatcher), world_size=16, gpu=gpu)
        return {(f.rule, f.severity, f.path) for f in report.findings}

    unknown = found("hybrid_ep")
    assert ("schema", "warning", "model.backend.dispatcher") in unknown
    assert (("skipped", "note", "model.backend.dispatcher") in unknown) == (gpu is None)
    assert ("schema", "warning", "model.backend.dispatcher") not in found("hybridep")

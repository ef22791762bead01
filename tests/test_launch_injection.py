"""Nothing user-given runs in a generated launch script, and no header directive is lost (issue: shell injection).

Hostile values (newlines, `;`, `$()`, backticks, quotes, `#SBATCH` lines, U+2028/U+0085, NUL, ...) go into
every launcher field and the model name. Each value is either refused when the intent is loaded (exit 2,
naming the field's dotted key, and the launch code's own check agrees) or accepted, in which case the
generated script is run for real with stub `scontrol`/`srun`/`torchrun` on PATH: the launch must run,
each value must arrive literally where it was meant to go, the canary file an injected command would
create must never appear, and the `#SBATCH` block must hold exactly the directives the writer meant.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import tempfile
from collections import Counter
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from automodel_dist.cli import main
from automodel_dist.compiler import CompileResult, compile_intent
from automodel_dist.errors import InputError
from automodel_dist.intent import load_intent
from automodel_dist.launch import write_launch_files
from automodel_dist.launch.settings import check_launcher_values
from automodel_dist.targets.automodel.emit import emit_recipe
from automodel_dist.textsafe import UNSAFE_CHARS
from automodel_dist.yamlio import load_document

BASE = {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-80gb", "nodes": 1, "gpus_per_node": 2},
        "training": {"task": "sft", "seq_length": 2048, "global_batch_size": 16}}
CANARY = "/tmp/automodel-dist-injection-canary"  # what every injected command tries to create
ATTACKS = [f"touch {CANARY}", f"touch${{IFS}}{CANARY}", f"$(touch {CANARY})", f"`touch {CANARY}`",
           f"';touch {CANARY};'", f'";touch {CANARY};"', "#SBATCH --uid=0", "\n#SBATCH --uid=0",
           f"\ntouch {CANARY}", f";touch {CANARY}", f"&&touch {CANARY}", f"|touch {CANARY}"]
FRAGMENTS = ["\n", "\r", "\r\n", ";", "&", "|", "$(", ")", "`", "'", '"', "\\", "\u2028", "\u2029", "\u0085",
             "\x00", "\x1b[2J", "\t", " ", "%x", "${HOME}", "$HOME", "*", "~", ":", ",", "/", "-", "=", "@", "#",
             "!", "\u202e", "é", "{", "}", "<", ">", "\v", "\x7f"]
PLAIN = st.text(alphabet="abcXYZ019._-", min_size=1, max_size=4)
PIECE = st.one_of(PLAIN, st.sampled_from(FRAGMENTS), st.sampled_from(ATTACKS))
VALUE = st.tuples(st.sampled_from(["", "", "/", "/lustre/", "acct"]), st.lists(PIECE, min_size=1, max_size=4)).map(
    lambda t: t[0] + "".join(t[1]))
FIELDS = ("account", "partition", "job_name", "time", "container_image", "cache_dir", "region",
          "container_mounts", "env_value", "env_name")
SBATCH_KEYS = {"job-name", "nodes", "ntasks-per-node", "gpus-per-node", "exclusive", "account", "partition", "time",
               "output", "error", "signal"}

SCONTROL = '#!/bin/bash\n[ "$1 $2" = "show hostnames" ] || exit 2\necho node01\n'
# srun: record the arguments, then run the command in --chdir with this node's id, as srun would.
SRUN = """#!/bin/bash
printf '%s\\0' "$@" > "$RECORDS/srun.args"
while [ "${1#--}" != "$1" ]; do
    case "$1" in --chdir=*) cd "${1#--chdir=}" || exit 3 ;; esac
    shift
done
SLURM_NODEID=0 exec "$@"
"""
# torchrun: record the arguments and the environment it was started with; the launch ran.
TORCHRUN = """#!/bin/bash
printf '%s\\0' "$@" > "$RECORDS/torchrun.args"
env -0 > "$RECORDS/torchrun.env"
"""

TALLY: Counter[str] = Counter()


@cache
def _base_result() -> CompileResult:
    return compile_intent(BASE)


def _launcher(field: str, value: str) -> dict[str, Any]:
    if field == "container_mounts":
        return {"container_image": "nvcr.io/nvidia/nemo:25.11", "container_mounts": [f"/data:{value}"]}
    if field == "env_value":
        return {"env": {"FUZZ_VALUE": value}}
    if field == "env_name":
        return {"env": {value: "1"}}
    return {field: value}


def _dotted(field: str) -> str:
    return {"container_mounts": "launcher.container_mounts", "env_value": "launcher.env.FUZZ_VALUE",
            "env_name": "launcher.env"}.get(field, f"launcher.{field}")


def _stubs(folder: Path) -> dict[str, str]:
    bin_dir, records = folder / "bin", folder / "records"
    bin_dir.mkdir()
    records.mkdir()
    for name, text in (("scontrol", SCONTROL), ("srun", SRUN), ("torchrun", TORCHRUN)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(folder), "RECORDS": str(records), "LC_ALL": "C",
            "SLURM_JOB_NODELIST": "node01", "SLURM_NNODES": "1", "SLURM_NODEID": "0", "SLURM_JOB_ID": "7"}


def _records(env: dict[str, str], name: str) -> list[str]:
    path = Path(env["RECORDS"]) / name
    assert path.exists(), f"{name} missing: the launch did not run"
    return path.read_text(encoding="utf-8", errors="surrogateescape").split("\0")[:-1]


def header_block(text: str) -> list[str]:
    """The lines sbatch reads directives from: up to the first line that is neither blank nor a comment."""
    block = []
    for line in text.splitlines()[1:]:
        if line.strip() and not line.startswith("#"):
            break
        block.append(line)
    return block


def run_launch(result: Any, folder: Path) -> tuple[str, dict[str, str]]:
    """Write the launch files into `folder/run`, run the script with the stubs; (script text, environment)."""
    run_dir = folder / "run"
    (script,) = write_launch_files(result, run_dir / "recipe.yaml", "slurm")
    text = Path(script).read_text(encoding="utf-8")
    env = _stubs(folder)
    done = subprocess.run(["bash", script], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return text, env


def check_script(text: str, settings_values: dict[str, Any]) -> None:
    """Every #SBATCH directive is in the header block, each meant key once, none other; no unsafe character."""
    assert UNSAFE_CHARS.sub("", text.replace("\n", "")) == text.replace("\n", "")
    block = header_block(text)
    directives = [line for line in block if line.startswith("#SBATCH")]
    assert directives == [line for line in text.splitlines() if line.startswith("#SBATCH")]
    keys = [re.match(r"#SBATCH --([a-z-]+)(?:=(.*))?$", line).group(1) for line in directives]
    assert len(keys) == len(set(keys)) and set(keys) <= SBATCH_KEYS, keys
    assert {"time", "output", "error", "signal", "nodes", "ntasks-per-node", "job-name"} <= set(keys)
    for key in ("account", "partition", "time", "job_name"):
        if key in settings_values:
            assert f"#SBATCH --{key.replace('_', '-')}={settings_values[key]}" in directives


def _judge(field: str, value: str, folder: Path) -> None:
    launcher = _launcher(field, value)
    hostile = re.search(r"[^A-Za-z0-9._/-]", value) is not None  # anything a shell or #SBATCH line could read
    TALLY["tried"] += 1
    TALLY["hostile tried"] += hostile
    try:
        intent = load_intent({**BASE, "launcher": launcher})
    except InputError as exc:
        TALLY["rejected"] += 1
        TALLY["hostile rejected"] += hostile
        TALLY[f"{field}: rejected"] += 1
        assert exc.exit_code == 2
        assert _dotted(field) in str(exc), str(exc)
        with pytest.raises(InputError):  # the launch code's own check, from the same schema, agrees
            check_launcher_values(launcher)
        return
    TALLY["accepted"] += 1
    TALLY["hostile accepted, run quoted"] += hostile
    TALLY[f"{field}: accepted"] += 1
    result = dataclasses.replace(_base_result(), intent=intent)
    if field == "region":  # SkyPilot only: a value of the recipe's skypilot: section
        sky = load_intent({**BASE, "launcher": {**launcher, "cloud": "aws"}})
        recipe = folder / "sky" / "recipe.yaml"
        write_launch_files(dataclasses.replace(result, intent=sky), recipe, "skypilot")
        assert load_document(recipe).plain()["skypilot"]["region"] == value
        return
    text, env = run_launch(result, folder)
    check_script(text, launcher)
    torchrun_env = dict(item.split("=", 1) for item in _records(env, "torchrun.env"))
    srun_args = _records(env, "srun.args")
    if field == "env_value":
        assert torchrun_env["FUZZ_VALUE"] == value  # arrived literally: quoted, never expanded
    if field == "env_name":
        assert torchrun_env[value] == "1"
    if field == "cache_dir":
        assert torchrun_env["HF_HOME"] == value.rstrip("/") + "/huggingface" or value.strip("/") == ""
    if field == "container_image":
        assert f"--container-image={value}" in srun_args
    if field == "container_mounts":
        assert any(arg.startswith("--container-mounts=") and f"/data:{value}" in arg.split("=", 1)[1].split(",")
                   for arg in srun_args)


@settings(max_examples=500, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(field=st.sampled_from(FIELDS), value=VALUE)
def _fuzz_launcher_value(field: str, value: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        try:
            _judge(field, value, Path(tmp))
        finally:
            assert not os.path.exists(CANARY), f"injected command ran: {field}={value!r}"


def test_hostile_launcher_values_are_refused_or_quoted() -> None:
    if os.path.exists(CANARY):
        os.unlink(CANARY)
    TALLY.clear()
    _fuzz_launcher_value()
    print(f"\nlauncher fuzz: {dict(TALLY)}")
    # The fuzz exercised both ways out, including accepted values the shell would have read as code.
    assert TALLY["rejected"] > 50 and TALLY["accepted"] > 50 and TALLY["hostile accepted, run quoted"] > 10
    assert not os.path.exists(CANARY)


@settings(max_examples=60, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(name=VALUE)
def _fuzz_model_name(name: str) -> None:
    base = _base_result()
    problem = dataclasses.replace(base.problem, model=dataclasses.replace(base.problem.model, name=name))
    recipe, _ = emit_recipe(problem, base.layout, base.estimate)
    plain = load_document(recipe).plain()  # the header stayed comments: the YAML is intact, the name a value
    assert plain["model"]["pretrained_model_name_or_path"] == name
    with tempfile.TemporaryDirectory() as tmp:
        result = dataclasses.replace(base, problem=problem, yaml=recipe)
        try:
            text, _ = run_launch(result, Path(tmp))
        except InputError as exc:  # a character YAML can only carry raw (a bidi override): the writer refuses it
            assert "refusing to write the control character" in exc.message and "recipe.yaml" in exc.message
            assert not (Path(tmp) / "run" / "recipe.yaml").exists()
            TALLY["model names refused by the writer"] += 1
        else:
            check_script(text, {})
            TALLY["model names written"] += 1
    assert not os.path.exists(CANARY), f"injected command ran: model name {name!r}"


def test_hostile_model_names_stay_in_their_comments() -> None:
    TALLY.clear()
    _fuzz_model_name()
    print(f"\nmodel name fuzz: {dict(TALLY)}")
    assert TALLY["model names written"] > 20


# -- the concrete cases of the issue, through the CLI --------------------------------------------------------
INTENT = """\
model: {model}
hardware: {{gpu: h100-80gb, nodes: 2}}
training: {{task: sft, seq_length: 4096, global_batch_size: 256}}
launcher: {launcher}
"""


def _cli(tmp_path: Path, capsys: pytest.CaptureFixture[str], *, model: str = "llama-3.1-8b",
         launcher: str = "{}") -> tuple[int, str, Path]:
    intent = tmp_path / "intent.yaml"
    intent.write_text(INTENT.format(model=model, launcher=launcher))
    recipe = tmp_path / "run" / "recipe.yaml"
    code = main(["compile", str(intent), "-o", str(recipe), "--launcher", "slurm"])
    return code, capsys.readouterr().err, recipe


@pytest.mark.parametrize(("launcher", "key"), [
    ('{account: "acct\\ntouch /tmp/x"}', "launcher.account"),
    ('{account: "acct\\n#SBATCH --uid=0"}', "launcher.account"),
    ('{account: "acct\\n"}', "launcher.account"),  # Python's `$` would let a final newline through
    ('{partition: "batch;touch /tmp/x"}', "launcher.partition"),
    ('{partition: "batch\\u2028touch"}', "launcher.partition"),
    ('{job_name: "run\\u0085x"}', "launcher.job_name"),
    ('{time: "04:00:00\\n"}', "launcher.time"),
    ('{cache_dir: "/lustre/$(id)"}', "launcher.cache_dir"),
    ('{container_image: "img\\u0000x"}', "launcher.container_image"),
    ('{env: {NCCL_DEBUG: "WARN\\ntouch /tmp/x"}}', "launcher.env.NCCL_DEBUG"),
    ('{env: {"A\\n": "1"}}', "launcher.env.A"),  # a final newline in a name: `export A<newline>='1'`
])
def test_an_injected_launcher_value_is_exit_2_at_its_key(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         launcher: str, key: str) -> None:
    code, err, recipe = _cli(tmp_path, capsys, launcher=launcher)
    assert code == 2, err
    assert key in err and "hint:" in err and "Traceback" not in err
    assert re.search(r"intent\.yaml:\d+:\d+", err)  # located in the file
    assert not recipe.parent.exists()


def _run_cli_script(tmp_path: Path, recipe: Path) -> str:
    text = (recipe.parent / "launch.sbatch").read_text()
    env = _stubs(tmp_path)
    env["SLURM_NNODES"] = "2"
    done = subprocess.run(["bash", str(recipe.parent / "launch.sbatch")], env=env, capture_output=True, text=True,
                          timeout=60, check=False, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert _records(env, "torchrun.args")  # the launch ran
    return text


def test_a_model_name_with_a_newline_stays_a_comment(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    canary = tmp_path / "canary"
    name = f'"x\\ntouch {canary}\\n#SBATCH --uid=0"'
    code, err, recipe = _cli(tmp_path, capsys, model=f"{{preset: llama-3.1-8b, name: {name}}}")
    assert code == 0, err
    text = _run_cli_script(tmp_path, recipe)
    assert not canary.exists()
    check_script(text, {})
    assert f"# Launch x\\ntouch {canary}\\n#SBATCH --uid=0 (sft)" in text
    assert recipe.read_text().startswith(f"# AutoModel recipe compiled by automodel-dist: x\\ntouch {canary}")


def test_a_model_folder_with_a_newline_in_its_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    canary = tmp_path / "canary"  # a folder name holds no '/': the injected command is run from tmp_path
    folder = tmp_path / "llama\ntouch canary"
    folder.mkdir()
    shutil.copy(Path(__file__).parent / "fixtures" / "hf_configs" / "llama-3.1-8b" / "config.json", folder)
    code, err, recipe = _cli(tmp_path, capsys, model='"' + str(folder).replace("\n", "\\n") + '"')
    assert code == 0, err
    text = _run_cli_script(tmp_path, recipe)
    assert not canary.exists()
    check_script(text, {})
    assert "# Launch llama\\ntouch canary (sft)" in text
    assert "automodel-llama-touch" in text  # the job name keeps only the characters Slurm accepts


@pytest.mark.parametrize("command", ["compile", "explain"])
def test_terminal_escapes_in_a_model_name_are_printed_escaped(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                              command: str) -> None:
    intent = tmp_path / "intent.yaml"
    intent.write_text(INTENT.format(model='{preset: llama-3.1-8b, name: "a\\e]0;pwned\\ab"}', launcher="{}"))
    assert main([command, str(intent)]) == 0
    out = capsys.readouterr().out
    assert "a\\x1b]0;pwned\\x07b" in out and "\x1b" not in out and "\x07" not in out

"""The one output writer: atomic (disk full, kill -9, two writers), never onto an input, never onto a file it did
not write unless --force, and every failure names its file."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from automodel_dist import output
from automodel_dist.cli import main
from automodel_dist.errors import InputError
from automodel_dist.output import RECIPE_MARKER, Output, write_outputs

OLD = f"# {RECIPE_MARKER}: the previous compile\nrecipe: Old\n" + "# padding\n" * 500
INTENT = """\
model: llama-3.1-8b
hardware: {{gpu: h100-80gb, nodes: 2}}
training: {{task: sft, seq_length: {seq}, global_batch_size: 256}}
{extra}"""
HAND_WRITTEN_SBATCH = "#!/bin/bash\n#SBATCH --nodes=2\nsrun my-own-launch.sh\n"


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def _intent(tmp_path: Path, extra: str = "", seq: int = 4096, name: str = "intent.yaml") -> Path:
    path = tmp_path / name
    path.write_text(INTENT.format(seq=seq, extra=extra))
    return path


def _disk_full_after(limit: int, only: str | None = None):
    """A `_write_chunk` that writes `limit` bytes of a file (named like `only`, or any) and then fails: ENOSPC."""
    real = output._write_chunk

    def write(fd: int, chunk: bytes) -> None:
        if only is not None and only not in os.readlink(f"/proc/self/fd/{fd}"):
            return real(fd, chunk)
        real(fd, chunk[:limit])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    return write


def test_disk_full_leaves_the_old_file_byte_identical_and_no_temp_file(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "recipe.yaml"
    target.write_text(OLD)
    before = target.read_bytes()
    monkeypatch.setattr(output, "_write_chunk", _disk_full_after(100))
    with pytest.raises(InputError) as caught:
        write_outputs([Output(target, f"# {RECIPE_MARKER}\n" + "x: 1\n" * 10_000)])
    assert caught.value.exit_code == 2
    assert str(target) in caught.value.message and "No space left on device" in caught.value.message
    assert target.read_bytes() == before
    assert _leftovers(tmp_path) == []


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc to tell which file a write is for")
def test_disk_full_on_the_script_leaves_both_launch_files_and_names_the_script(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    intent = _intent(tmp_path)
    recipe = tmp_path / "run" / "recipe.yaml"
    assert main(["compile", str(intent), "-o", str(recipe), "--launcher", "slurm"]) == 0
    old_recipe, old_script = recipe.read_bytes(), (recipe.parent / "launch.sbatch").read_bytes()
    monkeypatch.setattr(output, "_write_chunk", _disk_full_after(10, only="launch.sbatch"))
    code = main(["compile", str(intent), "training.seq_length=8192", "-o", str(recipe), "--launcher", "slurm"])
    err = capsys.readouterr().err
    assert code == 2
    assert f"cannot write {recipe.parent / 'launch.sbatch'}: No space left on device" in err
    assert recipe.read_bytes() == old_recipe, "nothing is replaced until every file is on disk"
    assert (recipe.parent / "launch.sbatch").read_bytes() == old_script
    assert _leftovers(recipe.parent) == []


@pytest.mark.parametrize("had_script", [True, False])
def test_a_rename_failing_on_the_second_file_puts_the_first_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, had_script: bool) -> None:
    """Both files are on disk before any is renamed; if the script's rename still fails, the recipe
    already replaced goes back to its previous file: the pair is all old or all new."""
    recipe, script = tmp_path / "recipe.yaml", tmp_path / "launch.sbatch"
    recipe.write_text(f"# {RECIPE_MARKER}\nold: 1\n")
    if had_script:
        script.write_text(f"#!/bin/bash\n# {output.WRITTEN_BY_MARKER}\nold\n")
    before = {p: p.read_bytes() for p in (recipe, script) if p.exists()}
    real = os.replace

    def replace_then_fail(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        if Path(dst) == script:
            raise OSError(errno.EXDEV, os.strerror(errno.EXDEV))
        real(src, dst)

    monkeypatch.setattr(output.os, "replace", replace_then_fail)
    with pytest.raises(InputError) as caught:
        write_outputs([Output(recipe, f"# {RECIPE_MARKER}\nnew: 2\n"),
                       Output(script, f"#!/bin/bash\n# {output.WRITTEN_BY_MARKER}\nnew\n")])
    assert str(script) in caught.value.message and "previous files (if any) are unchanged" in caught.value.message
    assert {p: p.read_bytes() for p in (recipe, script) if p.exists()} == before
    assert _leftovers(tmp_path) == []


def test_two_files_replaced_together_keep_no_links_behind(tmp_path: Path) -> None:
    """The neighbour: when every rename succeeds both files are new and the kept previous files are gone."""
    recipe, script = tmp_path / "recipe.yaml", tmp_path / "launch.sbatch"
    recipe.write_text(f"# {RECIPE_MARKER}\nold: 1\n")
    write_outputs([Output(recipe, f"# {RECIPE_MARKER}\nnew: 2\n"),
                   Output(script, f"#!/bin/bash\n# {output.WRITTEN_BY_MARKER}\nnew\n")])
    assert recipe.read_text().endswith("new: 2\n") and script.read_text().endswith("new\n")
    assert _leftovers(tmp_path) == []


KILLED_WRITER = """
import os, sys, time
from pathlib import Path
from automodel_dist import output
real = output._write_chunk
def half_then_hang(fd, chunk):
    real(fd, chunk[: len(chunk) // 2])
    Path(sys.argv[2]).write_text("writing")
    time.sleep(120)
output._write_chunk = half_then_hang
output.write_outputs([output.Output(Path(sys.argv[1]), "# " + output.RECIPE_MARKER + "\\n" + "y: 2\\n" * 5000)])
"""


def test_kill_9_during_a_write_leaves_the_old_file_intact(tmp_path: Path) -> None:
    target, ready = tmp_path / "recipe.yaml", tmp_path / "ready"
    target.write_text(OLD)
    before = target.read_bytes()
    proc = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(target), str(ready)])
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.02)
        assert ready.exists(), "the writer never got to the middle of its write"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert target.read_bytes() == before
    # The half-written temporary file is all a kill leaves; the target never sees it.
    litter = _leftovers(tmp_path)
    assert len(litter) == 1 and f".{proc.pid}." in litter[0]
    # The next run writing that target removes the dead writer's litter once it is old (a live write is never old).
    output.write_outputs([output.Output(target, "# " + output.RECIPE_MARKER + "\n")])
    assert _leftovers(tmp_path) == litter
    stale = time.time() - 3600
    os.utime(tmp_path / litter[0], (stale, stale))
    output.write_outputs([output.Output(target, "# " + output.RECIPE_MARKER + "\n")])
    assert _leftovers(tmp_path) == []


def test_a_live_writers_temp_file_is_never_removed(tmp_path: Path) -> None:
    target = tmp_path / "recipe.yaml"
    live = tmp_path / f".recipe.yaml.{os.getpid()}.abc123.tmp"
    other = tmp_path / ".other.yaml.1.abc123.tmp"
    for path in (live, other):
        path.write_text("partial")
        os.utime(path, (0, 0))
    output.write_outputs([output.Output(target, "# " + output.RECIPE_MARKER + "\n")])
    assert live.exists() and other.exists()


def test_two_concurrent_writers_leave_one_whole_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "recipe.yaml"
    texts = [f"# {RECIPE_MARKER}\n" + f"writer_{i}: {i}\n" * 40_000 for i in range(2)]
    real = output._write_chunk
    turns = threading.Barrier(2)

    def in_lock_step(fd: int, chunk: bytes) -> None:  # both writers alternate chunk by chunk
        turns.wait(timeout=30)
        real(fd, chunk)

    monkeypatch.setattr(output, "_write_chunk", in_lock_step)
    errors: list[BaseException] = []

    def write(text: str) -> None:
        try:
            write_outputs([Output(target, text)])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(text,)) for text in texts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    assert target.read_text() in texts
    assert _leftovers(tmp_path) == []


def test_two_concurrent_compiles_to_one_output(tmp_path: Path) -> None:
    target = tmp_path / "recipe.yaml"
    intents = [_intent(tmp_path, seq=seq, name=f"intent{seq}.yaml") for seq in (2048, 8192)]
    cli = [sys.executable, "-m", "automodel_dist"]
    expected = []
    for n, intent in enumerate(intents):  # each compile alone, into the same folder (same $schema line)
        alone = tmp_path / f"alone{n}.yaml"
        subprocess.run([*cli, "compile", str(intent), "-o", str(alone)], check=True, capture_output=True)
        expected.append(alone.read_text())
    assert expected[0] != expected[1]
    for _ in range(3):
        procs = [subprocess.Popen([*cli, "compile", str(i), "-o", str(target)], stderr=subprocess.PIPE)
                 for i in intents]
        for proc in procs:
            _, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, err
        assert target.read_text() in expected  # one whole compile's output, never a mix
    assert _leftovers(tmp_path) == []


# -- inputs are never outputs -------------------------------------------------------------------------------
def test_o_onto_the_intent_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    intent = _intent(tmp_path)
    before = intent.read_bytes()
    assert main(["compile", str(intent), "-o", str(intent)]) == 2
    err = capsys.readouterr().err
    assert f"refusing to write {intent.resolve()}: it is an input of this run" in err
    assert intent.read_bytes() == before


@pytest.mark.parametrize("how", ["direct", "symlink", "hardlink"])
def test_o_onto_the_base_recipe_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], how: str) -> None:
    base = tmp_path / "base.yaml"
    base.write_text("recipe: TrainFinetuneRecipeForNextTokenPrediction\nstep_scheduler:\n  global_batch_size: 256\n")
    before = base.read_bytes()
    intent = _intent(tmp_path, extra="base_recipe: base.yaml\n")
    target = {"direct": base, "symlink": tmp_path / "link.yaml", "hardlink": tmp_path / "hard.yaml"}[how]
    if how == "symlink":
        target.symlink_to(base)
    elif how == "hardlink":
        os.link(base, target)
    assert main(["compile", str(intent), "-o", str(target), "--force"]) == 2  # --force never overrides this
    assert "it is an input of this run" in capsys.readouterr().err
    assert base.read_bytes() == before


def test_o_onto_the_model_config_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "model" / "config.json"
    config.parent.mkdir()
    config.write_text((Path(__file__).parent / "fixtures" / "hf_configs" / "llama-3.1-8b" / "config.json").read_text())
    intent = tmp_path / "intent.yaml"
    intent.write_text(INTENT.format(seq=4096, extra="").replace("llama-3.1-8b", "./model"))
    assert main(["compile", str(intent), "-o", str(config), "--force"]) == 2
    assert "it is an input of this run" in capsys.readouterr().err


def test_o_empty_is_bad_input_not_stdout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compile", str(_intent(tmp_path)), "-o", ""]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "-o/--output is empty" in err and "hint:" in err


def test_a_fifo_as_output_is_refused_at_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fifo = tmp_path / "out.yaml"
    os.mkfifo(fifo)
    assert main(["compile", str(_intent(tmp_path)), "-o", str(fifo), "--force"]) == 2
    assert "not a regular file" in capsys.readouterr().err


# -- what the tool wrote, it may replace; what a person wrote, only with --force ---------------------------
def test_a_recipe_it_compiled_is_overwritten(tmp_path: Path) -> None:
    intent, target = _intent(tmp_path), tmp_path / "recipe.yaml"
    assert main(["compile", str(intent), "-o", str(target)]) == 0
    assert main(["compile", str(intent), "training.seq_length=8192", "-o", str(target)]) == 0
    assert "seq 8192" in target.read_text().splitlines()[1]


def test_json_output_it_wrote_is_overwritten(tmp_path: Path) -> None:
    intent, target = _intent(tmp_path), tmp_path / "result.json"
    assert main(["compile", str(intent), "--format", "json", "-o", str(target)]) == 0
    assert target.read_text().startswith('{\n  "generated_by": "automodel-dist",')
    assert main(["compile", str(intent), "--format", "json", "-o", str(target)]) == 0


def test_a_hand_written_recipe_is_kept_without_force(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "recipe.yaml"
    target.write_text("# my tuned recipe\nrecipe: Mine\n")
    assert main(["compile", str(_intent(tmp_path)), "-o", str(target)]) == 2
    err = capsys.readouterr().err
    assert "automodel-dist did not write it" in err and "--force" in err
    assert target.read_text() == "# my tuned recipe\nrecipe: Mine\n"


def test_a_hand_written_launch_script_needs_force(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    intent = _intent(tmp_path)
    recipe = tmp_path / "run" / "recipe.yaml"
    script = recipe.parent / "launch.sbatch"
    script.parent.mkdir()
    script.write_text(HAND_WRITTEN_SBATCH)
    assert main(["compile", str(intent), "-o", str(recipe), "--launcher", "slurm"]) == 2
    err = capsys.readouterr().err
    assert f"refusing to overwrite {script}" in err and "--force" in err
    assert script.read_text() == HAND_WRITTEN_SBATCH
    assert not recipe.exists(), "nothing is written when one target is refused"
    assert main(["compile", str(intent), "-o", str(recipe), "--launcher", "slurm", "--force"]) == 0
    assert "Written by automodel-dist" in script.read_text()
    # Once the tool wrote it, recompiling replaces it without --force.
    assert main(["compile", str(intent), "training.seq_length=8192", "-o", str(recipe), "--launcher", "slurm"]) == 0


def test_a_symlinked_output_keeps_its_link(tmp_path: Path) -> None:
    real = tmp_path / "real.yaml"
    real.write_text(OLD)
    link = tmp_path / "link.yaml"
    link.symlink_to(real)
    write_outputs([Output(link, f"# {RECIPE_MARKER}\nnew: 1\n")])
    assert link.is_symlink() and real.read_text().endswith("new: 1\n")


def test_permissions_of_an_existing_file_are_kept(tmp_path: Path) -> None:
    target = tmp_path / "recipe.yaml"
    target.write_text(OLD)
    target.chmod(0o640)
    write_outputs([Output(target, f"# {RECIPE_MARKER}\n")])
    assert (target.stat().st_mode & 0o777) == 0o640


@pytest.mark.parametrize("char", ["\x1b", "\x00", "\u2028", "\u202e", "\r"])
def test_a_control_character_never_reaches_a_file(tmp_path: Path, char: str) -> None:
    target = tmp_path / "recipe.yaml"
    with pytest.raises(InputError, match="refusing to write the control character") as caught:
        write_outputs([Output(target, f"# {RECIPE_MARKER}\nname: a{char}b\n")])
    assert caught.value.where == f"{target}:2"
    assert not target.exists()


def test_the_recipe_and_the_script_cannot_share_a_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "run" / "launch.sbatch"
    assert main(["compile", str(_intent(tmp_path)), "-o", str(target), "--launcher", "slurm"]) == 2
    assert "two outputs of this run would be written to" in capsys.readouterr().err
    assert not target.exists()

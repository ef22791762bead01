"""The one writer for every file the tool produces: outputs are precious, and so are the inputs beside them.

Each file is written to a temporary file in its own folder, flushed and fsync'ed, then renamed over the
target (`os.replace`, atomic on POSIX): a full disk, a crash or a `kill -9` leaves the previous file
whole, and two runs writing one path leave one complete file, never a mix. The temporary file a killed
run left behind is removed by the next run that writes the same target. Before anything is written
the targets are checked: never an input of the same run (the intent, its base recipe, a model file; also
through a symlink or a hard link), and never an existing file the tool did not write unless `force`.
A file counts as the tool's when one of its first lines carries a marker the tool writes (the recipe
header, the "Written by" line of the launch script and the HTML report, the JSON output's `generated_by`).

Every failure is an InputError (exit 2) that names the file it failed on.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from automodel_dist.errors import InputError
from automodel_dist.limits import file_kind
from automodel_dist.textsafe import first_unsafe

RECIPE_MARKER = "AutoModel recipe compiled by automodel-dist"
WRITTEN_BY_MARKER = "Written by automodel-dist"  # the launch script's and the HTML report's first lines
JSON_MARKER = "automodel-dist"  # the value of the JSON output's first key, `generated_by`
JSON_MARKER_LINE = f'"generated_by": "{JSON_MARKER}"'
_MARKERS = (RECIPE_MARKER, WRITTEN_BY_MARKER, JSON_MARKER_LINE)
_MARKER_LINES = 8  # a marker counts only near the top, where the tool writes it
_HEAD_BYTES = 4096
_CHUNK = 1 << 16
_STALE_SECONDS = 60  # a live write takes milliseconds; older temps of dead writers are litter


@dataclass(frozen=True)
class Output:
    """One file to write: where, and its whole text."""

    path: Path
    text: str


def output_path(text: str | os.PathLike[str], *, option: str = "-o/--output") -> Path:
    """A user-given output path; an empty one is bad input (it is not a request for stdout)."""
    if not str(text).strip():
        raise InputError(f"{option} is empty", where=option,
                         hint=f"pass {option} the path of a file to write, or leave {option} out to print to stdout")
    if "\0" in str(text):
        raise InputError(f"{option} contains a NUL character", where=option, hint="pass a plain file path")
    return Path(text)


def write_outputs(outputs: Sequence[Output], *, inputs: Iterable[str | os.PathLike[str]] = (),
                  force: bool = False) -> list[Path]:
    """Write every output atomically, after checking all of them; return the paths written.

    `inputs`: the files this run read (none of them may be a target); `force`: overwrite existing files
    the tool did not write. Nothing is replaced until every file's new text is safely on disk, and a rename
    that still fails part way puts back the files this run already replaced (a recipe and its launch script
    are a pair: all old or all new).
    """
    read = [Path(p) for p in inputs]
    # A symlinked target keeps its link: the file it points to is the one replaced.
    outputs = [Output(Path(os.path.realpath(out.path)), out.text) for out in outputs]
    paths = [out.path for out in outputs]
    if len(set(paths)) < len(paths):
        twice = next(p for p in paths if paths.count(p) > 1)
        raise InputError(f"two outputs of this run would be written to {twice}", where=str(twice),
                         hint="name the recipe (-o) something other than the launch files beside it (launch.sbatch)")
    for out in outputs:
        _check_text(out)
        _check_target(out.path, read, force)
    temps: list[tuple[Path, Path]] = []
    kept: list[tuple[Path, Path | None]] = []  # (target replaced, a link to its previous file, if it had one)
    current = outputs[0].path if outputs else None
    try:
        for out in outputs:
            current = out.path
            out.path.parent.mkdir(parents=True, exist_ok=True)
            _remove_stale_temps(out.path)
            temps.append((_write_temp(out), out.path))
        for temp, target in temps:
            current = target
            previous = _keep_previous(target) if len(temps) > 1 else None
            kept.append((target, previous))
            os.replace(temp, target)
        for folder in dict.fromkeys(target.parent for _, target in temps):
            _fsync_dir(folder)
    except OSError as exc:
        _restore(kept[:-1])  # the files of this run replaced before the failure: all or none of them is new
        raise InputError(f"cannot write {current}: {exc.strerror or exc}; the previous files (if any) are unchanged",
                         where=str(current), hint="free space, or pass a path in a folder you can write to") from None
    finally:
        for temp, _ in temps:
            with contextlib.suppress(FileNotFoundError):
                temp.unlink()
        for _, previous in kept:
            if previous is not None:
                with contextlib.suppress(FileNotFoundError):
                    previous.unlink()
    return [out.path for out in outputs]


def _keep_previous(target: Path) -> Path | None:
    """A hard link to the file `target` names now (None if there is none), so a run writing several files
    can put it back when a later file of the run fails: the recipe and its launch script stay a pair."""
    if not target.exists():
        return None
    import secrets  # only when writing files: a compile to stdout does without it (and hashlib's start-up)

    link = target.parent / f"{_temp_prefix(target, os.getpid())}{secrets.token_hex(6)}.tmp"
    os.link(target, link)
    return link


def _restore(replaced: Sequence[tuple[Path, Path | None]]) -> None:
    """Undo this run's replacements: each target back to its previous file, or removed if it had none."""
    for target, previous in reversed(replaced):
        with contextlib.suppress(OSError):
            if previous is None:
                target.unlink()
            else:
                os.replace(previous, target)


def is_generated(path: Path) -> bool:
    """Does the regular file at `path` carry one of the tool's markers in its first lines?"""
    try:
        with path.open("rb") as f:
            head = f.read(_HEAD_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return False
    return any(marker in line for line in head.splitlines()[:_MARKER_LINES] for marker in _MARKERS)


def _check_text(out: Output) -> None:
    """The last line of defence: user text reaches files only through validation and escaping (textsafe)."""
    bad = first_unsafe(out.text, in_file=True)
    if bad:
        offset, char = bad
        line = out.text.count("\n", 0, offset) + 1
        raise InputError(f"refusing to write the control character {char} into {out.path} (line {line}): a value "
                         "that reached it was not checked", where=f"{out.path}:{line}",
                         hint="remove control characters from the intent's names and paths")


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def _check_target(target: Path, inputs: Sequence[Path], force: bool) -> None:
    """Refuse an input of this run, a folder or device, and (without `force`) a file the tool did not write."""
    for source in inputs:
        if _same_file(target, source):
            raise InputError(f"refusing to write {target}: it is an input of this run ({source})",
                             where=str(target), hint="write the output to another path")
    try:
        info = os.stat(target)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise InputError(f"cannot write {target}: {exc.strerror or exc}", where=str(target),
                         hint="pass a path in a folder you can write to") from None
    if stat.S_ISDIR(info.st_mode):
        raise InputError(f"cannot write {target}: it is a folder", where=str(target),
                         hint="pass the path of a file, e.g. run/recipe.yaml")
    if not stat.S_ISREG(info.st_mode):
        raise InputError(f"refusing to write {target}: it is not a regular file (it is a {file_kind(info.st_mode)})",
                         where=str(target), hint="write the output to a regular file")
    if not force and not is_generated(target):
        raise InputError(f"refusing to overwrite {target}: it exists and automodel-dist did not write it",
                         where=str(target), hint="pass --force to replace it, or write to another path")


def _write_temp(out: Output) -> Path:
    """The text in a new temporary file beside the target, on disk (fsync), with the target's permissions."""
    import tempfile  # only when writing files: a compile to stdout does without it (and shutil's start-up)

    fd, name = tempfile.mkstemp(dir=out.path.parent, prefix=_temp_prefix(out.path, os.getpid()), suffix=".tmp")
    temp = Path(name)
    try:
        data = out.text.encode("utf-8")
        for start in range(0, len(data), _CHUNK):
            _write_chunk(fd, data[start:start + _CHUNK])
        os.fsync(fd)
        os.fchmod(fd, _mode_for(out.path))
    except BaseException:
        os.close(fd)
        temp.unlink(missing_ok=True)
        raise
    os.close(fd)
    return temp


def _temp_prefix(target: Path, pid: int) -> str:
    """Temporary files name their writer's pid, so a later run can tell a dead writer's litter from a live write."""
    return f".{target.name}.{pid}."


def _remove_stale_temps(target: Path) -> None:
    """Remove temporary files for `target` left by a writer that was killed (its pid gone, the file old)."""
    pattern = re.compile(re.escape(f".{target.name}.") + r"(\d+)\.[A-Za-z0-9_]+\.tmp")
    now = time.time()
    with contextlib.suppress(OSError):
        for entry in os.scandir(target.parent):
            match = pattern.fullmatch(entry.name)
            if not match or not entry.is_file(follow_symlinks=False) or _alive(int(match.group(1))):
                continue
            with contextlib.suppress(OSError):
                if now - entry.stat(follow_symlinks=False).st_mtime > _STALE_SECONDS:
                    os.unlink(entry.path)


def _alive(pid: int) -> bool:
    """Is a process with this pid running on this machine (or not ours to signal, which still means alive)?"""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def _write_chunk(fd: int, chunk: bytes) -> None:
    """All of `chunk` to `fd` (os.write may write less than asked)."""
    view = memoryview(chunk)
    while view:
        view = view[os.write(fd, view):]


def _mode_for(target: Path) -> int:
    """An existing target's permissions, else what a plain open() would give (0o666 less the umask)."""
    try:
        return stat.S_IMODE(os.stat(target).st_mode)
    except OSError:
        mask = os.umask(0)
        os.umask(mask)
        return 0o666 & ~mask


def _fsync_dir(folder: Path) -> None:
    """Make the rename itself durable (best effort: not every file system lets a folder be fsync'ed)."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

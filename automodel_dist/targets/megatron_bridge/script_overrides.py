"""The override list a Megatron-Bridge launch script passes (its `OVERRIDES` array, as `--launcher slurm` writes
it), judged as the job will run it: Hydra's own refusals of its items, and every key where it differs from the
override set validated beside it (the job runs the script's list, not the file).

The array is read as bash reads it, without running anything: quotes (`$'...'` too), escapes, `#` comments, line
continuations, a `)` on an item's line, `declare -a`, `+=` appends and `OVERRIDES=("${OVERRIDES[@]}" ...)`, here-
document bodies skipped. A word with an expansion (`$VAR`, `${...}`, `$(...)`, a backtick) outside single quotes has
a value only the running job knows: its key is not compared. What the reader cannot follow (an array set or extended
inside a block, an element assignment, a second statement after the closing parenthesis) leaves the list unjudged,
and a note says so.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from automodel_dist.errors import InputError
from automodel_dist.findings import Finding
from automodel_dist.rules import registry as r
from automodel_dist.targets.megatron_bridge.parse import hydra_mapping, read_hydra
from automodel_dist.targets.megatron_bridge.rules import SLURM_OVERRIDES, check_appends
from automodel_dist.textsafe import one_line

_SHOWN = 5  # differing keys named one by one; the rest are counted
_MISSING = object()
_ARRAY = re.compile(r"(?:(?:declare|typeset|local|readonly)(?:\s+-[A-Za-z]+)*\s+)?OVERRIDES(\+?)=\(")
_NAME_START = re.compile(r"[A-Za-z_0-9@*#?$!-]")
_CLOSERS = {"(": ")", "{": "}"}
_ELEMENT = re.compile(r"OVERRIDES\[[^]]*\]\+?=")
_HEREDOC = re.compile(r"<<-?\s*['\"]?([A-Za-z_][A-Za-z0-9_]*)['\"]?")
_ANSI_C = {"n": "\n", "t": "\t", "\\": "\\", "'": "'", '"': '"'}


@dataclass(frozen=True)
class Word:
    """One array item: its 1-based line, the text bash passes, and whether that text is known here (`literal`:
    no expansion outside single quotes)."""

    line: int
    text: str
    literal: bool


class Unreadable(Exception):
    """The script builds its list in a way this reader does not follow (the message says how)."""


def script_items(text: str) -> list[Word] | None:
    """The `OVERRIDES` array's items once the script has set it, or None without one; Unreadable when the items
    depend on how the script runs or on a statement this reader does not follow."""
    items: list[Word] | None = None
    offsets = _line_offsets(text)
    lines = text.splitlines()
    heredoc: str | None = None
    for number, line in enumerate(lines, start=1):
        if heredoc is not None:
            heredoc = None if line.strip() == heredoc else heredoc
            continue
        opened = _HEREDOC.search(line)
        heredoc = opened.group(1) if opened else None
        if _ELEMENT.match(line.lstrip()):
            raise Unreadable(f"line {number} assigns one element of the array")
        match = _ARRAY.match(line.lstrip())
        if not match:
            continue
        if line[:1].isspace():
            raise Unreadable(f"line {number} sets it inside a block (a branch, loop or function)")
        start = offsets[number - 1] + len(line) - len(line.lstrip()) + match.end()
        words, end = _words(text, start, offsets)
        if "OVERRIDES" in text[end + 1:].split("\n", 1)[0]:
            raise Unreadable(f"the line closing the array at {_line_of(end, offsets)} changes it again")
        again = [w for w in words if not w.literal and "${OVERRIDES[" in w.text]
        words = [w for w in words if w not in again]
        items = (items or []) + words if match.group(1) or again else words
    return items


def _line_offsets(text: str) -> list[int]:
    offsets, at = [], 0
    for line in text.splitlines(keepends=True):
        offsets.append(at)
        at += len(line)
    return offsets or [0]


def _line_of(offset: int, offsets: list[int]) -> int:
    return next(n for n in range(len(offsets), 0, -1) if offsets[n - 1] <= offset)


def _words(text: str, i: int, offsets: list[int]) -> tuple[list[Word], int]:
    """The words from offset `i` to the array's unquoted `)`, and that parenthesis's offset (or the text's end)."""
    words: list[Word] = []
    buf: list[str] = []
    literal, start, quote = True, None, None

    def flush() -> None:
        nonlocal buf, literal, start
        if start is not None:
            words.append(Word(_line_of(start, offsets), "".join(buf), literal))
        buf, literal, start = [], True, None

    while i < len(text):
        c = text[i]
        if quote == "'":
            quote = None if c == "'" else quote
            buf += [] if c == "'" else [c]
            i += 1
            continue
        if quote == "$'":  # ANSI-C quoting: backslash escapes, no expansion
            if c == "'":
                quote = None
            elif c == "\\" and i + 1 < len(text):
                buf.append(_ANSI_C.get(text[i + 1], "\\" + text[i + 1]))
                i += 1
            else:
                buf.append(c)
            i += 1
            continue
        if c == "$" and quote is None and text[i + 1:i + 2] == "'":
            quote, start = "$'", i if start is None else start
            i += 2
            continue
        if c in "$`" and _expands(text, i):
            end = _expansion_end(text, i)
            start = i if start is None else start
            buf.append(text[i:end])
            literal, i = False, end
            continue
        if quote == '"':
            if c == '"':
                quote = None
            elif c == "\\" and text[i + 1:i + 2] in ('$', '`', '"', '\\', '\n'):
                buf += [] if text[i + 1] == "\n" else [text[i + 1]]
                i += 1
            else:
                buf.append(c)
            i += 1
            continue
        if c == "\\":
            if text[i + 1:i + 2] not in ("\n", ""):
                start = i if start is None else start
                buf.append(text[i + 1])
            i += 2
            continue
        if c in " \t\n":
            flush()
        elif c == "#" and start is None:
            i = text.find("\n", i)
            i = len(text) if i < 0 else i
            continue
        elif c == ")":
            flush()
            return words, i
        elif c in "'\"":
            quote, start = c, i if start is None else start
        else:
            start = i if start is None else start
            buf.append(c)
        i += 1
    flush()
    return words, len(text)


def _expands(text: str, i: int) -> bool:
    """A `$` or backtick at `i` that starts an expansion (a lone `$` is literal)."""
    return text[i] == "`" or bool(_NAME_START.match(text[i + 1:i + 2])) or text[i + 1:i + 2] in _CLOSERS


def _expansion_end(text: str, i: int) -> int:
    """Offset just past the expansion at `i`: a backtick pair, `$(...)`/`${...}` balanced, or `$NAME`."""
    if text[i] == "`":
        end = text.find("`", i + 1)
        return len(text) if end < 0 else end + 1
    opener = text[i + 1]
    if opener in _CLOSERS:
        depth, j = 0, i + 1
        while j < len(text):
            depth += (text[j] == opener) - (text[j] == _CLOSERS[opener])
            if depth == 0:
                return j + 1
            j += 1
        return len(text)
    match = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|.").match(text, i + 1)
    return match.end() if match else i + 1


def check_script_overrides(text: str, flat: Mapping[str, Any], recipe: str | None,
                           sbatch_file: str | None) -> list[Finding]:
    """Findings (at the script's lines) for the script's override list against the file's `flat` key -> value."""
    try:
        words = script_items(text)
    except Unreadable as why:
        return [replace(r.SKIPPED.finding(f"the launch script's OVERRIDES list was not judged: {why}", path="",
                                          hint="build the list in one top-level OVERRIDES=( ... ) (as compile "
                                               "--launcher slurm writes it) to have it checked"), file=sbatch_file)]
    if words is None:
        return []
    known = [w for w in words if w.literal]
    unknown_keys = {w.text.lstrip("+").split("=", 1)[0] for w in words if not w.literal}
    first = words[0].line if words else 1

    def at(finding: Finding, line: int) -> Finding:
        return replace(finding, line=line, col=1, file=sbatch_file)

    try:
        hydra = read_hydra([w.text for w in known], where="OVERRIDES")
    except InputError as err:
        return [at(SLURM_OVERRIDES.finding(f"the launch script's override list: {err}", hint=err.hint or ""), first)]
    lines = [w.line for w in known]
    out = [at(f, f.line or first) for f in check_appends(hydra, recipe, lines)]
    script = hydra_mapping([w.text for w in known])
    line_of = {item.key: line for line, item in zip(lines, hydra, strict=True)}
    differ = sorted(key for key in (script.keys() | flat.keys()) - unknown_keys
                    if script.get(key, _MISSING) != flat.get(key, _MISSING))
    for key in differ[:_SHOWN]:
        said = "leaves out" if key not in script else f"sets {one_line(repr(script[key]))} for"
        has = "has no value" if key not in flat else f"has {one_line(repr(flat[key]))}"
        finding = SLURM_OVERRIDES.finding(
            f"the launch script {said} {key}, where the override file validated with it {has}: the job runs the "
            "script's list", path=key,
            hint="recompile both together (compile --launcher slurm), or make the script's item the file's")
        out.append(at(finding, line_of.get(key, first)))
    if len(differ) > _SHOWN:
        out.append(at(SLURM_OVERRIDES.finding(f"... and {len(differ) - _SHOWN} more keys differ",
                                              hint="recompile both together"), first))
    return out

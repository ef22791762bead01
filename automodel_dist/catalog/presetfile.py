"""Reading preset files fast: a small reader for their flat shape, ruamel for anything else.

ruamel.yaml's safe loader is pure Python here (~2 ms a file), and `compile` reads every model preset
to index the Hugging Face aliases. Presets are flat `key: scalar` lines, block lists of scalars and
one-line flow lists/maps, which this reader parses in microseconds. Anything outside that shape is
handed to ruamel, so the result is always what YAML says; a test checks both agree on every preset.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from automodel_dist.errors import InputError

_KEY = re.compile(r"^([A-Za-z_][A-Za-z0-9_.-]*):(?:\s+(.*))?$")
_INT = re.compile(r"^-?(0|[1-9][0-9]*)$")
_FLOAT = re.compile(r"^-?[0-9]+\.[0-9]+$")
_RESERVED = {"true", "false", "null", "yes", "no", "on", "off", "y", "n", "~"}


class _NotFlat(Exception):
    """The text uses YAML beyond the flat preset shape: let ruamel read it."""


def _strip_comment(line: str) -> str:
    """The line without its comment: a `#` at the start or after a space, outside quotes."""
    quote = ""
    for i, char in enumerate(line):
        if quote:
            if char == "\\":
                raise _NotFlat
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i].rstrip()
    return line.rstrip()


def _scalar(text: str, *, in_flow: bool) -> Any:
    """A plain or double-quoted scalar, only where its YAML meaning is unambiguous."""
    if text in ("true", "false"):
        return text == "true"
    if text in ("null", ""):
        return None
    if _INT.match(text):
        return int(text)
    if _FLOAT.match(text):
        return float(text)
    if len(text) >= 2 and text[0] == text[-1] == '"' and not set(text[1:-1]) & {'"', "\\"}:
        return text[1:-1]
    plain = (text[0].isalpha() or text[0] == "/") and text.lower() not in _RESERVED
    plain = plain and ": " not in text and " #" not in text and not text.endswith(":")
    plain = plain and not set(text) & ({"'", '"', "`", "[", "]", "{", "}", ","} if in_flow else {"'", '"', "`"})
    if plain:
        return text
    raise _NotFlat


def _value(text: str) -> Any:
    if text.startswith("[") and text.endswith("]"):
        inner = text[1:-1].strip()
        return [_scalar(part.strip(), in_flow=True) for part in inner.split(",")] if inner else []
    if text.startswith("{") and text.endswith("}"):
        pairs = {}
        for part in text[1:-1].split(","):
            key, sep, value = part.partition(":")
            if not sep or not _KEY.match(key.strip() + ":") or key.strip() in pairs:
                raise _NotFlat
            pairs[key.strip()] = _scalar(value.strip(), in_flow=True)
        return pairs
    return _scalar(text, in_flow=False)


def _parse_flat(text: str) -> dict[str, Any]:
    data: dict[str, Any] = {}
    open_list: list[Any] | None = None
    if "\t" in text or text.startswith(("%", "---")):
        raise _NotFlat
    for raw in text.splitlines():
        line = _strip_comment(raw)
        if not line.strip():
            continue
        if line.startswith("  - ") and open_list is not None:
            open_list.append(_value(line[4:].strip()))
            continue
        match = _KEY.match(line)
        if not match or match.group(1) in data:
            raise _NotFlat
        key, value = match.group(1), match.group(2)
        if value is None:
            open_list = data[key] = []
        else:
            open_list = None
            data[key] = _value(value.strip())
    if not data or any(v == [] for v in data.values()):
        raise _NotFlat  # an empty document, and `key:` with no items, are null in YAML
    return data


def ruamel_load(text: str) -> Any:
    """What YAML itself says the text means (the reference the flat reader must agree with)."""
    from ruamel.yaml import YAML

    return YAML(typ="safe").load(text)


def load_preset_file(path: Path) -> Any:
    """A preset file's mapping; unreadable or broken files are an InputError naming the file."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read preset: {exc}", where=str(path),
                         hint="the preset files ship with the package; reinstall it") from None
    flat = parse_flat(text)
    if flat is not None:
        return flat
    from ruamel.yaml.error import YAMLError

    try:
        return ruamel_load(text)
    except YAMLError as exc:
        raise InputError(f"cannot parse preset: {exc}", where=str(path),
                         hint="the preset files ship with the package; reinstall it") from None


def parse_flat(text: str) -> dict[str, Any] | None:
    """The flat reader alone: the mapping, or None when the text needs ruamel."""
    try:
        return _parse_flat(text)
    except _NotFlat:
        return None

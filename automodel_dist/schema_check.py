"""JSON Schema checks that speak the user's language: dotted key, file line:col, what was expected, a fix.

Shared by intent loading and `validate`. jsonschema reports errors in its own terms (and anyOf failures
as a wall of branch errors); this module turns each into one `SchemaIssue`, picks the branch the user
most likely meant, and suggests the nearest allowed key for a typo.

Schemas may annotate a subschema with `x-hint` (the fix to show when it fails). A check whose failure
AutoModel survives (a backend name it does not check, a section it does not read) sits under `x-warn`: this
module reports its failures as warnings, and every other validator (editors, check-jsonschema) ignores the
unknown keyword, so none of them rejects a recipe AutoModel runs.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

from automodel_dist.findings import ERROR, WARNING
from automodel_dist.limits import is_finite_number
from automodel_dist.resources import SCHEMAS_DIR
from automodel_dist.yamlio import Document, PathKey, join_path

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import ValidationError


@dataclass(frozen=True)
class SchemaIssue:
    """One schema violation: where (key path, line, col), what is wrong, and how to fix it."""

    path: PathKey
    message: str
    hint: str
    line: int | None = None
    col: int | None = None
    severity: str = ERROR

    @property
    def dotted(self) -> str:
        return join_path(self.path) or "<top level>"


@cache
def load_schema(schema_filename: str) -> dict[str, Any]:
    """The parsed schema shipped in `data/schemas/` (cached: read once per process)."""
    return json.loads((SCHEMAS_DIR / schema_filename).read_text(encoding="utf-8"))


@cache
def ecma_pattern(pattern: str) -> re.Pattern[str]:
    """A schema `pattern` compiled with ECMA-262's meaning of `$`: the very end of the string.

    Python's `$` also matches before a final newline, so `^[a-z]+$` would accept "acct\n": the one
    difference that matters for values written into launch scripts. Each `$` outside a character class
    and not escaped becomes `\\Z`.
    """
    out, in_class, escaped = [], False, False
    for ch in pattern:
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == "[":
            in_class = True
        elif ch == "]":
            in_class = False
        elif ch == "$" and not in_class:
            ch = r"\Z"
        out.append(ch)
    return re.compile("".join(out))


def matches_pattern(pattern: str, value: str) -> bool:
    """Does `value` match the schema `pattern` (searched, as JSON Schema does, with ECMA-262's `$`)?"""
    return ecma_pattern(pattern).search(value) is not None


def _pattern_keyword(validator: Any, pattern: str, instance: Any, schema: dict[str, Any]) -> Iterator[Any]:
    from jsonschema.exceptions import ValidationError

    if validator.is_type(instance, "string") and not matches_pattern(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


@cache
def _validator(schema_filename: str) -> Draft202012Validator:
    # Imported here: jsonschema costs ~60 ms to import, which commands that check no schema (dry-run,
    # presets) should not pay. Cached: building a validator is the costly part, done once per schema.
    from jsonschema import Draft202012Validator, validators

    def warn(validator: Any, subschema: Any, instance: Any, _schema: Any) -> Iterator[ValidationError]:
        yield from validator.descend(instance, subschema)

    # JSON Schema counts 2.0 as an integer and NaN as a number; neither is one to the code that reads the
    # value (AutoModel reads a size of 2.0 as 1; range(2.0) fails; NaN passes every bound). So here an
    # integer is an int and a number is finite: `tp: 2.0` and `memory_headroom: .nan` are located errors.
    checker = Draft202012Validator.TYPE_CHECKER.redefine_many({
        "integer": lambda _checker, value: isinstance(value, int) and not isinstance(value, bool),
        "number": lambda _checker, value: is_finite_number(value),
    })
    extended = validators.extend(Draft202012Validator, {"pattern": _pattern_keyword, "x-warn": warn},
                                 type_checker=checker)
    return extended(load_schema(schema_filename))


def schema_issues(doc: Document, schema_filename: str) -> list[SchemaIssue]:
    """Every violation of `data/schemas/<schema_filename>` in `doc`, located and explained, in file order."""
    issues: dict[tuple[PathKey, str], SchemaIssue] = {}
    root = load_schema(schema_filename)
    for error in _validator(schema_filename).iter_errors(doc.plain()):
        for path, message, hint, severity in _explain(error, root):
            pos = doc.locate(path)
            issue = SchemaIssue(path, message, hint, pos[0] if pos else None, pos[1] if pos else None, severity)
            issues.setdefault((path, message), issue)
    return sorted(issues.values(), key=lambda i: (i.line or 0, i.col or 0, join_path(i.path)))


Explained = tuple[PathKey, str, str, str]


def _explain(error: ValidationError, root: dict[str, Any]) -> Iterator[Explained]:
    """One validation error -> (path, message, hint, severity) items (an unknown-keys error gives one per key)."""
    keyword = error.validator
    if keyword in ("anyOf", "oneOf"):  # the chosen branch's errors carry their own path and severity
        yield from _explain_branches(error, root)
        return
    path: PathKey = tuple(error.absolute_path)
    schema = error.schema if isinstance(error.schema, dict) else {}
    severity = _severity(error)
    custom_hint = schema.get("x-hint")
    if keyword == "additionalProperties":
        allowed = _allowed_keys(error.schema)
        for key in _unknown_keys(error.instance, error.schema):
            yield (*path, key), f"unknown key '{key}'", _key_hint(key, allowed, custom_hint), severity
        return
    if "propertyNames" in error.relative_schema_path:
        # jsonschema validates each key name against the propertyNames subschema; the instance is the key.
        key = str(error.instance)
        if "enum" in schema:
            allowed = [str(v) for v in schema["enum"]]
            yield (*path, key), f"unknown key '{key}'", _key_hint(key, allowed, custom_hint), severity
        else:
            message, hint = _explain_value(keyword, error.validator_value, key, schema)
            yield (*path, key), f"key {message}", custom_hint or hint, severity
        return
    if keyword == "required":
        missing = [k for k in error.validator_value if isinstance(error.instance, dict) and k not in error.instance]
        for key in missing:
            where = join_path(path) or "the top level"
            yield path, f"missing required key '{key}' in {where}", custom_hint or f"add `{key}:`", severity
        return
    message, hint = _explain_value(keyword, error.validator_value, error.instance, schema)
    yield path, message, custom_hint or hint, severity


def _severity(error: ValidationError) -> str:
    """`warning` for a failure under an `x-warn` check, else `error`."""
    return WARNING if "x-warn" in error.absolute_schema_path else ERROR


def _explain_branches(error: ValidationError, root: dict[str, Any]) -> Iterator[Explained]:
    """anyOf/oneOf: explain the branch the value was closest to, or list what any branch would accept."""
    by_branch: dict[int, list[ValidationError]] = {}
    for sub in error.context or ():
        by_branch.setdefault(sub.relative_schema_path[0], []).append(sub)
    branches = error.validator_value
    depth = len(error.absolute_path)
    # A branch whose failures are all deeper than this value accepted its shape (a mapping with a bad key,
    # say): that is the one the user meant.
    shaped = [errs for errs in by_branch.values() if all(len(e.absolute_path) > depth or _is_structural(e)
                                                         for e in errs)]
    # Otherwise a branch of the value's own kind that failed on a bound (minimum, minItems, ...) says most.
    same_kind = [errs for errs in by_branch.values() if all(e.validator not in _KIND_KEYWORDS for e in errs)]
    if shaped or same_kind:
        best = min(shaped or same_kind, key=lambda errs: (len(errs), -max(len(e.absolute_path) for e in errs)))
        for sub in best:
            yield from _explain(sub, root)
        return
    schema = error.schema if isinstance(error.schema, dict) else {}
    severity = _severity(error)
    expected = schema.get("x-describe") or _join_alternatives(_describe(b, root) for b in branches)
    hint = schema.get("x-hint") or f"write {expected}"
    near = _nearest_string(error.instance, branches, root)
    if near:
        hint = f"did you mean {near!r}? " + hint
    yield tuple(error.absolute_path), f"expected {expected}, got {_show(error.instance)}", hint, severity


_KIND_KEYWORDS = ("type", "const", "enum", "pattern", "anyOf", "oneOf")


def _is_structural(error: ValidationError) -> bool:
    """Failures about a mapping's keys (unknown or missing) mean its shape matched the branch."""
    return error.validator in ("additionalProperties", "required", "propertyNames") or (
        "propertyNames" in error.relative_schema_path)


def _explain_value(keyword: str, expected: Any, value: Any, schema: dict[str, Any]) -> tuple[str, str]:
    got = _show(value)
    if keyword == "type":
        wanted = _type_words(expected)
        return f"expected {wanted}, got {got}", f"write {wanted} here"
    if keyword in ("enum", "const"):
        options = expected if keyword == "enum" else [expected]
        shown = ", ".join(_show(o) for o in options)
        near = _nearest_string(value, [{"enum": options}], {})
        hint = (f"did you mean {near!r}? " if near else "") + f"use one of: {shown}"
        return f"{got} is not one of the accepted values", hint
    if keyword in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"):
        op = {"minimum": "≥", "exclusiveMinimum": ">", "maximum": "≤", "exclusiveMaximum": "<"}[keyword]
        return f"must be {op} {expected}, got {got}", f"use a value {op} {expected}"
    if keyword == "minItems":
        return f"needs at least {expected} item(s), got {got}", f"list at least {expected} value(s)"
    if keyword == "maxItems":
        return f"allows at most {expected} item(s), got {got}", f"list at most {expected} value(s)"
    if keyword == "uniqueItems":
        return f"has repeated items: {got}", "list each value once"
    if keyword == "minLength":
        return "must not be empty", "write a non-empty string"
    if keyword == "pattern" and "x-enum" in schema:
        return _explain_value("enum", schema["x-enum"], value, {})
    if keyword == "pattern":
        form = schema.get("x-format") or f"the pattern {expected}"
        return f"{got} does not have the expected form ({form})", f"write it as {form}"
    if keyword == "not":
        return f"{got} is not allowed here", "remove it or use another value"
    return f"{got} is invalid here ({keyword}: {_show(expected)})", "see the schema for what is accepted"


def _describe(schema: Any, root: dict[str, Any]) -> str | None:
    """A short phrase for what a (branch) schema accepts, for 'expected A or B' messages.

    None for branches marked `x-quiet` (the ${VAR} placeholder, quoted numbers): true but noise.
    """
    if not isinstance(schema, dict):
        return None
    if schema.get("x-quiet"):
        return None
    if "x-describe" in schema:
        return str(schema["x-describe"])
    if "$ref" in schema:
        return _describe(_resolve(root, schema["$ref"]), root)
    if "const" in schema:
        return _show(schema["const"])
    options = schema.get("enum", schema.get("x-enum"))
    if options is not None:
        return "one of " + ", ".join(_show(v) for v in options)
    kind = schema.get("type")
    if kind == "array":
        items = _describe(schema.get("items", {}), root) or "values"
        return f"a {'non-empty ' if schema.get('minItems') else ''}list of {_plural(items)}"
    if kind is not None:
        words = _type_words(kind)
        if "minimum" in schema:
            words += f" ≥ {schema['minimum']}"
        if "pattern" in schema and kind == "string":
            words += f" of the form {schema.get('x-format') or schema['pattern']}"
        return words
    branches = schema.get("anyOf", schema.get("oneOf"))
    if branches:
        return _join_alternatives(_describe(b, root) for b in branches)
    return None


def _join_alternatives(phrases: Iterable[str | None]) -> str:
    return " or ".join(dict.fromkeys(p for p in phrases if p)) or "a valid value"


def _resolve(root: dict[str, Any], ref: str) -> Any:
    node: Any = root
    for part in ref.removeprefix("#/").split("/"):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def _plural(phrase: str) -> str:
    for article in ("an ", "a "):
        if phrase.startswith(article):
            noun, _, rest = phrase[len(article):].partition(" ")
            return f"{noun}s {rest}".strip()
    return phrase


_TYPE_WORDS = {"integer": "an integer", "number": "a number", "string": "a string", "boolean": "true or false",
               "object": "a mapping", "array": "a list", "null": "null"}


def _type_words(kind: str | Sequence[str]) -> str:
    kinds = [kind] if isinstance(kind, str) else list(kind)
    return " or ".join(_TYPE_WORDS.get(k, k) for k in kinds)


def _show(value: Any) -> str:
    """A value as the user wrote it, with its YAML kind when that is the problem."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        if len(value) <= 6 and not any(isinstance(v, (dict, list)) for v in value):
            return "[" + ", ".join(_show(v) for v in value) + "]"
        return f"a list of {len(value)} item(s)"
    return str(value)


def _allowed_keys(schema: Any) -> list[str]:
    return sorted(schema.get("properties", {})) if isinstance(schema, dict) else []


def _unknown_keys(instance: Any, schema: Any) -> list[str]:
    if not isinstance(instance, dict) or not isinstance(schema, dict):
        return []
    known = set(schema.get("properties", {}))
    patterns = [re.compile(p) for p in schema.get("patternProperties", {})]
    return [str(k) for k in instance if k not in known and not any(p.search(str(k)) for p in patterns)]


def _key_hint(key: str, allowed: Iterable[str], why: str | None = None) -> str:
    allowed = [a for a in allowed if a]
    near = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
    listing = ", ".join(allowed) if len(allowed) <= 40 else ", ".join(allowed[:40]) + ", ..."
    if near:
        hint = f"did you mean '{near[0]}'? allowed keys here: {listing}"
    else:
        hint = f"remove it; allowed keys here: {listing}" if allowed else "remove it"
    return f"{hint} ({why})" if why else hint


def _nearest_string(value: Any, branches: Iterable[Any], root: dict[str, Any]) -> str | None:
    """The accepted string closest to a misspelt string value, if any is close."""
    if not isinstance(value, str):
        return None
    options = {o.lower(): o for b in branches for o in _string_options(b, root)}
    near = difflib.get_close_matches(value.lower(), list(options), n=1, cutoff=0.6)
    return options[near[0]] if near and options[near[0]] != value else None


def _string_options(schema: Any, root: dict[str, Any], depth: int = 0) -> list[str]:
    """Every literal string a schema accepts (enum, const, x-enum), through $ref and anyOf."""
    if not isinstance(schema, dict) or depth > 8:
        return []
    found = [v for v in (*schema.get("enum", []), *schema.get("x-enum", []), schema.get("const"))
             if isinstance(v, str)]
    if "$ref" in schema:
        found += _string_options(_resolve(root, schema["$ref"]), root, depth + 1)
    for branch in schema.get("anyOf", schema.get("oneOf", [])):
        found += _string_options(branch, root, depth + 1)
    return found

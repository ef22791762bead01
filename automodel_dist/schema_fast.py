"""A quick verdict on a document against a shipped JSON Schema, sure or silent, so a valid intent never
pays jsonschema's import (a large share of a whole-process compile).

`verdict` walks the keywords our schemas use and answers True (valid), False (invalid) or None (not sure:
a keyword or value it does not judge). Only a sure True skips jsonschema (`schema_check.schema_issues`);
anything else goes through jsonschema, which explains every error. It answers by the same schema file,
so the rules stay in one place; tests/test_schema_fast.py holds it to jsonschema's answer.
"""

from __future__ import annotations

from typing import Any

from automodel_dist.limits import is_finite_number

# Keywords that only annotate (editors, docs, our own explanations): no bearing on validity.
ANNOTATIONS = frozenset({
    "$schema", "$id", "$defs", "$comment", "title", "description", "examples", "default", "deprecated",
    "markdownDescription", "defaultSnippets", "doNotSuggest", "errorMessage", "patternErrorMessage",
    "label", "body", "x-hint", "x-format", "x-describe", "x-enum", "x-quiet",
})
_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,), "array": (list,), "string": (str,), "boolean": (bool,), "null": (type(None),),
}

Verdict = bool | None


def _all(verdicts: Any) -> Verdict:
    """Conjunction: False if any is surely False, else None if any is unsure, else True."""
    unsure = False
    for v in verdicts:
        if v is False:
            return False
        unsure = unsure or v is None
    return None if unsure else True


def _type_ok(kind: str, value: Any) -> Verdict:
    """Our validator's types (schema_check): an integer is an int, a number is finite."""
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return is_finite_number(value)
    allowed = _TYPES.get(kind)
    return None if allowed is None else isinstance(value, allowed)


def _same(a: Any, b: Any) -> Verdict:
    """JSON equality for scalars (True is not 1); containers are left to jsonschema."""
    if isinstance(a, dict | list) or isinstance(b, dict | list):
        return None
    return (type(a) is type(b) or (is_finite_number(a) and is_finite_number(b))) and a == b


def _resolve(root: dict[str, Any], ref: str) -> Any:
    if not ref.startswith("#/"):
        return None
    node: Any = root
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def verdict(value: Any, schema: Any, root: dict[str, Any]) -> Verdict:
    """Is `value` valid against `schema` (a subschema of `root`)? True, False, or None when unsure."""
    if schema is True or schema == {}:
        return True
    if schema is False:
        return False
    if not isinstance(schema, dict):
        return None
    results: list[Verdict] = []
    for keyword, arg in schema.items():
        if keyword in ANNOTATIONS:
            continue
        result = _keyword(keyword, arg, value, schema, root)
        if result is False:
            return False
        results.append(result)
    return _all(results)


def _keyword(keyword: str, arg: Any, value: Any, schema: dict[str, Any], root: dict[str, Any]) -> Verdict:
    from automodel_dist.schema_check import matches_pattern

    if keyword == "type":
        kinds = arg if isinstance(arg, list) else [arg]
        checks = [_type_ok(k, value) for k in kinds]
        return True if True in checks else (None if None in checks else False)
    if keyword == "$ref":
        target = _resolve(root, arg) if isinstance(arg, str) else None
        return None if target is None else verdict(value, target, root)
    if keyword in ("enum", "const"):
        options = arg if keyword == "enum" else [arg]
        checks = [_same(value, option) for option in options]
        return True if True in checks else (None if None in checks else False)
    if keyword in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        if not is_finite_number(value):
            return True
        return {"minimum": value >= arg, "maximum": value <= arg, "exclusiveMinimum": value > arg,
                "exclusiveMaximum": value < arg}[keyword]
    if keyword in ("minLength", "maxLength", "pattern"):
        if not isinstance(value, str):
            return True
        if keyword == "pattern":
            return matches_pattern(arg, value)
        return len(value) >= arg if keyword == "minLength" else len(value) <= arg
    if keyword in ("properties", "additionalProperties", "required", "propertyNames"):
        return _object_keyword(keyword, arg, value, schema, root) if isinstance(value, dict) else True
    if keyword in ("items", "minItems", "maxItems", "uniqueItems"):
        return _array_keyword(keyword, arg, value, root) if isinstance(value, list) else True
    if keyword == "anyOf":
        checks = [verdict(value, branch, root) for branch in arg]
        return True if True in checks else (None if None in checks else False)
    if keyword == "allOf" or keyword == "x-warn":  # x-warn: a failure is a warning, still an issue to report
        return _all(verdict(value, branch, root) for branch in (arg if keyword == "allOf" else [arg]))
    if keyword == "if":
        condition = verdict(value, arg, root)
        if condition is None:
            return None
        branch = schema.get("then" if condition else "else", True)
        return verdict(value, branch, root)
    if keyword in ("then", "else"):
        return True  # judged with `if`
    return None  # oneOf, not, patternProperties, format, ...: jsonschema decides


def _object_keyword(keyword: str, arg: Any, value: dict[str, Any], schema: dict[str, Any],
                    root: dict[str, Any]) -> Verdict:
    if keyword == "properties":
        return _all(verdict(value[key], sub, root) for key, sub in arg.items() if key in value)
    if keyword == "required":
        return all(key in value for key in arg)
    if keyword == "propertyNames":
        return _all(verdict(key, arg, root) for key in value)
    if "patternProperties" in schema:
        return None
    known = schema.get("properties", {})
    return _all(verdict(item, arg, root) for key, item in value.items() if key not in known)


def _array_keyword(keyword: str, arg: Any, value: list[Any], root: dict[str, Any]) -> Verdict:
    if keyword == "items":
        return _all(verdict(item, arg, root) for item in value)
    if keyword == "minItems":
        return len(value) >= arg
    if keyword == "maxItems":
        return len(value) <= arg
    if not arg:
        return True
    if any(isinstance(item, dict | list) for item in value):
        return None
    keys = [(isinstance(item, bool), item) for item in value]  # 1 and 1.0 are equal in JSON, True is not
    return len(set(keys)) == len(keys)

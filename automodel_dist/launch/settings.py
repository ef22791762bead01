"""The intent's optional `launcher:` block, read once into a typed record both launchers share.

The intent schema (`data/schemas/intent.schema.json`, `launcher`) checks every value, with its line and
column, when the intent is loaded. Its patterns are the one statement of what may reach a launch script
(Slurm's names, paths without shell or #SBATCH metacharacters, text without control characters); this
module checks them again, from the same schema, on whatever mapping it is given (a caller of
`write_launch_files` need not have loaded an intent), then applies the defaults.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from automodel_dist.errors import InputError
from automodel_dist.problem import Problem
from automodel_dist.resources import INTENT_SCHEMA
from automodel_dist.schema_check import load_schema, matches_pattern
from automodel_dist.textsafe import one_line
from automodel_dist.yamlio import to_plain

# The intent schema's documented defaults: a bounded wall time, on-demand (not spot) cloud nodes.
DEFAULT_TIME = "04:00:00"
_JOB_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class LauncherSettings:
    """Cluster-side choices the plan cannot make: who pays, where, in which container, with what cache."""

    job_name: str
    account: str | None = None
    partition: str | None = None
    time: str = DEFAULT_TIME
    container_image: str | None = None
    container_mounts: tuple[str, ...] = ()
    cache_dir: str | None = None
    env: tuple[tuple[str, str], ...] = ()
    cloud: str | None = None
    use_spot: bool = False
    region: str | None = None


def default_job_name(problem: Problem, stack: str = "automodel") -> str:
    """'<stack>-<model>-<task>' (the stack that trains: automodel, mbridge), reduced to the characters Slurm and
    SkyPilot accept everywhere."""
    model = problem.model.name.rsplit("/", 1)[-1].lower()
    return _JOB_NAME_UNSAFE.sub("-", f"{stack}-{model}-{problem.training.task}").strip("-")


def _schema_patterns() -> dict[str, dict[str, Any]]:
    """The intent schema's `launcher` properties."""
    return load_schema(INTENT_SCHEMA)["properties"]["launcher"]["properties"]


def _check_text(value: Any, schema: Mapping[str, Any], where: str) -> None:
    """An InputError at `where` unless `value` (a string, or absent) has the form the schema's pattern says."""
    pattern = schema.get("pattern")
    if pattern is None or value is None:
        return
    if not isinstance(value, str) or not matches_pattern(pattern, value):
        shown = one_line(repr(value))
        form = schema.get("x-format", pattern)
        raise InputError(f"{where}: {shown} does not have the expected form ({form})", where=where,
                         hint=f"write it as {form} (it is written into the launch script; pattern {pattern})")


def check_launcher_values(raw: Mapping[str, Any]) -> None:
    """Every string of a `launcher:` mapping against its schema pattern (an InputError names the dotted key)."""
    props = _schema_patterns()
    for key, value in raw.items():
        schema = props.get(key)
        if schema is None:
            raise InputError(f"launcher: unknown key {key!r}", where=f"launcher.{key}",
                             hint="allowed keys: " + ", ".join(props))
        if key == "container_mounts":
            for i, item in enumerate(value or ()):
                _check_text(item, schema["items"], f"launcher.container_mounts[{i}]")
        elif key == "env":
            for name, text in (value or {}).items():
                _check_text(name, schema["propertyNames"], f"launcher.env.{one_line(str(name))}")
                _check_text(text, schema["additionalProperties"], f"launcher.env.{name}")
        else:
            _check_text(value, schema, f"launcher.{key}")


def launcher_settings(block: Mapping[str, Any] | None, problem: Problem, stack: str = "automodel") -> LauncherSettings:
    """The `launcher:` mapping (None = all defaults), its values checked, with the defaults filled in (the job
    named after `stack` unless the mapping names it)."""
    raw = to_plain(block) or {}
    check_launcher_values(raw)
    cache_dir = raw.get("cache_dir")
    return LauncherSettings(
        job_name=raw.get("job_name") or default_job_name(problem, stack),
        account=raw.get("account"),
        partition=raw.get("partition"),
        time=raw.get("time") or DEFAULT_TIME,
        container_image=raw.get("container_image"),
        container_mounts=tuple(raw.get("container_mounts") or ()),
        cache_dir=cache_dir.rstrip("/") or "/" if cache_dir else None,
        env=tuple((name, str(value)) for name, value in (raw.get("env") or {}).items()),
        cloud=raw.get("cloud"),
        use_spot=bool(raw.get("use_spot")),
        region=raw.get("region"),
    )

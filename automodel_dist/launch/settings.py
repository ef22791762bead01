"""The intent's optional `launcher:` block, read once into a typed record both launchers share.

The intent schema checks the block when the intent is loaded; this module still refuses a malformed
value (an intent can also arrive as an in-memory mapping), naming the `launcher.<key>` at fault.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from automodel_dist.errors import InputError
from automodel_dist.problem import Problem
from automodel_dist.yamlio import to_plain

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SLURM_TIME = re.compile(r"^(\d+-)?\d+(:\d{1,2}){0,2}$")
_JOB_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")

_STRING_KEYS = ("account", "partition", "time", "job_name", "container_image", "cache_dir", "cloud", "region")
KNOWN_KEYS = (*_STRING_KEYS, "container_mounts", "env", "use_spot")
# The intent schema's documented defaults: a bounded wall time, on-demand (not spot) cloud nodes.
DEFAULT_TIME = "04:00:00"


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


def default_job_name(problem: Problem) -> str:
    """'automodel-<model>-<task>', reduced to the characters Slurm and SkyPilot accept everywhere."""
    model = problem.model.name.rsplit("/", 1)[-1].lower()
    return _JOB_NAME_UNSAFE.sub("-", f"automodel-{model}-{problem.training.task}").strip("-")


def _fail(key: str, message: str, hint: str) -> InputError:
    return InputError(message, where=f"launcher.{key}", hint=hint)


def launcher_settings(block: Mapping[str, Any] | None, problem: Problem) -> LauncherSettings:
    """Read the intent's `launcher:` mapping (None = all defaults)."""
    raw = to_plain(block) if block is not None else {}
    if not isinstance(raw, dict):
        raise _fail("", "the launcher block must be a mapping", "write `launcher:` followed by `key: value` lines")
    unknown = sorted(set(raw) - set(KNOWN_KEYS))
    if unknown:
        raise _fail(unknown[0], f"unknown launcher setting {unknown[0]!r}", f"known settings: {', '.join(KNOWN_KEYS)}")
    for key in _STRING_KEYS:
        if raw.get(key) is not None and (not isinstance(raw[key], str) or not raw[key].strip()):
            raise _fail(key, f"expected a non-empty string, got {raw[key]!r}", "quote the value")
    if raw.get("time") is not None and not _SLURM_TIME.match(raw["time"]):
        raise _fail("time", f"{raw['time']!r} is not a Slurm time limit",
                    "write minutes, HH:MM:SS or D-HH:MM:SS, e.g. \"04:00:00\"")
    if raw.get("job_name") is not None and _JOB_NAME_UNSAFE.search(raw["job_name"]):
        raise _fail("job_name", f"job name {raw['job_name']!r} has characters other than letters, digits, '.', "
                    "'_' and '-'", "use a name like qwen3-30b-sft")
    mounts = raw.get("container_mounts") or []
    if not isinstance(mounts, list) or not all(isinstance(m, str) and _is_mount(m) for m in mounts):
        raise _fail("container_mounts", f"expected a list of \"src:dst\" strings, got {mounts!r}",
                    "write e.g. [\"/lustre/data:/data\"]: absolute source and destination, no commas")
    env = raw.get("env") or {}
    if not isinstance(env, dict):
        raise _fail("env", f"expected a mapping of variable names to values, got {env!r}", "write env: {NAME: value}")
    for name, value in env.items():
        if not isinstance(name, str) or not _ENV_NAME.match(name):
            raise _fail(f"env.{name}", f"{name!r} is not an environment variable name", "use letters, digits and _")
        if isinstance(value, (dict, list)) or value is None:
            raise _fail(f"env.{name}", f"expected a scalar value, got {value!r}", "write a string or a number")
    use_spot = raw.get("use_spot")
    if use_spot is not None and not isinstance(use_spot, bool):
        raise _fail("use_spot", f"expected true or false, got {use_spot!r}", "write use_spot: false")
    return LauncherSettings(
        job_name=raw.get("job_name") or default_job_name(problem),
        account=raw.get("account"),
        partition=raw.get("partition"),
        time=raw.get("time") or DEFAULT_TIME,
        container_image=raw.get("container_image"),
        container_mounts=tuple(mounts),
        cache_dir=raw["cache_dir"].rstrip("/") or "/" if raw.get("cache_dir") else None,
        env=tuple((name, _env_text(value)) for name, value in env.items()),
        cloud=raw.get("cloud"),
        use_spot=bool(use_spot),
        region=raw.get("region"),
    )


def _is_mount(text: str) -> bool:
    parts = text.split(":")
    return len(parts) in (2, 3) and all(p.startswith("/") for p in parts[:2]) and "," not in text


def _env_text(value: object) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)

"""The intent's optional `launcher:` block, read once into a typed record both launchers share.

The intent schema (`data/schemas/intent.schema.json`, `launcher`) checks every value, with its line and
column, when the intent is loaded; this module only applies the defaults.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from automodel_dist.problem import Problem
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


def default_job_name(problem: Problem) -> str:
    """'automodel-<model>-<task>', reduced to the characters Slurm and SkyPilot accept everywhere."""
    model = problem.model.name.rsplit("/", 1)[-1].lower()
    return _JOB_NAME_UNSAFE.sub("-", f"automodel-{model}-{problem.training.task}").strip("-")


def launcher_settings(block: Mapping[str, Any] | None, problem: Problem) -> LauncherSettings:
    """The schema-checked `launcher:` mapping (None = all defaults) with the defaults filled in."""
    raw = to_plain(block) or {}
    cache_dir = raw.get("cache_dir")
    return LauncherSettings(
        job_name=raw.get("job_name") or default_job_name(problem),
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

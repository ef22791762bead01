"""Whether a recipe's `_target_` (or `*_fn`) path resolves in AutoModel 0.7.0, judged without importing it.

AutoModel resolves every such path while it loads the config (components/config/loader.py `_resolve_target`:
the longest importable module prefix, then getattr for each remaining part), so a misspelled one ends the run
before anything else with an ImportError. data/automodel/targets.json (scripts/automodel_targets.py) holds
nemo_automodel's modules and the public names each defines, the torch and torchdata modules recipes name
optimizers and loaders from, and the members of AutoModel's auto classes. Paths elsewhere (transformers, a
user's own package) are not judged.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

from automodel_dist.catalog.fields import did_you_mean
from automodel_dist.resources import DATA_DIR


@cache
def _index() -> dict[str, Any]:
    return json.loads((DATA_DIR / "automodel" / "targets.json").read_text(encoding="utf-8"))


@cache
def _deepest_module() -> int:
    return max(name.count(".") + 1 for name in _index()["modules"])


def unresolved(path: str) -> str | None:
    """What AutoModel 0.7.0 cannot resolve in a dotted `path` (with a did-you-mean), or None: it resolves, or it
    lies outside what the index knows."""
    index = _index()
    modules, members = index["modules"], index["members"]
    parts = path.split(".")
    deepest = min(len(parts), _deepest_module())  # no module path is longer: a long path costs no more
    known = next((i for i in range(deepest, 0, -1) if ".".join(parts[:i]) in modules), 0)
    if not known or known == len(parts):
        return None
    module = ".".join(parts[:known])
    names = modules[module]
    name = parts[known]
    if name not in names:
        children = sorted({m.rsplit(".", 1)[1] for m in modules if m.rpartition(".")[0] == module} | set(names))
        return f"{module} has no {name[:80]!r}{did_you_mean(name, children)}"
    owner = f"{module}.{name}"
    if known + 1 < len(parts) and owner in members and parts[known + 1] not in members[owner]:
        member = parts[known + 1]
        return f"{owner} has no {member!r}{did_you_mean(member, members[owner])}"
    return None

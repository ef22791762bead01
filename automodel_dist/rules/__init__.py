"""One set of rules: every legality check lives here once, with an id, a message, a hint and a recipe path.

The planner prunes with `check_layout`; `validate` judges recipes with it plus `rules.recipe.check_recipe`.
`RULES` is the registry (id -> `Rule` metadata: severity, path, AutoModel R-number, what it needs).
"""

from __future__ import annotations

from automodel_dist.rules.layout import check_layout
from automodel_dist.rules.registry import RULES, Rule

__all__ = ["RULES", "Rule", "check_layout"]

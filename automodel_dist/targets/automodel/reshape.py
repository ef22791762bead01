"""An intent's model reshaped from the checkpoint its recipe loads (`model: {preset: X, num_layers: 16}`): the
Hugging Face config keys the recipe passes so AutoModel builds the architecture the plan is for.

The keys are the ones `recipe_model` reads back (its HF_OVERRIDES table, so `validate` judges the model the
recipe builds), plus `layer_types`, which transformers derives from the layer counts. A pretrained run may only
drop layers: other changes reshape weights the checkpoint holds (transformers refuses mismatched shapes, and added
layers would start random), so they need `training.init: from_scratch`.
"""

from __future__ import annotations

from typing import Any

from automodel_dist.catalog.hf_export import hf_config_dict
from automodel_dist.catalog.models import resolve_model
from automodel_dist.catalog.specs import architecture_changes
from automodel_dist.errors import InputError
from automodel_dist.problem import Problem
from automodel_dist.targets.automodel.recipe_model import HF_OVERRIDES

_DERIVED = frozenset({"layer_types"})  # transformers' per-layer list, rebuilt from the layer counts
_LAYER_COUNT = frozenset({"num_hidden_layers", "layer_types"})


def reshaping(problem: Problem, checkpoint: str, where: str) -> dict[str, Any]:
    """The config keys (and values) where the intent's model differs from what `checkpoint` builds as it is; {} when
    they agree or the checkpoint is one this tool cannot read. InputError at `where` for a change a recipe cannot
    carry."""
    try:
        named = resolve_model(checkpoint)
    except InputError:
        return {}
    changed = architecture_changes(problem.model, named)
    if not changed:
        return {}
    ours, theirs = hf_config_dict(problem.model), hf_config_dict(named)
    keys = {key: value for key, value in ours.items() if theirs.get(key) != value}
    unwritable = sorted(key for key in keys if key not in HF_OVERRIDES and key not in _DERIVED)
    if unwritable:
        raise InputError(f"the intent reshapes {named.name} ({', '.join(changed)}; the checkpoint's in brackets), and "
                         f"{', '.join(unwritable)} is not a config key a recipe can pass for it",
                         where=where, hint="change only sizes and counts (layers, widths, heads, experts), or give "
                                           "the model's own config.json")
    dropped = keys.get("num_hidden_layers", named.num_layers) < named.num_layers
    if problem.training.init != "from_scratch" and (set(keys) - _LAYER_COUNT or not dropped):
        raise InputError(f"the intent reshapes {named.name} ({', '.join(changed)}; the checkpoint's in brackets), but "
                         "it starts from the checkpoint's weights, whose shapes that changes: only fewer layers load",
                         where=where, hint="set training.init: from_scratch to train the reshaped architecture from "
                                           "random weights, or drop the changes")
    return keys

"""An intent's model reshaped from the checkpoint its recipe loads (`model: {preset: X, num_layers: 16}`): the
Hugging Face config keys the recipe passes so AutoModel builds the architecture the plan is for.

The keys are the ones `recipe_model` reads back (its HF_OVERRIDES table: sizes and counts), and a reshape is
written only when reading those keys back gives the intent's model: one they cannot carry (a flag such as
qk_norm, shared experts, a layer mix other than transformers derives from the layer count) is refused rather than
dropped. A pretrained run may only drop layers: other changes reshape weights the checkpoint holds (transformers
refuses mismatched shapes, and added layers would start random), so they need `training.init: from_scratch`.
"""

from __future__ import annotations

from typing import Any

from automodel_dist.catalog.models import resolve_model
from automodel_dist.catalog.specs import architecture_changes
from automodel_dist.errors import InputError
from automodel_dist.problem import Problem


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
    # imported here: every compile asks, and only a reshaped model needs them
    from automodel_dist.catalog.hf_export import hf_config_dict
    from automodel_dist.targets.automodel.recipe_model import HF_OVERRIDES, recipe_model

    theirs = hf_config_dict(named)
    keys = {key: value for key, value in hf_config_dict(problem.model).items()
            if key in HF_OVERRIDES and theirs.get(key) != value}
    read = recipe_model({"model": {"pretrained_model_name_or_path": checkpoint, **keys}}).spec  # as validate reads it
    left = architecture_changes(problem.model, read) if read is not None else changed
    if left:
        raise InputError(f"the intent reshapes {named.name} ({', '.join(changed)}; the checkpoint's in brackets), and "
                         f"a recipe's config keys cannot carry {', '.join(left)} (as the keys would build it, in "
                         "brackets)", where=where,
                         hint="change only sizes and counts (layers, widths, heads, experts) and keep the layer mix "
                              "the layer count gives, or give the model's own config.json")
    dropped = keys.get("num_hidden_layers", named.num_layers) < named.num_layers
    if problem.training.init != "from_scratch" and (set(keys) != {"num_hidden_layers"} or not dropped):
        raise InputError(f"the intent reshapes {named.name} ({', '.join(changed)}; the checkpoint's in brackets), but "
                         "it starts from the checkpoint's weights, whose shapes that changes: only fewer layers load",
                         where=where, hint="set training.init: from_scratch to train the reshaped architecture from "
                                           "random weights, or drop the changes")
    return keys

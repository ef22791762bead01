"""Rewrite automodel_dist/data/megatron_bridge/config_fields.json: the field names of every Megatron-Bridge recipe
function's ConfigContainer the target knows (recipes.RECIPES), its values at the keys the target models
(overrides.KEYS: what an override set that leaves a key out runs with) and the model facts it reads beside them
(MODEL_FACTS), what its Hydra overrides see, the name of every recipe function Megatron-Bridge exports (so a typo'd
one is told from one the target does not know), and the fields of every named mixed-precision recipe
(fields.PRECISION_FIELDS), read from the installed megatron-bridge 0.6.2 by building each recipe in the test oracle's
venv (tests/mbridge_oracle.py; tests/test_mbridge_fields_oracle.py checks the file against it).

    .venv/bin/python scripts/mbridge_config_fields.py [--check]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from automodel_dist.output import JSON_MARKER, Output, write_outputs
from automodel_dist.targets.megatron_bridge.fields import ALL_RECIPES, FIELDS_FILE, PRECISION_FIELDS, SOURCE
from automodel_dist.targets.megatron_bridge.overrides import KEYS
from automodel_dist.targets.megatron_bridge.recipes import RECIPES

ROOT = Path(__file__).resolve().parent.parent
# Values the recipe sets by what the machine has, not recorded: without Transformer Engine or APEX (the oracle's
# CPU) the model provider turns gradient_accumulation_fusion off; on a GPU node it stays on.
HOST_DEPENDENT = {"model.gradient_accumulation_fusion"}
# Values no override set writes that the target reads from the recipe: the vocabulary padding its bridge sets
# (DeepSeek-V3's and Kimi-K2's 1280; the others' largest power of two up to 128 dividing the vocabulary), which
# Megatron-Bridge's FLOP count pads the output head with (targets/megatron_bridge/flops.py); the loss kernel, which
# decides the bytes per logit alive at the loss (choose.loss_logit_bytes).
MODEL_FACTS = {"model.make_vocab_size_divisible_by", "model.cross_entropy_loss_fusion",
               "model.cross_entropy_fusion_impl"}
sys.path.insert(0, str(ROOT / "tests"))


def merge(trees: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """One file: each recipe's root fields, and the classes they reach (a field that holds a dataclass in any
    recipe names its class; a class's fields are the same in every recipe); each recipe's values at the target's
    keys; and what its Hydra overrides see: the fields left out, the None leaves (those None in every recipe once,
    under ALL_RECIPES)."""
    classes: dict[str, dict[str, Any]] = {}
    for tree in trees.values():
        for name, kind in tree["classes"].items():
            known = classes.setdefault(name, {"target": kind["target"], "fields": {}, "required": kind["required"]})
            assert (known["target"], known["required"]) == (kind["target"], kind["required"]), f"two classes {name}"
            for field, value in kind["fields"].items():
                if known["fields"].get(field) is None:
                    known["fields"][field] = value
    unset = {recipe: set(trees[recipe]["hydra"]["unset"]) for recipe in trees}
    everywhere = set.intersection(*unset.values())
    return {"generated_by": JSON_MARKER, "script": "scripts/mbridge_config_fields.py", "source": SOURCE,
            "recipes": {recipe: trees[recipe]["root"] for recipe in sorted(trees)},
            "values": {recipe: trees[recipe]["values"] for recipe in sorted(trees)},
            "hydra": {"excluded": {recipe: trees[recipe]["hydra"]["excluded"] for recipe in sorted(trees)},
                      "unset": {ALL_RECIPES: sorted(everywhere),
                                **{recipe: sorted(unset[recipe] - everywhere) for recipe in sorted(trees)}}},
            "classes": {name: {"target": kind["target"], "fields": dict(sorted(kind["fields"].items())),
                               "required": kind["required"]}
                        for name, kind in sorted(classes.items())}}


def read_installed() -> dict[str, Any]:
    from mbridge_oracle import Oracle

    oracle = Oracle()
    try:
        known = sorted(r.function for r in RECIPES.values())
        data = merge(oracle.fields(known, sorted({key.path for key in KEYS} - HOST_DEPENDENT | MODEL_FACTS)))
        return {**data, "precisions": oracle.precisions(list(PRECISION_FIELDS)), "functions": oracle.functions()}
    finally:
        oracle.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report drift; exit 1 if any")
    args = parser.parse_args()
    text = json.dumps(read_installed(), indent=1) + "\n"
    if FIELDS_FILE.exists() and FIELDS_FILE.read_text(encoding="utf-8") == text:
        return 0
    if args.check:
        print(f"drifted: {FIELDS_FILE.relative_to(ROOT)}")
        return 1
    write_outputs([Output(FIELDS_FILE, text)])
    print(f"wrote: {FIELDS_FILE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

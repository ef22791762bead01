"""Where the shipped data (presets, schemas) lives: next to the package in the source tree."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PRESETS_DIR = ROOT / "presets"
SCHEMAS_DIR = ROOT / "schemas"
INTENT_SCHEMA = "intent.schema.json"
RECIPE_SCHEMA = "automodel-recipe.schema.json"

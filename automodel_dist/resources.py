"""Where the shipped data (presets, schemas) lives: inside the package, found with importlib.resources.

They ship as package data (`automodel_dist/data/`), so a wheel or a plain `pip install .` carries them and
the CLI works from any folder. pip installs a wheel unpacked, so the data is a real folder on disk: the
catalogs glob it, and `automodel-dist schema --write` and editors can be pointed at its files.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

DATA_DIR = Path(str(files("automodel_dist") / "data"))
PRESETS_DIR = DATA_DIR / "presets"
SCHEMAS_DIR = DATA_DIR / "schemas"
INTENT_SCHEMA = "intent.schema.json"
RECIPE_SCHEMA = "automodel-recipe.schema.json"

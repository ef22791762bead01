"""Where the shipped data (presets, schemas) lives: inside the package, beside this module.

They ship as package data (`automodel_dist/data/`), so a wheel or a plain `pip install .` carries them and
the CLI works from any folder. pip installs a wheel unpacked, so the data is a real folder on disk: the
catalogs glob it, and `automodel-dist schema --write` and editors can be pointed at its files. (The package's
own folder, not importlib.resources: that one imports tempfile, zipfile and shutil, a tenth of a compile's
start-up, to find the same folder.)
"""

from __future__ import annotations

from pathlib import Path

DATA_DIR = Path(__file__).parent / "data"
PRESETS_DIR = DATA_DIR / "presets"
SCHEMAS_DIR = DATA_DIR / "schemas"
INTENT_SCHEMA = "intent.schema.json"
RECIPE_SCHEMA = "automodel-recipe.schema.json"

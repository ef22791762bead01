"""The shipped schemas in another validator: check-jsonschema with its default settings.

Its defaults check `format` and `regex` in the ECMA-262 (unicode) dialect editors use, and know nothing of
our `x-` keywords, so this is how an editor or a CI hook outside automodel-dist sees the schemas: valid
draft 2020-12, accepting every shipped example and every valid fixture, rejecting every invalid one.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from recipe_fixtures import INVALID, VALID

from automodel_dist.resources import INTENT_SCHEMA, RECIPE_SCHEMA, SCHEMAS_DIR

ROOT = Path(__file__).resolve().parent.parent
INTENTS = sorted((ROOT / "examples" / "intents").glob("*.yaml"))
RECIPES = sorted((ROOT / "examples" / "recipes").glob("*.yaml"))
# YAML with a repeated key: check-jsonschema's parser refuses it outright (validate reports it as a finding).
UNPARSABLE = {"qwen3_moe_30b_duplicate_key_ep8"}


def check_jsonschema(*args: str | Path) -> dict:
    """check-jsonschema's JSON report (status, errors, parse_errors), run with its default settings."""
    done = subprocess.run([sys.executable, "-m", "check_jsonschema", "-o", "json", *map(str, args)],
                          capture_output=True, text=True, timeout=300)
    assert done.stdout, done.stderr
    return json.loads(done.stdout)


def test_both_schemas_pass_the_metaschema_check_with_ecma_regexes() -> None:
    report = check_jsonschema("--check-metaschema", SCHEMAS_DIR / INTENT_SCHEMA, SCHEMAS_DIR / RECIPE_SCHEMA)
    assert report["status"] == "ok", report["errors"]


def test_every_example_intent_passes() -> None:
    report = check_jsonschema("--schemafile", SCHEMAS_DIR / INTENT_SCHEMA, *INTENTS)
    assert len(INTENTS) >= 12 and report["status"] == "ok", report["errors"]


def test_every_compiled_example_recipe_and_valid_fixture_passes() -> None:
    files = RECIPES + [p for p in VALID if p.stem not in UNPARSABLE]
    report = check_jsonschema("--schemafile", SCHEMAS_DIR / RECIPE_SCHEMA, *files)
    assert len(RECIPES) >= 12 and report["status"] == "ok", report["errors"]


def test_every_invalid_fixture_is_rejected() -> None:
    report = check_jsonschema("--schemafile", SCHEMAS_DIR / RECIPE_SCHEMA, *INVALID)
    assert {Path(e["filename"]).name for e in report["errors"]} == {p.name for p in INVALID}

"""Rewrite examples/recipes/<name>.yaml from examples/intents/<name>.yaml (tests/test_examples.py checks them).

    .venv/bin/python scripts/regen_examples.py [--check]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from automodel_dist.compiler import compile_intent
from automodel_dist.output import Output, write_outputs

ROOT = Path(__file__).resolve().parent.parent
INTENTS = ROOT / "examples" / "intents"
RECIPES = ROOT / "examples" / "recipes"


def compiled_examples() -> dict[str, str]:
    """Recipe file name -> the YAML its intent compiles to now."""
    return {f"{intent.stem}.yaml": compile_intent(intent).yaml for intent in sorted(INTENTS.glob("*.yaml"))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report drift; exit 1 if any")
    args = parser.parse_args()
    drift = []
    RECIPES.mkdir(parents=True, exist_ok=True)
    for name, text in compiled_examples().items():
        path = RECIPES / name
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            drift.append(name)
            if not args.check:  # atomically, and never over a hand-written file
                write_outputs([Output(path, text)], inputs=[INTENTS / name])
    for name in drift:
        print(("drifted: " if args.check else "wrote: ") + f"examples/recipes/{name}")
    return 1 if args.check and drift else 0


if __name__ == "__main__":
    sys.exit(main())

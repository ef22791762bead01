#!/usr/bin/env bash
# Set up, then compile a shipped example intent to run/recipe.yaml and explain the layout it chose.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-env.sh
INTENT=${1:-examples/intents/qwen3-30b-a3b-16xh100.yaml}
mkdir -p run
.venv/bin/automodel-dist compile "$INTENT" -o run/recipe.yaml
.venv/bin/automodel-dist explain "$INTENT" --top 5

#!/usr/bin/env bash
# Set up, then run the whole test suite (including the AutoModel mesh-builder oracle tests) and ruff.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-env.sh
.venv/bin/ruff check automodel_dist tests benchmarks
.venv/bin/python -m pytest -n 2 "$@"

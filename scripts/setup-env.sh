#!/usr/bin/env bash
# Create .venv with everything automodel-dist and its tests need. Idempotent.
# torch 2.13.0 (CPU) goes in first so nothing pulls a CUDA build; NeMo AutoModel 0.7.0 is installed
# with --no-deps as the test oracle for device meshes (never a runtime dependency); .venv-mb holds
# Megatron-Bridge, the megatron-bridge target's oracle.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
PIP=".venv/bin/pip"
if ! .venv/bin/python -c 'import torch, sys; sys.exit(0 if torch.__version__.startswith("2.13.0") else 1)' 2>/dev/null; then
  $PIP install --quiet --disable-pip-version-check torch==2.13.0
fi
$PIP install --quiet --disable-pip-version-check -e ".[dryrun,test]"
if ! .venv/bin/python -c 'import nemo_automodel' 2>/dev/null; then
  $PIP install --quiet --disable-pip-version-check --no-deps nemo-automodel==0.7.0
fi
# Megatron-Bridge 0.6.2 + Megatron-Core 0.19.2 in their own venv: the megatron-bridge target's test oracle.
bash scripts/setup-mbridge-oracle.sh
if ! command -v shellcheck >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1; then
    (apt-get install -y -qq shellcheck >/dev/null 2>&1 || (apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq shellcheck >/dev/null 2>&1)) \
      || echo "warning: could not install shellcheck" >&2
  fi
fi

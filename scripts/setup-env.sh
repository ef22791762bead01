#!/usr/bin/env bash
# Create .venv with everything automodel-dist and its tests need. Idempotent.
# torch 2.13.0 (CPU) goes in first so nothing pulls a CUDA build; NeMo AutoModel 0.7.0 is installed
# with --no-deps as the test oracle for device meshes (never a runtime dependency).
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
# Debian packages the tests use: shellcheck (launch scripts) and chromium (the HTML report, rendered headless).
for tool in shellcheck chromium; do
  if ! command -v "$tool" >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    (apt-get install -y -qq "$tool" >/dev/null 2>&1 || (apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq "$tool" >/dev/null 2>&1)) \
      || echo "warning: could not install $tool" >&2
  fi
done

#!/usr/bin/env bash
# Create .venv with everything automodel-dist and its tests need. Idempotent.
# torch 2.13.0 (CPU) goes in first so nothing pulls a CUDA build; then the package with its `oracle` extra:
# NeMo AutoModel 0.7.0 with its full dependency set (transformers and the rest, ~2 GB, a few minutes), the
# test oracle for meshes and for `dry-run --model`. triton is uninstalled: AutoModel 0.7.0's LoRA kernel
# module fails to import under triton 3.9 (an autotune key naming no argument), and nothing here needs it.
# .venv-mb holds Megatron-Bridge, the megatron-bridge target's oracle (scripts/setup-mbridge-oracle.sh).
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
if ! .venv/bin/python -c 'import nemo_automodel, transformers' 2>/dev/null; then  # once: it would re-pull triton
  $PIP install --quiet --disable-pip-version-check -e ".[dryrun,test,oracle]" -c <(echo "torch==2.13.0")
fi
if .venv/bin/python -c 'import triton' 2>/dev/null; then
  $PIP uninstall --quiet --disable-pip-version-check -y triton
fi
# Megatron-Bridge 0.6.2 + Megatron-Core 0.19.2 in their own venv: the megatron-bridge target's test oracle.
bash scripts/setup-mbridge-oracle.sh
# The real YAML language server, for the editor tests (tests/test_editor.py), into ./node_modules (gitignored).
YLS_VERSION=1.25.0
if command -v npm >/dev/null 2>&1 && ! grep -qs "\"version\": \"$YLS_VERSION\"" node_modules/yaml-language-server/package.json; then
  npm install --silent --no-save --no-package-lock --no-audit --no-fund --prefix "$PWD" "yaml-language-server@$YLS_VERSION" \
    || echo "warning: could not install yaml-language-server (the editor tests will fail)" >&2
fi
# Debian packages the tests use: shellcheck (launch scripts) and chromium (the HTML report, rendered headless).
for tool in shellcheck chromium; do
  if ! command -v "$tool" >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    (apt-get install -y -qq "$tool" >/dev/null 2>&1 || (apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq "$tool" >/dev/null 2>&1)) \
      || echo "warning: could not install $tool" >&2
  fi
done

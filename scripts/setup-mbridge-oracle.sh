#!/usr/bin/env bash
# Create .venv-mb: Megatron-Bridge 0.6.2 + Megatron-Core 0.19.2 on CPU, the test oracle for the
# megatron-bridge target (never a runtime dependency). Idempotent.
# Both packages declare Python >= 3.12 and a CUDA dependency tree; on 3.11 they install with
# --ignore-requires-python and --no-deps plus the modules their config validation imports
# (tests/mbridge_oracle/shim.py supplies what Transformer Engine would).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=.venv-mb
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
if "$VENV/bin/python" -c 'import importlib.metadata as m, sys; sys.exit(0 if m.version("megatron-bridge") == "0.6.2" and m.version("hydra-core").startswith("1.3") else 1)' 2>/dev/null; then
  exit 0
fi
PIP=("$VENV/bin/pip" install --quiet --disable-pip-version-check)
"${PIP[@]}" torch==2.13.0
"${PIP[@]}" --no-deps --ignore-requires-python megatron-core==0.19.2 megatron-bridge==0.6.2
"${PIP[@]}" numpy "packaging>=24.2" typing_extensions
"${PIP[@]}" --no-deps triton==3.1.0
"${PIP[@]}" transformers==5.12.1
"${PIP[@]}" datasets omegaconf einops megatron-energon multi-storage-client
"${PIP[@]}" tensorboard diffusers pulp
"${PIP[@]}" --no-deps nvidia-modelopt==0.47.0
"${PIP[@]}" "hydra-core>=1.3.4,<1.4"

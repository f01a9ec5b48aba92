#!/usr/bin/env bash
# Idempotent setup of a real ASGI stack (uvicorn + starlette, what vLLM's API server runs on) for
# the gateway's path-handling tests (crates/gateway/tests/asgi.rs). Creates
# ASGI_HOME/venv (default ~/.cache/headroom-asgi) once; a change of the pins below reinstalls.
# Prints the venv's python on success. Needs python3 (3.9+) with the venv module.
set -euo pipefail
ASGI_HOME=${HEADROOM_ASGI_HOME:-$HOME/.cache/headroom-asgi}
PINS="uvicorn==0.54.0 starlette==1.10.0"
PY=$ASGI_HOME/venv/bin/python
STAMP=$ASGI_HOME/venv/.headroom-stamp
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$PINS" ]; then
  echo "asgi setup: installing $PINS into $ASGI_HOME/venv" >&2
  rm -rf "$ASGI_HOME/venv"
  mkdir -p "$ASGI_HOME"
  python3 -m venv "$ASGI_HOME/venv"
  # shellcheck disable=SC2086 # PINS is a list of requirements
  "$PY" -m pip install -q --disable-pip-version-check $PINS
  "$PY" -c 'import uvicorn, starlette' 
  echo "$PINS" > "$STAMP"
fi
echo "$PY"

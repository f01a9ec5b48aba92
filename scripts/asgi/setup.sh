#!/usr/bin/env bash
# Idempotent setup of a real ASGI stack (uvicorn + starlette, what vLLM's API server runs on) for
# the gateway's path-handling tests (crates/gateway/tests/asgi.rs). Creates
# ASGI_HOME/venv (default ~/.cache/headroom-asgi) once; a change of the pins below reinstalls.
# Prints the venv's python on success. Needs python3 (3.9+) with the venv module.
set -euo pipefail
# shellcheck source=../lib/venv.sh
. "$(dirname "$0")/../lib/venv.sh"
ASGI_HOME=${HEADROOM_ASGI_HOME:-$HOME/.cache/headroom-asgi}
pinned_venv asgi "$ASGI_HOME" "uvicorn==0.54.0 starlette==1.10.0" python -c 'import uvicorn, starlette'
echo "$ASGI_HOME/venv/bin/python"

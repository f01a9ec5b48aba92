#!/usr/bin/env bash
# Install the peer load generators into their own venvs under PEERS_HOME (default
# ~/.cache/headroom-peers), idempotently: GuideLLM, AIPerf, inference-perf from PyPI. vLLM's own
# `vllm bench serve` comes from the vLLM venv of scripts/vllm/setup.sh. Versions are pinned so a
# comparison can be repeated.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
. "$ROOT/scripts/vllm/common.sh"
PEERS_HOME=${PEERS_HOME:-$HOME/.cache/headroom-peers}
"$ROOT/scripts/vllm/setup.sh" >&2          # the vLLM venv (for `vllm bench serve` and uv)
UV=$VLLM_HOME/venv/bin/uv
[ -f /etc/ssl/certs/ca-certificates.crt ] && export SSL_CERT_FILE=${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}
mkdir -p "$PEERS_HOME"
# inference-perf 0.7.0 requires Python >= 3.12; the others run on the vLLM venv's 3.11
PY312=${PY312:-}
if [ -z "$PY312" ]; then
  for c in python3.13 python3.12 "$HOME"/.pyenv/versions/3.1[234]*/bin/python3; do
    if command -v $c >/dev/null && $c -c 'import sys; sys.exit(sys.version_info[:2] < (3, 12))' 2>/dev/null; then
      PY312=$(command -v $c); break; fi
  done
fi
for spec in guidellm==0.8.1 aiperf==0.13.0 inference-perf==0.7.0; do
  name=${spec%%==*}; venv=$PEERS_HOME/$name
  base=$VLLM_PY
  if [ "$name" = inference-perf ]; then
    [ -n "$PY312" ] || { echo "peers: inference-perf needs python >= 3.12 (set PY312=...); skipped" >&2; continue; }
    base=$PY312
  fi
  if [ "$(cat "$venv/.headroom-stamp" 2>/dev/null)" != "$spec" ]; then
    echo "peers: installing $spec into $venv" >&2
    rm -rf "$venv"
    "$UV" venv -q --python "$base" "$venv"
    "$UV" pip install -q --python "$venv/bin/python" "$spec" || { echo "peers: $spec failed to install" >&2; continue; }
    echo "$spec" > "$venv/.headroom-stamp"
  fi
done
echo "peers ready in $PEERS_HOME"

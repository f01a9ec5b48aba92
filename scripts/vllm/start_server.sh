#!/usr/bin/env bash
# Start the real vLLM OpenAI server on 127.0.0.1:$VLLM_PORT (default 8011) in the background.
# Extra arguments go to vLLM (e.g. --enforce-eager --max-num-seqs 4). MODEL_DIR / MODEL_NAME pick
# the model (default: VLLM_HOME/tinymodel served as "tiny"). Writes the PID to VLLM_HOME/run/PORT.pid
# and refuses to start if that PID is still alive. Use wait_healthy.sh next, stop_server.sh after.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/common.sh"
[ -x "$VLLM_PY" ] || { echo "start: no venv in $VLLM_HOME; run scripts/vllm/setup.sh first" >&2; exit 1; }
mkdir -p "$VLLM_HOME/run" "$VLLM_HOME/logs"
if [ -s "$VLLM_PIDFILE" ] && kill -0 "$(cat "$VLLM_PIDFILE")" 2>/dev/null; then
  echo "start: already running (pid $(cat "$VLLM_PIDFILE")); run scripts/vllm/stop_server.sh first" >&2; exit 1; fi
if curl -s -m 2 -o /dev/null "http://127.0.0.1:$VLLM_PORT/health"; then
  echo "start: something already answers on 127.0.0.1:$VLLM_PORT (not ours); pick another VLLM_PORT" >&2; exit 1; fi
export VLLM_HOST_IP=127.0.0.1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
export VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-2}   # GiB of KV cache
export VLLM_LOGGING_LEVEL=${VLLM_LOGGING_LEVEL:-INFO}
export VLLM_CACHE_ROOT=${VLLM_CACHE_ROOT:-$VLLM_HOME/vllm-cache}
# VLLM_HOME is ours, not vLLM's: unset it for the child so vLLM does not warn about it
env -u VLLM_HOME -u VLLM_PORT nohup "$VLLM_PY" -m vllm.entrypoints.openai.api_server \
  --model "${MODEL_DIR:-$VLLM_HOME/tinymodel}" --served-model-name "${MODEL_NAME:-tiny}" \
  --host 127.0.0.1 --port "$VLLM_PORT" --max-model-len 2048 "$@" \
  > "$VLLM_LOG" 2>&1 < /dev/null &
echo $! > "$VLLM_PIDFILE"
echo "vllm pid $(cat "$VLLM_PIDFILE") on 127.0.0.1:$VLLM_PORT, log $VLLM_LOG"

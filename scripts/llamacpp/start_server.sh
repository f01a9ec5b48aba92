#!/usr/bin/env bash
# Start the real llama-server on 127.0.0.1:$LLAMACPP_PORT (default 8021) in the background:
# the model built by setup.sh (MODEL=... for another GGUF), --metrics --parallel 4 -c 4096 unless
# LLAMACPP_PARALLEL / LLAMACPP_CTX say otherwise; extra arguments go to llama-server. Writes the PID
# to LLAMACPP_HOME/run/PORT.pid and refuses to start if that PID is still alive or something else
# answers on the port. Use wait_healthy.sh next, stop_server.sh after.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/common.sh"
[ -x "$LLAMACPP_BIN" ] || { echo "start: no $LLAMACPP_BIN; run scripts/llamacpp/setup.sh first" >&2; exit 1; }
M=${MODEL:-$LLAMACPP_MODEL}
[ -f "$M" ] || { echo "start: no model $M; run scripts/llamacpp/setup.sh first" >&2; exit 1; }
mkdir -p "$LLAMACPP_HOME/run" "$LLAMACPP_HOME/logs"
if [ -s "$LLAMACPP_PIDFILE" ] && kill -0 "$(cat "$LLAMACPP_PIDFILE")" 2>/dev/null; then
  echo "start: already running (pid $(cat "$LLAMACPP_PIDFILE")); run scripts/llamacpp/stop_server.sh first" >&2; exit 1; fi
if curl -s -m 2 -o /dev/null "http://127.0.0.1:$LLAMACPP_PORT/health"; then
  echo "start: something already answers on 127.0.0.1:$LLAMACPP_PORT (not ours); pick another LLAMACPP_PORT" >&2; exit 1; fi
nohup "$LLAMACPP_BIN" -m "$M" --host 127.0.0.1 --port "$LLAMACPP_PORT" --metrics \
  --parallel "${LLAMACPP_PARALLEL:-4}" -c "${LLAMACPP_CTX:-4096}" --threads "${LLAMACPP_THREADS:-2}" "$@" \
  > "$LLAMACPP_LOG" 2>&1 < /dev/null &
echo $! > "$LLAMACPP_PIDFILE"
echo "llama-server pid $(cat "$LLAMACPP_PIDFILE") on 127.0.0.1:$LLAMACPP_PORT, log $LLAMACPP_LOG"

#!/usr/bin/env bash
# Wait until the server started by start_server.sh answers GET /health with 200 (llama-server
# answers 503 while it loads the model).
# Usage: wait_healthy.sh [T0] [MAX_S]   T0 = `date +%s.%N` before the start (default now); MAX_S
# default 120. Exits 1 (printing the log's tail) if the server dies or MAX_S passes.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/common.sh"
T0=${1:-$(date +%s.%N)}; MAX=${2:-120}
P=$(cat "$LLAMACPP_PIDFILE" 2>/dev/null) || { echo "wait: no $LLAMACPP_PIDFILE" >&2; exit 1; }
end=$(( $(date +%s) + MAX ))
while [ "$(date +%s)" -lt $end ]; do
  if [ "$(curl -s -m 2 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$LLAMACPP_PORT/health")" = 200 ]; then
    echo "llama-server healthy after $(awk -v a="$(date +%s.%N)" -v b="$T0" 'BEGIN{printf "%.1f", a-b}') s"; exit 0; fi
  kill -0 "$P" 2>/dev/null || { echo "wait: llama-server (pid $P) died; log tail:" >&2; tail -30 "$LLAMACPP_LOG" >&2; exit 1; }
  sleep 0.3
done
echo "wait: llama-server not healthy after $MAX s; log tail:" >&2; tail -30 "$LLAMACPP_LOG" >&2; exit 1

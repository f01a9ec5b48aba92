#!/usr/bin/env bash
# Stop the server started by start_server.sh: SIGTERM to the PID in VLLM_HOME/run/PORT.pid only, then
# wait for its process tree (the EngineCore and Worker children, found with pgrep -P before the
# signal) to exit; SIGKILL those PIDs after 30 s. Removes the PID file. Exits 0 if nothing was running.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/common.sh"
[ -s "$VLLM_PIDFILE" ] || { echo "stop: nothing running on port $VLLM_PORT"; exit 0; }
P=$(cat "$VLLM_PIDFILE")
if ! kill -0 "$P" 2>/dev/null; then rm -f "$VLLM_PIDFILE"; echo "stop: pid $P already gone"; exit 0; fi
C=$(pgrep -P "$P" | tr '\n' ' '); G=""; for c in $C; do G="$G $(pgrep -P "$c" | tr '\n' ' ')"; done
TREE="$P $C $G"
kill -TERM "$P" 2>/dev/null
for i in $(seq 1 60); do
  alive=""; for p in $TREE; do kill -0 "$p" 2>/dev/null && alive="$alive $p"; done
  [ -z "$alive" ] && { echo "vllm stopped ($(echo $TREE)) in $((i/2)) s"; rm -f "$VLLM_PIDFILE"; exit 0; }
  sleep 0.5
done
echo "stop: still alive after 30 s:$alive; SIGKILL to those PIDs"; for p in $alive; do kill -KILL "$p" 2>/dev/null; done
rm -f "$VLLM_PIDFILE"

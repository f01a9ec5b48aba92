#!/usr/bin/env bash
# Stop the server started by start_server.sh: SIGTERM to the PID in LLAMACPP_HOME/run/PORT.pid only,
# SIGKILL to that PID after 20 s. Removes the PID file. Exits 0 if nothing was running.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/common.sh"
[ -s "$LLAMACPP_PIDFILE" ] || { echo "stop: nothing running on port $LLAMACPP_PORT"; exit 0; }
P=$(cat "$LLAMACPP_PIDFILE")
if ! kill -0 "$P" 2>/dev/null; then rm -f "$LLAMACPP_PIDFILE"; echo "stop: pid $P already gone"; exit 0; fi
kill -TERM "$P" 2>/dev/null
for i in $(seq 1 40); do
  kill -0 "$P" 2>/dev/null || { echo "llama-server stopped (pid $P) in $((i/2)) s"; rm -f "$LLAMACPP_PIDFILE"; exit 0; }
  sleep 0.5
done
echo "stop: pid $P still alive after 20 s; SIGKILL"; kill -KILL "$P" 2>/dev/null
rm -f "$LLAMACPP_PIDFILE"

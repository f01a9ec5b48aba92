#!/usr/bin/env bash
# User-space instructions per SSE event of the gateway process alone, free of machine noise:
# the fixed-work mode of the gateway_overhead benchmark (STREAMS closed-loop streams through the
# child, FIXED_REQUESTS each, engine twin at TIME_SCALE 1 so the child keeps up even under
# valgrind and chunks arrive one by one) with the child under callgrind, at 1 and 3 requests per
# stream; the difference of the child's instructions over the difference of the events received
# removes start-up and connection set-up. The bare TCP relay is measured the same way: its
# figure is the user-space floor of a proxy that reads and writes each chunk. Kernel work (the
# read and write system calls, loopback TCP) is not counted here; gateway_overhead prints the
# CPU time, user and system, per event.
#
#   crates/gateway/benches/gateway_instructions.sh              # gateway and relay
#   PATHS=gateway STREAMS=20 crates/gateway/benches/gateway_instructions.sh
#
# Needs valgrind. Builds the benchmark with `cargo bench --no-run` (CARGO_TARGET_DIR respected),
# or runs the binary named by BIN.
set -euo pipefail
cd "$(dirname "$0")/../../.."
PATHS=${PATHS:-"gateway relay"}
STREAMS=${STREAMS:-10}
bin=${BIN:-$(cargo bench -p headroom-gateway --bench gateway_overhead --no-run --message-format=json 2>/dev/null |
    sed -n 's/.*"executable":"\([^"]*gateway_overhead[^"]*\)".*/\1/p' | tail -1)}
[ -x "$bin" ] || { echo "benchmark binary not found (cargo bench --no-run failed?)" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
measure() { # path requests -> "instructions events frames"
    FIXED_PATH=$1 FIXED_REQUESTS=$2 STREAMS=$STREAMS \
        CHILD_WRAP="valgrind --tool=callgrind --callgrind-out-file=$out/cg.$1.$2" \
        "$bin" 2>/dev/null >"$out/log.$1.$2"
    local ir events frames
    ir=$(sed -n 's/^summary: //p' "$out/cg.$1.$2")
    read -r events frames < <(sed -n 's/^fixed: \([0-9]*\) events \([0-9]*\) frames.*/\1 \2/p' "$out/log.$1.$2")
    echo "$ir $events $frames"
}
for path in $PATHS; do
    read -r ir1 e1 f1 < <(measure "$path" 1)
    read -r ir3 e3 f3 < <(measure "$path" 3)
    echo "$path, $STREAMS streams: $(( (ir3 - ir1) / (e3 - e1) )) user instructions per SSE event ($ir1 → $ir3 instructions, $e1 → $e3 events, $f1 → $f3 frames at the client)"
done

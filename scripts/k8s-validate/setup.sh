#!/usr/bin/env bash
# Idempotent setup of a Kubernetes schema validator (kubernetes-validate, from PyPI: the
# Kubernetes OpenAPI schemas bundled per version) for the test that checks what
# `headroom slo autoscale --kind hpa` writes (crates/cli/tests/cli_slo.rs). Creates
# HEADROOM_K8S_VALIDATE_HOME/venv (default ~/.cache/headroom-k8s-validate) once; a change of the
# pin below reinstalls. Prints the validator's path on success.
set -euo pipefail
# shellcheck source=../lib/venv.sh
. "$(dirname "$0")/../lib/venv.sh"
DIR=${HEADROOM_K8S_VALIDATE_HOME:-$HOME/.cache/headroom-k8s-validate}
pinned_venv k8s-validate "$DIR" "kubernetes-validate==1.37.0" kubernetes-validate --version
echo "$DIR/venv/bin/kubernetes-validate"

# Sourced by the scripts that install a pinned Python tool into a cached venv
# (scripts/asgi/setup.sh, scripts/k8s-validate/setup.sh).
#
# pinned_venv NAME DIR PINS CHECK...: creates DIR/venv with PINS installed, once; a change of
# PINS (recorded in DIR/venv/.headroom-stamp) reinstalls. CHECK... is a command run with the
# venv's bin/ first on PATH after installing; its failure fails the setup. Needs python3 (3.9+)
# with the venv module.
pinned_venv() {
  local name=$1 dir=$2 pins=$3
  shift 3
  local stamp=$dir/venv/.headroom-stamp
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$pins" ]; then
    echo "$name setup: installing $pins into $dir/venv" >&2
    rm -rf "$dir/venv"
    mkdir -p "$dir"
    python3 -m venv "$dir/venv"
    # shellcheck disable=SC2086 # pins is a list of requirements
    "$dir/venv/bin/python" -m pip install -q --disable-pip-version-check $pins
    PATH="$dir/venv/bin:$PATH" "$@" >&2
    echo "$pins" > "$stamp"
  fi
}

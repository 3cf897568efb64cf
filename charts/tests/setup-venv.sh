#!/usr/bin/env bash
# Creates (or reuses) the Python venv of the chart checks and prints its python's path.
#
#   charts/tests/setup-venv.sh [VENV_DIR]
#
# VENV_DIR defaults to ${XDG_CACHE_HOME:-$HOME/.cache}/consul-elector/venv, the path
# tests/it/chart_install.rs looks in (or set ELECTOR_HELM_PYTHON to the printed path).
# Reinstalls only when requirements.txt changed. Progress goes to stderr.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="${1:-${XDG_CACHE_HOME:-$HOME/.cache}/consul-elector/venv}"
requirements="$here/requirements.txt"
stamp="$venv/.requirements.sha256"
want="$(sha256sum "$requirements" | cut -d' ' -f1)"

if [[ ! -x "$venv/bin/python" ]]; then
  echo "setup-venv: creating $venv" >&2
  python3 -m venv "$venv" >&2
fi
if [[ "$(cat "$stamp" 2>/dev/null)" != "$want" ]] \
  || ! "$venv/bin/python" -c 'import helm_sdkpy, yaml' 2>/dev/null; then
  echo "setup-venv: installing $requirements" >&2
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    --ignore-requires-python -r "$requirements" >&2
  echo "$want" > "$stamp"
fi
"$venv/bin/python" -c 'import helm_sdkpy' >&2
echo "$venv/bin/python"

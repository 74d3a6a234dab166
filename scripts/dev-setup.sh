#!/usr/bin/env bash
# Development set-up: every workspace member installed editable into one virtualenv, plus the dev tools.
#
#   scripts/dev-setup.sh            # uses ./.venv (created if missing)
#   VENV=/path/to/venv scripts/dev-setup.sh
#
# The members are those of [tool.fsdp-sdk.workspace] in pyproject.toml. The example plugin is installed too:
# the tests check that its entry point (group fsdp_sdk) shows up in `fsdp-sdk instance-types`.
# PyTorch is a dependency of fsdp-trainer; install the build you want (CPU or CUDA) before running this.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
venv="${VENV:-$root/.venv}"

if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip)

members=$("$venv/bin/python" - "$root/pyproject.toml" <<'PY'
import sys, tomllib
with open(sys.argv[1], "rb") as f:
    print(" ".join(tomllib.load(f)["tool"]["fsdp-sdk"]["workspace"]["members"]))
PY
)
dev=$("$venv/bin/python" - "$root/pyproject.toml" <<'PY'
import sys, tomllib
with open(sys.argv[1], "rb") as f:
    print("\n".join(tomllib.load(f)["dependency-groups"]["dev"]))
PY
)

editable=()
for member in $members; do
    editable+=(-e "$root/$member")
done
mapfile -t dev_requirements <<<"$dev"
"${pip[@]}" install "${dev_requirements[@]}" "${editable[@]}"

echo "installed: $members"
echo "check:     $venv/bin/fsdp-sdk plugins && $venv/bin/python -m pytest -m 'not slow' -q"

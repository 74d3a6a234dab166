#!/usr/bin/env bash
# Sets up everything fsdp-sdk needs on a fresh Debian/Ubuntu machine, then installs every workspace
# member editable into one virtualenv with the dev tools. Safe to run again: each step is skipped when done.
#
#   scripts/setup.sh                      # ./.venv (created if missing)
#   VENV=/path/to/venv scripts/setup.sh
#   FSDP_SDK_TORCH="torch==2.13.0" scripts/setup.sh   # the torch requirement (default: the pinned CPU build)
#
# 1. Python 3.11+ (the scripts read pyproject.toml with tomllib). etcd (Debian package etcd-server) for
#    torchrun's etcd-v2 rendezvous, prometheus (promtool and the server) and chromium for the observability
#    tests, and python3-venv where Debian's Python lacks venv: installed with apt-get when missing (as root, or
#    through sudo).
# 2. torch, pinned: an unpinned torch pulls a multi-GB CUDA build; 2.13.0 is the version CI and the
#    tests use. Install a CUDA build yourself first on a GPU machine: a satisfied pin installs nothing.
# 3. The members of [tool.fsdp-sdk.workspace] in pyproject.toml, editable, and the [dependency-groups] dev
#    tools. The example plugin is a member: the tests check that its entry point shows up.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
venv="${VENV:-$root/.venv}"
torch_req="${FSDP_SDK_TORCH:-torch==2.13.0}"

python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' || {
    echo "setup: Python 3.11 or newer is needed (python3 is $(python3 -V 2>&1)); install one and put it first on PATH" >&2
    exit 2
}
apt_packages=()
command -v etcd >/dev/null 2>&1 || apt_packages+=(etcd-server)
# The observability tests: promtool checks the rendered Prometheus configuration, a real Prometheus scrapes a
# local run, and headless Chromium renders the run report.
command -v promtool >/dev/null 2>&1 || apt_packages+=(prometheus)
command -v chromium >/dev/null 2>&1 || apt_packages+=(chromium)
[ -x "$venv/bin/python" ] || python3 -c 'import ensurepip, venv' 2>/dev/null || apt_packages+=(python3-venv)
if [ ${#apt_packages[@]} -gt 0 ]; then
    sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo"
    echo "setup: installing ${apt_packages[*]} (apt-get)" >&2
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${apt_packages[@]}" >/dev/null
fi

if [ ! -x "$venv/bin/python" ]; then
    echo "setup: creating $venv" >&2
    python3 -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)
# pip >= 25.1 reads [dependency-groups] (--group)
"${pip[@]}" install --upgrade "pip>=25.1"
"${pip[@]}" install "$torch_req"

members=$("$venv/bin/python" - "$root/pyproject.toml" <<'PY'
import sys, tomllib
with open(sys.argv[1], "rb") as f:
    print(" ".join(tomllib.load(f)["tool"]["fsdp-sdk"]["workspace"]["members"]))
PY
)
editable=()
for member in $members; do
    editable+=(-e "$root/$member")
done
(cd "$root" && "${pip[@]}" install --group dev "${editable[@]}" "$torch_req")
echo "setup: ready ($venv; members: $members)" >&2

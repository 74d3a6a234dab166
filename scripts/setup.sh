#!/usr/bin/env bash
# Sets up everything fsdp-sdk needs on a fresh Debian/Ubuntu machine, then installs every workspace
# member editable into one virtualenv with the dev tools. Safe to run again: each step is skipped when done.
#
#   scripts/setup.sh                      # ./.venv (created if missing): enough to run fsdp-sdk and the trainer
#   scripts/setup.sh --test               # also the system packages only the test suite needs
#   scripts/setup.sh --dry-run [--test]   # print the stages and what each would install; change nothing
#   VENV=/path/to/venv scripts/setup.sh
#   FSDP_SDK_TORCH="torch==2.13.0" scripts/setup.sh   # the torch requirement (default: the pinned CPU build)
#
# 1. Python 3.11+ (the scripts read pyproject.toml with tomllib). etcd (Debian package etcd-server) for
#    torchrun's etcd-v2 rendezvous, and python3-venv where Debian's Python lacks venv: installed with apt-get
#    when missing (as root, or through sudo). With --test also prometheus (promtool and the server) and chromium
#    for the observability tests.
# 2. torch, pinned: an unpinned torch pulls a multi-GB CUDA build; 2.13.0 is the version CI and the
#    tests use. Install a CUDA build yourself first on a GPU machine: a satisfied pin installs nothing.
# 3. The members of [tool.fsdp-sdk.workspace] in pyproject.toml, editable, and the [dependency-groups] dev
#    tools. The example plugin is a member: the tests check that its entry point shows up.
#
# Each stage prints a line when it starts and when it ends, with its time; pip shows its progress on a terminal.
set -euo pipefail

usage() {
    sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'
}

test_packages=0
dry_run=0
for arg in "$@"; do
    case "$arg" in
        --test) test_packages=1 ;;
        --dry-run) dry_run=1 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "setup: unknown argument '$arg'; use --test, --dry-run or --help" >&2; exit 2 ;;
    esac
done

root="$(cd "$(dirname "$0")/.." && pwd)"
venv="${VENV:-$root/.venv}"
torch_req="${FSDP_SDK_TORCH:-torch==2.13.0}"
started=$SECONDS
stage_started=$SECONDS
stages=4
stage_number=0

clock() { # seconds -> m:ss
    printf '%d:%02d' $(($1 / 60)) $(($1 % 60))
}
stage() { # a stage begins: its number and what it does
    stage_number=$((stage_number + 1))
    stage_started=$SECONDS
    echo "setup: [$stage_number/$stages] $*" >&2
}
would() { # --dry-run: what the stage would do
    echo "setup: [$stage_number/$stages] would $*" >&2
}
stage_done() { # the stage ends: its time and the total so far
    echo "setup: [$stage_number/$stages] ${1:-done} in $(clock $((SECONDS - stage_started))) (total $(clock $((SECONDS - started))))" >&2
}

python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' || {
    echo "setup: Python 3.11 or newer is needed (python3 is $(python3 -V 2>&1)); install one and put it first on PATH" >&2
    exit 2
}

# command the stage checks -> Debian package that provides it
needed=(etcd:etcd-server)
# The observability tests: promtool checks the rendered Prometheus configuration, a real Prometheus scrapes a
# local run, and headless Chromium renders the run report.
[ "$test_packages" = 1 ] && needed+=(promtool:prometheus chromium:chromium)
checked=()
apt_packages=()
for pair in "${needed[@]}"; do
    checked+=("${pair%%:*}")
    command -v "${pair%%:*}" >/dev/null 2>&1 || apt_packages+=("${pair#*:}")
done
[ -x "$venv/bin/python" ] || python3 -c 'import ensurepip, venv' 2>/dev/null || apt_packages+=(python3-venv)

what=$(IFS=,; echo "${checked[*]}")
[ "$test_packages" = 1 ] || what="$what (the tests' prometheus and chromium: scripts/setup.sh --test)"
stage "system packages for ${what//,/, }"
if [ ${#apt_packages[@]} -eq 0 ]; then
    stage_done "all present"
elif [ "$dry_run" = 1 ]; then
    would "install ${apt_packages[*]} (apt-get)"
else
    sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo"
    echo "setup: installing ${apt_packages[*]} (apt-get)" >&2
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${apt_packages[@]}" >/dev/null
    stage_done "installed ${apt_packages[*]}"
fi

pip=("$venv/bin/python" -m pip --disable-pip-version-check)
[ -t 2 ] || pip+=(-q) # progress bars on a terminal; piped (CI, logs), only warnings and errors

stage "virtualenv $venv and pip>=25.1"
if [ "$dry_run" = 1 ]; then
    if [ -x "$venv/bin/python" ]; then would "reuse it"; else would "create it"; fi
else
    [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
    # pip >= 25.1 reads [dependency-groups] (--group)
    "${pip[@]}" install --upgrade "pip>=25.1"
    stage_done
fi

stage "$torch_req (pip; nothing downloaded when already satisfied)"
if [ "$dry_run" = 1 ]; then
    would "pip install $torch_req"
else
    "${pip[@]}" install "$torch_req"
    stage_done
fi

members=$(python3 - "$root/pyproject.toml" <<'PY'
import sys, tomllib
with open(sys.argv[1], "rb") as f:
    print(" ".join(tomllib.load(f)["tool"]["fsdp-sdk"]["workspace"]["members"]))
PY
)
editable=()
for member in $members; do
    editable+=(-e "$root/$member")
done
stage "the workspace, editable ($members) and the dev tools (pip)"
shown_venv="$venv"
case "$venv" in "$PWD"/*) shown_venv="${venv#"$PWD"/}" ;; esac
how_to_call="run the CLI as $shown_venv/bin/fsdp-sdk, or put it on PATH for this shell: source $shown_venv/bin/activate"
if [ "$dry_run" = 1 ]; then
    would "pip install --group dev ${editable[*]}"
    echo "setup: then: $how_to_call" >&2
    exit 0
fi
(cd "$root" && "${pip[@]}" install --group dev "${editable[@]}" "$torch_req")
stage_done

echo "setup: ready in $(clock $((SECONDS - started))) ($venv)" >&2
echo "setup: $how_to_call" >&2

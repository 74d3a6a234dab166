"""How fast does ``fsdp-sdk`` start?

Times ``fsdp-sdk --help``, ``fsdp-sdk config show`` in an empty directory, and
``fsdp-sdk config show`` beside a seed ``.env`` (the aws-do-eks FSDP example's
variables, a model named: the trainer's settings are validated too) against the
floor any click + pluggy CLI pays, ``python -c "import click, pluggy"``: the
median of N runs each, on the same machine, one after another. Prints the
figures and the ratios; the target is at most 2x the floor for every command.

    python bench/cli_startup.py            # 15 runs each
    python bench/cli_startup.py -n 31 --json

Every command runs once unmeasured first, with bytecode caching on (in a
temporary ``PYTHONPYCACHEPREFIX``), so all are measured with warm ``.pyc``
files, as an installed CLI runs. ``--help`` and ``config show`` are measured
twice: with the entry-point cache warm (as after a user's first command) and
cold (an empty ``$XDG_CACHE_HOME`` for every run, as on a fresh HOME or after
installing a package: the first command scans every distribution on
``sys.path``). Exits with status 1 when a command misses the target
(``--no-check`` to only report).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_RATIO = 2.0
#: A seed .env as users bring it (the account written out: fsdp-sdk runs no command substitution).
SEED_ENV = """\
export AWS_REGION=us-west-2
export ACCOUNT=123456789012
export REGISTRY=${ACCOUNT}.dkr.ecr.${AWS_REGION}.amazonaws.com/
export IMAGE=fsdp
export TAG=":llama2-efa"
export JOB_NAME=fsdp
export RDZV_HOST=etcd
export RDZV_PORT=2379
export NUM_WORKERS=2
export EFA_PER_WORKER=4
export NPROC_PER_WORKER=8
export INSTANCE_TYPE=p4de.24xlarge
export FI_PROVIDER=efa
export MODEL_NAME=meta-llama/Llama-2-7b-hf
export FSDP_SDK_TRAINER__DATA__SOURCE=hf
"""


def console_script() -> list[str]:
    """The installed ``fsdp-sdk`` script, run by this interpreter (as a user would run it)."""
    script = Path(sys.executable).with_name("fsdp-sdk")
    if not script.exists():
        found = shutil.which("fsdp-sdk")
        if found is None:
            sys.exit("fsdp-sdk is not installed in this environment (pip install -e packages/core)")
        script = Path(found)
    return [str(script)]


#: Cases run with an empty entry-point cache each time end with this.
COLD = " (cache cold)"


def run_once(command: list[str], env: dict[str, str], cwd: str, cold_cache: str | None = None) -> float:
    """Wall-clock seconds of one execution; with ``cold_cache``, ``$XDG_CACHE_HOME`` is that directory, emptied
    before the run (outside the time)."""
    if cold_cache is not None:
        shutil.rmtree(cold_cache, ignore_errors=True)
        os.makedirs(cold_cache)
        env = {**env, "XDG_CACHE_HOME": cold_cache}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    result = subprocess.run(command, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        sys.exit(f"{' '.join(command)} failed ({result.returncode}): {result.stderr.decode()[-500:]}")
    _CPU.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return elapsed


#: The CPU seconds (user + system) of each run, in the order run: on a shared machine the wall clock also counts
#: the time the command waited for a core, its CPU time only what it did.
_CPU: list[float] = []


def time_commands(
    cases: dict[str, list[str]], where: dict[str, str], runs: int, env: dict[str, str], cold_cache: str
) -> dict[str, list[float]]:
    """``runs`` timings of each case after one unmeasured warm-up, taken in turn (one run of each case, then
    the next round) so that a slow spell of a shared machine falls on every case alike. Cases named ``... (cache
    cold)`` run with an empty ``cold_cache`` as ``$XDG_CACHE_HOME``."""
    timings: dict[str, list[float]] = {name: [] for name in cases}
    for round_ in range(runs + 1):
        for name, command in cases.items():
            elapsed = run_once(command, env, where[name], cold_cache if name.endswith(COLD) else None)
            if round_:
                timings[name].append(elapsed)
                CPU_TIMINGS.setdefault(name, []).append(_CPU[-1])
    return timings


#: CPU seconds of the measured runs of each case (filled by :func:`time_commands`).
CPU_TIMINGS: dict[str, list[float]] = {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--runs", type=int, default=15, help="measured runs per command (default 15)")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    parser.add_argument("--no-check", action="store_true", help="do not fail when a command misses the target")
    args = parser.parse_args()

    script = console_script()
    with tempfile.TemporaryDirectory() as cwd, tempfile.TemporaryDirectory() as seed:  # state in a throwaway directory
        (Path(seed) / ".env").write_text(SEED_ENV)
        # Bytecode caches as users have them (written on the warm-up run), kept out of the source tree:
        # with PYTHONDONTWRITEBYTECODE set, every run would recompile the editable sources.
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env.update(
            FSDP_SDK_STATE_DIR=str(Path(cwd) / "state"),
            PYTHONPYCACHEPREFIX=str(Path(cwd) / "pycache"),
            XDG_CACHE_HOME=str(Path(cwd) / "cache"),  # the warm entry-point cache, written by the warm-up round
        )
        cases = {
            "python -c 'import click, pluggy'": [sys.executable, "-c", "import click, pluggy"],
            "fsdp-sdk --help": [*script, "--help"],
            "fsdp-sdk --help" + COLD: [*script, "--help"],
            "fsdp-sdk config show": [*script, "config", "show"],
            "fsdp-sdk config show" + COLD: [*script, "config", "show"],
        }
        where = {name: cwd for name in cases}
        cases["fsdp-sdk config show (seed .env)"] = [*script, "config", "show"]
        where["fsdp-sdk config show (seed .env)"] = seed
        timings = time_commands(cases, where, args.runs, env, str(Path(cwd) / "cold-cache"))
        minimums = {name: min(values) for name, values in timings.items()}
        cpu = {name: statistics.median(values) for name, values in CPU_TIMINGS.items()}
        medians = {name: statistics.median(values) for name, values in timings.items()}

    floor = medians["python -c 'import click, pluggy'"]
    ratios = {name: value / floor for name, value in medians.items()}
    cpu_ratios = {name: value / cpu["python -c 'import click, pluggy'"] for name, value in cpu.items()}
    if args.json:
        record = {
            "date": time.strftime("%Y-%m-%d"),
            "python": sys.version.split()[0],
            "cpus": os.cpu_count(),
            "runs": args.runs,
            "median_s": medians,
            "min_s": minimums,
            "ratio": ratios,
            "cpu_median_s": cpu,
            "cpu_ratio": cpu_ratios,
            "load_average": os.getloadavg(),
            "target_ratio": TARGET_RATIO,
            "timings_s": timings,
            "cpu_s": CPU_TIMINGS,
        }
        print(json.dumps(record))
    else:
        print(f"median of {args.runs} runs each ({os.cpu_count()} CPUs, {sys.version.split()[0]})")
        for name in cases:
            print(
                f"  {name:44s} median {medians[name] * 1000:7.1f} ms  min {minimums[name] * 1000:7.1f} ms"
                f"   {ratios[name]:4.2f}x   CPU {cpu[name] * 1000:6.1f} ms {cpu_ratios[name]:4.2f}x"
            )
        print(f"load average {', '.join(f'{x:.1f}' for x in os.getloadavg())} (on {os.cpu_count()} CPUs)")
        print(f"target: each fsdp-sdk command <= {TARGET_RATIO:g}x the click + pluggy import")
    missed = [name for name in cases if name.startswith("fsdp-sdk") and ratios[name] > TARGET_RATIO]
    if missed and not args.no_check:
        print(f"missed the target: {', '.join(missed)}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()

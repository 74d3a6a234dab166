"""What ``fsdp-sdk run`` shows: a readable display on a terminal (through a pseudo-terminal), raw lines in a pipe.

Both snapshots keep the lines the CLI itself writes (phases, steps, the summary) with the numbers that vary
(losses, throughput, times, ports, run ids, paths) replaced by placeholders.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pty
import re
import select
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fsdp_sdk.cli.run_display import format_duration, format_step, summary_lines

from .conftest import FSDP_SDK, etcd_or_skip, run_cli

ARGS = ["run", "--backend", "local", "--nodes", "2", "--nproc-per-node", "1", "--preset", "tiny", "--steps", "3"]
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")

TTY_SNAPSHOT = """\
> checkpoint every 1 steps (local.checkpoint_every_steps; 0: only at the end)
> run <id>: 2 agents x 1 processes, etcd-v2 rendezvous at 127.0.0.1:<port>, outputs in <dir>
> waiting for 2 agents at the etcd-v2 rendezvous
> rendezvous complete: 2 agents; starting 2 trainer processes
> trainers started; loading the model (tiny)
step 1/3  loss <loss>  tokens/s <n>  elapsed <t>  ETA -
step 2/3  loss <loss>  tokens/s <n>  elapsed <t>  ETA <t>
step 3/3  loss <loss>  tokens/s <n>  elapsed <t>  ETA <t>
Run <id> finished in <t>: 3 steps, final loss <loss>
  throughput   <n> tokens/s and <n> TFLOP/s per process
  processes    2 on cpu
  outputs      <dir> (summary.json holds the full summary and configuration)"""

PIPE_SNAPSHOT = """\
{"step": 1, "loss": <loss>, ...}
{"step": 2, "loss": <loss>, ...}
{"step": 3, "loss": <loss>, ...}
Run <id> finished in <t>: 3 steps, final loss <loss>
  throughput   <n> tokens/s and <n> TFLOP/s per process
  processes    2 on cpu
  outputs      <dir> (summary.json holds the full summary and configuration)"""


def _screen_line(raw: str) -> str:
    """What a terminal line shows at the end: the text after its last carriage return (a live bar redraws there)."""
    segments = [ANSI.sub("", part).rstrip() for part in raw.split("\r")]
    shown = [part for part in segments if part.strip()]
    return shown[-1] if shown else ""


def _normalise(line: str, run_dir: str) -> str:
    line = line.replace(run_dir, "<dir>")
    line = re.sub(r"\b([Rr]un) \S+-\d{8}-\d{6}-[0-9a-f]{4}", r"\1 <id>", line)
    line = re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:<port>", line)
    line = re.sub(r'("loss": )[-\d.e]+.*', r"\1<loss>, ...}", line)
    line = re.sub(r"loss -?\d+\.\d{4}", "loss <loss>", line)
    line = re.sub(r"\b\d+:\d\d\b", "<t>", line)
    line = re.sub(r"tokens/s [\d,]+", "tokens/s <n>", line)
    return re.sub(r"\b[\d,]+(\.\d+)? (tokens/s|TFLOP/s)", r"<n> \2", line)


@pytest.fixture
def cluster(state_dir: Path) -> Iterator[None]:
    etcd_or_skip()
    if importlib.util.find_spec("fsdp_trainer") is None:
        pytest.skip("the trainer is not installed")
    assert run_cli("up", "--backend", "local").returncode == 0
    yield
    run_cli("down", "--backend", "local")


def _run_in_a_pty(args: list[str], timeout: float = 240) -> tuple[int, str]:
    leader, follower = pty.openpty()
    process = subprocess.Popen(
        [FSDP_SDK, *args], stdin=follower, stdout=follower, stderr=follower, env={**os.environ, "COLUMNS": "120"}
    )
    os.close(follower)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 1.0)
        if ready:
            try:
                data = os.read(leader, 65536)
            except OSError:  # the terminal closed: the command ended
                break
            if not data:
                break
            chunks.append(data)
        elif process.poll() is not None:
            break
    os.close(leader)
    return process.wait(timeout=30), b"".join(chunks).decode(errors="replace")


@pytest.mark.slow
def test_on_a_terminal_the_run_says_what_it_does_and_one_line_per_step(cluster: None, state_dir: Path) -> None:
    code, text = _run_in_a_pty(ARGS)
    assert code == 0, text[-3000:]
    plain = [_screen_line(line) for line in text.replace("\r\n", "\n").split("\n")]
    run_id = next(re.search(r"run (\S+): 2 agents", line).group(1) for line in plain if "agents x" in line)
    run_dir = str(state_dir / "local" / "runs" / run_id)
    # the live bar ("━") is transient on a real terminal; this line-based reading of the screen still sees it
    shown = [line for line in plain if "━" not in line]
    ours = [_normalise(line, run_dir) for line in shown if line.startswith(("> ", "step ", "Run ", "  "))]
    assert "\n".join(ours) == TTY_SNAPSHOT
    assert not any(line.lstrip().startswith('{"step"') for line in plain), "no raw JSON on a terminal"
    assert sum("final loss" in line for line in plain) == 1, "the summary once"


@pytest.mark.slow
def test_in_a_pipe_stdout_is_the_per_step_json_and_the_rest_goes_to_stderr(cluster: None, state_dir: Path) -> None:
    result = run_cli(*ARGS, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    run_id = re.search(r"^run (\S+): 2 agents", result.stderr, re.M).group(1)
    run_dir = str(state_dir / "local" / "runs" / run_id)
    ours = [_normalise(line, run_dir) for line in result.stdout.splitlines()]
    ours += [_normalise(line, run_dir) for line in result.stderr.splitlines() if line.startswith(("Run ", "  "))]
    assert "\n".join(ours) == PIPE_SNAPSHOT
    # stdout is machine-readable: every line is the trainer's per-step JSON; everything else went to stderr
    assert [json.loads(line)["step"] for line in result.stdout.splitlines()] == [1, 2, 3]
    assert "master_addr=" in result.stderr and "master_addr=" not in result.stdout
    assert "\x1b[" not in result.stdout + result.stderr, "no terminal codes in a pipe"
    assert "waiting for 2 agents at the etcd-v2 rendezvous" in result.stderr, "progress goes to stderr"
    metrics = (Path(run_dir) / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in metrics] == [1, 2, 3]


def test_a_step_line_and_the_summary() -> None:
    record = {"step": 7, "loss": 3.14159265, "tokens_per_s_per_gpu": 12345.678}
    assert format_step(record, 20, 65.2, 3725) == "step  7/20  loss 3.1416  tokens/s 12,346  elapsed 1:05  ETA 1:02:05"
    assert format_step(record, None, 1, None) == "step 7  loss 3.1416  tokens/s 12,346  elapsed 0:01  ETA -"
    assert format_duration(None) == "-"
    lines = summary_lines(
        "r1",
        {
            "steps": 20,
            "steps_run": 12,
            "final_loss": 2.5,
            "tokens_per_s_per_gpu": 1000.4,
            "tflops_per_gpu": 0.5,
            "mfu": 0.42,
            "world_size": 8,
            "gpu_name": "NVIDIA H200",
            "peak_mem_gib": 70.26,
        },
        "/out",
        100,
    )
    assert lines == [
        "Run r1 finished in 1:40: 20 steps (12 in this segment), final loss 2.5000",
        "  throughput   1,000 tokens/s this segment and 0.50 TFLOP/s per process, MFU 42.0%",
        "  processes    8 on NVIDIA H200, peak memory 70.3 GiB",
        "  outputs      /out (summary.json holds the full summary and configuration)",
        "Next: 'fsdp-sdk job report r1' (plots and figures), 'fsdp-sdk job logs r1' (the leader's log), or "
        "'fsdp-sdk run --name r1 --steps N' to train it further",
    ]


def test_a_cluster_operation_on_a_terminal_shows_its_step_and_time_and_dims_the_tools_lines() -> None:
    import io

    from rich.console import Console

    from fsdp_sdk.cli.run_display import OperationDisplay

    screen = io.StringIO()
    display = OperationDisplay("creating the cluster", console=Console(file=screen, force_terminal=True, width=100))
    display.progress("preflight: 5 checks passed")
    display.progress('[eksctl 02:31] creating nodegroup "gpu"')
    display.progress("waiting for the GPU nodes")
    display.close()
    lines = [_screen_line(line) for line in screen.getvalue().split("\n")]
    assert "> preflight: 5 checks passed" in lines and "> waiting for the GPU nodes" in lines
    assert '[eksctl 02:31] creating nodegroup "gpu"' in lines, "a tool's line is printed as it came, not as a step"
    assert "\x1b[2m[eksctl 02:31]" in screen.getvalue(), "dimmed"
    assert any(re.fullmatch(r"\S waiting for the GPU nodes 0:00:0\d", line) for line in lines), "step, spinner, time"


def test_up_and_down_on_a_terminal_show_their_steps_live(state_dir: Path) -> None:
    etcd_or_skip()
    code, text = _run_in_a_pty(["up", "--backend", "local"], timeout=60)
    try:
        assert code == 0, text[-3000:]
        plain = [_screen_line(line) for line in text.replace("\r\n", "\n").split("\n")]
        assert "> starting etcd on 127.0.0.1 (free ports)" in plain
        assert any(line.startswith("> etcd is healthy at 127.0.0.1:") for line in plain)
        assert "state: ready" in plain, "the status, after the live line"
    finally:
        down_code, down_text = _run_in_a_pty(["down", "--backend", "local"], timeout=60)
    assert down_code == 0 and "state: absent" in [_screen_line(line) for line in down_text.split("\n")], down_text

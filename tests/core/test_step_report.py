"""``fsdp_sdk.report``: light (no torch), the trainer's JSON-lines format on rank 0 (stdout and metrics.jsonl, what
the progress display and ``runs`` read), nothing on the other ranks, a resumed run's steps not counted twice, and
the values on the Prometheus endpoint the trainer serves. Each case runs in a fresh interpreter, as a rank does."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fsdp_sdk.runs import leader_line_event


def _rank(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("FSDP_SDK_", "RANK", "LOCAL_RANK"))}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env={**clean, **env}, check=True
    )


def test_rank_0_writes_the_trainers_lines_without_importing_torch(tmp_path: Path) -> None:
    code = (
        "import sys, fsdp_sdk\n"
        "fsdp_sdk.report(step=1, loss=2.0, tokens=100, step_time_s=0.5)\n"
        "fsdp_sdk.report(step=2, loss=1.5, tokens=100, step_time_s=0.25, lr=0.1, mfu=0.3, phase='warm')\n"
        "print('torch imported:', 'torch' in sys.modules)\n"
    )
    done = _rank(code, {"FSDP_SDK_OUTPUT_DIR": str(tmp_path), "RANK": "0"})
    *lines, last = done.stdout.splitlines()
    assert last == "torch imported: False"
    records = [json.loads(line) for line in lines]
    reported = records[0].pop("time")  # when the step was reported (job report places the steps by it)
    assert abs(reported - time.time()) < 120 and records[1]["time"] >= reported
    assert records[0] == {"step": 1, "loss": 2.0, "step_time_s": 0.5, "tokens": 100, "tokens_per_s_per_gpu": 200.0}
    assert records[1]["tokens_per_s_per_gpu"] == 400.0 and records[1]["lr"] == 0.1
    assert (records[1]["mfu"], records[1]["phase"]) == (0.3, "warm")
    assert (tmp_path / "metrics.jsonl").read_text().splitlines() == lines  # what runs and job report read
    events = [leader_line_event(line, total_steps=2) for line in lines]  # what run's progress display gets
    assert [(e.kind, e.record["step"]) for e in events if e and e.record] == [("step", 1), ("step", 2)]


def test_other_ranks_write_nothing_and_a_resumed_run_counts_no_step_twice(tmp_path: Path) -> None:
    report = "import fsdp_sdk\nfor step in (3, 4):\n    fsdp_sdk.report(step=step, loss=1.0)\n"
    quiet = _rank(report, {"FSDP_SDK_OUTPUT_DIR": str(tmp_path), "RANK": "1"})
    assert quiet.stdout == "" and not (tmp_path / "metrics.jsonl").exists()
    # the killed attempt had reported steps 1..5 (the last line cut short); the checkpoint was at step 2
    earlier = [json.dumps({"step": s, "loss": 9.0}) for s in range(1, 6)]
    (tmp_path / "metrics.jsonl").write_text("\n".join(earlier) + '\n{"step": 6, "lo')
    _rank(report, {"FSDP_SDK_OUTPUT_DIR": str(tmp_path), "RANK": "0"})
    steps = [json.loads(line)["step"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4]


def test_a_step_that_is_not_an_int_is_refused() -> None:
    from fsdp_sdk.step_report import report

    with pytest.raises(TypeError, match="step must be an int"):
        report(step=1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="loss must be a number"):
        report(step=1, loss="low")  # type: ignore[arg-type]


@pytest.mark.skipif(
    importlib.util.find_spec("prometheus_client") is None or importlib.util.find_spec("fsdp_trainer") is None,
    reason="the endpoint is the trainer's (fsdp-trainer[prometheus])",
)
def test_the_values_are_served_for_prometheus_as_the_trainer_serves_them(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    code = (
        "import urllib.request, fsdp_sdk\n"
        "fsdp_sdk.report(step=7, loss=0.5, tokens=64, step_time_s=0.5)\n"
        f"print(urllib.request.urlopen('http://127.0.0.1:{port}/metrics', timeout=10).read().decode())\n"
    )
    done = _rank(code, {"FSDP_SDK_METRICS_PORT": str(port), "FSDP_SDK_METRICS_LINGER_S": "0", "RANK": "0"})
    body = done.stdout
    assert "fsdp_trainer_step 7.0" in body and "fsdp_trainer_loss 0.5" in body
    assert "fsdp_trainer_tokens_per_second_per_gpu 128.0" in body and "fsdp_trainer_tokens_total 64.0" in body

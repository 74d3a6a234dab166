"""``fsdp-sdk job report`` from the trainer's per-step JSON: a local run's metrics.jsonl, a job's leader log."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import pytest

from fsdp_sdk.reports.render import PLOTS, write_report
from fsdp_sdk.reports.sources import from_jsonl, from_lines
from k8s.fake_apiserver import FakeApiServer
from k8s.tools import cli

PNG = b"\x89PNG\r\n\x1a\n"


def _records(steps: int = 12) -> list[dict[str, Any]]:
    return [
        {
            "step": s,
            "loss": 6.0 - 0.2 * s,
            "lr": 3e-4,
            "grad_norm": 1.0 + 0.01 * s,
            "tokens_per_s_per_gpu": 1000.0 + 10 * s,
            "tflops_per_gpu": 0.5 + 0.01 * s,
            "mfu": None,
            "peak_mem_gib": None,
            "step_time_s": 0.25,
            "tokens": 256,
        }
        for s in range(1, steps + 1)
    ]


def _write_run(state: Path, run_id: str, records: list[dict[str, Any]]) -> Path:
    run_dir = state / "local" / "runs" / run_id
    run_dir.mkdir(parents=True)
    text = "".join(json.dumps(r) + "\n" for r in records)
    (run_dir / "metrics.jsonl").write_text(text + '{"step": 13, "lo')  # a run killed mid-write
    return run_dir


def test_report_from_metrics_jsonl(tmp_path: Path) -> None:
    records = _records()
    run_dir = _write_run(tmp_path, "abc123", records)
    metrics = from_jsonl(run_dir / "metrics.jsonl", run="abc123", job="fsdp")
    summary = metrics.summary()["training"]
    measured = records[2:]  # after the trainer's 2 warm-up steps
    assert summary["steps"] == 12 and summary["measured_steps"] == 10
    assert summary["tokens_per_s_per_gpu"] == pytest.approx(
        statistics.fmean(r["tokens_per_s_per_gpu"] for r in measured)
    )
    assert summary["final_loss"] == records[-1]["loss"] and summary["mfu"] is None
    assert summary["duration_s"] == pytest.approx(0.25 * 12), "12 steps of 0.25 s, from the first one's start"
    files = write_report(metrics, tmp_path / "report")
    assert set(files.plots) == set(PLOTS)
    for path in files.plots.values():
        assert path.read_bytes().startswith(PNG) and path.stat().st_size > 5000
    page = files.html.read_text()
    assert page.count("data:image/png;base64,") == len(PLOTS)
    assert 'src="http' not in page and "<script" not in page  # self-contained
    assert "1,075 tokens/s per GPU" in page and "No GPU telemetry" in page
    written = json.loads(files.summary.read_text())
    assert written["training"]["steps"] == 12
    # lines without the trainer's time stamps: the axis says it is the sum of step times, and spans the duration
    assert written["time_axis"]["of"] == "sum of step times (the lines carry no time)"
    assert written["time_axis"]["span_s"] == [0.0, pytest.approx(3.0)]
    assert written["time_axis"]["drawn_s"]["loss.png"] == pytest.approx([0.25, 3.0])


def test_report_of_time_stamped_lines_runs_on_the_wall_clock(tmp_path: Path) -> None:
    """The trainer's lines carry the time each step ended: the plots place the steps by it, from the first step's
    start, over the span the table calls the duration (a slow step shows as one)."""
    ends = [100.0 + 0.25 * s + (2.0 if s > 6 else 0.0) for s in range(1, 13)]  # step 7 waited 2 s (a checkpoint)
    records = [{**r, "time": end} for r, end in zip(_records(), ends, strict=True)]
    metrics = from_lines([json.dumps(r) for r in reversed(records)], run="fsdp", source="the leader's log")
    assert [r["t"] for r in metrics.records] == pytest.approx([e - 100.0 for e in ends])
    assert metrics.summary()["training"]["duration_s"] == pytest.approx(5.0)  # not the 3 s of summed step times
    written = json.loads(write_report(metrics, tmp_path / "report").summary.read_text())
    assert written["time_axis"]["of"] == "wall-clock time since the first step began"
    assert written["time_axis"]["span_s"] == [0.0, pytest.approx(5.0)]
    assert written["time_axis"]["drawn_s"]["throughput.png"] == pytest.approx([0.25, 5.0])


def test_report_from_log_lines_skips_other_lines() -> None:
    lines = [
        "master_addr=10.0.0.1",
        "[rank0] INFO starting",
        *[json.dumps(r) for r in _records(5)],
        '{"not": "a step"}',
    ]
    metrics = from_lines(lines, run="fsdp", source="the leader's log", job="fsdp")
    assert [r["step"] for r in metrics.records] == [1, 2, 3, 4, 5]
    with pytest.raises(Exception, match="has no per-step metrics"):
        from_lines(["nothing here"], run="fsdp", source="the leader's log")


@pytest.mark.usefixtures("isolated")
def test_job_report_of_a_local_run(isolated: Path, capsys: Any) -> None:
    _write_run(isolated / "state", "older", _records(3))
    _write_run(isolated / "state", "run42", _records())
    code, out, err = cli(capsys, "job", "report", "run42", "--backend", "local", "-o", str(isolated / "r"), "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["summary"]["run"] == "run42" and result["summary"]["source"].startswith("metrics.jsonl")
    assert Path(result["files"]["html"]).is_file()
    assert result["cost"]["local"] is True and result["cost"]["usd"] == 0.0  # a local run: nothing billed
    code, _, err = cli(capsys, "job", "report", "nope", "--backend", "local")
    assert code == 2 and "no local run 'nope'" in err and "recent runs:" in err


@pytest.mark.usefixtures("isolated")
def test_the_report_of_a_local_run_says_when_it_started(isolated: Path, capsys: Any) -> None:
    from fsdp_sdk.backends.local.records import RunRecord

    run_dir = _write_run(isolated / "state", "run7", _records())
    RunRecord("run7", "succeeded", "fsdp", str(run_dir), str(run_dir), 1, 1, 12, 1796000000.0, 1796000030.0).save()
    code, out, err = cli(capsys, "job", "report", "run7", "--backend", "local", "-o", str(isolated / "r"), "--json")
    assert code == 0, err
    page = Path(json.loads(out)["files"]["html"]).read_text()
    assert "started n/a" not in page and "started 2026-11-30 00:53:20 UTC" in page
    assert "<th>duration (the whole run)</th><td>0:30</td>" in page, (
        "the run's one duration: its record's, as 'runs' shows"
    )


@pytest.mark.usefixtures("isolated")
def test_job_report_reads_the_leader_log_without_prometheus(
    apiserver: FakeApiServer, isolated: Path, monkeypatch: Any, capsys: Any
) -> None:
    from fsdp_sdk.k8s.render import JOB_NAME_LABEL

    monkeypatch.setenv("KUBECONFIG", str(apiserver.write_kubeconfig(isolated / "kubeconfig")))
    monkeypatch.setenv("PATH", "/nonexistent")  # no kubectl: no port-forward to Prometheus
    log = "master_addr=10.0.0.1 host=ip-10-0-0-1.ec2.internal\n" + "".join(json.dumps(r) + "\n" for r in _records())
    apiserver.add_pod("train-worker-0", labels={JOB_NAME_LABEL: "train"}, log=log)
    apiserver.add_pod("train-worker-1", labels={JOB_NAME_LABEL: "train"}, log="")
    code, out, err = cli(
        capsys, "job", "report", "train", "--kubeconfig", str(isolated / "kubeconfig"), "-o", str(isolated / "r")
    )
    assert code == 0, err
    assert "kubectl" in err and "reading the leader's log" in err  # why Prometheus was not used
    assert "run train: 12 steps, 1,075 tokens/s per GPU" in out and "the leader's log of job default/train" in out
    assert "cost: " not in out  # the job itself is gone (only its pods are left): no figure rather than a wrong one
    assert (isolated / "r" / "report.html").is_file()

"""One story: a continued local run's figures are the same in ``runs``, ``job status``, ``job report`` and the
summary, each saying which they are (the whole run, this segment); the report starts when the run started and is
written into the run's directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fsdp_sdk.cli.run_display import summary_lines

STARTED = 1796561021.16  # the first segment's start
SEGMENT_START = STARTED + 100.0


def _continued_run(state_dir: Path, run_id: str = "twice") -> Path:
    """A run of 8 steps in two segments: 15 s up to step 6 (checkpoint at 4), then 22 s from step 5 to 8.

    Each step's ``time`` is when it ended: steps 1-6 at 9-14 s into the first segment, steps 5-8 at 17-20 s into
    the second (started 100 s after the first: the run was stopped for 85 s), so on the run's clock (stopped time
    left out) step 1 ends at 9 s and step 8 at 15 + 20 = 35 s, of the whole run's 37 s."""
    from fsdp_sdk.backends.local.records import RunRecord

    run_dir = state_dir / "local" / "runs" / run_id
    run_dir.mkdir(parents=True)
    first = [
        {"step": s, "loss": 10.0 - s, "tokens_per_s_per_gpu": 1000.0 + s, "step_time_s": 1.0, "time": STARTED + 8 + s}
        for s in range(1, 7)
    ]
    second = [
        {"step": s, "loss": 9.5 - s, "tokens_per_s_per_gpu": 2000.0 + s, "step_time_s": 1.0}
        | {"time": SEGMENT_START + 12 + s}
        for s in range(5, 9)
    ]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in first + second))
    summary = {"steps": 8, "steps_run": 4, "final_loss": 1.5, "tokens_per_s_per_gpu": 2007.5, "world_size": 2}
    (run_dir / "summary.json").write_text(json.dumps(summary))
    RunRecord(
        run_id,
        "succeeded",
        "fsdp",
        str(run_dir),
        str(run_dir),
        2,
        1,
        8,
        SEGMENT_START,
        SEGMENT_START + 22.0,
        run_started_at=STARTED,
        earlier_s=15.0,
        segments=[[STARTED, STARTED + 15.0]],
        attempts=2,
    ).save()
    return run_dir


#: The whole run's throughput: steps 3-8 after the warm-up, a step run twice counted as its last run.
WHOLE = (1003 + 1004 + 2005 + 2006 + 2007 + 2008) / 6


def test_runs_status_report_and_summary_give_the_same_figures_and_say_which(
    invoke, state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir = _continued_run(state_dir)
    listed = json.loads(invoke("runs", "--backend", "local", "--json").stdout)[0]
    assert listed["tokens_per_s"] == pytest.approx(WHOLE) and listed["steps"] == 8 and listed["final_loss"] == 1.5
    assert listed["run_duration_s"] == 37.0 and listed["duration_s"] == 22.0
    table = invoke("runs", "--backend", "local").stdout.splitlines()
    assert table[0].split()[:8] == ["ID", "STATE", "STEPS", "LOSS", "TOKENS/S", "STARTED", "DURATION", "COST"]
    row = table[1]
    assert f"{WHOLE:,.0f}" in row and "2026-12-06 12:43:41 UTC" in row and "0:37" in row, row

    status = invoke("job", "status", "twice", "--backend", "local")
    assert "started_at: 2026-12-06 12:45:21 UTC" in status.stdout, status.stdout
    assert "run_started_at: 2026-12-06 12:43:41 UTC" in status.stdout and "run_duration: 0:37" in status.stdout
    assert "segment_duration: 0:22" in status.stdout and "1796561" not in status.stdout, "no raw Unix time"
    assert f"tokens_per_s: {WHOLE:,.0f} (the whole run, per process)" in status.stdout
    assert "final_loss: 1.5000" in status.stdout
    raw = json.loads(invoke("job", "status", "twice", "--backend", "local", "--json").stdout)
    assert raw["run_started_at"] == STARTED and raw["duration_s"] == 22.0, "--json keeps the raw values"

    monkeypatch.chdir(tmp_path)
    report = invoke("job", "report", "twice", "--backend", "local", "--json")
    assert report.exit_code == 0, report.output
    result = json.loads(report.stdout)
    training = result["summary"]["training"]
    assert training["tokens_per_s_per_gpu"] == pytest.approx(WHOLE), "the same throughput as 'runs'"
    assert training["duration_s"] == 37.0 and training["segment_duration_s"] == 22.0
    assert training["duration_of"] == "the whole run" and result["summary"]["started"] == STARTED
    assert Path(result["files"]["html"]) == run_dir / "report" / "report.html", "into the run's directory"
    assert not list(tmp_path.glob("fsdp-report-*")), "nothing in the current directory"
    page = (run_dir / "report" / "report.html").read_text()
    assert "<th>duration (the whole run)</th><td>0:37 (0:22 this segment)</td>" in page
    assert f"<td>{WHOLE:,.0f} tokens/s per GPU</td>" in page and "started 2026-12-06 12:43:41 UTC" in page
    axis = result["summary"]["time_axis"]  # as summary.json has it
    assert axis == json.loads((run_dir / "report" / "summary.json").read_text())["time_axis"]
    assert axis["of"].startswith("the run's running time since its start"), axis
    assert axis["span_s"] == [0.0, training["duration_s"]], "the plots span the duration the table gives"
    for plot in ("throughput.png", "loss.png"):  # on the run's clock: step 1 ended at 9 s, step 8 at 35 s
        assert axis["drawn_s"][plot] == pytest.approx([9.0, 35.0]), (plot, axis)
    assert "x axis: the run&#x27;s running time since its start" in page and "from 0:00 to 0:37" in page
    text = invoke("job", "report", "twice", "--backend", "local", "-o", str(tmp_path / "r")).stdout
    assert f"{WHOLE:,.0f} tokens/s per GPU (whole run, after warm-up)" in text

    summary = json.loads((run_dir / "summary.json").read_text())
    lines = summary_lines("twice", summary, run_dir, 37.0, segment_s=22.0, run_tokens_per_s=listed["tokens_per_s"])
    assert (
        lines[0]
        == "Run twice finished in 0:37 (the whole run; 0:22 this segment): 8 steps (4 in this segment), final loss 1.5000"
    )
    assert lines[1].startswith(f"  throughput   {WHOLE:,.0f} tokens/s over the whole run (2,008 this segment)")


def test_after_the_summary_one_line_says_what_to_do_next() -> None:
    lines = summary_lines("r1", {"steps": 3, "final_loss": 2.0}, "/x", 5.0)
    assert lines[-1] == (
        "Next: 'fsdp-sdk job report r1' (plots and figures), 'fsdp-sdk job logs r1' (the leader's log), or "
        "'fsdp-sdk run --name r1 --steps N' to train it further"
    )
    assert not any("this segment" in line for line in lines), "one segment: nothing to tell apart"


def test_a_runs_clock_leaves_out_the_time_it_was_stopped() -> None:
    """RunRecord.running_time: seconds the run had run by a Unix time, segments' gaps left out; records of older
    versions (no segments, one earlier stretch) count from the run's start."""
    from fsdp_sdk.backends.local.records import RunRecord

    record = RunRecord("r", "succeeded", "fsdp", "/x", "/x", 1, 1, 8, 1000.0, 1030.0, run_started_at=100.0)
    record.earlier_s, record.segments = 25.0, [[100.0, 110.0], [500.0, 515.0]]
    assert [record.running_time(t) for t in (100.0, 105.0, 300.0, 510.0, 900.0, 1000.0, 1012.0, 1030.0)] == [
        0.0,
        5.0,
        10.0,  # stopped: still 10 s
        20.0,
        25.0,
        25.0,
        37.0,
        55.0,
    ]
    assert record.running_time(1030.0) == record.run_duration_s
    older = RunRecord("r", "succeeded", "fsdp", "/x", "/x", 1, 1, 8, 1000.0, 1030.0, run_started_at=100.0)
    older.earlier_s = 15.0
    assert (older.running_time(110.0), older.running_time(1020.0)) == (10.0, 35.0)


def test_a_continued_run_records_each_earlier_segment() -> None:
    """The local backend's record of a continued run keeps every earlier segment's start and end, which add up to
    its earlier_s (what running_time counts by)."""
    from fsdp_sdk.backends.local.backend import _earlier_s, _segments

    first = {"started_at": 100.0, "ended_at": 110.0}
    second = {"started_at": 500.0, "ended_at": 515.0, "earlier_s": _earlier_s(first), "segments": _segments(first)}
    assert _segments(second) == [[100.0, 110.0], [500.0, 515.0]] and _earlier_s(second) == 25.0
    assert _segments({"started_at": 900.0}) == [], "a segment without an end (lost) adds none, as earlier_s"


def test_a_finished_run_run_again_gives_the_figures_runs_gives(invoke, state_dir: Path) -> None:
    """Running a finished (continued) run by its name starts nothing and sums it up as its end did and as 'runs'
    does: the whole run's duration and throughput, its last segment's beside them (was: the trainer's own
    tokens/s of the last segment, 2,008, with no word of the whole run's)."""
    pytest.importorskip("fsdp_trainer")
    _continued_run(state_dir)
    result = invoke("run", "--backend", "local", "--preset", "tiny", "--name", "twice", "--steps", "8")
    assert result.exit_code == 0, result.output
    assert "run twice has finished (8 steps): nothing started" in result.stderr
    assert (
        "Run twice finished in 0:37 (the whole run; 0:22 this segment): 8 steps (4 in this segment), "
        "final loss 1.5000" in result.stderr
    ), result.stderr
    assert f"throughput   {WHOLE:,.0f} tokens/s over the whole run (2,008 this segment)" in result.stderr
    listed = json.loads(invoke("runs", "--backend", "local", "--json").stdout)[0]
    assert listed["tokens_per_s"] == pytest.approx(WHOLE) and listed["run_duration_s"] == 37.0
    assert not (state_dir / "local" / "state.json").exists(), "no etcd was started"

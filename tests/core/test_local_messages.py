"""What the local backend says when a run stops or fails, and of settings that do nothing where they are given."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fsdp_sdk import Client
from fsdp_sdk.errors import RunError


def _stopped_run(state_dir: Path, run_id: str, last_step: int, checkpoints: list[int] | None) -> Path:
    """A run that was stopped after ``last_step``, checkpointing (``checkpoints``: complete steps) or not (None)."""
    from fsdp_sdk.backends.local.records import RunRecord

    run_dir = state_dir / "local" / "runs" / run_id
    run_dir.mkdir(parents=True)
    lines = [json.dumps({"step": step, "loss": 3.0}) for step in range(1, last_step + 1)]
    (run_dir / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    settings: dict = {"trainer": {"checkpoint": {"enabled": False}}, "checkpoint_locations": []}
    if checkpoints is not None:
        root = run_dir / "checkpoints"
        settings["checkpoint_locations"] = [str(root)]
        for step in checkpoints:
            (root / f"step_{step:08d}").mkdir(parents=True)
            (root / f"step_{step:08d}" / "COMPLETE").write_text("")
        (root / "step_00000099.tmp").mkdir(parents=True)  # a save cut short: no checkpoint
    RunRecord(
        run_id, "interrupted", "fsdp", str(run_dir), str(run_dir), 1, 1, 40, 1000.0, 1100.0, settings=settings
    ).save()
    return run_dir


def _client() -> Client:
    return Client.from_sources(overrides={"cluster.backend": "local"})


def test_a_stopped_run_says_its_last_step_and_checkpoint_and_where_a_resume_continues(state_dir: Path) -> None:
    run_dir = _stopped_run(state_dir, "r27", 27, [10, 20])
    saved = _client().runner.saved("r27")  # type: ignore[attr-defined]
    where = run_dir / "checkpoints" / "step_00000020"
    assert saved == f"stopped at step 27; the last checkpoint is step 20 ({where}): a resume continues from step 21"


def test_a_run_stopped_before_its_first_checkpoint_says_a_resume_starts_at_step_1(state_dir: Path) -> None:
    _stopped_run(state_dir, "early", 7, [])
    _stopped_run(state_dir, "off", 3, None)
    runner = _client().runner
    assert runner.saved("early") == "stopped at step 7; no checkpoint yet: a resume starts at step 1"  # type: ignore[attr-defined]
    assert runner.saved("off") == "stopped at step 3; it saves no checkpoints: a resume starts at step 1"  # type: ignore[attr-defined]


def test_the_interrupt_line_says_what_is_saved_and_the_way_on(state_dir: Path) -> None:
    from fsdp_sdk.cli.run_display import stopped_lines

    _stopped_run(state_dir, "r27", 27, [20])
    (line,) = stopped_lines(_client(), "r27", KeyboardInterrupt())
    assert line.startswith("Run r27 interrupted: stopped at step 27; the last checkpoint is step 20 (")
    assert line.endswith("): a resume continues from step 21; continue it with: fsdp-sdk run --resume r27")


def test_a_failure_gets_no_resume_hint_beside_out_of_memory_or_with_nothing_saved(state_dir: Path) -> None:
    from fsdp_sdk.cli.run_display import stopped_lines

    _stopped_run(state_dir, "r27", 27, [20])
    failed = RunError("run r27 failed: agent 1's local rank 0 exited with code 1; logs in /x")
    (line,) = stopped_lines(_client(), "r27", failed)
    assert line.startswith("Run r27 failed: stopped at step 27; the last checkpoint is step 20")
    _stopped_run(state_dir, "early", 0, [])
    assert stopped_lines(_client(), "early", failed) == [], "nothing done, nothing saved: nothing to continue"
    oom = RunError(
        "run r27 failed: out of memory: rank 0 ...; not restarted (it would run out again): use a smaller model"
    )
    assert stopped_lines(_client(), "r27", oom) == [], "no resume hint beside 'it would run out again'"


def test_settings_that_do_nothing_on_the_local_backend_warn_in_one_line(
    invoke, state_dir: Path, tmp_path: Path
) -> None:
    result = invoke("up", "--backend", "local", "--idle-scale-to-zero", "30", "--dry-run")
    assert result.exit_code == 0, result.output
    warning = next(line for line in result.stderr.splitlines() if "--idle-scale-to-zero" in line)
    assert warning == (
        "[warning] --idle-scale-to-zero (cluster.idle_scale_to_zero_minutes): given (command line) but does nothing "
        "on the local backend: this machine has no GPU nodes to scale to zero; leave it out, or use it with a "
        "cluster backend (--backend eksctl|terraform)"
    )
    env = tmp_path / "job.env"
    env.write_text("CMD='torchrun train.py'\n")
    checks = Client.from_sources(env_file=env, overrides={"cluster.backend": "local"}).preflight("run")
    (line,) = [r.line() for r in checks if "job.command" in r.check]
    assert line.startswith(f"[warning] CMD (job.command): given ({env.name}")
    assert "does nothing on the local backend: local runs start the trainer (python -m fsdp_trainer) themselves" in line
    quiet = Client.from_sources(overrides={"cluster.backend": "local"}).preflight("run")
    assert not [r for r in quiet if not r.ok and "does nothing" in r.message]


@pytest.mark.parametrize("given", [False, True])
def test_only_a_setting_given_is_warned_of(given: bool) -> None:
    from fsdp_sdk.backends.local.backend import ignored_settings
    from fsdp_sdk.config import Setting

    overrides = [Setting("job.command", "torchrun x.py", "CMD", ".env")] if given else []
    config = Client.from_sources(overrides=[Setting("cluster.backend", "local"), *overrides]).config
    assert len(ignored_settings(config)) == int(given)


def test_a_failing_runs_display_holds_its_traceback_back_for_the_logs(capsys: pytest.CaptureFixture[str]) -> None:
    """The leader's traceback and torchrun's failure summary stay in the logs; the display says where they are and
    goes on with the lines after them."""
    from fsdp_sdk.cli.run_display import TRACEBACK_NOTE, PlainDisplay
    from fsdp_sdk.runs import RunEvent

    lines = [
        "loading the model",
        "[rank0]: Traceback (most recent call last):",
        '[rank0]:   File "/x/trainer.py", line 12, in step',
        "[rank0]:     loss.backward()",
        "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
        "Traceback (most recent call last):",
        '  File "/x/run.py", line 3, in <module>',
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "============================================================",
        "fsdp_trainer FAILED",
        "------------------------------------------------------------",
        "Root Cause (first observed failure):",
        "============================================================",
        "agent stopped",
    ]
    display = PlainDisplay()
    for line in lines:
        display.event(RunEvent("output", line))
    shown = capsys.readouterr().err.splitlines()
    assert shown == ["loading the model", TRACEBACK_NOTE, "agent stopped"]

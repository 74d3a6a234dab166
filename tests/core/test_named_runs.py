"""A named local run keeps what it was started with: running the name again continues with its recorded settings,
options given again override only what they name, and a change that would lose its progress is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fsdp_sdk import Client
from fsdp_sdk.backends.local.continuation import complete_checkpoints, unused_checkpoint_note
from fsdp_sdk.errors import ConfigError

pytestmark = pytest.mark.skipif(
    pytest.importorskip("fsdp_trainer") is None, reason="the trainer package is not installed"
)

CKPT = "s3://ckpt/s3run"


def _recorded_run(
    state_dir: Path, run_id: str = "s3run", *, step: int | None = 20, trainer: dict | None = None
) -> Path:
    """A run started as ``run --backend local --name s3run --nodes 2 --steps 40 --set job.max_restarts=0
    -- --checkpoint.dir s3://ckpt/s3run``, interrupted after ``step``."""
    from fsdp_sdk.backends.local.records import RunRecord

    run_dir = state_dir / "local" / "runs" / run_id
    run_dir.mkdir(parents=True)
    if step is not None:
        (run_dir / "metrics.jsonl").write_text(json.dumps({"step": step, "loss": 2.5}) + "\n")
    settings = {
        "trainer": trainer or {"model": {"preset": "tiny"}, "train": {"steps": 40}, "checkpoint": {"dir": CKPT}},
        "sdk": {"job.max_restarts": 0, "job.num_workers": 2},
        "num_workers": 2,
        "nproc_per_node": 1,
        "checkpoint_locations": [CKPT],
    }
    RunRecord(
        run_id, "interrupted", "fsdp", str(run_dir), str(run_dir), 2, 1, 40, 1000.0, 1100.0, settings=settings
    ).save()
    return run_dir


def _client() -> Client:
    return Client.from_sources(overrides={"cluster.backend": "local"})


def _argument(command: tuple[str, ...], flag: str) -> str:
    return command[command.index(flag) + 1]


def test_running_the_name_again_continues_with_every_recorded_setting(state_dir: Path) -> None:
    """``run --name s3run --steps 300``: the trainer options and SDK settings of the first start, steps changed."""
    _recorded_run(state_dir)
    plan = _client().dryrun(trainer_overrides={"train.steps": 300}, run_id="s3run")
    command = plan.commands[0]
    assert _argument(command, "--checkpoint.dir") == CKPT, "the recorded trainer option"
    assert _argument(command, "--train.steps") == "300", "the option given again wins"
    assert _argument(command, "--model.preset") == "tiny"
    assert len(plan.commands) == 2 and _argument(command, "--nnodes") == "2", "the recorded worker count"
    assert plan.details["max_restarts"] == 0, "the recorded job.max_restarts"


def test_resume_continues_the_same_way(state_dir: Path) -> None:
    _recorded_run(state_dir)
    plan = _client().dryrun(trainer_overrides={"train.steps": 300}, resume="s3run")
    assert _argument(plan.commands[0], "--checkpoint.dir") == CKPT


@pytest.mark.parametrize(
    ("args", "flag", "was", "now"),
    [
        (
            ["--checkpoint.dir", "s3://ckpt/elsewhere"],
            "--checkpoint.dir",
            f"checkpoints in {CKPT}",
            "s3://ckpt/elsewhere",
        ),
        (["--model.preset", "tiny-gqa"], "--model.preset", "model.preset tiny", "model.preset tiny-gqa"),
        (["--checkpoint.enabled", "false"], "--checkpoint.enabled", f"checkpoints in {CKPT}", "no checkpoints"),
    ],
)
def test_a_change_that_would_lose_the_runs_progress_is_refused(
    state_dir: Path, args: list[str], flag: str, was: str, now: str
) -> None:
    _recorded_run(state_dir)
    with pytest.raises(ConfigError) as refused:
        _client().dryrun(trainer_args=args, run_id="s3run")
    message = str(refused.value)
    assert message.startswith(f"{flag}: run s3run was started with {was}; "), message
    assert f"this command gives {now}: " in message
    assert f"'fsdp-sdk run --resume s3run' (without {flag}), or start a new run with another --name" in message
    assert "\n" not in message


def test_the_refusal_on_the_command_line_is_one_line_exit_2(invoke, state_dir: Path) -> None:
    _recorded_run(state_dir)
    result = invoke(
        "run", "--backend", "local", "--name", "s3run", "--steps", "300", "--dry-run", "--", "--checkpoint.dir", "/x"
    )
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and f"run s3run was started with checkpoints in {CKPT}" in lines[0], result.stderr


def test_without_progress_a_new_location_is_taken(state_dir: Path) -> None:
    """Nothing to lose (no step finished yet): the options given now are simply the run's."""
    _recorded_run(state_dir, step=None)
    plan = _client().dryrun(trainer_args=["--checkpoint.dir", "s3://ckpt/other"], run_id="s3run")
    assert _argument(plan.commands[0], "--checkpoint.dir") == "s3://ckpt/other"


def test_a_world_size_the_hybrid_layout_cannot_use_is_refused(state_dir: Path) -> None:
    trainer = {
        "model": {"preset": "tiny"},
        "train": {"steps": 40},
        "parallel": {"sharding": "hybrid_shard", "shard_size": 2, "replicate_size": 1},
    }
    _recorded_run(state_dir, trainer=trainer)
    client = Client.from_sources(overrides={"cluster.backend": "local", "job.num_workers": 3})
    with pytest.raises(ConfigError, match=r"run s3run was started on 2 processes; this command gives 3: its hybrid"):
        client.dryrun(run_id="s3run")


def _checkpoint(root: Path, step: int, complete: bool = True) -> None:
    path = root / f"step_{step:08d}"
    path.mkdir(parents=True)
    if complete:
        (path / "COMPLETE").write_text("")


def test_a_run_starting_at_step_1_beside_a_complete_checkpoint_of_it_says_so(tmp_path: Path) -> None:
    ckpt = tmp_path / "run" / "checkpoints"
    _checkpoint(ckpt, 4)
    _checkpoint(ckpt, 6, complete=False)
    _checkpoint(ckpt, 8)
    (ckpt / "step_00000008" / "BROKEN").write_text("__0_0.distcp does not match the CRC32 recorded at save")
    assert complete_checkpoints(str(ckpt)) == [4], "a checkpoint the trainer found broken does not count"
    trainer = {"checkpoint": {"resume": "never"}}
    note = unused_checkpoint_note("r", trainer, tmp_path / "run", [])
    assert note == (
        f"run r starts at step 1 although {ckpt} holds its complete checkpoint of step 4 (checkpoint.resume is "
        f"never); to continue from it: --checkpoint.dir {ckpt} --checkpoint.resume auto"
    )
    assert unused_checkpoint_note("r", {}, tmp_path / "run", []) is None, "it resumes from there"
    elsewhere = {"checkpoint": {"dir": str(tmp_path / "new")}}
    note = unused_checkpoint_note("r", elsewhere, tmp_path / "run", [str(ckpt)])
    assert note and f"holds its complete checkpoint of step 4 (it now saves to {tmp_path / 'new'})" in note
    assert unused_checkpoint_note("r", {"checkpoint": {"enabled": False}}, tmp_path / "run", [str(ckpt)])


def test_the_note_comes_before_the_run_starts(state_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A named run with a complete checkpoint, continued with ``--checkpoint.resume never``: the run says so
    before any agent starts (the agents' start is made to fail here, so nothing runs)."""
    from fsdp_sdk.backends.local import supervisor

    run_dir = _recorded_run(state_dir, step=None, trainer={"model": {"preset": "tiny"}, "train": {"steps": 40}})
    record = json.loads((run_dir / "run.json").read_text())
    record["settings"]["checkpoint_locations"] = [str(run_dir / "checkpoints")]
    (run_dir / "run.json").write_text(json.dumps(record))
    _checkpoint(run_dir / "checkpoints", 8)

    def refuse(self: object) -> None:
        raise RuntimeError("no agents in this test")

    monkeypatch.setattr(supervisor.Supervisor, "start", refuse)
    said: list[str] = []
    client = Client.from_sources(
        overrides={"cluster.backend": "local", "job.rdzv_backend": "c10d"}, progress=said.append
    )
    with pytest.raises(RuntimeError, match="no agents"):
        client.run(trainer_args=["--checkpoint.resume", "never"], run_id="s3run", force=True)
    notes = [line for line in said if "starts at step 1" in line]
    assert notes == [
        f"run s3run starts at step 1 although {run_dir / 'checkpoints'} holds its complete checkpoint of step 8 "
        f"(checkpoint.resume is never); to continue from it: --checkpoint.dir {run_dir / 'checkpoints'} "
        "--checkpoint.resume auto"
    ], said
    assert said.index(notes[0]) < next(i for i, line in enumerate(said) if line.startswith("run s3run: ")), "first"


def test_the_memory_check_sees_the_model_the_named_run_continues(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``run --name big`` of a run started with llama2-70b: the run that would start is llama2-70b's, so that is
    what must fit (here: 1 GiB of host memory), not the default preset."""
    trainer = {"model": {"preset": "llama2-70b"}, "train": {"steps": 40}}
    _recorded_run(state_dir, "big", trainer=trainer)
    client = Client.from_sources(overrides={"cluster.backend": "local", "local.memory_limit_gib": 1})
    with pytest.raises(ConfigError, match=r"^estimate: llama2-70b needs about .* GiB of host memory"):
        client.dryrun(trainer_overrides={"train.steps": 50}, run_id="big")
    assert client.dryrun(trainer_overrides={"train.steps": 50}, run_id="big", force=True).run_id == "big"

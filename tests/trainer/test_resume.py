"""Checkpoints: a killed run resumes to exactly the same losses, and a save killed halfway is never used.

Runs use the testing aids ``FSDP_TRAINER_FAULT_AFTER_STEP`` (SIGKILL every rank after a
step and its checkpoint) and ``FSDP_TRAINER_FAULT_DURING_SAVE`` (SIGKILL every rank after
the shards of a save are written, before its ``COMPLETE`` marker and rename).
"""

from __future__ import annotations

import json

import pytest

from conftest import TINY, assert_ok, run_trainer

pytestmark = pytest.mark.timeout(240)

STEPS = 10
ARGS = [*TINY, "--train.steps", str(STEPS), "--train.micro_batch_size", "2", "--parallel.api", "fsdp2"]


@pytest.fixture(scope="module")
def straight(tmp_path_factory) -> dict[int, float]:
    """10 steps without interruption."""
    run = run_trainer([*ARGS, "--checkpoint.every_steps", "5"], tmp_path_factory.mktemp("straight") / "out", nproc=2)
    assert_ok(run)
    assert sorted(run.losses()) == list(range(1, STEPS + 1))
    return run.losses()


def test_kill_after_step_5_then_resume_matches_straight_run(straight, tmp_path):
    out = tmp_path / "out"
    killed = run_trainer([*ARGS, "--checkpoint.every_steps", "5"], out, nproc=2, env={"FSDP_TRAINER_FAULT_AFTER_STEP": "5"})
    assert killed.returncode != 0
    assert [r["step"] for r in killed.records] == [1, 2, 3, 4, 5]
    ckpts = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert ckpts == ["step_00000005"]
    train_state = json.loads((out / "checkpoints" / "step_00000005" / "train_state.json").read_text())
    assert train_state["step"] == 5 and train_state["data"]["position"] > 0

    resumed = run_trainer([*ARGS, "--checkpoint.every_steps", "5"], out, nproc=2)
    assert_ok(resumed)
    assert "resumed from" in resumed.stderr
    steps = [r["step"] for r in resumed.records]
    assert steps == list(range(1, STEPS + 1)), "the metrics file continues at step 6"
    losses = resumed.losses()
    for step in range(6, STEPS + 1):
        assert losses[step] == pytest.approx(straight[step], abs=1e-6), f"step {step}"
    assert resumed.summary["steps"] == STEPS and resumed.summary["steps_run"] == 5
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step_00000005", "step_00000010"]


def test_save_killed_midway_leaves_the_previous_checkpoint(straight, tmp_path):
    out = tmp_path / "out"
    args = [*ARGS, "--checkpoint.every_steps", "2", "--checkpoint.keep", "3"]
    crashed = run_trainer(args, out, nproc=2, env={"FSDP_TRAINER_FAULT_DURING_SAVE": "4"})
    assert crashed.returncode != 0
    ckpt = out / "checkpoints"
    assert (ckpt / "step_00000002" / "COMPLETE").is_file()
    partial = ckpt / "step_00000004.tmp"
    assert partial.is_dir() and not (partial / "COMPLETE").exists()
    assert any(p.suffix == ".distcp" for p in partial.iterdir()), "the shards were written before the kill"
    assert not (ckpt / "step_00000004").exists()

    resumed = run_trainer(args, out, nproc=2)
    assert_ok(resumed)
    assert "step_00000002 (step 2)" in resumed.stderr
    assert not partial.exists(), "the partial save is cleaned up"
    assert resumed.losses()[STEPS] == pytest.approx(straight[STEPS], abs=1e-6)
    assert [r["step"] for r in resumed.records] == list(range(1, STEPS + 1)), "steps 3-4 of the crashed run are replaced"
    assert sorted(p.name for p in ckpt.iterdir()) == ["step_00000006", "step_00000008", "step_00000010"]


def test_fsdp1_checkpoint_resumes(straight, tmp_path):
    """FSDP1's sharded state dict (ShardedTensor) goes through the same save/resume path."""
    out = tmp_path / "out"
    args = [*ARGS, "--parallel.api", "fsdp1", "--checkpoint.every_steps", "5"]
    killed = run_trainer(args, out, nproc=2, env={"FSDP_TRAINER_FAULT_AFTER_STEP": "5"})
    assert killed.returncode != 0 and (out / "checkpoints" / "step_00000005" / "COMPLETE").is_file()
    resumed = run_trainer(args, out, nproc=2)
    assert_ok(resumed)
    losses = resumed.losses()
    for step in range(6, STEPS + 1):  # FSDP1 vs FSDP2 straight run: equal to float rounding
        assert losses[step] == pytest.approx(straight[step], rel=1e-4), f"step {step}"


def test_resume_picks_the_newest_complete_checkpoint(tmp_path):
    from fsdp_trainer.checkpoint import Checkpointer, complete_checkpoints
    from fsdp_trainer.config import CheckpointConfig
    from fsdp_trainer.errors import ConfigError

    for name, complete in [("step_00000002", True), ("step_00000003", False), ("step_00000004.tmp", False), ("step_00000001", True)]:
        (tmp_path / name).mkdir()
        if complete:
            (tmp_path / name / "COMPLETE").write_text("")
    assert [step for step, _ in complete_checkpoints(tmp_path)] == [1, 2]

    def finder(resume: str) -> Checkpointer:
        return Checkpointer(CheckpointConfig(dir=str(tmp_path), resume=resume), env=None, model=None, optimizer=None, stateful={})

    assert finder("auto").find_resume() == tmp_path / "step_00000002"
    assert finder("never").find_resume() is None
    assert finder(str(tmp_path / "step_00000001")).find_resume() == tmp_path / "step_00000001"
    with pytest.raises(ConfigError, match="--checkpoint.resume: .*step_00000003 is not a complete checkpoint"):
        finder(str(tmp_path / "step_00000003")).find_resume()

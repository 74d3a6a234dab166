"""Checkpoints: a killed run resumes to exactly the same losses, and a save killed halfway is never used.

Runs use the testing aids ``FSDP_TRAINER_FAULT_AFTER_STEP`` (SIGKILL every rank after a
step and its checkpoint) and ``FSDP_TRAINER_FAULT_DURING_SAVE`` (SIGKILL every rank after
the shards of a save are written, before its ``COMPLETE`` marker and rename).
"""

from __future__ import annotations

import json
import re

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
    killed = run_trainer(
        [*ARGS, "--checkpoint.every_steps", "5"], out, nproc=2, env={"FSDP_TRAINER_FAULT_AFTER_STEP": "5"}
    )
    assert killed.returncode != 0
    assert [r["step"] for r in killed.records] == [1, 2, 3, 4, 5]
    ckpts = sorted(p.name for p in (out / "checkpoints").glob("step_*"))
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
    assert sorted(p.name for p in (out / "checkpoints").glob("step_*")) == ["step_00000005", "step_00000010"]


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
    assert [r["step"] for r in resumed.records] == list(range(1, STEPS + 1)), (
        "steps 3-4 of the crashed run are replaced"
    )
    assert sorted(p.name for p in ckpt.glob("step_*")) == ["step_00000006", "step_00000008", "step_00000010"]


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

    for name, complete in [
        ("step_00000002", True),
        ("step_00000003", False),
        ("step_00000004.tmp", False),
        ("step_00000001", True),
    ]:
        (tmp_path / name).mkdir()
        if complete:
            (tmp_path / name / "train_state.json").write_text('{"world_size": 1}')  # saved without digests
            (tmp_path / name / "COMPLETE").write_text("")
    assert [step for step, _ in complete_checkpoints(tmp_path)] == [1, 2]

    def finder(resume: str) -> Checkpointer:
        return Checkpointer(
            CheckpointConfig(dir=str(tmp_path), resume=resume), env=None, model=None, optimizer=None, stateful={}
        )

    assert finder("auto").find_resume() == str(tmp_path / "step_00000002")
    assert finder("never").find_resume() is None
    assert finder(str(tmp_path / "step_00000001")).find_resume() == str(tmp_path / "step_00000001")
    with pytest.raises(
        ConfigError,
        match=re.escape("--checkpoint.resume: ") + ".*" + re.escape("step_00000003 is not a complete checkpoint"),
    ):
        finder(str(tmp_path / "step_00000003")).find_resume()


def test_pruning_removes_the_marker_before_the_files(tmp_path, monkeypatch):
    """A deletion cut short (here: rmtree fails at once) never leaves a directory that still looks complete."""
    from fsdp_trainer import storage
    from fsdp_trainer.checkpoint import complete_checkpoints
    from fsdp_trainer.storage import remove_dir as remove_checkpoint

    d = tmp_path / "step_00000003"
    (d / "rng").mkdir(parents=True)
    (d / "COMPLETE").write_text("3\n")
    (d / "__0_0.distcp").write_bytes(b"x")
    monkeypatch.setattr(storage.shutil, "rmtree", lambda *a, **k: None)  # killed right after the marker
    remove_checkpoint(d)
    assert d.is_dir() and not (d / "COMPLETE").exists()
    assert complete_checkpoints(tmp_path) == []
    monkeypatch.undo()
    remove_checkpoint(d)
    assert not d.exists()


def test_replacing_a_checkpoint_keeps_the_old_one_until_the_new_is_in_place(tmp_path, monkeypatch):
    import os

    from fsdp_trainer import storage
    from fsdp_trainer.checkpoint import Checkpointer
    from fsdp_trainer.config import CheckpointConfig
    from fsdp_trainer.storage import replace_dir

    final, tmp = tmp_path / "step_00000005", tmp_path / "step_00000005.tmp"
    for d, tag in ((final, "old"), (tmp, "new")):
        d.mkdir()
        (d / "COMPLETE").write_text("5\n")
        (d / "train_state.json").write_text(tag)
    replace_dir(tmp, final)
    assert (final / "train_state.json").read_text() == "new" and not tmp.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_00000005"]

    # A kill between the two renames: the old checkpoint is aside, nothing at the final name.
    tmp.mkdir()
    (tmp / "COMPLETE").write_text("5\n")
    real_replace = os.replace
    calls = []

    def replace_once(src, dst):
        calls.append((src, dst))
        if len(calls) == 2:
            raise KeyboardInterrupt("killed")
        real_replace(src, dst)

    monkeypatch.setattr(storage.os, "replace", replace_once)
    with pytest.raises(KeyboardInterrupt):
        replace_dir(tmp, final)
    monkeypatch.setattr(storage.os, "replace", real_replace)
    assert not final.exists() and len(list(tmp_path.glob("step_00000005.old-*"))) == 1

    class Leader:
        is_leader = True

        def barrier(self):
            pass

    Checkpointer(
        CheckpointConfig(dir=str(tmp_path)), env=Leader(), model=None, optimizer=None, stateful={}
    ).clean_partial()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_00000005"], (
        "the aside checkpoint is restored, the .tmp removed"
    )
    assert (final / "train_state.json").read_text() == "new"


def test_explicit_resume_prunes_the_abandoned_runs_newer_checkpoints(tmp_path):
    from fsdp_trainer.checkpoint import Checkpointer, complete_checkpoints
    from fsdp_trainer.config import CheckpointConfig

    for step in (2, 4, 6, 8):
        (tmp_path / f"step_{step:08d}").mkdir()
        (tmp_path / f"step_{step:08d}" / "train_state.json").write_text('{"world_size": 1}')  # saved without digests
        (tmp_path / f"step_{step:08d}" / "COMPLETE").write_text("")

    class Leader:
        is_leader = True

        def barrier(self):
            pass

    ck = Checkpointer(
        CheckpointConfig(dir=str(tmp_path), resume=str(tmp_path / "step_00000004")),
        env=Leader(),
        model=None,
        optimizer=None,
        stateful={},
    )
    assert ck.find_resume() == str(tmp_path / "step_00000004")
    ck.prune_newer_than(4)
    assert [s for s, _ in complete_checkpoints(tmp_path)] == [2, 4]


def test_relaunching_a_finished_run_reports_it_and_does_nothing(tmp_path):
    out = tmp_path / "out"
    args = [*TINY, "--train.steps", "2", "--parallel.api", "none", "--checkpoint.export_hf", str(tmp_path / "hf")]
    first = run_trainer(args, out)
    assert_ok(first)
    assert (tmp_path / "hf" / "config.json").is_file()
    (tmp_path / "hf" / "config.json").unlink()
    again = run_trainer(args, out)
    assert_ok(again)
    assert "nothing to train: resumed at step 2" in again.stderr
    assert again.summary["steps"] == 2 and again.summary["steps_run"] == 0
    assert again.summary["final_loss"] == first.summary["final_loss"] is not None
    assert not (tmp_path / "hf" / "config.json").exists(), "no second export"
    assert [r["step"] for r in again.records] == [1, 2]

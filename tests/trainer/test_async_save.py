"""Asynchronous saves (``checkpoint.async_mode async``), one process, no process group: the background write's error fails
the run with its cause and leaves no marker; the next save waits for the previous one; what is written is the state
at the time of the save, not what training changed afterwards."""

from __future__ import annotations

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemWriter

from fsdp_trainer.checkpoint import Checkpointer
from fsdp_trainer.config import CheckpointConfig
from fsdp_trainer.storage import MARKER


class Env:
    """One process's DistEnv, no process group."""

    rank, world_size, local_world_size, is_leader = 0, 1, 1, True
    device = torch.device("cpu")

    def barrier(self) -> None:
        pass

    def all_reduce_sum(self, values: list[float]) -> list[float]:
        return values


def checkpointer(
    tmp_path, stage_on_device: bool = False, **cfg
) -> tuple[Checkpointer, torch.nn.Module, torch.optim.Optimizer]:
    model = torch.nn.Linear(4, 3)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.ones(2, 4)).sum().backward()
    optimizer.step()
    ck = Checkpointer(
        CheckpointConfig(dir=str(tmp_path), async_mode="async", **cfg), Env(), model, optimizer, {}, stage_on_device
    )
    return ck, model, optimizer


class FailingWriter(FileSystemWriter):
    def write_data(self, plan, planner):  # type: ignore[no-untyped-def]
        raise OSError(28, "No space left on device")


def test_a_failed_background_save_fails_with_its_cause_and_leaves_no_marker(tmp_path):
    ck, _, _ = checkpointer(tmp_path)
    ck.store.writer = lambda ckpt: FailingWriter(ckpt)  # type: ignore[method-assign]
    ck.save(1)  # returns once staged; the write fails in the background
    with pytest.raises(RuntimeError, match=r"background save of step 1 failed: .*No space left on device") as e:
        ck.close()
    assert isinstance(e.value.__cause__, BaseException)
    assert not (tmp_path / "step_00000001" / MARKER).exists() and ck.store.complete() == []


@pytest.mark.parametrize("on_device", [False, True], ids=["host", "device-then-host"])
def test_the_save_holds_the_state_of_its_step_and_the_next_one_waits(tmp_path, on_device):
    ck, model, _ = checkpointer(tmp_path, keep=1, stage_on_device=on_device)
    before = model.weight.detach().clone()
    ck.save(1)
    with torch.no_grad():
        model.weight.add_(100.0)  # training goes on while the save writes: the checkpoint keeps step 1's weights
    ck.save(2)  # waits for save 1 (committed, then pruned by keep=1 after save 2)
    ck.close()
    assert [c.step for c in ck.store.complete()] == [2]
    assert ck.blocking_s and len(ck.blocking_s) == 2 and ck._async is True
    t = ck.timings  # host buffers allocated by the first save only, reused by the second
    assert t["alloc_s"][0] > 0 and t["alloc_s"][1] == 0 and t["copy_s"] == []  # no device copies on CPU
    assert all(len(t[k]) == 2 for k in ("wait_s", "stage_s", "write_s", "background_s"))
    assert t["background_s"][0] >= t["write_s"][0] and ck.blocking_s[1] >= t["wait_s"][1]
    # staged on the "device" (a second copy on CPU): the background's hop to the host buffers, each save
    assert len(t["offload_s"]) == (2 if on_device else 0) and t["background_s"][1] >= t["write_s"][1]
    state = {"model": {"weight": torch.zeros_like(before), "bias": torch.zeros(3)}}
    dcp.load(state, storage_reader=ck.store.reader(ck.store.final_id(2)))
    torch.testing.assert_close(state["model"]["weight"], before + 100.0)


def test_write_threads_spread_the_shards_over_as_many_files(tmp_path):
    ck, _, _ = checkpointer(tmp_path, write_threads=2)
    ck.save(1)
    ck.close()
    assert sorted(p.name for p in (tmp_path / "step_00000001").glob("*.distcp")) == ["__0_0.distcp", "__0_1.distcp"]


class HeldWriter(FileSystemWriter):
    """Writes once ``release`` is set: a store slower than the save interval."""

    release = None

    def write_data(self, plan, planner):  # type: ignore[no-untyped-def]
        assert self.release is not None
        self.release.wait()
        return super().write_data(plan, planner)


def test_the_first_save_says_when_saves_will_queue_and_which_interval_would_not(tmp_path, caplog):
    import threading

    ck, _, _ = checkpointer(tmp_path, every_steps=2)
    release = threading.Event()
    ck.store.writer = lambda ckpt: HeldWriter(ckpt)  # type: ignore[method-assign]
    HeldWriter.release = release
    ck.save(2)
    ck.poll()  # step 3: still writing, nothing known yet
    assert ck.advice == {}
    ck.store_advice(4, ck._saved_at + 2.0, done=False)  # what save(4) does before it waits: two steps of 1 s each
    a = ck.advice
    assert a["saves_queue"] is True and a["step_s"] == 1.0 and a["interval_s"] == 2.0
    assert a["store_figure"].startswith("at most") and a["min_every_steps"] == 2
    assert "every save will wait for the previous one; every 2 steps or more would not" in caplog.text
    release.set()
    ck.close()


def test_a_store_that_keeps_pace_is_said_to_once_the_first_write_is_done(tmp_path, caplog):
    import logging

    caplog.set_level(logging.INFO, logger="fsdp_trainer.checkpoint")
    ck, _, _ = checkpointer(tmp_path, every_steps=1000)
    ck.save(1000)
    ck._pending.result()  # the background write is done
    ck.poll()
    a = ck.advice
    assert a["saves_queue"] is False and a["store_figure"] == "measured" and a["store_gb_per_s"] > 0
    staged = sum(t.numel() * t.element_size() for t in ck._buffers.values())
    assert a["gb_per_save"] == float(f"{staged / 1e9:.3g}")
    assert "saves keep pace" in caplog.text
    ck.close()

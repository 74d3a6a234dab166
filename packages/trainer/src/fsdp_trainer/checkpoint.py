"""Sharded, atomic checkpoints with torch.distributed.checkpoint (DCP), resume, and Hugging Face export.

Layout of one checkpoint, ``<checkpoint.dir>/step_00000010/`` (a directory or an
``s3://bucket/prefix``; ``storage.py`` holds what differs between the two):

* ``*.distcp`` + ``.metadata``: model and optimizer state from ``get_state_dict``,
  each rank writing its own shards (reloadable on a different world size);
* ``train_state.json``: step, data position, scheduler and grad-scaler state;
* ``rng/rank_00003.pt``: each rank's torch CPU/CUDA and Python RNG states;
* ``COMPLETE``: the marker, written last.

Complete means complete. On a directory everything is written to
``step_00000010.tmp/``; once every rank's files and DCP's metadata are written, the
leader writes ``COMPLETE`` and renames the directory (atomic on POSIX); the small files
and the parent directory are fsynced; an existing ``step_00000010`` is renamed aside
first and deleted after, and a crash in between is repaired at the next start. On S3
(no rename) the save writes into ``step_00000010/`` itself and the ``COMPLETE`` object
is put last. Either way resume takes the newest checkpoint that has the marker, the
leftovers of a crashed save are deleted at start, ``checkpoint.keep`` deletes older
checkpoints, and a deletion removes the marker first, so a half-deleted checkpoint is
never taken as complete.

Asynchronous saves (``checkpoint.async_mode``): each rank copies its shards into
buffers kept between saves (the only part training waits for), then writes them from
a background thread over a process group of its own (gloo), so training continues
meanwhile. On CUDA the copy goes to pinned host memory, which the next optimizer step
waits for on the device (at PCIe speed: 0.86 s for a 22.6 GB state on an H100); with
``experimental.stage_on_device`` it goes to spare device memory first (the optimizer
waits for that copy only) and on to the host in the background. When the first save's
write is done, its speed says whether saves every ``checkpoint.every_steps`` will queue
(:meth:`Checkpointer.store_advice`). The leader commits
(marker, pruning) as soon as its save is done: DCP's metadata is written only after
every rank has reported its shards written, and each rank's small files were written
before its shards. The next save waits for the previous one; an error of a background
save is raised at the next step, with its cause; the last save is waited for before the
run ends. ``auto`` turns it on unless the staged copy would not fit in host memory.

Which checkpoint to resume is decided by the leader and broadcast, so every rank
loads the same one. After an explicit ``checkpoint.resume <path>`` at step S, the
complete checkpoints newer than S in ``checkpoint.dir`` belong to the abandoned run:
they are deleted once the resume is loaded, so they neither outrank the new run's
checkpoints in pruning nor are picked by a later ``resume=auto``.

Faults (``ownership.py``, ``digests.py``, ``storage.py``): before ``checkpoint.dir`` is touched the leader makes
this run its owner or refuses the run naming the owner; every save records each file's size and CRC32, checked
before a load (a broken checkpoint is named, marked ``BROKEN`` and the previous one taken); a checkpoint that fails
to load anyway is marked too; on S3 a save that hears nothing from the endpoint for ``checkpoint.s3_timeout_s``
(or runs past ``checkpoint.save_timeout_s``) fails the run with the cause: a synchronous one from a watchdog
thread, a background one at the next step's check.

Testing aid: ``FSDP_TRAINER_FAULT_DURING_SAVE=<step>`` SIGKILLs every rank in the
middle of that step's save (shards and metadata written, no marker yet).
"""

from __future__ import annotations

import contextlib
import copy as copy_module
import functools
import json
import logging
import os
import random
import signal
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
import torch.nn as nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_state_dict,
)
from torch.distributed.tensor import DTensor

from .config import CheckpointConfig
from .converters.master_weights import attach_masters, masters_by_key, with_masters
from .digests import check_files, expected_files
from .distributed import DistEnv
from .errors import CheckpointLoadFailed, ConfigError, StoreStalled, TrainerError
from .model import DTYPES, meta_model, reset_rotary_
from .ownership import RunIdentity, check_owner, claim, gone_line, remember_checkpoint, run_identity, whose
from .storage import (
    BROKEN,
    MARKER,
    CheckpointStore,
    LocalStore,
    is_s3,
    parse_s3,
    s3_upload_dir,
    step_dir_name,
    store_for,
    torch_bytes,
)

log = logging.getLogger(__name__)

FAULT_DURING_SAVE = "FSDP_TRAINER_FAULT_DURING_SAVE"
#: Host memory the staged copy of an asynchronous save may take, as a share of what is available (auto).
ASYNC_HOST_MEMORY_SHARE = 0.5

__all__ = ["MARKER", "Checkpointer", "complete_checkpoints", "export_hf", "step_dir_name"]


def complete_checkpoints(root: Path | str) -> list[tuple[int, Path]]:
    """(step, path) of every complete checkpoint in directory ``root``, oldest first."""
    return [(c.step, Path(c.id)) for c in LocalStore(str(root)).complete()]


def _transient(e: BaseException) -> bool:
    """Whether a load failed for the store (unreachable, stalled), not for the checkpoint's bytes."""
    failures = getattr(e, "failures", None)  # DCP's CheckpointException: rank -> exception or (exception, traceback)
    causes = [f[0] if isinstance(f, tuple) else f for f in failures.values()] if isinstance(failures, dict) else [e]
    names = {type(c).__name__ for c in causes}
    return bool(names & {"S3Exception", "StoreStalled", "ConnectionError", "TimeoutError"})


class _Unstageable(Exception):
    """The state holds a tensor type ``Checkpointer._stage`` does not copy (FSDP1's ShardedTensor)."""


def _rng_state(device: torch.device) -> dict[str, Any]:
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def _set_rng_state(state: dict[str, Any], device: torch.device) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


def _state_bytes(state: Any) -> int:
    """Bytes of this rank's tensors in a (nested) state dict: what an asynchronous save stages in host memory."""
    if isinstance(state, dict):
        return sum(_state_bytes(v) for v in state.values())
    if isinstance(state, (list, tuple)):
        return sum(_state_bytes(v) for v in state)
    if isinstance(state, DTensor):
        state = state.to_local()
    if hasattr(state, "local_shards"):  # FSDP1's ShardedTensor
        return sum(_state_bytes(shard.tensor) for shard in state.local_shards())
    if isinstance(state, torch.Tensor):
        return state.numel() * state.element_size()
    return 0


def _copy_tree(
    state: Any, buffers: dict[str, torch.Tensor], device: torch.device, pin: bool, stream: Any, alloc: list[float]
) -> Any:
    """``state`` with each tensor copied into ``buffers`` (by its path; made on ``device``, pinned if ``pin``, where
    missing or of another shape, the seconds spent adding to ``alloc[0]``) and DTensors rebuilt around the copies.
    ``stream``: the CUDA stream the copies run on (the sources are recorded on it). Raises ``_Unstageable`` on a
    ShardedTensor (FSDP1)."""

    def copy(path: str, t: torch.Tensor) -> torch.Tensor:
        buf = buffers.get(path)
        if buf is None or buf.shape != t.shape or buf.dtype != t.dtype:
            began = time.perf_counter()
            buf = torch.empty(t.shape, dtype=t.dtype, device=device, pin_memory=pin and device.type == "cpu")
            alloc[0] += time.perf_counter() - began
            buffers[path] = buf
        if stream is not None and t.is_cuda:
            t.record_stream(stream)
        buf.copy_(t, non_blocking=t.is_cuda or buf.is_cuda)
        return buf

    def walk(x: Any, path: str) -> Any:
        if isinstance(x, DTensor):
            local = copy(path, x.to_local().detach())
            return DTensor.from_local(
                local, x.device_mesh, x.placements, run_check=False, shape=x.shape, stride=x.stride()
            )
        if isinstance(x, torch.Tensor):
            if hasattr(x, "local_shards"):
                raise _Unstageable
            return copy(path, x.detach())
        if hasattr(x, "local_shards"):
            raise _Unstageable
        if isinstance(x, dict):
            return {k: walk(v, f"{path}/{k}") for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            items = [walk(v, f"{path}/{i}") for i, v in enumerate(x)]
            return items if isinstance(x, list) else tuple(items)
        return copy_module.deepcopy(x)

    return walk(state, "")


def _host_memory_available() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


class Checkpointer:
    """Saves and restores everything a run needs to continue exactly where it stopped."""

    def __init__(
        self,
        cfg: CheckpointConfig,
        env: DistEnv,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        stateful: dict[str, Any],
        stage_on_device: bool = False,
    ):
        """``stateful``: name -> object with ``state_dict()``/``load_state_dict()`` (scheduler, data loader, scaler).
        ``stage_on_device``: ``experimental.stage_on_device`` (see :meth:`_stage_on_device`)."""
        assert cfg.dir is not None
        self.cfg, self.env, self.model, self.optimizer, self.stateful = cfg, env, model, optimizer, stateful
        self.store: CheckpointStore = store_for(cfg.dir, cfg.s3_client, cfg.write_threads, cfg.s3_timeout_s)
        self._identity: RunIdentity | None = None  # take_ownership()
        self._run_cfg: Any = None
        self._save_started: float | None = None  # a save (or load) in flight (bounded: _stalled)
        self._watched: tuple[Any, str, bool] = (None, "", True)
        self._save_step = 0
        self.root = Path(cfg.dir) if not is_s3(cfg.dir) else None
        #: Seconds each save kept training waiting (staging only, for an asynchronous save).
        self.blocking_s: list[float] = []
        #: Seconds the run's end waited for the last asynchronous save.
        self.final_wait_s = 0.0
        #: Asynchronous saves, one entry each. In ``save()`` (within ``blocking_s``): waiting for the previous save's
        #: write, allocating the staging buffers (a state of new shapes: the first save), queuing the copies. In the
        #: background: the copies on the device (CUDA only: their device time), the copy from device buffers to
        #: pinned host ones (``offload_s``, staging on the device only, host buffers allocated there), DCP's write,
        #: and the whole job to the commit.
        self.timings: dict[str, list[float]] = {
            k: [] for k in ("wait_s", "alloc_s", "stage_s", "copy_s", "offload_s", "write_s", "background_s")
        }
        self._async: bool | None = {"auto": None, "disabled": False, "async": True}[cfg.async_mode]
        self._group: Any = None
        self._pending: Future[str] | None = None
        self._pending_step = 0
        self._executor: ThreadPoolExecutor | None = None
        self._stream: Any = None
        self._buffers: dict[str, torch.Tensor] = {}
        self._device_buffers: dict[str, torch.Tensor] = {}
        self._offload_stream: Any = None
        self._on_device: bool | None = None if stage_on_device else False
        self._copied: Any = None
        #: Whether saves every ``checkpoint.every_steps`` keep pace with the store, from the first asynchronous
        #: save's measured write (:meth:`store_advice`); empty until known.
        self.advice: dict[str, Any] = {}
        self._staged_bytes = 0
        self._saved_at = 0.0
        self._steps_since_save = 0
        if cfg.enabled and self._async is not False:
            self._init_async_group()

    def _init_async_group(self) -> None:
        """The background saves' own gloo group: their collectives never interleave with training's (every rank)."""
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            self._group = dist.new_group(backend="gloo")

    def _dcp_state(self) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
        """What DCP saves and loads, and the optimizer's fp32 masters in it (``converters.master_weights.with_masters``; empty without them)."""
        model_sd, optim_sd = get_state_dict(self.model, self.optimizer)
        masters = with_masters(self.model, self.optimizer, model_sd, optim_sd)
        return {"model": model_sd, "optim": optim_sd}, masters

    def clean_partial(self) -> None:
        """Delete what a save that never finished left, and repair an interrupted replace (leader only, then a barrier)."""
        if self.env.is_leader:
            for removed in self.store.clean_partial():
                log.warning("checkpoint: removed incomplete %s", removed)
        self.env.barrier()

    def find_resume(self) -> str | None:
        """The checkpoint to resume (None: start fresh), chosen by the leader and checked against its digests
        (``digests.py``), on every rank.

        Each rank choosing for itself could pick different checkpoints (a save landing
        between two ranks' listings, a lagging shared filesystem), so with a process
        group of more than one rank the leader decides and broadcasts. Each rank then checks
        a share of the chosen checkpoint's files; a broken one is named, marked ``BROKEN`` (no
        later start, restart or ``run --resume`` takes it again), and the previous complete one is
        taken instead, with a warning.
        """
        candidates = self._on_leader(self._resume_candidates)
        for i, (ckpt, files) in enumerate(candidates):
            problem = files if isinstance(files, str) else None
            if isinstance(files, dict):
                problem = self._first_problem(ckpt, files)
            if problem is None:
                return ckpt  # type: ignore[no-any-return]
            fallback = candidates[i + 1][0] if i + 1 < len(candidates) else None
            self._mark_broken(ckpt, problem, fallback)
            if self.cfg.resume != "auto":  # the checkpoint named: no other one is taken in its place
                raise ConfigError(f"--checkpoint.resume: {ckpt} is broken: {problem}; name another checkpoint")
        if candidates:
            ckpt, _ = candidates[0]
            raise ConfigError(
                f"--checkpoint.resume: no checkpoint in {self.store.root} loads: {ckpt} and every earlier one are "
                "broken (see the warnings above; each is marked BROKEN); restore them, or start over with "
                "--checkpoint.resume never or another --checkpoint.dir"
            )
        return None

    def _on_leader(self, fn: Any) -> Any:
        """``fn()`` on the leader, its result (or its ConfigError) on every rank."""
        import torch.distributed as dist

        if self.env is None or not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
            return fn()
        choice: list[Any] = [None]
        if self.env.is_leader:
            try:
                choice[0] = ("value", fn())
            except ConfigError as e:
                choice[0] = ("error", str(e))
        dist.broadcast_object_list(choice, src=0, device=torch.device("cpu"))
        kind, value = choice[0]
        if kind == "error":
            raise ConfigError(value)
        return value

    def _first_problem(self, ckpt: str, files: dict[str, tuple[int, str]]) -> str | None:
        """This rank checks its share of ``ckpt``'s files; the first problem any rank found (every rank)."""
        import torch.distributed as dist

        store = self._store_of(ckpt)
        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
            return check_files(store, ckpt, files)
        problem = check_files(store, ckpt, files, (dist.get_rank(), dist.get_world_size()))
        found: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(found, problem)
        return next((p for p in found if p), None)

    def _mark_broken(self, ckpt: str, problem: str, fallback: str | None) -> None:
        """Leader: say what is broken, and mark the checkpoint so nothing resumes it again (then a barrier)."""
        leader = self.env is None or self.env.is_leader
        if leader:
            store = self._store_of(ckpt)
            then = f"; resuming from the previous complete checkpoint, {fallback}" if fallback else ""
            log.warning("checkpoint: %s is broken: %s; marked %s%s", ckpt, problem, BROKEN, then)
            try:
                store.write(store.join(ckpt, BROKEN), f"{problem}\n".encode())
            except Exception as e:  # a read-only location: say so; the checks find it broken again next time
                log.warning("checkpoint: could not mark %s %s (%s)", ckpt, BROKEN, " ".join(str(e).split())[:200])
        if self.env is not None:
            self.env.barrier()

    def _resume_candidates(self) -> list[tuple[str, Any]]:
        """Leader: the checkpoints to try, newest first, each with its recorded files (``digests.expected_files``)."""
        if not self.cfg.enabled or self.cfg.resume == "never":
            return []
        if self.cfg.resume == "auto":
            found = self.store.complete()
            if not found and self._run_cfg is not None:
                gone = gone_line(self._run_cfg, self.store)
                if gone:
                    log.warning("%s", gone)
            return [(c.id, expected_files(self.store, c.id)) for c in reversed(found)]
        path = self._find_resume_local()
        assert path is not None
        store = self._store_of(path)
        if self._identity is not None and store is not self.store:
            taken = whose(store, path, self._identity)
            if taken:
                log.warning("%s", taken)
        return [(path, expected_files(store, path))]

    def take_ownership(self, run_cfg: Any) -> None:
        """Before anything is written or cleaned in ``checkpoint.dir``: make this run its owner, or refuse the run
        in one line naming the owner (``ownership.py``). Every rank; the leader decides."""
        self._run_cfg = run_cfg

        def decide() -> RunIdentity:
            identity = run_identity(run_cfg)
            explicit = None if self.cfg.resume in ("auto", "never") else self.cfg.resume
            warning = claim(self.store, identity, explicit)
            if warning:
                log.warning("%s", warning)
            return identity

        self._identity = self._on_leader(decide)

    def _check_owner(self) -> None:
        """Leader: still this run's location (another run's claim since refuses this one)."""
        if self._identity is not None and self.env.is_leader:
            check_owner(self.store, self._identity)

    def prune_newer_than(self, step: int) -> None:
        """After an explicit resume at ``step``: delete the abandoned run's newer checkpoints (leader only, then a barrier)."""
        if self.env.is_leader:
            for c in self.store.complete():
                if c.step > step:
                    log.warning("checkpoint: removing %s, newer than the explicit resume point (step %d)", c.id, step)
                    self.store.remove(c.id)
        self.env.barrier()

    def _store_of(self, ckpt: str) -> CheckpointStore:
        """The store that holds checkpoint ``ckpt`` (``checkpoint.dir``'s, or its parent's for an explicit resume)."""
        parent = ckpt.rstrip("/").rsplit("/", 1)[0] if is_s3(ckpt) else str(Path(ckpt).parent)
        if parent.rstrip("/") == self.store.root.rstrip("/"):
            return self.store
        return store_for(parent, self.cfg.s3_client, s3_timeout_s=self.cfg.s3_timeout_s)

    def _find_resume_local(self) -> str | None:
        if not self.cfg.enabled or self.cfg.resume == "never":
            return None
        if self.cfg.resume == "auto":
            found = self.store.complete()
            return found[-1].id if found else None
        path = self.cfg.resume.rstrip("/")
        if is_s3(path):
            parse_s3(path, "--checkpoint.resume")
        store = self._store_of(path)
        if store.is_broken(path):
            why = (store.read(store.join(path, BROKEN)) or b"").decode(errors="replace").strip()
            raise ConfigError(f"--checkpoint.resume: {path} is broken ({why}; found when it was loaded); name another")
        if not store.is_complete(path):
            raise ConfigError(f"--checkpoint.resume: {path} is not a complete checkpoint (no {MARKER} marker)")
        return path

    def load(self, path: str | Path) -> int:
        """Restore model, optimizer, RNG and ``stateful`` objects from ``path``; returns the step it was saved at.

        A checkpoint whose files do not load (one saved without digests, or damaged in a way they do not show) is
        marked ``BROKEN`` and the run fails saying so (CheckpointLoadFailed): its next start, a restart by the local
        supervisor or ``run --resume``, takes the previous complete checkpoint instead of failing the same way. A
        store that cannot be reached is not the checkpoint's fault: that error goes on as it is.
        """
        ckpt = str(path)
        try:
            return self._load(ckpt)
        except BaseException as e:  # DCP's CheckpointException is a BaseException
            if isinstance(e, (KeyboardInterrupt, SystemExit, TrainerError)) or _transient(e):
                raise
            lines = [line.strip() for line in str(e).splitlines() if line.strip()]
            cause = " ".join((lines[-1] if lines else type(e).__name__).split())[:300]
            if self.env is None or self.env.is_leader:
                store = self._store_of(ckpt)
                with contextlib.suppress(Exception):
                    store.write(store.join(ckpt, BROKEN), f"loading it failed: {cause}\n".encode())
            raise CheckpointLoadFailed(
                f"checkpoint: loading {ckpt} failed ({cause}); marked it {BROKEN}, so the next start or restart "
                "resumes from the previous complete checkpoint"
            ) from e

    def _load(self, ckpt: str) -> int:
        store = self._store_of(ckpt)
        state, masters = self._dcp_state()
        with self._watchdog(f"loading {ckpt}", store, ckpt, save=False):
            dcp.load(state, storage_reader=store.reader(ckpt))
        set_state_dict(self.model, self.optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
        attach_masters(
            self.model, self.optimizer, masters
        )  # loaded in place; set_state_dict replaced the optimizer's state
        raw = store.read(store.join(ckpt, "train_state.json"))
        if raw is None:
            raise ConfigError(f"--checkpoint.resume: {ckpt} has no train_state.json")
        train_state = json.loads(raw)
        for name, obj in self.stateful.items():
            if obj is not None and name in train_state:
                obj.load_state_dict(train_state[name])
        rng = store.read(store.join(ckpt, f"rng/rank_{self.env.rank:05d}.pt"))
        if rng is not None:
            import io

            _set_rng_state(torch.load(io.BytesIO(rng), weights_only=False), self.env.device)
        log.info("checkpoint: resumed from %s (step %d)", ckpt, train_state["step"])
        return int(train_state["step"])

    def _use_async(self, state: dict[str, Any]) -> bool:
        """``checkpoint.async_mode``, with auto decided once from the staged copy's size against host memory."""
        if self._async is None:
            need = _state_bytes(state) * max(1, self.env.local_world_size)
            available = _host_memory_available()
            self._async = available is None or need <= ASYNC_HOST_MEMORY_SHARE * available
            if not self._async:
                log.warning(
                    "checkpoint: saving synchronously: the staged copies (%.1f GiB on this node) would take over "
                    "half of the %.1f GiB of host memory available (--checkpoint.async_mode async forces it)",
                    need / 2**30,
                    (available or 0) / 2**30,
                )
            flags = [int(self._async)]  # every rank must agree: the background saves have collectives
            (agreed,) = self.env.all_reduce_sum(flags)
            self._async = int(agreed) == self.env.world_size
        return bool(self._async)

    def save(self, step: int) -> str:
        """Write checkpoint ``step`` (see the module docstring); returns where it goes. Asynchronous: returns once
        the state is staged, the previous save having finished first."""
        start = time.perf_counter()
        if self._pending is not None and not self.advice:
            self.store_advice(step, start, self._pending.done())
        self.wait()  # the previous save (asynchronous) is written: training waits for it here, counted in this save
        waited = time.perf_counter() - start
        staging = self.store.staging_id(step)
        if self.env.is_leader:
            self._check_owner()
            self.store.prepare(step)
        self.env.barrier()
        state = self._dcp_state()[0]
        self.store.write(
            self.store.join(staging, f"rng/rank_{self.env.rank:05d}.pt"), torch_bytes(_rng_state(self.env.device))
        )
        if self.env.is_leader:
            train_state = {"step": step, "world_size": self.env.world_size}
            train_state.update({name: obj.state_dict() for name, obj in self.stateful.items() if obj is not None})
            self.store.write(self.store.join(staging, "train_state.json"), json.dumps(train_state, indent=1).encode())
        if self._use_async(state):
            self.timings["wait_s"].append(waited)
            staged, copied = self._stage(state)
            if staged is None:  # FSDP1's ShardedTensor: DCP's own asynchronous save (it copies to host memory)
                kwargs: dict[str, Any] = {"storage_writer": self.store.writer(staging)}
                if self._group is not None:
                    kwargs["process_group"] = self._group
                response = dcp.async_save(state, **kwargs)
                written = response if isinstance(response, Future) else response.upload_completion
                job = functools.partial(self._finish_async, written.result, step)
            else:
                write = functools.partial(self._write_staged, staged, self.store.writer(staging), copied)
                job = functools.partial(self._finish_async, write, step)
            if self._executor is None:
                self._executor = ThreadPoolExecutor(1, thread_name_prefix="checkpoint-commit")
            self._begin_save(step)
            self._pending = self._executor.submit(job)
            self._pending_step = step
            self._saved_at, self._steps_since_save = time.perf_counter(), 0
            self.blocking_s.append(self._saved_at - start)
            return self.store.final_id(step)
        with self._watchdog(f"the save of step {step}", self.store, self.store.final_id(step)):
            dcp.save(state, storage_writer=self.store.writer(staging))
            self._fault_point(step)
            self.env.barrier()  # every rank's shards are written
            final = self._commit(step) if self.env.is_leader else self.store.final_id(step)
        self.env.barrier()
        self.blocking_s.append(time.perf_counter() - start)
        log.info("checkpoint: saved %s", final)
        return final

    def _stage(self, state: dict[str, Any]) -> tuple[dict[str, Any] | None, Any]:
        """Copy this rank's state into buffers kept between saves: the staged state (None when it holds a
        ShardedTensor, FSDP1) and, on CUDA, the copies' start and end events (the background write waits for the end).

        On CUDA the copies run on a stream of their own, behind what the device has queued so far, while the next
        step's forward and backward run (they read the state, never write it): :meth:`before_update` makes the
        optimizer step wait on the device, not the host, for them. The source tensors are recorded on that stream,
        so the allocator does not reuse them before the copies end. The buffers are on the device when
        :meth:`_stage_on_device` says so (the background moves them to the host), else pinned host memory. On CPU
        the copy is a plain one (``experimental.stage_on_device true`` there: a second copy in the background, for tests).
        """
        cuda = self.env.device.type == "cuda"
        on_device = self._stage_on_device(state)
        if cuda and self._stream is None:
            self._stream = torch.cuda.Stream(self.env.device)
        start = time.perf_counter()
        events, timed = None, [0.0]
        try:
            if cuda:
                self._stream.wait_stream(torch.cuda.current_stream(self.env.device))
                with torch.cuda.stream(self._stream):
                    events = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    events[0].record(self._stream)
                    if on_device:
                        staged = _copy_tree(state, self._device_buffers, self.env.device, False, self._stream, timed)
                    else:
                        staged = _copy_tree(state, self._buffers, torch.device("cpu"), True, self._stream, timed)
                    events[1].record(self._stream)
                self._copied = events[1]
            else:
                buffers = self._device_buffers if on_device else self._buffers
                staged = _copy_tree(state, buffers, torch.device("cpu"), False, None, timed)
        except _Unstageable:
            return None, None
        self._staged_bytes = _state_bytes(state)
        self.timings["alloc_s"].append(timed[0])
        self.timings["stage_s"].append(time.perf_counter() - start - timed[0])
        return staged, events

    @property
    def staged_on_device(self) -> bool:
        """Whether the asynchronous saves staged their copies on the device first (see :meth:`_stage_on_device`)."""
        return bool(self._on_device)

    def _stage_on_device(self, state: dict[str, Any]) -> bool:
        """Whether the copies go to device buffers first (``experimental.stage_on_device``, off by default; when
        on, decided at the first save on CUDA: when the run's peak leaves room for them beside a margin of 5% of the
        device, at least 2 GiB, counting what CUDA holds outside the allocator; on CPU always, a second copy in the
        background, for tests). Each rank decides for itself: the writes are the same."""
        if self._on_device is None:
            self._on_device = True
            if self.env.device.type == "cuda":
                dev = self.env.device
                need = _state_bytes(state)
                free, total = torch.cuda.mem_get_info(dev)
                outside = total - free - torch.cuda.memory_reserved(dev)  # the context, NCCL, cuBLAS workspaces
                room = total - outside - torch.cuda.max_memory_allocated(dev)
                self._on_device = need <= room - max(2 * 2**30, total // 20)
                log.info(
                    "checkpoint: staging asynchronous saves in %s memory (%.1f GiB; %.1f GiB free beside the peak)",
                    "device" if self._on_device else "pinned host",
                    need / 2**30,
                    room / 2**30,
                )
        return bool(self._on_device)

    def _write_staged(self, staged: dict[str, Any], writer: Any, copied: Any) -> None:
        """Background: once the copies are done (``copied``: their CUDA events, None on CPU), the copy from device
        buffers to pinned host ones (staging on the device), then DCP's save of the host copy over the checkpoint's
        own group."""
        if copied is not None:
            copied[1].synchronize()
            self.timings["copy_s"].append(copied[0].elapsed_time(copied[1]) / 1000)
        if self._on_device:
            start = time.perf_counter()
            cuda = self.env.device.type == "cuda"
            if cuda:
                if self._offload_stream is None:
                    self._offload_stream = torch.cuda.Stream(self.env.device)
                with (
                    torch.cuda.device(self.env.device),
                    torch.cuda.stream(self._offload_stream),
                ):  # this thread's device
                    staged = _copy_tree(staged, self._buffers, torch.device("cpu"), True, None, [0.0])
                self._offload_stream.synchronize()
            else:
                staged = _copy_tree(staged, self._buffers, torch.device("cpu"), False, None, [0.0])
            self.timings["offload_s"].append(time.perf_counter() - start)
        if hasattr(writer, "per_thread_copy_ahead"):
            # the staged copy is on the host already: DCP's copy-ahead loader (one write thread on a CUDA machine)
            # would only synchronize this thread's current stream, the device's default one that training runs
            # on, before writing each tensor (bench/reports/2026-12-06-h200-checkpoint-blocking.md)
            writer.per_thread_copy_ahead = 0
        start = time.perf_counter()
        dcp.save(staged, storage_writer=writer, process_group=self._group)
        self.timings["write_s"].append(time.perf_counter() - start)

    def before_update(self) -> None:
        """Before the optimizer changes the weights: make the device wait until a background save has copied them."""
        copied, self._copied = self._copied, None
        if copied is not None:
            torch.cuda.current_stream(self.env.device).wait_event(copied)

    def _fault_point(self, step: int) -> None:
        if os.environ.get(FAULT_DURING_SAVE) == str(step):
            log.warning("checkpoint: %s=%d, killing this process mid-save", FAULT_DURING_SAVE, step)
            os.kill(os.getpid(), signal.SIGKILL)

    def _commit(self, step: int) -> str:
        """Leader: the marker (and rename), then ``checkpoint.keep``."""
        self._check_owner()
        final = self.store.commit(step)
        if self._run_cfg is not None:
            remember_checkpoint(self._run_cfg, final, step)
        for old in self.store.complete()[: -self.cfg.keep]:
            self.store.remove(old.id)
        return final

    def _finish_async(self, write: Any, step: int) -> str:
        """Background: write (or wait for DCP's write), then (leader) commit. Runs in the commit thread."""
        start = time.perf_counter()
        try:
            write()  # raises the background save's error
            self._fault_point(step)
            final = self._commit(step) if self.env.is_leader else self.store.final_id(step)
        finally:
            self._save_started = None
        self.timings["background_s"].append(time.perf_counter() - start)
        log.info("checkpoint: saved %s (asynchronously)", final)
        return final

    def poll(self) -> None:
        """Raise the error of a background save that failed, or that stalled (cheap: call it every step)."""
        pending = self._pending
        self._steps_since_save += pending is not None
        if pending is not None and pending.done():
            self._pending = None
            self._raise_if_failed(pending)
            if not self.advice:
                self.store_advice(None, time.perf_counter(), True)
        elif pending is not None:
            self._raise_if_stalled()

    def store_advice(self, step: int | None, now: float, done: bool) -> None:
        """Once, when the first asynchronous save's write is known to be done (``done``, found by :meth:`poll`) or
        not (``done`` False at the next save, ``step``): log whether a save every ``checkpoint.every_steps`` keeps
        pace with the store and, if not, what it needs and which interval would, and keep the figures in
        :attr:`advice` (summary.json). A step's time is measured from the save's return to ``now``."""
        every = self.cfg.every_steps
        background = self.timings["background_s"]
        if not every or not self._staged_bytes or (done and not background):
            return
        steps = self._steps_since_save + (step is not None)  # the step that called save() did not poll
        if steps <= 0:
            return
        step_s = (now - self._saved_at) / steps
        interval = every * step_s
        gb = self._staged_bytes / 1e9
        if done:
            write_s, busy_s = self.timings["write_s"][0], background[0]
        else:  # still writing after a whole interval: the time so far is a lower bound
            write_s = busy_s = now - self._saved_at
        queues = not done or busy_s > interval
        self.advice = {
            "every_steps": every,
            "step_s": round(step_s, 4),
            "interval_s": round(interval, 2),
            "gb_per_save": float(f"{gb:.3g}"),
            "needed_gb_per_s": float(f"{gb / interval:.3g}"),
            "store_gb_per_s": float(f"{gb / write_s:.3g}") if write_s > 0 else None,
            "store_figure": "measured" if done else "at most (the write had not ended)",
            "background_s": round(busy_s, 2),
            "saves_queue": queues,
            "min_every_steps": int(-(-busy_s // step_s)) if step_s > 0 else None,
        }
        a = self.advice
        took = f"{'took' if done else 'took at most'} {a['store_gb_per_s']} GB/s"
        if queues:
            log.warning(
                "checkpoint: a save every %d steps (%.1f s) needs %.3g GB/s from this rank (%.3g GB a save); this "
                "store %s (the first save: %.1f s in the background): every save will wait for the previous one; "
                "every %d steps or more would not",
                every, interval, a["needed_gb_per_s"], gb, took, busy_s, a["min_every_steps"],
            )  # fmt: skip
        else:
            log.info(
                "checkpoint: a save every %d steps (%.1f s) needs %.3g GB/s from this rank; this store %s: "
                "saves keep pace (every %d steps or more would)",
                every, interval, a["needed_gb_per_s"], took, a["min_every_steps"],
            )  # fmt: skip

    def wait(self) -> None:
        """Wait for the background save in flight, if any (bounded: see :meth:`_stalled`); raise its error."""
        self.before_update()
        pending = self._pending
        if pending is not None:
            while not futures_wait([pending], timeout=0.5).done:
                self._raise_if_stalled()
            self._pending = None
            self._raise_if_failed(pending)

    # -- bounded saves: a store that stops answering fails the run within checkpoint.s3_timeout_s / save_timeout_s --

    def _begin_save(self, step: int) -> None:
        self._begin(self.store, self.store.final_id(step), save=True)
        self._save_step = step

    def _begin(self, store: CheckpointStore, ckpt: str, save: bool) -> None:
        """Watch a save (bounded by both timeouts) or a load (by ``s3_timeout_s``) of ``ckpt`` in ``store``."""
        self._save_started, self._watched = time.monotonic(), (store, ckpt, save)
        if hasattr(store, "last_progress"):
            store.last_progress = time.monotonic()

    def _stalled(self) -> str | None:
        """What the save (or load) in flight is stuck on, in words; None while it goes on (S3 only: the CRT client's
        requests have no timeout of their own, so progress is what the store last heard, ``S3Store.last_progress``)."""
        started, (store, ckpt, save) = self._save_started, self._watched
        last = getattr(store, "last_progress", None)
        if started is None or last is None:
            return None
        now = time.monotonic()
        if now - last > self.cfg.s3_timeout_s:
            return f"{ckpt}: no answer from the endpoint for {self.cfg.s3_timeout_s:g} s (--checkpoint.s3_timeout_s)"
        if save and now - started > self.cfg.save_timeout_s:
            return f"{ckpt}: the save did not finish within {self.cfg.save_timeout_s:g} s (--checkpoint.save_timeout_s)"
        return None

    def _raise_if_stalled(self) -> None:
        stall = self._stalled()
        if stall is not None:
            self._pending = None
            raise StoreStalled(f"checkpoint: the background save of step {self._save_step} failed: {stall}")

    @contextlib.contextmanager
    def _watchdog(self, what: str, store: CheckpointStore, ckpt: str, save: bool = True) -> Iterator[None]:
        """Around a synchronous save or a load: a thread that ends the process with the cause ("checkpoint: <what>
        failed: ...") when the store stalls (the blocked request cannot be interrupted; the peers wait at the next
        collective until torchrun stops them)."""
        self._begin(store, ckpt, save)
        done = threading.Event()

        def watch() -> None:
            while not done.wait(0.5):
                stall = self._stalled()
                if stall is not None:
                    line = f"checkpoint: {what} failed: {stall}"
                    log.error("%s", line)
                    print(f"error: {line}", file=sys.stderr, flush=True)
                    os._exit(1)

        if hasattr(store, "last_progress"):
            threading.Thread(target=watch, name="checkpoint-watchdog", daemon=True).start()
        try:
            yield
        finally:
            done.set()
            self._save_started = None

    def _raise_if_failed(self, pending: Future[str]) -> None:
        try:
            pending.result()
        except BaseException as e:  # DCP's CheckpointException is a BaseException
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                raise
            if isinstance(e, StoreStalled):
                raise StoreStalled(f"checkpoint: the background save of step {self._pending_step} failed: {e}") from e
            # DCP's CheckpointException carries each rank's traceback: its last line is the cause
            lines = [line.strip() for line in str(e).splitlines() if line.strip()]
            cause = lines[-1] if lines else type(e).__name__
            raise RuntimeError(f"checkpoint: the background save of step {self._pending_step} failed: {cause}") from e

    def close(self) -> None:
        """Wait for the last save (the run's end) and stop the commit thread."""
        start = time.perf_counter()
        try:
            self.before_update()
            self.wait()
            self.final_wait_s = time.perf_counter() - start
        finally:
            self._buffers.clear()
            self._device_buffers.clear()
            if self._executor is not None:
                self._executor.shutdown(wait=True)
                self._executor = None


def export_hf(
    model: nn.Module,
    hf_config: Any,
    tokenizer: Any,
    path: str,
    dtype: str,
    env: DistEnv,
    optimizer: torch.optim.Optimizer | None = None,
) -> None:
    """Gather a full state dict on rank 0 (CPU) and write a ``save_pretrained`` directory plus the tokenizer.

    With master weights (``precision.master_weights optimizer``) the weights are the optimizer's fp32 masters,
    not their bf16 rounding in the parameters.
    """
    masters = masters_by_key(model, optimizer) if optimizer is not None else {}
    if masters:
        full = {}
        for key, value in get_model_state_dict(model).items():
            value = masters.get(key, value)
            value = value.full_tensor() if isinstance(value, DTensor) else value  # a collective: every rank, same order
            if env.is_leader:
                full[key] = value.detach().to("cpu")
    else:
        full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if env.is_leader:
        sd = {k.removeprefix("lm."): v.to(DTYPES[dtype]) for k, v in full.items()}
        lm = meta_model(hf_config)
        lm.load_state_dict(sd, strict=True, assign=True)
        reset_rotary_(lm, "cpu")
        lm.config.dtype = DTYPES[dtype]
        if is_s3(path):  # save_pretrained writes a directory: a temporary one on the leader, then uploaded
            import tempfile

            with tempfile.TemporaryDirectory(prefix="fsdp-trainer-export-") as tmp:
                lm.save_pretrained(tmp)
                if tokenizer is not None:
                    tokenizer.save_pretrained(tmp)
                s3_upload_dir(Path(tmp), path)
        else:
            lm.save_pretrained(path)
            if tokenizer is not None:
                tokenizer.save_pretrained(path)
        log.info("export: Hugging Face model written to %s", path)
    env.barrier()

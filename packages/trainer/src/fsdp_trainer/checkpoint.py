"""Sharded, atomic checkpoints with torch.distributed.checkpoint (DCP), resume, and Hugging Face export.

Layout of one checkpoint, ``<checkpoint.dir>/step_00000010/``:

* ``*.distcp`` + ``.metadata``: model and optimizer state from ``get_state_dict``,
  each rank writing its own shards (reloadable on a different world size);
* ``train_state.json``: step, data position, scheduler and grad-scaler state;
* ``rng/rank_00003.pt``: each rank's torch CPU/CUDA and Python RNG states;
* ``COMPLETE``: the marker, written last.

Atomicity: everything is written to ``step_00000010.tmp/``; after a barrier the
leader writes ``COMPLETE`` and renames the directory (atomic on POSIX). The small
files (train state, RNG states, marker) and the parent directory are fsynced. An
existing ``step_00000010`` (a rerun of the same step) is first renamed aside to
``step_00000010.old-<pid>``, the new one renamed into place, then the aside one
deleted; a crash in between is repaired at the next start. Resume takes the newest
directory that has the marker; ``.tmp`` leftovers of a crashed save are ignored and
deleted. Pruning removes a checkpoint's marker before its files, so a half-deleted
directory is never taken as complete.

Which checkpoint to resume is decided by the leader and broadcast, so every rank
loads the same one. After an explicit ``checkpoint.resume <path>`` at step S, the
complete checkpoints newer than S in ``checkpoint.dir`` belong to the abandoned run:
they are deleted once the resume is loaded, so they neither outrank the new run's
checkpoints in pruning nor are picked by a later ``resume=auto``.

Testing aid: ``FSDP_TRAINER_FAULT_DURING_SAVE=<step>`` SIGKILLs every rank in the
middle of that step's save (shards written, no marker yet).
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import shutil
import signal
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
from .distributed import DistEnv
from .errors import ConfigError
from .model import DTYPES, meta_model, reset_rotary_

log = logging.getLogger(__name__)

MARKER = "COMPLETE"
STEP_DIR = re.compile(r"^step_(\d{8})$")
ASIDE_DIR = re.compile(r"^(step_\d{8})\.old-\d+$")
FAULT_DURING_SAVE = "FSDP_TRAINER_FAULT_DURING_SAVE"


def step_dir_name(step: int) -> str:
    return f"step_{step:08d}"


def complete_checkpoints(root: Path) -> list[tuple[int, Path]]:
    """(step, path) of every complete checkpoint under ``root``, oldest first."""
    if not root.is_dir():
        return []
    found = []
    for p in root.iterdir():
        m = STEP_DIR.match(p.name)
        if m and (p / MARKER).is_file():
            found.append((int(m.group(1)), p))
    return sorted(found)


def _fsync_dir(path: Path) -> None:
    """Make a directory's entries (a rename, a new file) durable."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some filesystems do not fsync directories
        pass
    finally:
        os.close(fd)


def _write_synced(path: Path, data: bytes | str) -> None:
    """Write a small file and fsync it."""
    with open(path, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)
        f.flush()
        os.fsync(f.fileno())


def remove_checkpoint(path: Path) -> None:
    """Delete a checkpoint directory, marker first: a deletion cut short never leaves a 'complete' checkpoint behind."""
    try:
        (path / MARKER).unlink()
        _fsync_dir(path)
    except FileNotFoundError:
        pass
    shutil.rmtree(path, ignore_errors=True)


def replace_dir(tmp: Path, final: Path) -> None:
    """Rename ``tmp`` to ``final``; an existing ``final`` is renamed aside first and deleted after (never a moment with neither)."""
    aside = None
    if final.exists():
        aside = final.with_name(f"{final.name}.old-{os.getpid()}")
        os.replace(final, aside)
    os.replace(tmp, final)
    _fsync_dir(final.parent)
    if aside is not None:
        remove_checkpoint(aside)


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


class Checkpointer:
    """Saves and restores everything a run needs to continue exactly where it stopped."""

    def __init__(
        self,
        cfg: CheckpointConfig,
        env: DistEnv,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        stateful: dict[str, Any],
    ):
        """``stateful``: name -> object with ``state_dict()``/``load_state_dict()`` (scheduler, data loader, scaler)."""
        assert cfg.dir is not None
        self.cfg, self.env, self.model, self.optimizer, self.stateful = cfg, env, model, optimizer, stateful
        self.root = Path(cfg.dir)

    def _dcp_state(self) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
        """What DCP saves and loads, and the optimizer's fp32 masters in it (``converters.master_weights.with_masters``; empty without them)."""
        model_sd, optim_sd = get_state_dict(self.model, self.optimizer)
        masters = with_masters(self.model, self.optimizer, model_sd, optim_sd)
        return {"model": model_sd, "optim": optim_sd}, masters

    def clean_partial(self) -> None:
        """Delete ``.tmp`` directories left by a save that never finished, and repair an interrupted replace (leader only, then a barrier)."""
        if self.env.is_leader and self.root.is_dir():
            for p in self.root.glob("step_*.old-*"):
                m = ASIDE_DIR.match(p.name)
                final = self.root / m.group(1) if m else None
                if final is not None and not final.exists() and (p / MARKER).is_file():
                    log.warning("checkpoint: restoring %s (a replace was interrupted)", final)
                    os.replace(p, final)
                    _fsync_dir(self.root)
                else:
                    remove_checkpoint(p)
            for p in self.root.glob("step_*.tmp"):
                log.warning("checkpoint: removing incomplete %s", p)
                shutil.rmtree(p, ignore_errors=True)
        self.env.barrier()

    def find_resume(self) -> Path | None:
        """The checkpoint ``checkpoint.resume`` points at (None: start fresh), as the leader sees it, on every rank.

        Each rank choosing for itself could pick different checkpoints (a save landing
        between two ranks' directory listings, a lagging shared filesystem), so with a
        process group of more than one rank the leader decides and broadcasts.
        """
        import torch.distributed as dist

        if self.env is None or not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
            return self._find_resume_local()
        choice: list[Any] = [None]
        if self.env.is_leader:
            try:
                path = self._find_resume_local()
                choice[0] = ("path", None if path is None else str(path))
            except ConfigError as e:
                choice[0] = ("error", str(e))
        dist.broadcast_object_list(choice, src=0, device=torch.device("cpu"))
        kind, value = choice[0]
        if kind == "error":
            raise ConfigError(value)
        return None if value is None else Path(value)

    def prune_newer_than(self, step: int) -> None:
        """After an explicit resume at ``step``: delete the abandoned run's newer checkpoints (leader only, then a barrier)."""
        if self.env.is_leader:
            for s, p in complete_checkpoints(self.root):
                if s > step:
                    log.warning("checkpoint: removing %s, newer than the explicit resume point (step %d)", p, step)
                    remove_checkpoint(p)
        self.env.barrier()

    def _find_resume_local(self) -> Path | None:
        if not self.cfg.enabled or self.cfg.resume == "never":
            return None
        if self.cfg.resume == "auto":
            found = complete_checkpoints(self.root)
            return found[-1][1] if found else None
        path = Path(self.cfg.resume)
        if not (path / MARKER).is_file():
            raise ConfigError(f"--checkpoint.resume: {path} is not a complete checkpoint (no {MARKER} marker)")
        return path

    def load(self, path: Path) -> int:
        """Restore model, optimizer, RNG and ``stateful`` objects from ``path``; returns the step it was saved at."""
        state, masters = self._dcp_state()
        dcp.load(state, checkpoint_id=str(path))
        set_state_dict(self.model, self.optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
        attach_masters(
            self.model, self.optimizer, masters
        )  # loaded in place; set_state_dict replaced the optimizer's state
        train_state = json.loads((path / "train_state.json").read_text())
        for name, obj in self.stateful.items():
            if obj is not None and name in train_state:
                obj.load_state_dict(train_state[name])
        rng_file = path / "rng" / f"rank_{self.env.rank:05d}.pt"
        if rng_file.is_file():
            _set_rng_state(torch.load(rng_file, weights_only=False), self.env.device)
        log.info("checkpoint: resumed from %s (step %d)", path, train_state["step"])
        return int(train_state["step"])

    def save(self, step: int) -> Path:
        """Write ``step_XXXXXXXX`` atomically (see the module docstring) and prune old checkpoints."""
        final = self.root / step_dir_name(step)
        tmp = final.with_name(final.name + ".tmp")
        if self.env.is_leader:
            shutil.rmtree(tmp, ignore_errors=True)
            (tmp / "rng").mkdir(parents=True)
        self.env.barrier()
        dcp.save(self._dcp_state()[0], checkpoint_id=str(tmp))
        with open(tmp / "rng" / f"rank_{self.env.rank:05d}.pt", "wb") as f:
            torch.save(_rng_state(self.env.device), f)
            f.flush()
            os.fsync(f.fileno())
        if self.env.is_leader:
            train_state = {"step": step, "world_size": self.env.world_size}
            train_state.update({name: obj.state_dict() for name, obj in self.stateful.items() if obj is not None})
            _write_synced(tmp / "train_state.json", json.dumps(train_state, indent=1))
        if os.environ.get(FAULT_DURING_SAVE) == str(step):
            log.warning("checkpoint: %s=%d, killing this process mid-save", FAULT_DURING_SAVE, step)
            os.kill(os.getpid(), signal.SIGKILL)
        self.env.barrier()  # every rank's shards are on disk
        if self.env.is_leader:
            _fsync_dir(tmp / "rng")
            _write_synced(tmp / MARKER, f"{step}\n")
            _fsync_dir(tmp)
            replace_dir(tmp, final)
            for _, old in complete_checkpoints(self.root)[: -self.cfg.keep]:
                remove_checkpoint(old)
        self.env.barrier()
        log.info("checkpoint: saved %s", final)
        return final


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
        lm.save_pretrained(path)
        if tokenizer is not None:
            tokenizer.save_pretrained(path)
        log.info("export: Hugging Face model written to %s", path)
    env.barrier()

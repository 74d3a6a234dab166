"""One owner per checkpoint location: the run that first used a ``checkpoint.dir`` (S3 prefix or directory).

Two runs writing ``step_00000004`` into one prefix mix their shards; a new run started on a finished run's prefix
would silently continue that run. So the leader records the run's identity in ``OWNER.json`` at the location's
root before anything is written there, and refuses any other run in one line naming the owner and the ways out.
A run takes another's location only when told to: an explicit ``checkpoint.resume`` of one of its checkpoints
(then it says whose it takes). Two runs started at the same moment both write ``OWNER.json``; the last write wins,
and the loser sees it when it reads the record back, or at the latest before its first save and before each commit
(:func:`check_owner`), before it has written a shard.

A run's identity is ``<train.output_dir>/run_identity.json``, made at its first start (a random id, the run's name,
a digest of its settings) and read again when the run is continued, so a resumed or restarted run is the same run.
``FSDP_RUN_ID`` (a job whose pods come back on fresh disks) and ``FSDP_RUN_NAME`` set the id and name instead.
The record also keeps the run's last committed checkpoint, which says when a location lost it (:func:`gone_line`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .errors import ConfigError

OWNER = "OWNER.json"
IDENTITY_FILE = "run_identity.json"
RUN_ID_ENV = "FSDP_RUN_ID"
RUN_NAME_ENV = "FSDP_RUN_NAME"


@dataclass(frozen=True)
class RunIdentity:
    """Who a run is: what ``OWNER.json`` records."""

    run_id: str
    name: str
    config_digest: str
    started: str
    """When the run was first started (UTC, ISO 8601 to the minute)."""

    def same_run(self, other: RunIdentity) -> bool:
        return self.run_id == other.run_id

    def describe(self) -> str:
        """``run 'a' (id 3f2a9c1e, settings 1a2b3c4d, started 2026-12-06 22:41 UTC)``."""
        return (
            f"run {self.name!r} (id {self.run_id[:12]}, settings {self.config_digest[:8]}, "
            f"started {self.started.replace('T', ' ')} UTC)"
        )


def _digest(cfg: Any) -> str:
    settings = cfg.to_dict()
    for volatile in (("checkpoint", "resume"), ("train", "steps"), ("train", "output_dir")):
        settings.get(volatile[0], {}).pop(volatile[1], None)
    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()


def run_identity(cfg: Any) -> RunIdentity:
    """This run's identity (see the module docstring); made and recorded at its first start."""
    path = Path(cfg.train.output_dir) / IDENTITY_FILE
    record: dict[str, Any] = {}
    with contextlib.suppress(OSError, ValueError):
        record = json.loads(path.read_text())
    run_id = os.environ.get(RUN_ID_ENV) or record.get("run_id") or uuid.uuid4().hex
    name = os.environ.get(RUN_NAME_ENV) or record.get("name") or Path(cfg.train.output_dir).resolve().name
    identity = RunIdentity(
        run_id=run_id,
        name=name,
        config_digest=record.get("config_digest") or _digest(cfg),
        started=record.get("started") or time.strftime("%Y-%m-%dT%H:%M", time.gmtime()),
    )
    if record.get("run_id") != identity.run_id or record.get("name") != identity.name:
        _write_record(path, {**record, **asdict(identity)})
    return identity


def _write_record(path: Path, record: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(f".{path.name}.{os.getpid()}")
    part.write_text(json.dumps(record, indent=1))
    os.replace(part, path)


def remember_checkpoint(cfg: Any, ckpt: str, step: int) -> None:
    """Record the run's last committed checkpoint in its identity file (leader, after each commit)."""
    path = Path(cfg.train.output_dir) / IDENTITY_FILE
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return
    record["last_checkpoint"] = {"id": ckpt, "step": step, "dir": cfg.checkpoint.dir}
    _write_record(path, record)


def gone_line(cfg: Any, store: Any) -> str | None:
    """When ``checkpoint.dir`` holds no complete checkpoint but this run committed one there: the warning that says
    it is gone (before step 1), else None."""
    try:
        record = json.loads((Path(cfg.train.output_dir) / IDENTITY_FILE).read_text())
    except (OSError, ValueError):
        return None
    last = record.get("last_checkpoint") or {}
    if not last or str(last.get("dir", "")).rstrip("/") != str(cfg.checkpoint.dir).rstrip("/"):
        return None
    return (
        f"checkpoint: this run's last checkpoint, {last['id']} (step {last['step']}), is gone from "
        f"{store.root} (a lifecycle rule, a deleted prefix or a restored account?); no complete checkpoint is "
        "left there, so training starts again at step 1"
    )


def read_owner(store: Any) -> RunIdentity | None:
    """The identity recorded in a location's ``OWNER.json``, or None."""
    raw = store.read(store.join(store.root, OWNER))
    if raw is None:
        return None
    try:
        data = json.loads(raw)
        return RunIdentity(data["run_id"], data["name"], data["config_digest"], data["started"])
    except (ValueError, KeyError, TypeError):
        return None


def _write_owner(store: Any, identity: RunIdentity, **extra: Any) -> None:
    store.write(store.join(store.root, OWNER), json.dumps({**asdict(identity), **extra}, indent=1).encode())


def refusal(store: Any, owner: RunIdentity) -> str:
    """The one line refusing a run on a location another run owns."""
    return (
        f"--checkpoint.dir: {store.root} holds the checkpoints of {owner.describe()}; use another "
        f"--checkpoint.dir for this run, or continue that run (fsdp-sdk run --resume {owner.name}); to start from "
        "one of its checkpoints instead, name it with --checkpoint.resume"
    )


def claim(store: Any, identity: RunIdentity, explicit_resume: str | None) -> str | None:
    """Leader, at start: make ``identity`` the location's owner, or refuse (ConfigError). ``explicit_resume``: the
    checkpoint named by ``checkpoint.resume``, which lets this run take a location another run owns. Returns a
    warning to log when it took one, else None."""
    owner = read_owner(store)
    warning = None
    if owner is not None and not owner.same_run(identity):
        inside = explicit_resume is not None and explicit_resume.rstrip("/").rsplit("/", 1)[0] == store.root.rstrip("/")
        if not inside:
            raise ConfigError(refusal(store, owner))
        warning = (
            f"checkpoint: {store.root} held the checkpoints of {owner.describe()}; this run takes it over from "
            f"{explicit_resume} (--checkpoint.resume), and its checkpoints after that one are deleted"
        )
    if owner is None or not owner.same_run(identity):
        _write_owner(store, identity, **({"taken_from": asdict(owner)} if owner else {}))
        check_owner(store, identity)  # another run's claim landing at the same moment wins: refused here
    return warning


def check_owner(store: Any, identity: RunIdentity) -> None:
    """Leader, before each save and commit: refuse (ConfigError) when another run has claimed the location since."""
    owner = read_owner(store)
    if owner is not None and not owner.same_run(identity):
        raise ConfigError(refusal(store, owner))


def whose(store: Any, ckpt: str, identity: RunIdentity) -> str | None:
    """For an explicit resume from another location: the line saying whose checkpoint this run starts from."""
    owner = read_owner(store)
    if owner is None or owner.same_run(identity):
        return None
    return f"checkpoint: starting from {ckpt}, a checkpoint of {owner.describe()} (--checkpoint.resume)"

"""A named local run continued: the settings it was started with, what this command changes, and what it may not.

A run records every setting it was started with in ``run.json`` (``settings``: the trainer section and the
explicitly set ``job.*`` and ``local.*`` settings; :func:`recorded_settings`). Running its name again, with
``--name`` or ``--resume``, starts from those settings, with what this command sets on top
(:func:`continued_config`): ``--steps 300`` changes the steps and nothing else. A change that would lose the
run's progress is refused in one line naming both values and the two ways out (:func:`refuse_lost_progress`):
another checkpoint location (its checkpoints would not be found), another model (they would not load), or a
world size the run's parallel layout cannot use. And a run about to start at step 1 while a complete
checkpoint of it exists somewhere it knows of says so first (:func:`unused_checkpoint_note`).
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fsdp_sdk.errors import ConfigError

if TYPE_CHECKING:
    from fsdp_sdk.backends.local.records import RunRecord
    from fsdp_sdk.config import Config

__all__ = [
    "checkpoint_location",
    "complete_checkpoints",
    "continued_config",
    "recorded_settings",
    "refuse_lost_progress",
    "unused_checkpoint_note",
]

#: The SDK sections whose explicitly set values a run records (``cluster.*`` says where the record is: not kept;
#: ``code.*``: the run's own script, module or function, run again when it is continued).
RECORDED_SECTIONS = ("job", "local", "code")
_STEP_DIR = re.compile(r"^step_(\d{8})$")
_MARKER = "COMPLETE"
_BROKEN = "BROKEN"  # fsdp_trainer.storage.BROKEN: the trainer found the checkpoint damaged when it loaded it


def recorded_settings(config: Config, run_dir: Path) -> dict[str, Any]:
    """What ``run.json`` keeps of a run's settings: the trainer section, the explicitly set ``job.*`` and
    ``local.*`` values (secrets left out: they are given again, never written down), and where its checkpoints
    go (``checkpoint_locations``, every one the run has used)."""
    raw, shown = config.to_dict(redact=False), config.to_dict()
    sdk: dict[str, Any] = {}
    for path in sorted(config.origins):
        section, _, name = path.partition(".")
        if section not in RECORDED_SECTIONS or "." in name or name not in (raw.get(section) or {}):
            continue
        value = raw[section][name]
        if value != shown[section][name]:  # a secret (or holds one): not written down
            continue
        sdk[path] = copy.deepcopy(value)
    return {"trainer": copy.deepcopy(dict(config.trainer)), "sdk": sdk}


def continued_config(config: Config, record: RunRecord) -> Config:
    """``config`` with run ``record``'s recorded settings under what this command sets (its trainer settings and
    every ``job.*``/``local.*`` value it sets explicitly win; the rest is as the run was started)."""
    from fsdp_sdk.config import Setting

    settings = record.settings or {}
    new = copy.deepcopy(config)
    new.trainer = _deep_merge(settings.get("trainer") or {}, config.trainer)
    recorded = dict(settings.get("sdk") or {})
    for path, key in (("job.num_workers", "num_workers"), ("job.nproc_per_node", "nproc_per_node")):
        if key in settings:  # what records before the "sdk" key kept
            recorded.setdefault(path, settings[key])
    items = [
        Setting(path, value, path, f"run {record.run_id}'s record")
        for path, value in sorted(recorded.items())
        if path not in config.origins
    ]
    if not items:
        return new
    origins = dict(new.origins)
    new = new.with_overrides(items)
    new.origins = origins  # recorded values are not "given": a later continuation may still take new ones
    return new


def checkpoint_location(trainer: Mapping[str, Any], run_dir: Path) -> str | None:
    """Where a run's checkpoints go: ``checkpoint.dir``, else ``<train.output_dir or run dir>/checkpoints``
    (``None`` when checkpoints are off). Paths are absolute, S3 prefixes without their trailing ``/``."""
    checkpoint = trainer.get("checkpoint") or {}
    if str(checkpoint.get("enabled", True)).lower() in ("false", "0", "no", "off"):
        return None
    where = checkpoint.get("dir")
    if where:
        where = str(where)
        return where.rstrip("/") if where.startswith("s3://") else str(Path(os.path.expanduser(where)).absolute())
    output = (trainer.get("train") or {}).get("output_dir") or run_dir
    return str((Path(os.path.expanduser(str(output))) / "checkpoints").absolute())


def _model(trainer: Mapping[str, Any]) -> tuple[str, str]:
    model = trainer.get("model") or {}
    name = model.get("name_or_path")
    return ("model.name_or_path", str(name)) if name else ("model.preset", str(model.get("preset") or "tiny"))


def _flag(config: Config, path: str) -> str:
    origin = config.origins.get(f"trainer.{path}") or config.origins.get(path)
    return origin.name if origin is not None else f"--{path}" if not path.startswith(("job.", "local.")) else path


def _world_problem(trainer: Mapping[str, Any], world: int) -> str | None:
    """Why the run's parallel layout cannot use ``world`` processes (``None``: a DCP checkpoint reshards to it)."""
    parallel = trainer.get("parallel") or {}
    if str(parallel.get("sharding", "full_shard")) != "hybrid_shard":
        return None
    shard, replicate = int(parallel.get("shard_size") or 0), int(parallel.get("replicate_size") or 0)
    if shard and replicate and shard * replicate != world:
        return f"its hybrid layout is {replicate} replicas x {shard} shards = {shard * replicate} processes"
    if shard and world % shard:
        return f"its hybrid layout shards over {shard} processes, which {world} is not a multiple of"
    return None


def refuse_lost_progress(record: RunRecord, new: Config, run_dir: Path) -> None:
    """Refuse a continuation of run ``record`` whose settings would lose its progress.

    :param record: the run as recorded (its settings, its progress).
    :param new: the configuration the continuation would run (:func:`continued_config`).
    :param run_dir: the run's directory.
    :raises ConfigError: another checkpoint location, another model, or a world size its layout cannot use;
        naming both values and the two ways out (``--resume NAME`` as it was, or a new ``--name``).
    """
    settings = record.settings or {}
    old_trainer = settings.get("trainer")
    if not isinstance(old_trainer, dict) or not record.steps:
        return  # nothing recorded to compare with, or no progress to lose
    run_id = record.run_id

    def refuse(path: str, was: str, now: str, consequence: str) -> None:
        flag = _flag(new, path)
        raise ConfigError(
            flag,
            f"run {run_id} was started with {was}; this command gives {now}: {consequence}",
            f"continue it as it was with 'fsdp-sdk run --resume {run_id}' (without {flag}), or start a new run "
            "with another --name",
        )

    was_dir, now_dir = checkpoint_location(old_trainer, run_dir), checkpoint_location(new.trainer, run_dir)
    if was_dir is not None and now_dir != was_dir:
        path = "checkpoint.dir" if (new.trainer.get("checkpoint") or {}).get("dir") else "train.output_dir"
        if now_dir is None:
            path = "checkpoint.enabled"
        refuse(
            path,
            f"checkpoints in {was_dir}",
            f"{now_dir}" if now_dir else "no checkpoints",
            f"it would not find its checkpoints and start again at step 1 (its last step: {record.steps})",
        )
    (was_key, was_model), (now_key, now_model) = _model(old_trainer), _model(new.trainer)
    if (was_key, was_model) != (now_key, now_model):
        refuse(
            now_key if (new.trainer.get("model") or {}).get(now_key.split(".")[1]) else was_key,
            f"{was_key} {was_model}",
            f"{now_key} {now_model}",
            "its checkpoints would not load into that model",
        )
    world = new.job.num_workers * (new.job.nproc_per_node or 1)
    was_world = int(settings.get("num_workers", record.nodes)) * int(settings.get("nproc_per_node", 1) or 1)
    problem = _world_problem(new.trainer, world) if world != was_world else None
    if problem:
        origin = new.origins.get("job.nproc_per_node") or new.origins.get("job.num_workers")
        raise ConfigError(
            origin.name if origin else "job.num_workers",
            f"run {run_id} was started on {was_world} processes; this command gives {world}: {problem}",
            f"continue it as it was with 'fsdp-sdk run --resume {run_id}' (without {origin.name if origin else ''}), "
            "or start a new run with another --name",
        )


def complete_checkpoints(location: str) -> list[int]:
    """The steps of the complete checkpoints (``step_XXXXXXXX`` with its ``COMPLETE`` marker and without the trainer's
    ``BROKEN`` marker: one found damaged does not count) at ``location``, oldest first: a directory, or an ``s3://``
    prefix (listed with boto3). Empty when it cannot be read."""
    if location.startswith("s3://"):
        return _s3_complete(location)
    root = Path(location)
    try:
        entries = list(root.iterdir())
    except OSError:
        return []
    steps = []
    for entry in entries:
        match = _STEP_DIR.match(entry.name)
        if match and (entry / _MARKER).is_file() and not (entry / _BROKEN).exists():
            steps.append(int(match.group(1)))
    return sorted(steps)


def _s3_complete(location: str) -> list[int]:
    from fsdp_sdk.aws.checkpoints import _client, trainer_region

    bucket, _, prefix = location[len("s3://") :].partition("/")
    base = f"{prefix.rstrip('/')}/" if prefix else ""
    try:
        client = _client(trainer_region())
        steps = []
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=base, Delimiter="/"):
            for common in page.get("CommonPrefixes", []):
                match = _STEP_DIR.match(common["Prefix"][len(base) :].rstrip("/"))
                if not match:
                    continue
                marker = client.list_objects_v2(Bucket=bucket, Prefix=f"{common['Prefix']}{_MARKER}", MaxKeys=1)
                broken = client.list_objects_v2(Bucket=bucket, Prefix=f"{common['Prefix']}{_BROKEN}", MaxKeys=1)
                if marker.get("KeyCount", 0) and not broken.get("KeyCount", 0):
                    steps.append(int(match.group(1)))
        return sorted(steps)
    except Exception:  # credentials, network, a missing bucket: the trainer reports those; this is only a note
        return []


def _resumes(trainer: Mapping[str, Any]) -> bool:
    checkpoint = trainer.get("checkpoint") or {}
    return str(checkpoint.get("resume", "auto")) != "never"


def unused_checkpoint_note(
    run_id: str, trainer: Mapping[str, Any], run_dir: Path, known: list[str], resumes_from: str | None = None
) -> str | None:
    """The line a run about to start at step 1 prints while a complete checkpoint of it exists in a location it
    knows of (``known``: the locations its record lists, and where it saves now), or ``None``.

    :param run_id: the run.
    :param trainer: the trainer settings it starts with.
    :param run_dir: its directory.
    :param known: checkpoint locations the run has used.
    :param resumes_from: where it will look for a checkpoint to resume (default: where it saves now).
    """
    here = checkpoint_location(trainer, run_dir)
    looks = resumes_from or here
    explicit = str((trainer.get("checkpoint") or {}).get("resume", "auto"))
    if explicit not in ("auto", "never"):
        return None  # an explicit checkpoint to resume: the trainer checks it
    if looks is not None and _resumes(trainer) and complete_checkpoints(looks):
        return None  # it resumes
    for location in dict.fromkeys([*known, *([here] if here else [])]):
        steps = complete_checkpoints(location)
        if not steps:
            continue
        why = (
            "checkpoints are off"
            if here is None
            else "checkpoint.resume is never"
            if not _resumes(trainer)
            else f"it now saves to {here}"
        )
        return (
            f"run {run_id} starts at step 1 although {location} holds its complete checkpoint of step {steps[-1]} "
            f"({why}); to continue from it: --checkpoint.dir {location}"
            + (" --checkpoint.resume auto" if not _resumes(trainer) and here is not None else "")
        )
    return None


def _deep_merge(base: Mapping[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(dict(base))
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out

"""What a checkpoint's files were when saved (sizes and CRC32 checksums), and checking them before a load.

Each rank's save goes through :class:`DigestingWriter`, a wrapper of the store's DCP ``StorageWriter`` that hashes
every shard as it is written (the stream is wrapped: no second read) and, once its shards are written, puts
``digests/rank_00003.json`` beside them: the size and CRC32 of each shard and of the small files that rank wrote
(its RNG state; on the leader ``train_state.json``). The coordinator adds ``digests/metadata.json`` for DCP's
``.metadata``. All of it lands before the ``COMPLETE`` marker: DCP writes ``.metadata`` only after every rank's
``write_data`` returned, and the marker comes after that.

Before a checkpoint is loaded, :func:`expected_files` gathers those records (the leader) and :func:`check_files`
compares the files with them (each rank a share): a missing, truncated or altered object is named, with the
checkpoint. A checkpoint saved before digests existed has no ``digests/`` and is loaded unchecked.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import zlib
from collections.abc import Iterator
from typing import Any

from torch.distributed.checkpoint import StorageWriter


class Crc32:
    """CRC32 (zlib's, which releases the GIL on large buffers) with hashlib's ``update``/``hexdigest``: a checksum
    for corrupted or cut-short objects, at twice SHA-256's speed (2.1 against 1.1 GB/s on one core here)."""

    def __init__(self) -> None:
        self.value = 0

    def update(self, data: Any) -> None:
        self.value = zlib.crc32(data, self.value)

    def hexdigest(self) -> str:
        return f"{self.value:08x}"


#: The folder of a checkpoint holding its digests.
DIGESTS = "digests"


def rank_digests_name(rank: int) -> str:
    """``digests/rank_00003.json``."""
    return f"{DIGESTS}/rank_{rank:05d}.json"


class _DigestingStream:
    """A write stream that hashes and counts what goes through it (DCP writes each file sequentially)."""

    def __init__(self, inner: Any, on_progress: Any) -> None:
        self.inner, self.on_progress = inner, on_progress
        self.digest = Crc32()
        self.size = 0

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self.digest.update(view)
        self.size += view.nbytes
        written = self.inner.write(data)
        self.on_progress()
        return self.size if written is None else written

    def __getattr__(self, name: str) -> Any:  # tell, flush, close, fileno, writable...
        return getattr(self.inner, name)


class _DigestingFileSystem:
    """A DCP file system whose write streams are :class:`_DigestingStream` s, recorded by file name."""

    def __init__(self, inner: Any, record: Any, on_progress: Any) -> None:
        self.inner, self.record, self.on_progress = inner, record, on_progress

    @contextlib.contextmanager
    def create_stream(self, path: Any, mode: str) -> Iterator[Any]:
        with self.inner.create_stream(path, mode) as stream:
            if "w" not in mode:
                yield stream
                return
            wrapped = _DigestingStream(stream, self.on_progress)
            yield wrapped
        self.on_progress()
        self.record(str(path).rstrip("/").rsplit("/", 1)[-1], wrapped.size, wrapped.digest.hexdigest())

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class _ProgressStream:
    """A read stream that tells the store it heard from S3 at each read (the load's watchdog reads it)."""

    def __init__(self, inner: Any, store: Any) -> None:
        self.inner, self.store = inner, store

    def read(self, *args: Any) -> Any:
        data = self.inner.read(*args)
        self.store.last_progress = time.monotonic()
        return data

    def readinto(self, buffer: Any) -> Any:
        n = self.inner.readinto(buffer)
        self.store.last_progress = time.monotonic()
        return n

    def __getattr__(self, name: str) -> Any:  # seek, tell, readable, close...
        return getattr(self.inner, name)


class ProgressFileSystem:
    """A DCP file system whose read streams keep ``store.last_progress`` current."""

    def __init__(self, inner: Any, store: Any) -> None:
        self.inner, self.store = inner, store

    @contextlib.contextmanager
    def create_stream(self, path: Any, mode: str) -> Iterator[Any]:
        with self.inner.create_stream(path, mode) as stream:
            yield _ProgressStream(stream, self.store) if "r" in mode else stream

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class DigestingWriter(StorageWriter):
    """The store's DCP writer, recording each file's size and CRC32 in ``digests/`` (see the module docstring).

    :param inner: the store's own ``StorageWriter`` (it must write through ``inner.fs.create_stream``, as DCP's
        file system, s3torchconnector's and fsspec's writers do).
    :param store: the checkpoint store (writes the digest files; its ``last_progress``, if any, is kept current).
    :param ckpt: the checkpoint being written.
    :param small: name -> (size, crc32) of the small files this rank wrote into ``ckpt`` already.
    """

    def __init__(self, inner: Any, store: Any, ckpt: str, small: dict[str, tuple[int, str]]) -> None:
        self.inner, self.store, self.ckpt = inner, store, ckpt
        self.files: dict[str, tuple[int, str]] = dict(small)
        self.is_coordinator = False
        self._lock = threading.Lock()
        if getattr(inner, "fs", None) is not None:
            inner.fs = _DigestingFileSystem(inner.fs, self._record, self._progress)

    def _progress(self) -> None:
        if hasattr(self.store, "last_progress"):
            self.store.last_progress = time.monotonic()

    def _record(self, name: str, size: int, crc32: str) -> None:
        with self._lock:
            self.files[name.removesuffix(".tmp")] = (size, crc32)  # DCP writes .metadata.tmp, then renames it

    # -- StorageWriter, delegated --

    def reset(self, checkpoint_id: Any = None) -> None:
        self.inner.reset(checkpoint_id)

    def set_up_storage_writer(self, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        self.is_coordinator = is_coordinator
        self.inner.set_up_storage_writer(is_coordinator, *args, **kwargs)

    def prepare_local_plan(self, plan: Any) -> Any:
        return self.inner.prepare_local_plan(plan)

    def prepare_global_plan(self, plans: Any) -> Any:
        return self.inner.prepare_global_plan(plans)

    def write_data(self, plan: Any, planner: Any) -> Any:
        future = self.inner.write_data(plan, planner)
        future.wait()  # DCP's writers write before returning; the digests go after the shards, before .metadata
        with self._lock:
            files = {k: v for k, v in self.files.items() if k != ".metadata"}
        self._put(rank_digests_name(_rank()), files)
        return future

    def finish(self, metadata: Any, results: Any) -> None:
        self.inner.finish(metadata, results)
        with self._lock:
            entry = self.files.get(".metadata")
        if entry is not None:
            self._put(f"{DIGESTS}/metadata.json", {".metadata": entry})

    def storage_meta(self) -> Any:
        return self.inner.storage_meta()

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: Any) -> bool:
        return True

    # -- AsyncStager, delegated (DCP's async_save stages through its writer's own stager: FSDP1's ShardedTensor) --

    @property
    def _synchronize_after_execute(self) -> bool:
        return bool(getattr(self.inner, "_synchronize_after_execute", True))

    @property
    def should_synchronize_after_execute(self) -> bool:
        return self._synchronize_after_execute

    def stage(self, state_dict: Any) -> Any:
        return self.inner.stage(state_dict)

    def synchronize_staging(self) -> None:
        self.inner.synchronize_staging()

    def close(self) -> None:
        if hasattr(self.inner, "close"):
            self.inner.close()

    def _put(self, name: str, files: dict[str, tuple[int, str]]) -> None:
        body = {"files": {k: {"size": size, "crc32": crc} for k, (size, crc) in sorted(files.items())}}
        self.store.write(self.store.join(self.ckpt, name), json.dumps(body, indent=1).encode())

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def small_digest(data: bytes) -> tuple[int, str]:
    """(size, CRC32) of a small file's bytes."""
    digest = Crc32()
    digest.update(data)
    return len(data), digest.hexdigest()


def expected_files(store: Any, ckpt: str) -> dict[str, tuple[int, str]] | str | None:
    """Every file of ``ckpt`` with the size and CRC32 recorded at save; a problem (a digest record missing or
    unreadable) as a string; None for a checkpoint saved without digests (loaded unchecked)."""
    raw = store.read(store.join(ckpt, "train_state.json"))
    if raw is None:
        return "train_state.json is missing"
    try:
        world = int(json.loads(raw).get("world_size", 1))
    except (ValueError, AttributeError):
        return "train_state.json is not readable JSON"
    names = [rank_digests_name(r) for r in range(world)] + [f"{DIGESTS}/metadata.json"]
    records = [store.read(store.join(ckpt, n)) for n in names]
    if all(r is None for r in records):
        return None
    files: dict[str, tuple[int, str]] = {}
    for name, record in zip(names, records, strict=True):
        if record is None:
            return f"{name} is missing (it lists what that rank wrote)"
        try:
            for file, entry in json.loads(record)["files"].items():
                files[file] = (int(entry["size"]), str(entry["crc32"]))
        except (ValueError, KeyError, TypeError):
            return f"{name} is not readable"
    return files


def check_files(
    store: Any, ckpt: str, files: dict[str, tuple[int, str]], share: tuple[int, int] = (0, 1)
) -> str | None:
    """The first of ``files`` (this rank's ``share``: (rank, world) takes every world-th file) that differs from
    what was saved, said in words ("__0_0.distcp is 543691 bytes, 612345 were written"); None when all match."""
    rank, world = share
    for name in sorted(files)[rank::world]:
        size, crc = files[name]
        file = store.join(ckpt, name)
        found = store.size(file)
        if found is None:
            return f"{name} is missing"
        if found != size:
            return f"{name} is {found} bytes, {size} were written"
        if store.crc32(file) != crc:
            return f"{name} does not match the CRC32 recorded at save (its bytes changed)"
    return None

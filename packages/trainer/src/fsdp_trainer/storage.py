"""Where checkpoints live: a local directory or an S3 prefix, behind one small interface.

``checkpoint.py`` decides *what* a checkpoint is (DCP shards + metadata, train state, RNG
states, a ``COMPLETE`` marker written last); a :class:`CheckpointStore` decides *how* its
files are written, listed, committed and deleted:

* :class:`LocalStore`: a save goes to ``step_XXXXXXXX.tmp/`` and is renamed into place
  after the marker (atomic on POSIX); see ``checkpoint.py``'s docstring;
* :class:`S3Store` (``s3://bucket/prefix``): S3 has no rename, so a save writes straight
  into ``step_XXXXXXXX/`` and the ``COMPLETE`` object, put after every rank's shards,
  RNG states, the train state and DCP's ``.metadata``, is what makes it count. A prefix
  without the marker is the debris of an interrupted save: never resumed, deleted by
  :meth:`CheckpointStore.clean_partial`. Deleting removes the marker first.

A checkpoint that failed verification when loaded gets a ``BROKEN`` object (the reason inside): it no longer
counts as complete, is never resumed again, and is kept (not deleted as debris) for its owner to inspect. Every
small S3 operation is bounded (:func:`bounded`, ``checkpoint.s3_timeout_s``); credentials S3 rejects are said apart
from a policy that denies (:func:`describe_s3_error`).

S3 goes through AWS's ``s3torchconnector`` (``pip install fsdp-trainer[s3]``): its DCP
``S3StorageWriter``/``S3StorageReader`` for the shards, its CRT-based client for the
small objects, listing and deleting. The endpoint comes from the standard settings
(``AWS_ENDPOINT_URL_S3``, then ``AWS_ENDPOINT_URL``; path-style addressing when one is
set, as S3-compatible stores and moto expect), the region from ``AWS_REGION`` /
``AWS_DEFAULT_REGION`` (default us-east-1), credentials from the standard chain
(environment, profile, EKS Pod Identity / IRSA web identity, instance role).

``checkpoint.s3_client fsspec`` selects torch's fsspec DCP storage over ``s3fs``
instead (``pip install s3fs``): the fallback for a store the CRT client cannot serve
(a TLS proxy, an endpoint that needs botocore's options). Same layout, same marker.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import ConfigError, StoreStalled

MARKER = "COMPLETE"
#: Put in a checkpoint that failed verification at load (its reason inside): never resumed again, kept to inspect.
BROKEN = "BROKEN"
STEP_DIR = re.compile(r"^step_(\d{8})$")
ASIDE_DIR = re.compile(r"^(step_\d{8})\.old-\d+$")
S3_CLIENTS = ("s3torchconnector", "fsspec")
#: Bytes read at a time when a file is checksummed.
CHUNK = 8 << 20
#: A file inside a checkpoint (or its staging directory): (checkpoint, name inside it).
SMALL_FILE = re.compile(r"^(.*/step_\d{8}(?:\.tmp)?)/(.+)$")


def bounded(fn: Any, args: tuple[Any, ...], timeout_s: float, uri: str, setting: str) -> Any:
    """``fn(*args)`` in a daemon thread, waited for at most ``timeout_s``: its result or its exception, else
    :class:`StoreStalled` ("<uri>: no answer from the endpoint for 60 s (<setting>)"). A stalled call is left behind
    in its daemon thread (nothing can cancel a request the CRT client has in flight); the run fails."""
    done = threading.Event()
    out: list[Any] = [None, None]

    def call() -> None:
        try:
            out[0] = fn(*args)
        except BaseException as e:
            out[1] = e
        done.set()

    threading.Thread(target=call, name="s3-bounded", daemon=True).start()
    if not done.wait(timeout_s):
        raise StoreStalled(f"{uri}: no answer from the endpoint for {timeout_s:g} s ({setting})")
    if out[1] is not None:
        raise out[1]
    return out[0]


#: The settings that may hold an ``s3://`` location. The SDK checks the same ones from the machine that launches
#: (``fsdp_sdk.aws.checkpoints``: it runs where the trainer is not installed, and the image holds no SDK), with the
#: same bucket and region rules; tests/core/test_s3_rules.py holds the two to one another.
S3_SETTINGS = (
    ("checkpoint", "dir"),
    ("checkpoint", "resume"),
    ("checkpoint", "export_hf"),
    ("model", "name_or_path"),
    ("model", "tokenizer"),
)


def step_dir_name(step: int) -> str:
    """``step_00000010`` for step 10."""
    return f"step_{step:08d}"


def is_s3(path: str | os.PathLike[str] | None) -> bool:
    """Whether ``path`` is an ``s3://`` URI."""
    return path is not None and str(path).startswith("s3://")


def parse_s3(uri: str, field: str = "--checkpoint.dir") -> tuple[str, str]:
    """(bucket, key prefix without a trailing slash) of ``s3://bucket/prefix``; ConfigError when there is no bucket."""
    rest = uri[len("s3://") :]
    bucket, _, prefix = rest.partition("/")
    if not re.fullmatch(r"[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]", bucket):
        raise ConfigError(
            f"{field}: {uri!r} names no valid bucket; expected s3://BUCKET/PREFIX "
            "(a bucket name is 3-63 lower-case letters, digits, '.' or '-')"
        )
    return bucket, prefix.strip("/")


def s3_endpoint() -> str | None:
    """The S3 endpoint from the standard AWS settings (``AWS_ENDPOINT_URL_S3``, then ``AWS_ENDPOINT_URL``), if any."""
    return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None


def s3_region() -> str:
    """The region the S3 client signs for (``AWS_REGION``, ``AWS_DEFAULT_REGION``, else us-east-1)."""
    return os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"


@dataclass(frozen=True)
class Listing:
    """One ``step_XXXXXXXX`` checkpoint found in a store."""

    step: int
    id: str
    """What DCP's ``checkpoint_id`` and the store's methods take (a path or an ``s3://`` URI)."""
    complete: bool
    """Has its ``COMPLETE`` marker and no ``BROKEN`` one."""
    broken: bool = False
    """Marked ``BROKEN``: it failed verification when a run tried to load it (``digests.py``)."""


class CheckpointStore:
    """The operations ``Checkpointer`` needs from a checkpoint location. Ids are paths or ``s3://`` URIs."""

    root: str
    #: Threads each rank's DCP write spreads its shards over, one file each (``checkpoint.write_threads``).
    write_threads: int = 1

    def join(self, ckpt: str, name: str) -> str:
        """The id of file ``name`` (``a/b`` for subfolders) in checkpoint ``ckpt``."""
        return f"{ckpt.rstrip('/')}/{name}"

    def final_id(self, step: int) -> str:
        """Where the checkpoint of ``step`` is once complete."""
        return self.join(self.root, step_dir_name(step))

    def staging_id(self, step: int) -> str:
        """Where the save of ``step`` writes before it is committed."""
        raise NotImplementedError

    def listing(self) -> list[Listing]:
        """Every ``step_XXXXXXXX`` checkpoint, complete or not, oldest first."""
        raise NotImplementedError

    def complete(self) -> list[Listing]:
        """The complete checkpoints, oldest first."""
        return [c for c in self.listing() if c.complete]

    def is_complete(self, ckpt: str) -> bool:
        """Whether ``ckpt`` has its marker and was never found broken."""
        return self.exists(self.join(ckpt, MARKER)) and not self.is_broken(ckpt)

    def is_broken(self, ckpt: str) -> bool:
        """Whether ``ckpt`` failed verification at an earlier load (its ``BROKEN`` marker)."""
        return self.exists(self.join(ckpt, BROKEN))

    def size(self, file: str) -> int | None:
        """A file's size in bytes; None when it does not exist."""
        raise NotImplementedError

    def crc32(self, file: str) -> str | None:
        """A file's CRC32 (8 hex digits, as ``digests.Crc32``), read in chunks; None when it does not exist."""
        raise NotImplementedError

    def exists(self, file: str) -> bool:
        """Whether the file exists."""
        raise NotImplementedError

    def prepare(self, step: int) -> None:
        """Leader, before a save: an empty staging location for ``step``."""
        raise NotImplementedError

    def write(self, file: str, data: bytes) -> None:
        """Write a small file durably (train state, RNG state, marker)."""
        raise NotImplementedError

    def read(self, file: str) -> bytes | None:
        """A small file's bytes; None when it does not exist."""
        raise NotImplementedError

    def commit(self, step: int) -> str:
        """Leader, after every rank's files and DCP's metadata: write the marker (and move into place); the final id."""
        raise NotImplementedError

    def remove(self, ckpt: str) -> None:
        """Delete a checkpoint, marker first: a deletion cut short never leaves a 'complete' one behind."""
        raise NotImplementedError

    def clean_partial(self) -> list[str]:
        """Leader, at start: delete what interrupted saves and deletions left; returns what was removed."""
        raise NotImplementedError

    def writer(self, ckpt: str) -> Any:
        """DCP ``StorageWriter`` for ``ckpt``, recording the size and CRC32 of what it writes (``digests.py``),
        with those of the small files this process wrote into ``ckpt`` before."""
        from .digests import DigestingWriter

        small = getattr(self, "_small", {}).pop(ckpt.rstrip("/"), {})
        return DigestingWriter(self._dcp_writer(ckpt), self, ckpt, small)

    def _dcp_writer(self, ckpt: str) -> Any:
        raise NotImplementedError

    def _note_small(self, file: str, data: bytes) -> None:
        """Remember the digest of a small file written into a checkpoint (the next ``writer()`` of it records it)."""
        m = SMALL_FILE.match(file)
        if m is None or m.group(2) in (MARKER, BROKEN) or m.group(2).startswith("digests/"):
            return
        from .digests import small_digest

        pending = self.__dict__.setdefault("_small", {})
        pending.setdefault(m.group(1), {})[m.group(2)] = small_digest(data)

    def reader(self, ckpt: str) -> Any:
        """DCP ``StorageReader`` for ``ckpt`` (its reads keep ``last_progress`` current, where the store has one)."""
        from .digests import ProgressFileSystem

        reader = self._dcp_reader(ckpt)
        if hasattr(self, "last_progress") and getattr(reader, "fs", None) is not None:
            reader.fs = ProgressFileSystem(reader.fs, self)
        return reader

    def _dcp_reader(self, ckpt: str) -> Any:
        raise NotImplementedError


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


def _write_synced(path: Path, data: bytes) -> None:
    """Write a small file and fsync it."""
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


class LocalStore(CheckpointStore):
    """Checkpoints in a directory (a local disk or a shared filesystem), committed by an atomic rename."""

    def __init__(self, root: str) -> None:
        self.root = str(root)
        self.path = Path(root)

    def staging_id(self, step: int) -> str:
        return self.final_id(step) + ".tmp"

    def listing(self) -> list[Listing]:
        if not self.path.is_dir():
            return []
        found = []
        for p in self.path.iterdir():
            m = STEP_DIR.match(p.name)
            if m:
                broken = (p / BROKEN).is_file()
                found.append(Listing(int(m.group(1)), str(p), (p / MARKER).is_file() and not broken, broken))
        return sorted(found, key=lambda c: c.step)

    def exists(self, file: str) -> bool:
        return Path(file).is_file()

    def size(self, file: str) -> int | None:
        try:
            return Path(file).stat().st_size
        except FileNotFoundError:
            return None

    def crc32(self, file: str) -> str | None:
        from .digests import Crc32

        digest = Crc32()
        try:
            with open(file, "rb") as f:
                while chunk := f.read(CHUNK):
                    digest.update(chunk)
        except FileNotFoundError:
            return None
        return digest.hexdigest()

    def prepare(self, step: int) -> None:
        tmp = Path(self.staging_id(step))
        shutil.rmtree(tmp, ignore_errors=True)
        (tmp / "rng").mkdir(parents=True)

    def write(self, file: str, data: bytes) -> None:
        self._note_small(file, data)
        path = Path(file)
        path.parent.mkdir(parents=True, exist_ok=True)
        _write_synced(path, data)

    def read(self, file: str) -> bytes | None:
        try:
            return Path(file).read_bytes()
        except FileNotFoundError:
            return None

    def commit(self, step: int) -> str:
        tmp, final = Path(self.staging_id(step)), Path(self.final_id(step))
        _fsync_dir(tmp / "rng")
        _write_synced(tmp / MARKER, f"{step}\n".encode())
        _fsync_dir(tmp)
        replace_dir(tmp, final)
        return str(final)

    def remove(self, ckpt: str) -> None:
        remove_dir(Path(ckpt))

    def clean_partial(self) -> list[str]:
        removed: list[str] = []
        if not self.path.is_dir():
            return removed
        for p in self.path.glob("step_*.old-*"):
            m = ASIDE_DIR.match(p.name)
            final = self.path / m.group(1) if m else None
            if final is not None and not final.exists() and (p / MARKER).is_file():
                os.replace(p, final)  # a replace was interrupted: the aside one is the complete checkpoint
                _fsync_dir(self.path)
            else:
                remove_dir(p)
                removed.append(str(p))
        for p in self.path.glob("step_*.tmp"):
            shutil.rmtree(p, ignore_errors=True)
            removed.append(str(p))
        return removed

    def _dcp_writer(self, ckpt: str) -> Any:
        from torch.distributed.checkpoint import FileSystemWriter

        return FileSystemWriter(ckpt, thread_count=self.write_threads)

    def _dcp_reader(self, ckpt: str) -> Any:
        from torch.distributed.checkpoint import FileSystemReader

        return FileSystemReader(ckpt)


def remove_dir(path: Path) -> None:
    """Delete a checkpoint directory, marker first."""
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
        remove_dir(aside)


class S3Store(CheckpointStore):
    """Checkpoints under an ``s3://bucket/prefix``: written in place, complete once the ``COMPLETE`` object exists.

    Every small operation (listing, a small object, a deletion, a chunk read) is bounded by ``timeout_s``
    (``checkpoint.s3_timeout_s``): an endpoint that accepts and never answers fails it with :class:`StoreStalled`
    instead of hanging the run. ``last_progress`` (monotonic seconds) is when the store last heard from S3, which
    the checkpointer's watchdog reads for the shard writes it cannot bound one by one.
    """

    def __init__(self, root: str, client: str = "s3torchconnector", timeout_s: float = 60.0) -> None:
        self.bucket, self.prefix = parse_s3(root)
        self.root = f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"
        self.client_kind = client
        self.timeout_s = timeout_s
        self.last_progress = time.monotonic()
        self._client: Any = None

    # -- the small objects, listing and deletion: s3torchconnector's client (CRT) --

    def _s3(self) -> Any:
        if self._client is None:
            self._client = s3_client()
        return self._client

    def _bounded(self, uri: str, fn: Any, *args: Any) -> Any:
        """``fn(*args)``, or StoreStalled naming ``uri`` when S3 has not answered within ``timeout_s``."""
        result = bounded(fn, args, self.timeout_s, uri, "--checkpoint.s3_timeout_s")
        self.last_progress = time.monotonic()
        return result

    def _key(self, uri: str) -> str:
        bucket, key = parse_s3(uri)
        if bucket != self.bucket:
            raise ConfigError(f"--checkpoint.resume: {uri} is in bucket {bucket}, checkpoint.dir in {self.bucket}")
        return key

    def _keys(self, prefix: str, delimiter: str = "") -> tuple[list[str], list[str]]:
        def run() -> tuple[list[str], list[str]]:
            keys: list[str] = []
            prefixes: list[str] = []
            for page in self._s3().list_objects(self.bucket, prefix, delimiter):
                keys.extend(o.key for o in page.object_info)
                prefixes.extend(page.common_prefixes)
            return keys, prefixes

        return self._bounded(f"s3://{self.bucket}/{prefix}", run)  # type: ignore[no-any-return]

    def staging_id(self, step: int) -> str:
        return self.final_id(step)

    def listing(self) -> list[Listing]:
        base = f"{self.prefix}/" if self.prefix else ""
        _, prefixes = self._keys(base, "/")
        found = []
        for p in prefixes:
            name = p[len(base) :].rstrip("/")
            m = STEP_DIR.match(name)
            if m:
                ckpt = self.join(self.root, name)
                broken = self.is_broken(ckpt)
                found.append(
                    Listing(int(m.group(1)), ckpt, not broken and self.exists(self.join(ckpt, MARKER)), broken)
                )
        return sorted(found, key=lambda c: c.step)

    def _head(self, file: str) -> Any:
        from s3torchconnectorclient import S3Exception

        try:
            return self._bounded(file, self._s3().head_object, self.bucket, self._key(file))
        except S3Exception as e:
            if "not found" in str(e).lower():
                return None
            raise

    def exists(self, file: str) -> bool:
        return self._head(file) is not None

    def size(self, file: str) -> int | None:
        info = self._head(file)
        return None if info is None else int(info.size)

    def crc32(self, file: str) -> str | None:
        from .digests import Crc32

        if not self.exists(file):
            return None
        reader = self._bounded(file, self._s3().get_object, self.bucket, self._key(file))
        digest = Crc32()
        while chunk := self._bounded(file, reader.read, CHUNK):
            digest.update(chunk)
        return digest.hexdigest()

    def prepare(self, step: int) -> None:
        self.remove(self.staging_id(step))  # a rerun of the same step, or an interrupted save's debris

    def write(self, file: str, data: bytes) -> None:
        self._note_small(file, data)

        def run() -> None:
            stream = self._s3().put_object(self.bucket, self._key(file))
            stream.write(data)
            stream.close()

        self._bounded(file, run)

    def read(self, file: str) -> bytes | None:
        if not self.exists(file):
            return None
        reader = self._bounded(file, self._s3().get_object, self.bucket, self._key(file))
        return bytes(self._bounded(file, reader.read))

    def commit(self, step: int) -> str:
        final = self.final_id(step)
        self.write(self.join(final, MARKER), f"{step}\n".encode())
        return final

    def remove(self, ckpt: str) -> None:
        key = self._key(ckpt).rstrip("/")
        marker = f"{key}/{MARKER}"
        keys, _ = self._keys(f"{key}/")
        if marker in keys:
            self._bounded(ckpt, self._s3().delete_object, self.bucket, marker)
        for k in keys:
            if k != marker:
                self._bounded(ckpt, self._s3().delete_object, self.bucket, k)

    def clean_partial(self) -> list[str]:
        removed = []
        for c in self.listing():
            if not c.complete and not c.broken:  # a broken one is kept (marked) for its owner to inspect
                self.remove(c.id)
                removed.append(c.id)
        return removed

    # -- the shards: s3torchconnector's DCP storage, or torch's fsspec storage over s3fs --

    def _dcp_writer(self, ckpt: str) -> Any:
        if self.client_kind == "fsspec":
            from torch.distributed.checkpoint._fsspec_filesystem import FsspecWriter

            return FsspecWriter(ckpt, sync_files=False, thread_count=self.write_threads, **_fsspec_options())
        from s3torchconnector.dcp import S3FileSystem, S3StorageWriter

        writer = S3StorageWriter(s3_region(), ckpt, thread_count=self.write_threads)
        writer.fs = S3FileSystem(s3_region(), s3_client=s3_client())
        return writer

    def _dcp_reader(self, ckpt: str) -> Any:
        if self.client_kind == "fsspec":
            from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader

            return FsspecReader(ckpt, **_fsspec_options())
        from s3torchconnector import S3ReaderConstructor
        from s3torchconnector.dcp import S3FileSystem, S3StorageReader

        constructor = S3ReaderConstructor.dcp_optimized()
        reader = S3StorageReader(s3_region(), ckpt, reader_constructor=constructor)
        reader.fs = S3FileSystem(s3_region(), s3_client=s3_client(), reader_constructor=constructor)
        return reader


def _fsspec_options() -> dict[str, Any]:
    """s3fs's options from the same AWS settings (its botocore reads credentials from the standard chain)."""
    opts: dict[str, Any] = {"client_kwargs": {"region_name": s3_region()}}
    endpoint = s3_endpoint()
    if endpoint:
        opts["client_kwargs"]["endpoint_url"] = endpoint
    return opts


def s3_client(max_attempts: int | None = None) -> Any:
    """An s3torchconnector ``S3Client`` for the configured region and endpoint (path-style with a custom endpoint);
    ``max_attempts``: the CRT client's retries (its default otherwise)."""
    try:
        from s3torchconnector import S3ClientConfig
        from s3torchconnector._s3client import S3Client
    except ImportError:
        raise ConfigError(
            "--checkpoint.dir: s3:// locations need s3torchconnector; pip install 'fsdp-trainer[s3]'"
        ) from None
    endpoint = s3_endpoint()
    options: dict[str, Any] = {"force_path_style": endpoint is not None}
    if max_attempts is not None:
        options["max_attempts"] = max_attempts
    config = S3ClientConfig(**options)
    return S3Client(s3_region(), endpoint=endpoint, s3client_config=config)


#: S3's errors for credentials it does not accept (as opposed to a policy that denies them): code -> (what the CRT
#: client's error carries for it: S3's message, or the CRT's own error name; what it means).
REJECTED_CREDENTIALS = {
    "InvalidAccessKeyId": (
        ("The AWS Access Key Id you provided does not exist",),
        "the access key id is not known to S3",
    ),
    "SignatureDoesNotMatch": (
        ("The request signature we calculated does not match",),
        "the secret access key does not match the access key id",
    ),
    "ExpiredToken": (
        ("The provided token has expired", "AWS_ERROR_S3_TOKEN_EXPIRED"),
        "the session token has expired",
    ),
    "InvalidToken": (("The provided token is malformed",), "the session token is not valid"),
}

#: botocore's credential provider names, in words.
CREDENTIAL_SOURCES = {
    "env": "the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN)",
    "shared-credentials-file": "the shared credentials file (AWS_SHARED_CREDENTIALS_FILE, ~/.aws/credentials)",
    "config-file": "the AWS config file (AWS_CONFIG_FILE, ~/.aws/config)",
    "assume-role": "a role assumed through the AWS profile",
    "assume-role-with-web-identity": "a web identity role (IRSA: AWS_ROLE_ARN, AWS_WEB_IDENTITY_TOKEN_FILE)",
    "container-role": "the container credentials endpoint (EKS Pod Identity or ECS)",
    "iam-role": "the instance role (instance metadata)",
    "sso": "AWS SSO (the profile's sso settings)",
    "custom-process": "the profile's credential_process",
}


def credential_source() -> str:
    """Where the standard chain finds credentials here, in words (botocore's resolver, as the CRT client's chain
    looks in the same places and order)."""
    try:
        import botocore.session

        session = botocore.session.Session()
        credentials = session.get_credentials()
    except Exception:
        return "the standard AWS chain"
    if credentials is None:
        return "nowhere (no credentials found: requests go unsigned)"
    method = getattr(credentials, "method", "") or ""
    where = CREDENTIAL_SOURCES.get(method, method or "the standard AWS chain")
    profile = os.environ.get("AWS_PROFILE")
    if method in ("shared-credentials-file", "config-file", "assume-role", "sso", "custom-process") and profile:
        where += f", profile {profile}"
    key = getattr(credentials, "access_key", "") or ""
    return f"{where}; access key id {key[:4]}...{key[-4:]}" if len(key) > 8 else where


def describe_s3_error(detail: str, uri: str) -> str | None:
    """The words for an S3 error that is about credentials (rejected ones, said apart from a denying policy)."""
    for code, (said, meaning) in REJECTED_CREDENTIALS.items():
        if code in detail or any(phrase in detail for phrase in said):
            return (
                f"S3 rejected the credentials ({code}: {meaning}); they came from {credential_source()}; "
                "fix or replace them (or unset them to use another source)"
            )
    if "AccessDenied" in detail or "Access Denied" in detail:
        bucket = parse_s3(uri)[0]
        return (
            f"S3 accepted the credentials (from {credential_source()}) but a policy denies access to bucket "
            f"{bucket}; allow s3:ListBucket on it and s3:GetObject, s3:PutObject, s3:DeleteObject on its objects"
        )
    return None


def check_s3_locations(cfg: Any) -> None:
    """List one key under each ``s3://`` location of a ``TrainerConfig`` (checkpoint dir, resume, export, weights,
    tokenizer); raise a one-line ConfigError naming the setting when S3 refuses or cannot be reached (credentials it
    rejects said apart from a policy that denies; no answer within ``checkpoint.s3_connect_timeout_s``)."""
    ck, model = cfg.checkpoint, cfg.model
    locations = [
        (f"--{section}.{name}", getattr(getattr(cfg, section), name))
        for section, name in S3_SETTINGS
        if ck.enabled or (section, name) not in (("checkpoint", "dir"), ("checkpoint", "resume"))
    ]
    seen: set[str] = set()
    for flag, uri in locations:
        if not is_s3(uri) or uri is None:
            continue
        bucket, prefix = parse_s3(uri, flag)
        if bucket in seen:
            continue
        seen.add(bucket)
        from s3torchconnectorclient import S3Exception

        def first_key(bucket: str = bucket, prefix: str = prefix) -> Any:
            return next(iter(s3_client(max_attempts=2).list_objects(bucket, prefix, "/", 1)), None)  # fail fast

        try:
            bounded(first_key, (), ck.s3_connect_timeout_s, uri, "--checkpoint.s3_connect_timeout_s")
        except S3Exception as e:
            detail = " ".join(str(e).split())[:300]
            where = s3_endpoint() or f"S3 in {s3_region()}"
            credentials = describe_s3_error(detail, uri)
            if credentials:
                raise ConfigError(f"{flag}: cannot use {uri} ({where}): {credentials}") from None
            raise ConfigError(
                f"{flag}: cannot use {uri} ({where}): {detail}; check the bucket, AWS_REGION, the endpoint "
                "(AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL) and the credentials"
            ) from None
    if is_s3(model.name_or_path):
        check_s3_model(model.name_or_path)


def store_for(
    location: str, s3_client_kind: str = "s3torchconnector", write_threads: int = 1, s3_timeout_s: float = 60.0
) -> CheckpointStore:
    """The store of a ``checkpoint.dir`` (a directory or ``s3://bucket/prefix``)."""
    store = S3Store(location, s3_client_kind, s3_timeout_s) if is_s3(location) else LocalStore(location)
    store.write_threads = write_threads
    return store


def torch_bytes(obj: Any) -> bytes:
    """``torch.save`` into bytes (the RNG states)."""
    import torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


# -- Hugging Face model directories on S3 (model.name_or_path, model.tokenizer, checkpoint.export_hf) --

#: Files of a model directory that are not read through local disk (the weights, streamed by rank 0).
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")


def _list_keys(uri: str, field: str) -> tuple[Any, str, list[str]]:
    client = s3_client()
    bucket, prefix = parse_s3(uri, field)
    base = f"{prefix}/" if prefix else ""
    keys = [o.key for page in client.list_objects(bucket, base, "/") for o in page.object_info]
    return client, bucket, keys


def s3_model_files(uri: str, field: str = "--model.name_or_path") -> str:
    """A local copy of the small files of an ``s3://`` model directory (config, tokenizer; no weights); its path.

    Every process needs the config and the tokenizer; the weights stay on S3 (``s3_safetensors``).
    """
    import hashlib
    import tempfile

    client, bucket, keys = _list_keys(uri, field)
    small = [k for k in keys if not k.endswith(WEIGHT_SUFFIXES)]
    if not any(k.endswith("/config.json") or k == "config.json" for k in small):
        raise ConfigError(f"{field}: {uri} holds no config.json (expected a Hugging Face model directory)")
    tag = hashlib.sha256(uri.encode()).hexdigest()[:16]
    dest = Path(tempfile.gettempdir()) / f"fsdp-trainer-s3-{tag}"
    dest.mkdir(parents=True, exist_ok=True)
    for key in small:
        data = client.get_object(bucket, key).read()
        part = dest / f".{key.rsplit('/', 1)[-1]}.{os.getpid()}"
        part.write_bytes(data)
        os.replace(part, dest / key.rsplit("/", 1)[-1])  # the processes of a node write the same files
    return str(dest)


def s3_safetensors(uri: str, field: str = "--model.name_or_path") -> dict[str, Any]:
    """Every tensor of the ``*.safetensors`` files of an ``s3://`` model directory, read into memory (no local copy)."""
    from safetensors.torch import load

    client, bucket, keys = _list_keys(uri, field)
    files = sorted(k for k in keys if k.endswith(".safetensors"))
    if not files:
        raise ConfigError(f"{field}: {uri} holds no *.safetensors weights")
    tensors: dict[str, Any] = {}
    for key in files:
        tensors.update(load(bytes(client.get_object(bucket, key).read())))
    return tensors


def check_s3_model(uri: str, field: str = "--model.name_or_path") -> None:
    """Refuse (ConfigError, one line naming the prefix and what is missing) an ``s3://`` model directory that is not
    a whole export: no ``config.json``, no ``*.safetensors`` weights, a shard its index lists but the prefix lacks,
    or a safetensors file shorter than its header says (an upload cut short)."""
    import struct

    client, bucket, keys = _list_keys(uri, field)
    base = parse_s3(uri, field)[1]
    names = {k[len(base) + 1 :] if base else k: k for k in keys}
    sizes = {
        o.key: o.size for page in client.list_objects(bucket, f"{base}/" if base else "", "/") for o in page.object_info
    }
    found = ", ".join(sorted(names)) or "nothing"
    if "config.json" not in names:
        raise ConfigError(f"{field}: {uri} is not a whole model export: no config.json (found: {found})")
    weights = sorted(n for n in names if n.endswith(".safetensors"))
    if not weights:
        raise ConfigError(f"{field}: {uri} is not a whole model export: no *.safetensors weights (found: {found})")
    if "model.safetensors.index.json" in names:
        index = json.loads(bytes(client.get_object(bucket, names["model.safetensors.index.json"]).read()))
        missing = sorted(set(index.get("weight_map", {}).values()) - set(weights))
        if missing:
            raise ConfigError(
                f"{field}: {uri} is not a whole model export: {', '.join(missing)} (listed in "
                "model.safetensors.index.json) is missing"
            )
    for name in weights:
        key = names[name]
        reader = client.get_object(bucket, key)
        head = bytes(reader.read(8))
        header_len = struct.unpack("<Q", head)[0] if len(head) == 8 else 0
        header = json.loads(bytes(reader.read(header_len))) if 0 < header_len < 100 << 20 else {}
        end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
        expected = 8 + header_len + end
        if not header or sizes.get(key, 0) < expected:
            raise ConfigError(
                f"{field}: {uri} is not a whole model export: {name} is truncated "
                f"({sizes.get(key, 0)} of {expected} bytes)"
            )


def s3_upload_dir(src: Path, uri: str, field: str = "--checkpoint.export_hf") -> None:
    """Put every file of directory ``src`` under ``s3://bucket/prefix/``, ``config.json`` last: an upload cut short
    leaves no config, which ``check_s3_model`` refuses."""
    client = s3_client()
    bucket, prefix = parse_s3(uri, field)
    files = sorted((p for p in src.rglob("*") if p.is_file()), key=lambda p: (p.name == "config.json", str(p)))
    for path in files:
        key = "/".join(x for x in (prefix, path.relative_to(src).as_posix()) if x)
        stream = client.put_object(bucket, key)
        with open(path, "rb") as f:
            while chunk := f.read(64 << 20):
                stream.write(chunk)
        stream.close()

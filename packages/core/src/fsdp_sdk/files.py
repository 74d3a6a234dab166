"""Writing files so that no reader ever sees half of one."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["write_atomic"]


def write_atomic(path: Path, data: str | bytes, *, mode: int = 0o644) -> Path:
    """Replace ``path`` with ``data``: written to a temporary file in the same directory, flushed to disk, then
    renamed over it, so a reader (or a crash) sees the old file or the new one, never a part.

    :param path: the file; its directory is created when missing.
    :param data: text (written as UTF-8) or bytes.
    :param mode: the file's permissions (``0o600`` for credentials).
    :returns: ``path``.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data.encode("utf-8") if isinstance(data, str) else data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path

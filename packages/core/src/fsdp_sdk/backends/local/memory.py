"""Memory of local runs: will the run fit in this machine's memory, and did the kernel kill a rank for lack of it.

Before a local run starts, :func:`memory_problem` holds the estimate (:mod:`fsdp_sdk.estimate`, torch-free)
against what this machine can give: host RAM for every trainer process on CPU (the memory
available now, capped by the cgroup's ``memory.max`` the processes run in, or ``local.memory_limit_gib``),
and each GPU's memory when ``nvidia-smi`` reports GPUs.

When a rank dies by ``SIGKILL``, :func:`oom_counters` read before the launch and again after the death tell
whether the kernel's OOM killer struck: the ``oom_kill`` counter of the cgroup v2 this process runs in
(``memory.events``) or the kernel's (``/proc/vmstat``). ``$FSDP_SDK_OOM_COUNTERS_FILE`` names a file read
instead of both (lines ``oom_kill N``, as ``memory.events`` has them), for tests that simulate an OOM kill.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "OOM_COUNTERS_ENV",
    "OUT_OF_MEMORY_FIX",
    "HostMemory",
    "gpu_memory_gib",
    "gpu_out_of_memory",
    "host_memory",
    "oom_counters",
    "oom_rose",
    "out_of_memory",
]

#: A file read instead of the real OOM counters (tests).
OOM_COUNTERS_ENV = "FSDP_SDK_OOM_COUNTERS_FILE"
GiB = float(2**30)


def _cgroup_dir() -> Path | None:
    """The cgroup v2 directory this process runs in (its children inherit it)."""
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            if line.startswith("0::"):
                path = Path("/sys/fs/cgroup") / line[3:].lstrip("/")
                return path if path.is_dir() else None
    except OSError:
        return None
    return None


def _counter(path: Path, key: str = "oom_kill") -> int | None:
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        return None
    return None


def oom_counters() -> dict[str, int]:
    """The OOM-kill counters readable here, by what they count: ``{"oom_kill in /sys/fs/cgroup/.../memory.events":
    0, "oom_kill in /proc/vmstat": 3}`` (the file of ``$FSDP_SDK_OOM_COUNTERS_FILE`` alone when it is set)."""
    override = os.environ.get(OOM_COUNTERS_ENV)
    paths = (
        [Path(override)] if override else [p / "memory.events" for p in [_cgroup_dir()] if p] + [Path("/proc/vmstat")]
    )
    counters = {}
    for path in paths:
        value = _counter(path)
        if value is not None:
            counters[f"oom_kill in {path}"] = value
    return counters


def oom_rose(before: Mapping[str, int], after: Mapping[str, int] | None = None) -> str | None:
    """Which OOM counter rose since ``before`` (``"oom_kill in /proc/vmstat rose from 3 to 4"``); ``None``: none."""
    after = oom_counters() if after is None else after
    for name, value in after.items():
        if name in before and value > before[name]:
            return f"{name} rose from {before[name]} to {value}"
    return None


#: What a run that ran out of memory is told (a restart would run out again: it is not restarted, nor offered a resume).
OUT_OF_MEMORY_FIX = (
    "not restarted (it would run out again): use a smaller model or micro batch, fewer processes, or activation "
    "checkpointing"
)
_CUDA_OOM = re.compile(r"CUDA out of memory|OutOfMemoryError", re.IGNORECASE)
_TRIED = re.compile(r"Tried to allocate ([\d.]+ [KMGT]iB)", re.IGNORECASE)
_CAPACITY = re.compile(r"total capacity of ([\d.]+ [KMGT]iB)", re.IGNORECASE)


def out_of_memory(where: str, who: str, evidence: str, estimate: str | None) -> str:
    """The one-line cause of a run that ran out of memory, the memory and the rank first, the estimate beside the
    limit: ``out of host memory: agent 0's local rank 1 (pid 42) was killed by SIGKILL (oom_kill ... rose from 0 to
    1; the estimate: 9.1 GiB per process x 2 processes, over the 12.0 GiB available); not restarted ...``."""
    details = "; ".join(part for part in (evidence, estimate) if part)
    return f"out of {where} memory: {who}{f' ({details})' if details else ''}; {OUT_OF_MEMORY_FIX}"


def gpu_out_of_memory(text: str) -> str | None:
    """The evidence of a CUDA out-of-memory error line (``tried to allocate 2.00 GiB of a GPU of 79.19 GiB``), or
    ``None`` when the line is no such error."""
    if not _CUDA_OOM.search(text):
        return None
    tried, capacity = _TRIED.search(text), _CAPACITY.search(text)
    parts = [f"tried to allocate {tried.group(1)}" if tried else "CUDA out of memory"]
    if capacity:
        parts.append(f"of a GPU of {capacity.group(1)}")
    return " ".join(parts)


@dataclass(frozen=True)
class HostMemory:
    """The memory a local run may use, and where that number comes from."""

    gib: float
    source: str


def host_memory(limit_gib: float | None = None) -> HostMemory | None:
    """What a local run may use: ``limit_gib`` when given (``local.memory_limit_gib``), else the memory available
    now (``MemAvailable``), capped by what the cgroup's ``memory.max`` leaves; ``None`` when unknown."""
    if limit_gib is not None:
        return HostMemory(limit_gib, "local.memory_limit_gib")
    found: HostMemory | None = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found = HostMemory(int(line.split()[1]) * 1024 / GiB, "MemAvailable in /proc/meminfo")
    except (OSError, ValueError, IndexError):
        found = None
    cgroup = _cgroup_dir()
    if cgroup is not None:
        try:
            limit = (cgroup / "memory.max").read_text().strip()
            used = int((cgroup / "memory.current").read_text().strip())
            if limit != "max":
                left = (int(limit) - used) / GiB
                if found is None or left < found.gib:
                    found = HostMemory(left, f"memory.max - memory.current of the cgroup {cgroup}")
        except (OSError, ValueError):
            pass
    return found


def gpu_memory_gib() -> list[float]:
    """Each GPU's total memory in GiB as ``nvidia-smi`` reports it; empty without ``nvidia-smi`` or GPUs."""
    binary = shutil.which("nvidia-smi")
    if binary is None:
        return []
    try:
        out = subprocess.run(
            [binary, "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
        return [float(line) / 1024 for line in out.split() if line.strip()]  # MiB
    except (OSError, subprocess.SubprocessError, ValueError):
        return []

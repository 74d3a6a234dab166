"""``experimental.symmetric_memory``: FSDP2's all-gathers and reduce-scatters in NCCL symmetric memory.

With the staging buffer of every all-gather registered as a symmetric NCCL window, NCCL 2.28+ runs the all-gather on
the GPU's copy engines instead of SM kernels when the communicator's CTA policy is zero (``NCCL_CTA_POLICY=2``, which
the trainer sets before the process group exists unless the environment sets it), on one node; the SMs stay with the
matmuls the all-gather overlaps. FSDP2 gathers in place (each rank's input is its slice of the output), so
registering the output registers both; with ``experimental.flat_shards`` the input is the unit's shard buffer, which
``symmetric_allocator`` takes from the same pool and registers once, when it allocates it. Reduce-scatters (input and
output registered) run on NCCL's symmetric-memory kernels; a reduction cannot run on the copy engines. On torch 2.12+
the units are switched with FSDP2's own ``set_symm_mem_for_comm``; before that, with the custom collectives here.

Use it for FSDP2 sharded over several GPUs of one node: Llama-3.1-8B over 2 H200s trained 1.8% faster with bf16
gradient reduction (``bench/reports/2026-11-30-llama3.1-8b-h200x2-symmetric-memory.md``). It changes no numerics.

Why it is experimental: it goes through torch's private ``torch.distributed._symmetric_memory`` module and, before
torch 2.12, FSDP2's private collective interfaces (``torch.distributed.fsdp._fully_shard._fsdp_api``, imported with
this module). Off by default, and ``--auto`` does not choose it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp._fully_shard._fsdp_api import AllGather, ReduceScatter

from ..converters import ModelConverter
from ..errors import ConfigError

log = logging.getLogger(__name__)

#: NCCL's zero-CTA policy, under which all-gathers into symmetric memory run on the copy engines (one node).
NCCL_ENV = {"NCCL_CTA_POLICY": "2"}


def nccl_env() -> dict[str, str]:
    """NCCL settings to export before the process group exists; a value already in the environment wins
    (``NCCL_CTA_POLICY=0`` there keeps NCCL's default policy)."""
    return {k: v for k, v in NCCL_ENV.items() if k not in os.environ}


def prepare_symmetric_memory(group: dist.ProcessGroup | None) -> None:
    """Select NCCL as the symmetric-memory backend and create ``group``'s NCCL communicator, which the first rendezvous
    needs. NCCL creates it lazily, at its first collective, and with the trainer's mixed gloo/nccl process group a
    barrier runs on gloo; a CUDA all-reduce runs on NCCL. Every rank must then run the same FSDP forwards: the first
    all-gather into each new buffer is a collective rendezvous."""
    from torch.distributed import _symmetric_memory as symm_mem

    try:
        symm_mem.set_backend("NCCL")
    except RuntimeError as e:
        raise ConfigError(
            f"--experimental.symmetric_memory: this torch build cannot use NCCL symmetric memory ({e}); "
            "use --experimental.symmetric_memory false"
        ) from None
    dist.all_reduce(torch.zeros(1, device=torch.device("cuda", torch.cuda.current_device())), group=group)


def symmetric_unavailable() -> str | None:
    """Why FSDP2's collectives cannot go in NCCL symmetric memory in this process, or None when they can: CUDA and NCCL 2.28+ (copy-engine all-gathers), torch's symmetric-memory
    module, and FSDP2's custom collectives or ``set_symm_mem_for_comm``."""
    if not torch.cuda.is_available() or not dist.is_nccl_available():
        return "no CUDA or NCCL"
    nccl = torch.cuda.nccl.version()
    if tuple(nccl[:2]) < (2, 28):
        return f"NCCL {'.'.join(map(str, nccl))} is older than 2.28"
    try:
        from torch.distributed import _symmetric_memory as symm_mem
        from torch.distributed.fsdp import FSDPModule
    except ImportError as e:
        return str(e)
    if not hasattr(symm_mem, "set_backend") or not hasattr(symm_mem, "get_mem_pool"):
        return f"torch {torch.__version__} has no NCCL symmetric-memory pool"
    if not (hasattr(FSDPModule, "set_symm_mem_for_comm") or hasattr(FSDPModule, "set_custom_reduce_scatter")):
        return f"torch {torch.__version__} cannot place FSDP2's reduce-scatters"
    return None


class _SymmetricPool:
    """Staging buffers from NCCL's symmetric-memory pool, registered with ``group`` (the units' collective group).

    Call :meth:`prepare` once, on every rank of ``group``, before the first collective.
    """

    def __init__(self, group: dist.ProcessGroup | None = None) -> None:
        self.group = group

    def prepare(self) -> None:
        """See :func:`prepare_symmetric_memory`."""
        prepare_symmetric_memory(self.group)

    def allocate(self, size: Sequence[int | torch.SymInt], *, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        from torch.distributed import _symmetric_memory as symm_mem

        # The pool reuses its buffers, so each size is registered (and rendezvoused) once, not on every step.
        with torch.cuda.use_mem_pool(symm_mem.get_mem_pool(device), device=device):
            return torch.empty(*size, dtype=dtype, device=device)


class SymmetricAllGather(_SymmetricPool, AllGather):
    """A custom FSDP2 all-gather (``FSDPModule.set_custom_all_gather``) whose output lives in NCCL symmetric memory."""

    def __call__(
        self, output_tensor: torch.Tensor, input_tensor: torch.Tensor, group: dist.ProcessGroup, async_op: bool = False
    ) -> dist.Work | None:
        from torch.distributed import _symmetric_memory as symm_mem

        # in place, the input is a slice of the output; out of place, it is a flat shard buffer, registered already
        symm_mem.rendezvous(output_tensor, group=group.group_name)
        return dist.all_gather_into_tensor(output_tensor, input_tensor, group=group, async_op=async_op)


class SymmetricReduceScatter(_SymmetricPool, ReduceScatter):
    """A custom FSDP2 reduce-scatter (``FSDPModule.set_custom_reduce_scatter``) with both buffers in NCCL symmetric
    memory, where NCCL runs its symmetric-memory kernels (what torch 2.12+'s ``set_symm_mem_for_comm`` also does)."""

    def __call__(
        self,
        output_tensor: torch.Tensor,
        input_tensor: torch.Tensor,
        group: dist.ProcessGroup,
        op: Any,
        async_op: bool = False,
    ) -> dist.Work | None:
        from torch.distributed import _symmetric_memory as symm_mem

        symm_mem.rendezvous(input_tensor, group=group.group_name)
        symm_mem.rendezvous(output_tensor, group=group.group_name)
        return dist.reduce_scatter_tensor(output_tensor, input_tensor, op=op, group=group, async_op=async_op)


def symmetric_allocator(group: dist.ProcessGroup | None) -> Callable[[int, torch.dtype, torch.device], torch.Tensor]:
    """``allocate(numel, dtype, device)`` for ``shards.flatten_shards``: a buffer from NCCL's symmetric-memory pool,
    registered with ``group`` (a collective: every rank allocates the same buffers in the same order)."""
    pool = _SymmetricPool(group)

    def allocate(numel: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        from torch.distributed import _symmetric_memory as symm_mem

        buffer = pool.allocate((numel,), dtype=dtype, device=device)
        symm_mem.rendezvous(buffer, group=dist.group.WORLD.group_name if group is None else group.group_name)
        return buffer

    return allocate


def set_symmetric_collectives(model: nn.Module, mesh: Any) -> int:
    """Put every FSDP2 unit's all-gathers and reduce-scatters in NCCL symmetric memory: torch's own
    ``set_symm_mem_for_comm`` where it exists (2.12+), else the custom collectives above; returns the units switched."""
    from torch.distributed.fsdp import FSDPModule

    units = [m for m in model.modules() if isinstance(m, FSDPModule)]
    # The units all-gather and reduce-scatter over the mesh's shard dimension (its only one without replication).
    group = None if mesh is None else mesh.get_group(mesh.ndim - 1)
    if units and all(hasattr(u, "set_symm_mem_for_comm") for u in units):
        prepare_symmetric_memory(group)  # torch's own warm-up is a barrier, which a gloo/nccl group runs on gloo
        for unit in units:
            unit.set_symm_mem_for_comm("NCCL")
        return len(units)
    if not units or not all(hasattr(u, "set_custom_reduce_scatter") for u in units):
        raise ConfigError(
            "--experimental.symmetric_memory: needs FSDP2 units with FSDPModule.set_symm_mem_for_comm or "
            f"set_custom_all_gather and set_custom_reduce_scatter, which torch {torch.__version__} lacks; "
            "use --experimental.symmetric_memory false"
        )
    gather, scatter = SymmetricAllGather(group), SymmetricReduceScatter(group)
    gather.prepare()
    for unit in units:
        unit.set_custom_all_gather(gather)
        unit.set_custom_reduce_scatter(scatter)
    return len(units)


class SymmetricMemory(ModelConverter):
    """``experimental.symmetric_memory``: FSDP2's collectives in NCCL symmetric memory (module docstring)."""

    name = "experimental.symmetric_memory"
    stage = "sharded"

    def __init__(self, cfg: Any, device: torch.device, mesh: Any) -> None:
        super().__init__(cfg, device, mesh)
        if device.type != "cuda":
            raise ConfigError(
                f"--experimental.symmetric_memory: needs NCCL on GPUs; this run is on {device.type} (set it to false)"
            )
        unavailable = symmetric_unavailable()
        if unavailable:
            raise ConfigError(f"--experimental.symmetric_memory: {unavailable}; set it to false")

    def convert(self, model: nn.Module) -> None:
        units = set_symmetric_collectives(model, self.mesh)
        log.info("experimental.symmetric_memory: %d FSDP units collect in NCCL symmetric memory", units)

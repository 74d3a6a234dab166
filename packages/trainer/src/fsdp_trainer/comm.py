"""FSDP2 collectives in NCCL symmetric memory, for torch releases before ``FSDPModule.set_symm_mem_for_comm`` (2.12).

With the staging buffer of every all-gather registered as a symmetric NCCL window, NCCL 2.28+ can run the
all-gather on the GPU's copy engines instead of SM kernels when the communicator's CTA policy is zero
(``NCCL_CTA_POLICY=2``), on one node; the SMs stay with the matmuls the all-gather overlaps. Without that policy,
NCCL uses its symmetric-memory kernels. FSDP2 gathers in place (each rank's input is its slice of the output), so
registering the output registers both; with ``parallel.flat_shards`` the input is the unit's shard buffer, which
``symmetric_allocator`` takes from the same pool and registers once, when it allocates it. Reduce-scatters (input and output registered) run on NCCL's
symmetric-memory kernels; a reduction cannot run on the copy engines.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.fsdp._fully_shard._fsdp_api import AllGather, ReduceScatter


def prepare_symmetric_memory(group: dist.ProcessGroup | None) -> None:
    """Select NCCL as the symmetric-memory backend and create ``group``'s NCCL communicator, which the first rendezvous
    needs. NCCL creates it lazily, at its first collective, and with the trainer's mixed gloo/nccl process group a
    barrier runs on gloo; a CUDA all-reduce runs on NCCL. Every rank must then run the same FSDP forwards: the first
    all-gather into each new buffer is a collective rendezvous."""
    from torch.distributed import _symmetric_memory as symm_mem

    from .errors import ConfigError

    try:
        symm_mem.set_backend("NCCL")
    except RuntimeError as e:
        raise ConfigError(
            f"--parallel.comm_buffers: this torch build cannot use NCCL symmetric memory ({e}); "
            "use --parallel.comm_buffers default"
        ) from None
    dist.all_reduce(torch.zeros(1, device=torch.device("cuda", torch.cuda.current_device())), group=group)


def symmetric_unavailable() -> str | None:
    """Why FSDP2's collectives cannot go in NCCL symmetric memory in this process (``parallel.comm_buffers
    symmetric``), or None when they can: CUDA and NCCL 2.28+ (copy-engine all-gathers), torch's symmetric-memory
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

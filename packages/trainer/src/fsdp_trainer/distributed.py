"""Device, process group and device mesh.

Works under torchrun (RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR in the environment)
and as a plain process, which becomes a world of size 1 on an in-memory store.
On CUDA the group pairs NCCL (GPU tensors) with gloo (CPU tensors, used by CPU
offload and by checkpoint metadata exchange).
"""

from __future__ import annotations

import datetime
import logging
import os
import socket
from dataclasses import dataclass

import torch
import torch.distributed as dist

# Before any process group exists: torch.distributed.nn.functional (imported by FSDP, through torch.distributed._shard)
# takes ``group=group.WORLD`` as a default argument, evaluated at import, so importing it after the group is made
# keeps that group (and a gloo group's listening socket) for as long as the process lives.
import torch.distributed.fsdp
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from .autotune import mesh_shape
from .config import ParallelConfig, RuntimeConfig
from .errors import ConfigError

log = logging.getLogger(__name__)


@dataclass
class DistEnv:
    """Where this process sits in the job."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    device: torch.device

    @property
    def is_leader(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        dist.barrier()

    def all_reduce_sum(self, values: list[float]) -> list[float]:
        """Sum a few floats over all ranks (float64, on the training device)."""
        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(t)
        return t.tolist()


def resolve_device(cfg: RuntimeConfig) -> torch.device:
    """``runtime.device`` -> a concrete device for this process (cuda:LOCAL_RANK or cpu)."""
    if cfg.device == "cpu" or (cfg.device == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise ConfigError("--runtime.device: 'cuda' requested but no GPU is visible (use auto or cpu)")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if local_rank >= torch.cuda.device_count():
        raise ConfigError(
            f"--runtime.device: LOCAL_RANK {local_rank} but only {torch.cuda.device_count()} GPUs are visible; lower --nproc-per-node"
        )
    torch.cuda.set_device(local_rank)
    return torch.device("cuda", local_rank)


def init_distributed(cfg: RuntimeConfig, device: torch.device) -> DistEnv:
    """Join the process group (or make a world of one) and log where the leader is."""
    backend = cfg.backend
    if backend == "auto":
        backend = "cpu:gloo,cuda:nccl" if device.type == "cuda" else "gloo"
    elif backend == "nccl":
        if device.type != "cuda":
            raise ConfigError("--runtime.backend: nccl needs CUDA; use gloo (or auto) on CPU")
        backend = "cpu:gloo,cuda:nccl"
    timeout = datetime.timedelta(seconds=cfg.timeout_s)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        dist.init_process_group(backend=backend, timeout=timeout)
    else:
        os.environ.setdefault("LOCAL_WORLD_SIZE", "1")
        dist.init_process_group(backend=backend, store=dist.HashStore(), rank=0, world_size=1, timeout=timeout)
    env = DistEnv(
        rank=dist.get_rank(),
        world_size=dist.get_world_size(),
        local_rank=int(os.environ.get("LOCAL_RANK", "0")),
        local_world_size=int(os.environ.get("LOCAL_WORLD_SIZE", "1")),
        device=device,
    )
    # master_addr= first: the SDK finds the leader's log by this token. Under torchrun --standalone
    # MASTER_ADDR is localhost, so the host is named too.
    log.info("master_addr=%s host=%s", os.environ.get("MASTER_ADDR") or socket.gethostname(), socket.getfqdn())
    log.info(
        "rank=%d world_size=%d local_world_size=%d device=%s backend=%s",
        env.rank,
        env.world_size,
        env.local_world_size,
        device,
        backend,
    )
    return env


def destroy_distributed() -> None:
    """Leave the process group if we joined one, and let its sockets close.

    DTensor's sharding propagation caches its results, and each cached spec holds its device mesh and, through it,
    the mesh's process groups: after ``destroy_process_group`` a gloo group's listening socket stays open for as long
    as the process lives (a trainer called in-process, ``fsdp_sdk.train`` or a test, would leave one per run). The
    caches are cleared once the groups are gone."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
        _clear_sharding_caches()


def _clear_sharding_caches() -> None:
    """DTensor's caches that hold meshes: sharding propagation (the Python one and the C++ fast path's),
    redistribution plans and mesh topologies; each looked up by name, since they move between torch releases. ``gc`` then frees the
    cycles (modules and their hooks) that held the meshes."""
    import gc

    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # a torch build without distributed tensors
        return
    propagator = getattr(getattr(DTensor, "_op_dispatcher", None), "sharding_propagator", None)
    for name in ("propagate_op_sharding", "_propagate_tensor_meta_cached"):
        clear = getattr(getattr(propagator, name, None), "cache_clear", None)
        if clear is not None:
            clear()
    native = getattr(torch._C, "_clear_DTensor_sharding_propagator_cache", None)
    if native is not None:
        native()
    try:  # redistribution plans, cached per mesh (torch >= 2.10)
        from torch.distributed.tensor import _redistribute
    except ImportError:
        _redistribute = None
    for name in ("clear_redistribute_planner_cache", "_gen_transform_infos"):
        found = getattr(_redistribute, name, None)
        clear = getattr(found, "cache_clear", found if name.startswith("clear") else None)
        if callable(clear):
            clear()
    try:  # the mesh's topology (bandwidth, latency), cached per mesh for redistribution costs
        from torch.distributed.tensor._collective_utils import MeshTopoInfo
    except ImportError:
        MeshTopoInfo = None
    clear = getattr(getattr(MeshTopoInfo, "build_from_mesh", None), "cache_clear", None)
    if callable(clear):
        clear()
    gc.collect()


def build_mesh(cfg: ParallelConfig, env: DistEnv) -> DeviceMesh | None:
    """1-D ("shard",) mesh for full_shard/shard_grad_op; 2-D ("replicate", "shard") for hybrid_shard and no_shard."""
    if cfg.api == "none":
        if env.world_size != 1:
            raise ConfigError(
                f"--parallel.api: 'none' runs one process, but the world size is {env.world_size}; use fsdp2 or fsdp1"
            )
        return None
    replicate, shard = mesh_shape(cfg, env.world_size, env.local_world_size)
    if cfg.sharding in ("full_shard", "shard_grad_op"):
        return init_device_mesh(env.device.type, (shard,), mesh_dim_names=("shard",))
    return init_device_mesh(env.device.type, (replicate, shard), mesh_dim_names=("replicate", "shard"))


def shard_group(mesh: DeviceMesh | None) -> dist.ProcessGroup | None:
    """The ranks among which parameters and gradients are sharded (the mesh's last dimension, "shard"); None when
    nothing is sharded (no mesh, or a shard dimension of one rank, as for no_shard)."""
    if mesh is None or mesh.size(mesh.ndim - 1) == 1:
        return None
    return mesh.get_group(mesh.ndim - 1)

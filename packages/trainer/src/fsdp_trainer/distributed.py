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


#: ``parallel.comm_buffers`` symmetric*: NCCL's zero-CTA policy, under which all-gathers into symmetric memory run on
#: the copy engines (one node). Llama-3.1-8B on 2 H200s: +0.6% over the same buffers without it (bench/RESULTS.md,
#: session 5); policy 1 (efficient CTAs) was 0.9% slower than the default.
SYMMETRIC_NCCL_ENV = {"NCCL_CTA_POLICY": "2"}


def nccl_env_for(parallel: ParallelConfig) -> dict[str, str]:
    """NCCL settings the run's options call for, to set before the process group exists; a value already in the
    environment wins (``NCCL_CTA_POLICY=0`` there keeps NCCL's default policy)."""
    wanted = SYMMETRIC_NCCL_ENV if parallel.comm_buffers.startswith("symmetric") else {}
    return {k: v for k, v in wanted.items() if k not in os.environ}


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
    """Leave the process group if we joined one."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


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

"""Gradient clipping on local shards (``optim.clip_grad_norm_``), the trainer's one clipping path, equals torch's own
clipping: ``nn.utils.clip_grad_norm_`` on FSDP2's DTensors (FSDP2 and HSDP) and FSDP1's ``clip_grad_norm_``."""

from __future__ import annotations

import os
import sys
import traceback

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

pytestmark = pytest.mark.timeout(120)


def _worker(rank: int, world: int, store: str, shard: int, max_norm: float, out: str) -> None:
    # Leave with os._exit: at interpreter exit gloo's threads can abort a process that
    # already succeeded (SIGABRT), the same reason the trainer's CLI exits that way.
    try:
        _check(rank, world, store, shard, max_norm, out)
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    os._exit(0)


def _layers() -> torch.nn.Sequential:
    torch.manual_seed(0)  # same weights on every rank, then sharded (5 and 3 rows: uneven shards)
    return torch.nn.Sequential(torch.nn.Linear(8, 13), torch.nn.Linear(13, 5), torch.nn.Linear(5, 3))


def _backward(model: torch.nn.Module, rank: int) -> None:
    g = torch.Generator().manual_seed(100 + rank)  # different data per rank: gradients differ before the reduction
    model(torch.randn(4, 8, generator=g)).square().sum().backward()


def _fsdp2(mesh) -> torch.nn.Module:
    from torch.distributed.fsdp import fully_shard

    model = _layers()
    for layer in model:
        fully_shard(layer, mesh=mesh)
    return fully_shard(model, mesh=mesh)


def _fsdp1(mesh, world: int, shard: int) -> torch.nn.Module:
    """Wrapped as the trainer wraps (``parallelize.apply_fsdp1``): use_orig_params, hybrid on the 2-D mesh, and a
    one-rank shard group as NO_SHARD over every rank."""
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp import ShardingStrategy
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    if shard == world:
        strategy, device_mesh = ShardingStrategy.FULL_SHARD, None
    elif shard == 1:
        strategy, device_mesh = ShardingStrategy.NO_SHARD, None
    else:
        strategy, device_mesh = ShardingStrategy.HYBRID_SHARD, mesh
    return FSDP(
        _layers(),
        auto_wrap_policy=ModuleWrapPolicy({torch.nn.Linear}),
        sharding_strategy=strategy,
        device_mesh=device_mesh,
        use_orig_params=True,
        device_id=torch.device("cpu"),
    )


def _full_grads(model: torch.nn.Module) -> list[torch.Tensor]:
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    if isinstance(model, FSDP):
        with FSDP.summon_full_params(model, with_grads=True):
            return [p.grad.detach().clone() for p in model.parameters()]
    return [p.grad.full_tensor() for p in model.parameters()]


def _check(rank: int, world: int, store: str, shard: int, max_norm: float, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        from torch.distributed.device_mesh import init_device_mesh

        from fsdp_trainer.distributed import shard_group
        from fsdp_trainer.optim import clip_grad_norm_

        mesh = (
            init_device_mesh("cpu", (world,), mesh_dim_names=("shard",))
            if shard == world
            else init_device_mesh("cpu", (world // shard, shard), mesh_dim_names=("replicate", "shard"))
        )
        norms = []
        for build, theirs in (
            (lambda: _fsdp2(mesh), lambda m: torch.nn.utils.clip_grad_norm_(m.parameters(), max_norm or float("inf"))),
            (lambda: _fsdp1(mesh, world, shard), lambda m: m.clip_grad_norm_(max_norm or float("inf"))),
        ):
            results = []
            for ours in (True, False):
                model = build()
                _backward(model, rank)
                norm = clip_grad_norm_(model.parameters(), max_norm, shard_group(mesh)) if ours else theirs(model)
                if hasattr(norm, "full_tensor"):
                    norm = norm.full_tensor()
                results.append((float(norm), _full_grads(model)))
            (norm_a, grads_a), (norm_b, grads_b) = results
            assert abs(norm_a - norm_b) <= 1e-5 * norm_b, (norm_a, norm_b)
            for a, b in zip(grads_a, grads_b, strict=True):
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)
            norms.append(norm_a)
        assert norms[0] == pytest.approx(norms[1], rel=1e-5), "FSDP1 and FSDP2 see the same gradients"
        if rank == 0:
            with open(out, "w") as f:
                f.write(f"{norms[0]}")
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("world,shard,max_norm", [(2, 2, 0.5), (2, 2, 0.0), (4, 2, 0.5), (2, 1, 0.5)])
def test_local_clipping_equals_torchs_clipping(world, shard, max_norm, tmp_path):
    """FSDP2 and FSDP1 on 2 ranks, HSDP 2 x 2 and 2 x 1: the same norm and the same clipped gradients as torch's."""
    out = tmp_path / "norm"
    mp.spawn(_worker, args=(world, str(tmp_path / "store"), shard, max_norm, str(out)), nprocs=world, join=True)
    assert float(out.read_text()) > 0.5  # the clip was active at 0.5

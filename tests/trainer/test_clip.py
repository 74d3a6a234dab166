"""Gradient clipping on local shards (``clip_grad_norm_local_``) equals torch's DTensor clipping, FSDP2 and HSDP."""

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


def _check_folded_step(mesh, rank: int, max_norm: float) -> None:
    """Clipping folded into fused AdamW (its grad_scale) moves the weights exactly as clipping and then stepping."""
    from torch.distributed.fsdp import fully_shard

    from fsdp_trainer.trainer import clip_divisor, clip_grad_norm_local_, fused_step_with_divisor

    weights = []
    for folded in (True, False):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 13), torch.nn.Linear(13, 5))
        for layer in model:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        opt = torch.optim.AdamW(model.parameters(), lr=0.1, weight_decay=0.1, fused=True)
        for step in range(3):
            g = torch.Generator().manual_seed(10 * step + rank)
            (10 * model(torch.randn(4, 8, generator=g))).square().sum().backward()  # large gradients: clipping bites
            params = list(model.parameters())
            if folded:
                norm = clip_grad_norm_local_(params, 0.0)
                assert float(clip_divisor(norm, max_norm)) > 1.0, "the test must clip"
                fused_step_with_divisor(opt, clip_divisor(norm, max_norm))
                assert not hasattr(opt, "grad_scale")
            else:
                clip_grad_norm_local_(params, max_norm)
                opt.step()
            opt.zero_grad(set_to_none=True)
        weights.append([p.full_tensor() for p in model.parameters()])
    for a, b in zip(*weights, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


def _check(rank: int, world: int, store: str, shard: int, max_norm: float, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        from fsdp_trainer.trainer import clip_grad_norm_local_

        mesh = (
            init_device_mesh("cpu", (world,), mesh_dim_names=("shard",))
            if shard == world
            else init_device_mesh("cpu", (world // shard, shard), mesh_dim_names=("replicate", "shard"))
        )
        results = []
        for ours in (True, False):
            torch.manual_seed(0)  # same weights on every rank, then sharded
            model = torch.nn.Sequential(torch.nn.Linear(8, 13), torch.nn.Linear(13, 5), torch.nn.Linear(5, 3))
            for layer in model:
                fully_shard(layer, mesh=mesh)
            fully_shard(model, mesh=mesh)
            g = torch.Generator().manual_seed(
                100 + rank
            )  # different data per rank: gradients differ before the reduction
            model(torch.randn(4, 8, generator=g)).square().sum().backward()
            params = list(model.parameters())
            norm = (
                clip_grad_norm_local_(params, max_norm)
                if ours
                else torch.nn.utils.clip_grad_norm_(params, max_norm or float("inf"), foreach=True)
            )
            if hasattr(norm, "full_tensor"):
                norm = norm.full_tensor()
            results.append((float(norm), [p.grad.full_tensor() for p in params]))
        (norm_a, grads_a), (norm_b, grads_b) = results
        assert abs(norm_a - norm_b) <= 1e-5 * norm_b, (norm_a, norm_b)
        for a, b in zip(grads_a, grads_b, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)
        if max_norm:
            _check_folded_step(mesh, rank, max_norm)
        if rank == 0:
            with open(out, "w") as f:
                f.write(f"{norm_a}")
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("world,shard,max_norm", [(2, 2, 0.5), (2, 2, 0.0), (4, 2, 0.5), (2, 1, 0.5)])
def test_local_clipping_equals_dtensor_clipping(world, shard, max_norm, tmp_path):
    """FSDP2 (2 ranks), HSDP 2 x 2 and 2 x 1: the same norm and the same clipped gradients as ``nn.utils.clip_grad_norm_``."""
    out = tmp_path / "norm"
    mp.spawn(_worker, args=(world, str(tmp_path / "store"), shard, max_norm, str(out)), nprocs=world, join=True)
    assert float(out.read_text()) > 0.5  # the clip was active at 0.5

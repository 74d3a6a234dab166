"""``parallel.comm_buffers``: every FSDP2 unit's collectives take their staging buffers where the flag says.

Training through the process group's allocator is checked for loss parity in test_parity.py; symmetric memory
needs NCCL on GPUs (refused on CPU: test_refusals.py), so here only its wiring is checked; it is measured by
bench/gpu_compare.py."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn

from fsdp_trainer.errors import ConfigError
from fsdp_trainer.parallelize import set_comm_buffers

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def world_of_one():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _units(model: nn.Module) -> list[nn.Module]:
    from torch.distributed.fsdp import FSDPModule

    return [m for m in model.modules() if isinstance(m, FSDPModule)]


def _mesh():
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh("cpu", (1,))


def _sharded_model(mesh=None) -> nn.Module:
    from torch.distributed.fsdp import fully_shard

    mesh = mesh or _mesh()
    model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 2))
    for layer in model:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def _comm_classes(model: nn.Module) -> set[tuple[str, str]]:
    groups = [g for unit in _units(model) for g in unit._get_fsdp_state()._fsdp_param_groups]
    assert len(groups) == 3, "one parameter group per sharded layer (the root holds no parameters of its own)"
    return {(type(g._all_gather_comm).__name__, type(g._reduce_scatter_comm).__name__) for g in groups}


def test_process_group_buffers_reach_every_unit(world_of_one):
    model = _sharded_model()
    assert _comm_classes(model) == {("DefaultAllGather", "DefaultReduceScatter")}
    set_comm_buffers(model, "process_group")
    assert _comm_classes(model) == {("ProcessGroupAllocAllGather", "ProcessGroupAllocReduceScatter")}
    loss = model(torch.randn(4, 8)).sum()  # gloo has no allocator of its own: plain tensors, same result
    loss.backward()
    assert all(p.grad is not None for p in model.parameters())


def test_default_leaves_the_units_alone(world_of_one):
    model = _sharded_model()
    set_comm_buffers(model, "default")
    assert _comm_classes(model) == {("DefaultAllGather", "DefaultReduceScatter")}


@pytest.mark.parametrize(
    "where, reduce_scatter", [("symmetric", "SymmetricReduceScatter"), ("symmetric_all_gather", "DefaultReduceScatter")]
)
def test_symmetric_before_torch_2_12_installs_the_trainers_collectives_on_every_unit(
    world_of_one, monkeypatch, where, reduce_scatter
):
    from torch.distributed.fsdp import FSDPModule

    from fsdp_trainer import comm

    mesh = _mesh()
    model = _sharded_model(mesh)
    if hasattr(FSDPModule, "set_symm_mem_for_comm"):  # as on torch 2.11 (the GPU machine's), which lacks it
        monkeypatch.delattr(FSDPModule, "set_symm_mem_for_comm")
    prepared = []
    monkeypatch.setattr(
        comm._SymmetricPool, "prepare", lambda self: prepared.append(self)
    )  # NCCL symmetric memory needs GPUs
    set_comm_buffers(model, where, mesh)
    assert len(prepared) == 1, "the backend is chosen once, before the first collective"
    assert prepared[0].group is mesh.get_group(0), "its communicator is the units' collective group's"
    assert _comm_classes(model) == {("SymmetricAllGather", reduce_scatter)}
    groups = [g for unit in _units(model) for g in unit._get_fsdp_state()._fsdp_param_groups]
    assert {id(g._all_gather_comm) for g in groups} == {id(prepared[0])}
    if where == "symmetric":
        scatters = {id(g._reduce_scatter_comm) for g in groups}
        assert len(scatters) == 1 and groups[0]._reduce_scatter_comm.group is mesh.get_group(0)


def test_symmetric_on_torch_2_12_uses_torchs_own_setter(world_of_one, monkeypatch):
    from torch.distributed.fsdp import FSDPModule

    from fsdp_trainer import comm

    model = _sharded_model()
    calls = []
    monkeypatch.setattr(
        FSDPModule, "set_symm_mem_for_comm", lambda self, backend="NCCL": calls.append(backend), raising=False
    )
    monkeypatch.setattr(comm, "prepare_symmetric_memory", lambda group: calls.append("prepared"))
    set_comm_buffers(model, "symmetric")
    assert calls == ["prepared"] + ["NCCL"] * 4, "the backend first, then every unit (three layers and the root)"


def test_a_torch_without_the_setters_is_refused_in_one_line():
    with pytest.raises(
        ConfigError,
        match=r"^--parallel.comm_buffers: symmetric needs FSDPModule.set_custom_all_gather, which torch .* lacks",
    ):
        set_comm_buffers(nn.Linear(2, 2), "symmetric")
    with pytest.raises(
        ConfigError,
        match=r"^--parallel.comm_buffers: process_group needs FSDPModule.set_allocate_memory_from_process_group_for_comm",
    ):
        set_comm_buffers(nn.Linear(2, 2), "process_group")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a CPU-only build of torch")
def test_a_torch_build_without_nccl_symmetric_memory_is_refused_in_one_line(world_of_one):
    # This CPU build of torch has the FSDP API but no NCCL: the backend cannot be chosen.
    with pytest.raises(
        ConfigError, match=r"^--parallel.comm_buffers: this torch build cannot use NCCL symmetric memory \("
    ):
        set_comm_buffers(_sharded_model(), "symmetric")


def test_symmetric_buffers_ask_nccl_for_the_copy_engine_policy_unless_it_is_set(monkeypatch):
    from fsdp_trainer.config import ParallelConfig
    from fsdp_trainer.distributed import nccl_env_for

    monkeypatch.delenv("NCCL_CTA_POLICY", raising=False)
    assert nccl_env_for(ParallelConfig(comm_buffers="symmetric")) == {"NCCL_CTA_POLICY": "2"}
    assert nccl_env_for(ParallelConfig(comm_buffers="symmetric_all_gather")) == {"NCCL_CTA_POLICY": "2"}
    assert nccl_env_for(ParallelConfig(comm_buffers="default")) == {}
    monkeypatch.setenv("NCCL_CTA_POLICY", "0")  # the user's own setting wins
    assert nccl_env_for(ParallelConfig(comm_buffers="symmetric")) == {}


def test_symmetric_availability_is_reported_with_a_reason(monkeypatch):
    """``--auto`` asks before it picks symmetric buffers: no on CPU, and no with an NCCL older than 2.28."""
    from fsdp_trainer import comm

    if not torch.cuda.is_available():
        assert comm.symmetric_unavailable() == "no CUDA or NCCL"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(dist, "is_nccl_available", lambda: True)
    monkeypatch.setattr(torch.cuda.nccl, "version", lambda: (2, 27, 3))
    assert comm.symmetric_unavailable() == "NCCL 2.27.3 is older than 2.28"
    monkeypatch.setattr(torch.cuda.nccl, "version", lambda: (2, 28, 9))
    assert comm.symmetric_unavailable() is None  # torch has the pool and FSDP2's custom collectives

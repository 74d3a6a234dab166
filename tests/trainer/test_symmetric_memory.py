"""``experimental.symmetric_memory``: every FSDP2 unit's collectives take their staging buffers in NCCL symmetric memory.

Symmetric memory needs NCCL on GPUs (refused on CPU: test_refusals.py), so here only its wiring is checked; it is
measured by bench/gpu_compare.py."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn

from fsdp_trainer.errors import ConfigError
from fsdp_trainer.experimental import symmetric_memory
from fsdp_trainer.experimental.symmetric_memory import set_symmetric_collectives

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def world_of_one():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    from fsdp_trainer.distributed import destroy_distributed

    destroy_distributed()


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


def test_before_torch_2_12_the_trainers_collectives_go_on_every_unit(world_of_one, monkeypatch):
    from torch.distributed.fsdp import FSDPModule

    mesh = _mesh()
    model = _sharded_model(mesh)
    assert _comm_classes(model) == {("DefaultAllGather", "DefaultReduceScatter")}
    if hasattr(FSDPModule, "set_symm_mem_for_comm"):  # as on torch 2.11 (the GPU machine's), which lacks it
        monkeypatch.delattr(FSDPModule, "set_symm_mem_for_comm")
    prepared = []
    monkeypatch.setattr(
        symmetric_memory._SymmetricPool, "prepare", lambda self: prepared.append(self)
    )  # NCCL symmetric memory needs GPUs
    assert set_symmetric_collectives(model, mesh) == 4, "three layers and the root"
    assert len(prepared) == 1, "the backend is chosen once, before the first collective"
    assert prepared[0].group is mesh.get_group(0), "its communicator is the units' collective group's"
    assert _comm_classes(model) == {("SymmetricAllGather", "SymmetricReduceScatter")}
    groups = [g for unit in _units(model) for g in unit._get_fsdp_state()._fsdp_param_groups]
    assert {id(g._all_gather_comm) for g in groups} == {id(prepared[0])}
    scatters = {id(g._reduce_scatter_comm) for g in groups}
    assert len(scatters) == 1 and groups[0]._reduce_scatter_comm.group is mesh.get_group(0)


def test_on_torch_2_12_torchs_own_setter_is_used(world_of_one, monkeypatch):
    from torch.distributed.fsdp import FSDPModule

    model = _sharded_model()
    calls = []
    monkeypatch.setattr(
        FSDPModule, "set_symm_mem_for_comm", lambda self, backend="NCCL": calls.append(backend), raising=False
    )
    monkeypatch.setattr(symmetric_memory, "prepare_symmetric_memory", lambda group: calls.append("prepared"))
    set_symmetric_collectives(model, None)
    assert calls == ["prepared"] + ["NCCL"] * 4, "the backend first, then every unit (three layers and the root)"


def test_a_model_without_fsdp2_units_is_refused_in_one_line():
    with pytest.raises(ConfigError, match=r"^--experimental.symmetric_memory: needs FSDP2 units with "):
        set_symmetric_collectives(nn.Linear(2, 2), None)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a CPU-only build of torch")
def test_a_torch_build_without_nccl_symmetric_memory_is_refused_in_one_line(world_of_one):
    # This CPU build of torch has the FSDP API but no NCCL: the backend cannot be chosen.
    with pytest.raises(
        ConfigError, match=r"^--experimental.symmetric_memory: this torch build cannot use NCCL symmetric memory \("
    ):
        set_symmetric_collectives(_sharded_model(), None)


def test_nccl_is_asked_for_the_copy_engine_policy_unless_it_is_set(monkeypatch):
    monkeypatch.delenv("NCCL_CTA_POLICY", raising=False)
    assert symmetric_memory.nccl_env() == {"NCCL_CTA_POLICY": "2"}
    monkeypatch.setenv("NCCL_CTA_POLICY", "0")  # the user's own setting wins
    assert symmetric_memory.nccl_env() == {}


def test_availability_is_reported_with_a_reason(monkeypatch):
    if not torch.cuda.is_available():
        assert symmetric_memory.symmetric_unavailable() == "no CUDA or NCCL"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(dist, "is_nccl_available", lambda: True)
    monkeypatch.setattr(torch.cuda.nccl, "version", lambda: (2, 27, 3))
    assert symmetric_memory.symmetric_unavailable() == "NCCL 2.27.3 is older than 2.28"
    monkeypatch.setattr(torch.cuda.nccl, "version", lambda: (2, 28, 9))
    assert symmetric_memory.symmetric_unavailable() is None  # torch has the pool and FSDP2's custom collectives

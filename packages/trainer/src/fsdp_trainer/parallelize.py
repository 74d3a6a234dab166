"""Turn ``CausalLMWithLoss`` into a distributed model: activation checkpointing, compile, FSDP2 or FSDP1.

The order matters, and is the same as torchtitan's:

1. Activation checkpointing first, so it wraps exactly one decoder block and its
   recomputation stays inside that block.
2. Compile second, so each compiled graph covers the checkpointed block (the
   compiler sees the recompute region) and FSDP's hooks stay outside the graph.
3. FSDP per block next: each block becomes one all-gather / reduce-scatter unit,
   which is what lets communication for block i+1 overlap compute of block i.
4. FSDP2: the lm_head (``model.LossHead``, which computes the loss) as its own unit,
   kept gathered from its forward to its backward, so its gradient's
   reduce-scatter starts right after the loss's backward and overlaps the blocks'
   backward (a tied lm_head shares the embedding's weight and stays with the root).
5. The root last: it picks up what no unit owns (embeddings, final norm, and under
   FSDP1 the lm_head), and as the outermost unit its hooks gather them around the
   wrapper's forward.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from typing import Any

import torch
import torch.nn as nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
from torch.distributed.device_mesh import DeviceMesh

from .config import TrainerConfig
from .errors import ConfigError
from .model import DTYPES, CausalLMWithLoss


def apply_activation_checkpointing(blocks: nn.ModuleList, mode: str, every: int) -> None:
    """Wrap every block (full) or every ``every``-th block (selective) in a non-reentrant checkpoint."""
    if mode == "none":
        return
    for i, block in enumerate(blocks):
        if mode == "full" or (i + 1) % every == 0:
            blocks[i] = checkpoint_wrapper(block, preserve_rng_state=False)


def apply_compile(blocks: nn.ModuleList, mode: str = "default", memory_budget: float = 1.0) -> None:
    """``torch.compile`` each block separately (``compile.mode``): identical blocks share one compiled graph.
    ``memory_budget`` (``compile.memory_budget``) is the compiler's process-wide activation memory budget, read when
    the blocks compile (at their first call)."""
    import torch._functorch.config as functorch_config

    functorch_config.activation_memory_budget = memory_budget
    for i, block in enumerate(blocks):
        blocks[i] = torch.compile(block, mode=mode)


def apply_fsdp2(model: CausalLMWithLoss, blocks: nn.ModuleList, cfg: TrainerConfig, mesh: DeviceMesh) -> None:
    """``fully_shard`` each block, then the root, on a 1-D ("shard") or 2-D ("replicate", "shard") mesh."""
    from torch.distributed.fsdp import (
        CPUOffloadPolicy,
        MixedPrecisionPolicy,
        OffloadPolicy,
        fully_shard,
        register_fsdp_forward_method,
    )

    par, prec = cfg.parallel, cfg.precision
    kwargs: dict[str, Any] = dict(
        mesh=mesh,
        mp_policy=MixedPrecisionPolicy(param_dtype=DTYPES[prec.param_dtype], reduce_dtype=DTYPES[prec.reduce_dtype]),
        offload_policy=CPUOffloadPolicy() if par.cpu_offload else OffloadPolicy(),
    )
    reshard = bool(par.reshard_after_forward)
    for i, block in enumerate(blocks):
        # The last block's parameters are needed again right away by backward: keep them gathered.
        fully_shard(block, reshard_after_forward=reshard and i < len(blocks) - 1, **kwargs)
    head = model.lm.lm_head
    if head.weight is not model.lm.get_input_embeddings().weight:
        # Its backward (LossHead's fused loss) comes first in the backward pass: keep it gathered too.
        fully_shard(head, reshard_after_forward=False, **kwargs)
        register_fsdp_forward_method(head, "loss")
    fully_shard(model, reshard_after_forward=reshard, **kwargs)
    set_comm_buffers(model, par.comm_buffers, mesh)
    if par.forward_prefetch:
        for block, nxt in itertools.pairwise(blocks):
            block.set_modules_to_forward_prefetch([nxt])
    # backward_prefetch='pre': gather block i-1 while block i computes its gradients.
    for prev, block in itertools.pairwise(blocks):
        block.set_modules_to_backward_prefetch([prev])


def set_comm_buffers(model: nn.Module, where: str, mesh: DeviceMesh | None = None) -> None:
    """``parallel.comm_buffers``: every FSDP2 unit's collective staging buffers from the process group's allocator, or
    in NCCL symmetric memory: all-gathers and reduce-scatters (``symmetric``: torch's own ``set_symm_mem_for_comm``
    where it exists, from 2.12; before that, the custom collectives of ``comm.py`` doing the same), or all-gathers
    only (``symmetric_all_gather``)."""
    if where == "default":
        return
    units = [m for m in model.modules() if hasattr(m, "set_custom_all_gather")]  # every fully_shard unit
    if where == "process_group":
        if not all(hasattr(u, "set_allocate_memory_from_process_group_for_comm") for u in units) or not units:
            raise ConfigError(
                f"--parallel.comm_buffers: process_group needs FSDPModule.set_allocate_memory_from_process_group_for_comm "
                f"(torch 2.8+), which torch {torch.__version__} lacks; upgrade torch or use --parallel.comm_buffers default"
            )
        for unit in units:
            unit.set_allocate_memory_from_process_group_for_comm(True)
        return
    if not units:
        raise ConfigError(
            f"--parallel.comm_buffers: {where} needs FSDPModule.set_custom_all_gather, which torch {torch.__version__} lacks; "
            "upgrade torch or use --parallel.comm_buffers default"
        )
    from .comm import SymmetricAllGather, SymmetricReduceScatter, prepare_symmetric_memory

    # The units all-gather and reduce-scatter over the mesh's shard dimension (its only one without replication).
    group = None if mesh is None else mesh.get_group(mesh.ndim - 1)
    both = where == "symmetric"
    if both and all(hasattr(u, "set_symm_mem_for_comm") for u in units):
        prepare_symmetric_memory(group)  # torch's own warm-up is a barrier, which a gloo/nccl group runs on gloo
        for unit in units:
            unit.set_symm_mem_for_comm("NCCL")
        return
    if both and not all(hasattr(u, "set_custom_reduce_scatter") for u in units):
        raise ConfigError(
            f"--parallel.comm_buffers: symmetric needs FSDPModule.set_custom_reduce_scatter, which torch {torch.__version__} "
            "lacks; use --parallel.comm_buffers symmetric_all_gather"
        )
    gather = SymmetricAllGather(group)
    gather.prepare()
    scatter = SymmetricReduceScatter(group) if both else None
    for unit in units:
        unit.set_custom_all_gather(gather)
        if scatter is not None:
            unit.set_custom_reduce_scatter(scatter)


def apply_fsdp1(
    model: CausalLMWithLoss,
    blocks: nn.ModuleList,
    cfg: TrainerConfig,
    mesh: DeviceMesh,
    device: torch.device,
    param_init_fn: Callable[[nn.Module], None] | None,
    sync_module_states: bool,
) -> nn.Module:
    """Wrap in ``FullyShardedDataParallel``: one unit per decoder block, the wrapper as root."""
    from torch.distributed.fsdp import BackwardPrefetch, CPUOffload, MixedPrecision, ShardingStrategy
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy

    par, prec = cfg.parallel, cfg.precision
    # transformer_auto_wrap_policy on the decoder-block class; when blocks are wrapped for
    # checkpointing, the wrapper's class is named so the FSDP unit encloses the checkpointed
    # region (FSDP(CheckpointWrapper(LlamaDecoderLayer)), the usual FSDP1 layout).
    block_classes = {type(b) for b in blocks}
    if len(block_classes) > 1:  # selective checkpointing mixes plain and wrapped blocks
        from torch.distributed.fsdp.wrap import lambda_auto_wrap_policy

        block_ids = {id(b) for b in blocks}
        policy = functools.partial(lambda_auto_wrap_policy, lambda_fn=lambda m: id(m) in block_ids)
    else:
        policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls=block_classes)
    mixed = None
    if prec.param_dtype != "fp32" or prec.reduce_dtype != "fp32":
        mixed = MixedPrecision(param_dtype=DTYPES[prec.param_dtype], reduce_dtype=DTYPES[prec.reduce_dtype])
    strategy = {
        "full_shard": ShardingStrategy.FULL_SHARD,
        "hybrid_shard": ShardingStrategy.HYBRID_SHARD,
        "shard_grad_op": ShardingStrategy.SHARD_GRAD_OP,
        "no_shard": ShardingStrategy.NO_SHARD,
    }[par.sharding]
    hybrid = par.sharding == "hybrid_shard"
    if hybrid and mesh.size(1) == 1:
        # FSDP1 turns a one-rank shard group into NO_SHARD *within that group*, which silently
        # drops the cross-replica gradient all-reduce. Replicating over all ranks is the same layout.
        strategy, hybrid = ShardingStrategy.NO_SHARD, False
    prefetch = {"pre": BackwardPrefetch.BACKWARD_PRE, "post": BackwardPrefetch.BACKWARD_POST, "none": None}[
        par.backward_prefetch
    ]
    return FSDP(
        model,
        auto_wrap_policy=policy,
        sharding_strategy=strategy,
        device_mesh=mesh if hybrid else None,
        mixed_precision=mixed,
        cpu_offload=CPUOffload(offload_params=par.cpu_offload),
        backward_prefetch=prefetch,
        forward_prefetch=par.forward_prefetch,
        limit_all_gathers=par.limit_all_gathers,
        use_orig_params=True,
        device_id=device,
        param_init_fn=param_init_fn,
        sync_module_states=sync_module_states,
    )


def parallelize_llama(
    model: CausalLMWithLoss,
    cfg: TrainerConfig,
    mesh: DeviceMesh | None,
    *,
    device: torch.device,
    param_init_fn: Callable[[nn.Module], None] | None = None,
    sync_module_states: bool = False,
) -> nn.Module:
    """Apply AC, then compile, then FSDP per block, then the root (see the module docstring); returns the model to train.

    ``param_init_fn`` / ``sync_module_states`` are FSDP1's hooks for meta-device
    models (FSDP2 callers materialise after this returns).
    """
    blocks = model.lm.model.layers
    apply_activation_checkpointing(blocks, cfg.activation_checkpointing.mode, cfg.activation_checkpointing.every)
    if cfg.compile.enabled:
        apply_compile(blocks, cfg.compile.mode, cfg.compile.memory_budget)
    if cfg.parallel.api == "fsdp2":
        assert mesh is not None
        apply_fsdp2(model, blocks, cfg, mesh)
        return model
    if cfg.parallel.api == "fsdp1":
        assert mesh is not None
        return apply_fsdp1(model, blocks, cfg, mesh, device, param_init_fn, sync_module_states)
    return model

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
from .model import DTYPES, CausalLMWithLoss


def apply_activation_checkpointing(blocks: nn.ModuleList, mode: str, every: int) -> None:
    """Wrap every block (full) or every ``every``-th block (selective) in a non-reentrant checkpoint."""
    if mode == "none":
        return
    for i, block in enumerate(blocks):
        if mode == "full" or (i + 1) % every == 0:
            blocks[i] = checkpoint_wrapper(block, preserve_rng_state=False)


def apply_compile(blocks: nn.ModuleList, memory_budget: float = 1.0) -> None:
    """``torch.compile`` each block separately: identical blocks share one compiled graph. ``memory_budget``
    (``compile.memory_budget``) is the compiler's process-wide activation memory budget, read when the blocks compile
    (at their first call)."""
    import torch._functorch.config as functorch_config

    functorch_config.activation_memory_budget = memory_budget
    for i, block in enumerate(blocks):
        blocks[i] = torch.compile(block)


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
    if par.forward_prefetch:
        for block, nxt in itertools.pairwise(blocks):
            block.set_modules_to_forward_prefetch([nxt])
    # backward_prefetch='pre': gather block i-1 while block i computes its gradients.
    for prev, block in itertools.pairwise(blocks):
        block.set_modules_to_backward_prefetch([prev])


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
        apply_compile(blocks, cfg.compile.memory_budget)
    if cfg.parallel.api == "fsdp2":
        assert mesh is not None
        apply_fsdp2(model, blocks, cfg, mesh)
        return model
    if cfg.parallel.api == "fsdp1":
        assert mesh is not None
        return apply_fsdp1(model, blocks, cfg, mesh, device, param_init_fn, sync_module_states)
    return model

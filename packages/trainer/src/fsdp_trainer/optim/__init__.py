"""AdamW, gradient clipping, the learning-rate schedule and the fp16 gradient scaler."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn as nn

from ..config import TrainConfig, TrainerConfig
from ..errors import ConfigError

BETAS = (0.9, 0.95)  # Llama 2 / Llama 3 pretraining values
EPS = 1e-8


def build_optimizer(model: nn.Module, cfg: TrainerConfig, device: torch.device) -> torch.optim.AdamW:
    """AdamW (``train.adamw``, see ``choose_adamw``) with no weight decay on norm weights.

    Under ``precision.master_weights`` resolved to optimizer (``use_master_weights``) it is the Triton AdamW keeping
    the masters; the ``master_weights`` converter seeds them from the weights as drawn or loaded.
    """
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if p.requires_grad:
            (no_decay if "norm" in name else decay).append(p)
    groups = [
        {"params": decay, "weight_decay": cfg.train.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    choice = choose_adamw(cfg, device.type)
    if choice == "triton":
        from .triton_adamw import TritonAdamW

        masters = use_master_weights(cfg, device.type)
        return TritonAdamW(groups, lr=cfg.train.lr, betas=BETAS, eps=EPS, master_weights=masters)
    return torch.optim.AdamW(groups, lr=cfg.train.lr, betas=BETAS, eps=EPS, **{choice: True})


def describe_optimizer(optimizer: torch.optim.Optimizer) -> dict[str, str]:
    """Which AdamW ran (``train.adamw`` with auto resolved) and where the fp32 weights lived, for the summary."""
    from .triton_adamw import TritonAdamW

    if isinstance(optimizer, TritonAdamW):
        adamw = "triton"
    else:
        adamw = "fused" if optimizer.defaults.get("fused") else "foreach"
    return {"adamw": adamw, "master_weights": "optimizer" if getattr(optimizer, "master_weights", False) else "params"}


def choose_adamw(cfg: TrainerConfig, device_type: str) -> str:
    """``train.adamw``, with auto resolved: triton on GPUs where Triton is installed (one memory-speed kernel per
    shard, ``optim/triton_adamw.py``); fused on GPUs without Triton and under FP8, where it measured faster
    (``bench/reports/2026-11-30-llama3.1-8b-h200-triton-adamw.md``); foreach on CPU and for parameters offloaded to
    CPU."""
    if cfg.train.adamw != "auto":
        return cfg.train.adamw
    if device_type != "cuda" or cfg.parallel.cpu_offload:
        return "foreach"
    from .triton_adamw import available

    return "triton" if available() and not cfg.fp8.enabled else "fused"


def use_master_weights(cfg: TrainerConfig, device_type: str, grad_accum_steps: int | None = None) -> bool:
    """``precision.master_weights``, with auto resolved: bf16 parameters and fp32 masters in the optimizer where the
    settings allow it (``TrainerConfig.master_weights_blocker``) and the Triton AdamW runs; fp32 parameters otherwise.
    An explicit ``optimizer`` whose AdamW does not resolve to triton is refused in one line. ``grad_accum_steps``:
    answer for that many micro-batches per step (``--auto`` asks for 1 before it chooses)."""
    mode = cfg.precision.master_weights
    if mode == "params":
        return False
    reason = cfg.master_weights_blocker(grad_accum_steps)
    if reason is not None:
        if mode == "optimizer":  # the config refuses these at once; --auto's choice of accumulation arrives here
            raise ConfigError(f"--precision.master_weights: optimizer {reason}")
        return False
    if choose_adamw(cfg, device_type) == "triton":
        return True
    if mode == "optimizer":
        raise ConfigError(
            f"--precision.master_weights: optimizer needs the Triton AdamW, which does not run here "
            f"({device_type}{'' if device_type == 'cpu' else ', Triton not installed'}); use --precision.master_weights params"
        )
    return False


@torch.no_grad()
def clip_grad_norm_(
    parameters: Any, max_norm: float, shard_group: torch.distributed.ProcessGroup | None = None
) -> torch.Tensor:
    """The global L2 norm of the gradients, which are then clipped to ``max_norm`` (0: only measured); on the local
    shards, for every kind of model the trainer builds.

    Each rank sums the squares of the gradients it holds, as plain tensors (FSDP2's DTensor shards through their local
    tensors, FSDP1's sharded views of its flat gradients as they are); the sum is all-reduced over ``shard_group``,
    the ranks among which the gradients are sharded (not over replicas, which hold the same values; None: no
    reduction, for an unsharded model); the clip factor multiplies the local gradients in place. The result is
    ``torch.nn.utils.clip_grad_norm_``'s, to rounding, without DTensor dispatch for every tensor of every foreach call
    (host work between the end of backward and the optimizer, with the GPU waiting).
    """
    from torch.distributed.tensor import DTensor

    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return torch.zeros(())
    local = [g.to_local() if isinstance(g, DTensor) else g for g in grads]
    # In fp32 whatever the gradients' dtype (bf16 with precision.master_weights optimizer).
    squares = torch.stack(torch._foreach_norm(local, 2.0, dtype=torch.float32)).square().sum()
    if shard_group is not None:
        torch.distributed.all_reduce(squares, group=shard_group)
    norm = squares.sqrt()
    if max_norm:
        torch._foreach_mul_(local, (max_norm / (norm + 1e-6)).clamp(max=1.0))
    return norm


def lr_multiplier(cfg: TrainConfig) -> Callable[[int], float]:
    """Factor of ``train.lr`` for the step about to run (0-based): linear warm-up, then decay to ``min_lr_ratio``."""
    warmup, total, floor = cfg.warmup_steps, cfg.steps, cfg.min_lr_ratio

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        if cfg.schedule == "constant":
            return 1.0
        progress = min((step - warmup) / max(total - warmup, 1), 1.0)
        if cfg.schedule == "linear":
            return 1.0 - (1.0 - floor) * progress
        return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))

    return factor


def build_scheduler(optimizer: torch.optim.Optimizer, cfg: TrainConfig) -> torch.optim.lr_scheduler.LambdaLR:
    """``LambdaLR`` over ``lr_multiplier``; its state (the step count) is checkpointed."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_multiplier(cfg))


def build_grad_scaler(cfg: TrainerConfig, device: torch.device) -> Any:
    """A gradient scaler for fp16 (None otherwise).

    FSDP1 and FSDP2 use ``ShardedGradScaler``: it unscales sharded gradients (FlatParameter
    shards or DTensors) and all-reduces the found-inf flag over the process group, so every
    rank skips the same steps.
    """
    if cfg.precision.param_dtype != "fp16":
        return None
    if cfg.parallel.api == "none":
        return torch.amp.GradScaler(device.type)
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

    return ShardedGradScaler(device=device.type)

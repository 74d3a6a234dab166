"""AdamW, the learning-rate schedule and the fp16 gradient scaler."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn as nn

from .config import TrainConfig, TrainerConfig
from .errors import ConfigError

BETAS = (0.9, 0.95)  # Llama 2 / Llama 3 pretraining values
EPS = 1e-8


def build_optimizer(
    model: nn.Module, cfg: TrainerConfig, device: torch.device, masters: dict[str, torch.Tensor] | None = None
) -> torch.optim.AdamW:
    """AdamW (``train.adamw``, see ``choose_adamw``) with no weight decay on norm weights.

    ``masters``: the fp32 weights by parameter name when the model's parameters were cast to bf16 for
    ``precision.master_weights`` (``materialize.BuiltModel.masters``); the Triton AdamW keeps them as its masters.
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
        from .adamw import TritonAdamW

        optimizer = TritonAdamW(groups, lr=cfg.train.lr, betas=BETAS, eps=EPS, master_weights=bool(masters))
        if masters:
            optimizer.seed_masters({p: masters[name] for name, p in model.named_parameters() if name in masters})
        return optimizer
    return torch.optim.AdamW(groups, lr=cfg.train.lr, betas=BETAS, eps=EPS, **{choice: True})


def choose_adamw(cfg: TrainerConfig, device_type: str) -> str:
    """``train.adamw``, with auto resolved: triton on GPUs where Triton is installed (one memory-speed kernel per shard,
    25% less time than torch's fused kernel on an 8B model's shards); fused on GPUs without Triton and under FP8 (the
    Triton kernel steps torchao's float8 weights through their inner tensor, but Llama-2-7B in FP8 on 2 H200s ran 1%
    slower with it: 15,832 against 16,003 tokens/s/GPU, bench/RESULTS.md session 6);
    foreach on CPU and for parameters offloaded to CPU."""
    if cfg.train.adamw != "auto":
        return cfg.train.adamw
    if device_type != "cuda" or cfg.parallel.cpu_offload:
        return "foreach"
    from .adamw import available

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

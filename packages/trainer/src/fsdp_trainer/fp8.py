"""Float8 training of the decoder's linear layers with torchao (Hopper-class GPUs).

Conversion happens before parallelization (on the meta or CPU model), so FSDP
shards the float8 linears like any other; with ``fp8.all_gather`` FSDP2 gathers
weights in float8 and the per-step scales are precomputed after each optimizer
step (``precompute_scales``).
"""

from __future__ import annotations

import torch
import torch.nn as nn

from .config import Fp8Config
from .errors import ConfigError


def check_fp8_supported(device: torch.device) -> None:
    """Raise a one-line ConfigError unless float8 can run here (CUDA, sm_89 or newer, torchao installed)."""
    if device.type != "cuda":
        raise ConfigError(
            f"--fp8.enabled: float8 training needs a Hopper-class GPU (sm_89+); this run is on {device.type}"
        )
    major, minor = torch.cuda.get_device_capability(device)
    if (major, minor) < (8, 9):
        name = torch.cuda.get_device_name(device)
        raise ConfigError(
            f"--fp8.enabled: float8 training needs a Hopper-class GPU (sm_89+); {name} is sm_{major}{minor}"
        )
    try:
        import torchao.float8  # noqa: F401
    except ImportError:
        raise ConfigError("--fp8.enabled: torchao is not installed; pip install fsdp-trainer[fp8]") from None


def _eligible(module: nn.Module, fqn: str) -> bool:
    # float8 matmuls need both dimensions divisible by 16.
    return isinstance(module, nn.Linear) and module.in_features % 16 == 0 and module.out_features % 16 == 0


def convert_to_fp8(model: nn.Module, cfg: Fp8Config) -> None:
    """Swap the decoder's ``nn.Linear`` layers for torchao ``Float8Linear`` (lm_head stays in high precision)."""
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    if cfg.recipe != "tensorwise":
        config = Float8LinearConfig.from_recipe_name(cfg.recipe)
    else:
        config = Float8LinearConfig(enable_fsdp_float8_all_gather=cfg.all_gather)
    convert_to_float8_training(model.lm.model, config=config, module_filter_fn=_eligible)


def precompute_scales(model: nn.Module, cfg: Fp8Config) -> None:
    """After ``optimizer.step()``: one all-reduce for all float8 weight scales (fsdp2 + fp8.all_gather only)."""
    if cfg.enabled and cfg.all_gather:
        from torchao.float8 import precompute_float8_dynamic_scale_for_fsdp

        precompute_float8_dynamic_scale_for_fsdp(model)

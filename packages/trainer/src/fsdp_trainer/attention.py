"""Attention: PyTorch SDPA with the kernel order chosen by the trainer, not left to the default.

PyTorch's default SDPA priority on CUDA is flash (FlashAttention-2), memory-efficient,
math, and cuDNN last. On Hopper (sm_90, H100/H200) the cuDNN fused attention is the
faster kernel for training shapes (head dim 128, causal, long sequences), which is
why torchtitan puts it first there too. ``model.sdpa_backend=auto`` does the same
on sm_90 and newer and keeps torch's own choice everywhere else (CPU, older GPUs).

The attention function is registered with transformers' ``AttentionInterface`` under
``ATTENTION_NAME`` (and the stock SDPA mask builder under the same name), and the
model's config points at it. It expands grouped key/value heads itself
(``repeat_kv``) rather than passing ``enable_gqa``, which not every fused kernel
accepts; the call runs inside ``sdpa_kernel(..., set_priority=True)``, which
``torch.compile`` traces, so compiled blocks bake in the same kernel.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

ATTENTION_NAME = "fsdp_trainer_sdpa"

_KERNELS = {
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "math": SDPBackend.MATH,
}
_FALLBACK = ["flash", "efficient", "math"]

#: Kernel priority of the registered function; set by ``configure_attention`` before the model runs.
_priority: list[SDPBackend] = [SDPBackend.MATH]


def kernel_order(choice: str, device: torch.device) -> list[str] | None:
    """SDPA kernels in priority order for ``model.sdpa_backend``; None means torch's own default order.

    ``auto``: cuDNN first on CUDA devices of compute capability 9.0 or newer, else torch's default.
    ``default``: always torch's default. A kernel name: that kernel first, then flash, efficient, math
    (SDPA falls through to the next one when a call's shapes or dtypes don't suit a kernel).
    """
    if choice == "default":
        return None
    if choice == "auto":
        if device.type != "cuda" or torch.cuda.get_device_capability(device) < (9, 0):
            return None
        choice = "cudnn"
    return [choice] + [k for k in _FALLBACK if k != choice]


def repeat_kv(states: torch.Tensor, groups: int) -> torch.Tensor:
    """``[b, kv_heads, s, d] -> [b, kv_heads * groups, s, d]``, each key/value head repeated for its query group."""
    if groups == 1:
        return states
    b, heads, s, d = states.shape
    return states[:, :, None].expand(b, heads, groups, s, d).reshape(b, heads * groups, s, d)


def sdpa_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function contract: ``[b, heads, s, d]`` in, ``([b, s, heads, d], None)`` out."""
    groups = getattr(module, "num_key_value_groups", 1)
    key, value = repeat_kv(key, groups), repeat_kv(value, groups)
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    # Training sequences come without a mask (packed, causal): let the kernel apply causality itself.
    causal = bool(causal) and attention_mask is None and query.shape[2] > 1
    with sdpa_kernel(_priority, set_priority=True):
        out = F.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, is_causal=causal)
    return out.transpose(1, 2).contiguous(), None


def configure_attention(hf_config: Any, choice: str, device: torch.device) -> str:
    """Point ``hf_config`` at the trainer's SDPA function when ``choice`` asks for a kernel order; returns the order used.

    Only configs using ``sdpa`` are touched: eager, flash_attention_2 and flex_attention stay as they are.
    """
    global _priority
    if getattr(hf_config, "_attn_implementation", None) != "sdpa":
        return hf_config._attn_implementation
    order = kernel_order(choice, device)
    if order is None:
        return "sdpa (torch default order)"
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    _priority = [_KERNELS[k] for k in order]
    AttentionInterface.register(ATTENTION_NAME, sdpa_attention)
    AttentionMaskInterface.register(ATTENTION_NAME, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])
    hf_config._attn_implementation = ATTENTION_NAME
    return "sdpa (" + ", ".join(order) + ")"

"""Attention: PyTorch SDPA with the kernel chosen by the trainer, not left to the default order.

PyTorch's default SDPA priority on CUDA is flash (FlashAttention-2), memory-efficient,
math, and cuDNN last. On Hopper (sm_90, H100/H200) the cuDNN fused attention is the
faster kernel for training shapes (head dim 128, causal, long sequences: 1.8x flash's speed,
forward + backward, on an H200; ``bench/reports/2026-11-30-h200-attention-kernels.md``).
``model.sdpa_backend=auto`` takes cuDNN on sm_90 and newer and keeps torch's own choice
everywhere else (CPU, older GPUs).

The attention function is registered with transformers' ``AttentionInterface`` under
``ATTENTION_NAME`` (and the stock SDPA mask builder under the same name), and the
model's config points at it. Grouped key/value heads (Llama-3's 8 for 32 query heads)
go to the kernel as they are (``enable_gqa``) where SDPA's dispatcher takes them for the
run's shapes (flash and math; cuDNN on recent torch), so each key/value head is read once
for its query group and its gradient comes out already summed (Llama-3.1-8B trains faster
than with the heads repeated: ``bench/reports/2026-11-30-llama3.1-8b-h200x2-grouped-heads-cudnn.md``);
elsewhere (memory-efficient attention) they are expanded first (``repeat_kv``): a copy each
way per block. SDPA runs inside ``sdpa_kernel([kernel, MATH])``: only the chosen
kernel, and math as the safety net for shapes it refuses, so the choice does not rest
on torch's default order or on a priority order being honoured inside compiled
graphs. Before training, a probe asks SDPA's dispatcher whether the kernel takes the
run's shapes; if not, the run keeps torch's default order and says why.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

log = logging.getLogger(__name__)

ATTENTION_NAME = "fsdp_trainer_sdpa"

_KERNELS = {
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "math": SDPBackend.MATH,
}

#: Kernels enabled in the registered function; set by ``configure_attention`` before the model runs.
_enabled: list[SDPBackend] = [SDPBackend.MATH]
#: Whether the enabled kernel takes grouped key/value heads itself (``enable_gqa``); else they are repeated.
_gqa_native = False


def kernel_choice(choice: str, device: torch.device) -> str | None:
    """The SDPA kernel for ``model.sdpa_backend`` on ``device``; None means torch's own default order.

    ``auto``: cuDNN on CUDA devices of compute capability 9.0 or newer, else None. ``default``: None.
    """
    if choice == "default":
        return None
    if choice == "auto":
        if device.type != "cuda" or torch.cuda.get_device_capability(device) < (9, 0):
            return None
        return "cudnn"
    return choice


def probe(
    kernel: str,
    device: torch.device,
    dtype: torch.dtype,
    heads: int,
    head_dim: int,
    seq_len: int,
    kv_heads: int | None = None,
) -> str | None:
    """None when SDPA's dispatcher takes ``kernel`` for a causal training call of this shape, else the reason it does not.

    With ``kv_heads`` fewer than ``heads``, the call passes the grouped key/value heads as they are (``enable_gqa``)."""
    kv_heads = heads if kv_heads is None else kv_heads
    q = torch.zeros((1, heads, seq_len, head_dim), device=device, dtype=dtype, requires_grad=True)
    k, v = (
        torch.zeros((1, kv_heads, seq_len, head_dim), device=device, dtype=dtype, requires_grad=True) for _ in range(2)
    )
    try:
        with sdpa_kernel([_KERNELS[kernel]]):
            picked = torch._fused_sdp_choice(q, k, v, None, 0.0, True, enable_gqa=kv_heads != heads)
    except RuntimeError as e:
        return str(e).strip().splitlines()[0][:200] or type(e).__name__
    if picked != int(_KERNELS[kernel]):
        return f"SDPA dispatches this shape to backend {picked}, not {kernel}"
    return None


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
    gqa = {}
    if groups > 1 and _gqa_native and attention_mask is None:
        gqa = {"enable_gqa": True}  # the kernel reads each key/value head once for its query group
    else:
        key, value = repeat_kv(key, groups), repeat_kv(value, groups)
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    # Training sequences come without a mask (packed, causal): let the kernel apply causality itself.
    causal = bool(causal) and attention_mask is None and query.shape[2] > 1
    with sdpa_kernel(_enabled):
        out = F.scaled_dot_product_attention(
            query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, is_causal=causal, **gqa
        )
    return out.transpose(1, 2).contiguous(), None


def configure_attention(hf_config: Any, choice: str, device: torch.device, dtype: torch.dtype, seq_len: int) -> str:
    """Point ``hf_config`` at the trainer's SDPA function when ``choice`` names a kernel that takes the run's shapes.

    Grouped key/value heads are passed as they are where the kernel takes them for these shapes, else expanded
    first. Returns what attention runs, for the log. Only configs using ``sdpa`` are touched: eager,
    flash_attention_2 and flex_attention stay as they are.
    """
    global _enabled, _gqa_native
    if getattr(hf_config, "_attn_implementation", None) != "sdpa":
        return hf_config._attn_implementation
    kernel = kernel_choice(choice, device)
    if kernel is None:
        return "sdpa, torch's default kernel order"
    head_dim = getattr(hf_config, "head_dim", None) or hf_config.hidden_size // hf_config.num_attention_heads
    refused = (
        None if kernel == "math" else probe(kernel, device, dtype, hf_config.num_attention_heads, head_dim, seq_len)
    )
    if refused:
        log.warning(
            "model.sdpa_backend=%s: the %s kernel does not take this run's attention (%s); using torch's default order",
            choice,
            kernel,
            refused,
        )
        return "sdpa, torch's default kernel order"
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    kv_heads = getattr(hf_config, "num_key_value_heads", None) or hf_config.num_attention_heads
    grouped = kv_heads != hf_config.num_attention_heads
    _enabled = [_KERNELS[kernel]] + ([SDPBackend.MATH] if kernel != "math" else [])
    _gqa_native = grouped and (
        kernel == "math"
        or probe(kernel, device, dtype, hf_config.num_attention_heads, head_dim, seq_len, kv_heads) is None
    )
    AttentionInterface.register(ATTENTION_NAME, sdpa_attention)
    AttentionMaskInterface.register(ATTENTION_NAME, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])
    hf_config._attn_implementation = ATTENTION_NAME
    heads = (
        "" if not grouped else ", grouped key/value heads as they are" if _gqa_native else ", key/value heads repeated"
    )
    return f"sdpa, {kernel} kernel (math as fallback){heads}"

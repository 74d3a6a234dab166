"""``model.fused_kernels``: fewer element-wise kernels in eager Llama blocks, a fused RMSNorm and an in-place rotary.

Without ``torch.compile``, Hugging Face's Llama runs its RMSNorm as six element-wise kernels over the activations
(three of them in fp32) forward and about twice that backward, and its rotary embedding as multiply / negate /
concatenate / multiply / add over transposed (non-contiguous) query and key views. This converter swaps in:

- ``FusedRMSNorm``: ``F.rms_norm``, which on CUDA is one fused kernel forward and backward. The statistics are in
  fp32 as in Hugging Face's; the normalised value is multiplied by the weight before the one rounding to the
  activation dtype, where Hugging Face rounds before and after (equal in fp32).
- ``RopeAttention``: the same attention as ``LlamaAttention`` with the rotary embedding applied to query and key in
  their ``[batch, seq, heads, head_dim]`` projection layout (contiguous), by ``apply_rotary``: four half-size kernels
  forward (``mul`` and ``addcmul`` per half), four backward, nothing saved for backward but ``cos`` and ``sin``. SDPA
  then takes the transposed views as they are.

It pays in eager runs (Llama-2-7B on 2 H200s, micro batch 1: 13% more tokens/s and 4 GiB less memory,
``bench/reports/2026-11-30-llama2-7b-h200x2-fused-kernels.md``). Under ``torch.compile`` the rotary embedding is
plain functional code and ``F.rms_norm`` is decomposed, so the compiler fuses both on its own and the swap changes
nothing. The classes are swapped on the built model's modules (``__class__``), so parameter names, state dicts and
checkpoints are unchanged.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

from . import ModelConverter


def _rotate_halves(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, transpose: bool = False) -> torch.Tensor:
    """Hugging Face's ``x * cos + rotate_half(x) * sin``, ``[x1 c1 - x2 s1, x2 c2 + x1 s2]`` for ``x = [x1, x2]``
    split on the last dimension, in four half-size kernels; ``transpose``: the rotation's transpose (its backward),
    ``[x1 c1 + x2 s2, x2 c2 - x1 s1]`` (the halves of cos/sin are not assumed equal).
    """
    x1, x2 = x.chunk(2, dim=-1)
    c1, c2 = cos.chunk(2, dim=-1)
    s1, s2 = sin.chunk(2, dim=-1)
    sign = 1.0
    if transpose:
        s1, s2, sign = s2, s1, -1.0
    out = torch.empty_like(x)
    o1, o2 = out.chunk(2, dim=-1)
    torch.mul(x1, c1, out=o1)
    o1.addcmul_(x2, s1, value=-sign)
    torch.mul(x2, c2, out=o2)
    o2.addcmul_(x1, s2, value=sign)
    return out


class _Rotary(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(cos, sin)
        return _rotate_halves(x, cos, sin)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        cos, sin = ctx.saved_tensors
        return _rotate_halves(grad, cos, sin, transpose=True), None, None


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding of ``x`` ``[batch, seq, heads, head_dim]`` with ``cos``/``sin`` ``[batch, seq, head_dim]``.

    Equal to Hugging Face's ``apply_rotary_pos_emb`` on the transposed layout.
    """
    cos, sin = cos.unsqueeze(2), sin.unsqueeze(2)
    if torch.compiler.is_compiling() or cos.dtype != x.dtype or cos.requires_grad or sin.requires_grad:
        # The compiler fuses this itself; mixed dtypes (autocast) keep Hugging Face's type promotion.
        x1, x2 = x.chunk(2, dim=-1)
        return x * cos + torch.cat((-x2, x1), dim=-1) * sin
    return _Rotary.apply(x, cos, sin)


def __getattr__(name: str) -> type:
    """``fused_kernels.FusedRMSNorm`` / ``fused_kernels.RopeAttention``, built on first use (transformers is imported then),
    so that models holding them pickle and unpickle by name."""
    classes = dict(zip(("FusedRMSNorm", "RopeAttention"), _rope_attention_classes(), strict=True))
    if name in classes:
        return classes[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@functools.cache
def _rope_attention_classes() -> tuple[type, type]:
    from transformers.models.llama.modeling_llama import LlamaAttention, LlamaRMSNorm

    class FusedRMSNorm(LlamaRMSNorm):
        """``LlamaRMSNorm`` through ``F.rms_norm`` (one fused CUDA kernel each way)."""

        def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
            if self.weight.dtype != hidden_states.dtype:  # fp32 weights under autocast: Hugging Face's promotion
                return self.weight * F.rms_norm(hidden_states.float(), self.weight.shape, eps=self.variance_epsilon).to(
                    hidden_states.dtype
                )
            return F.rms_norm(hidden_states, self.weight.shape, self.weight, self.variance_epsilon)

    class RopeAttention(LlamaAttention):
        """``LlamaAttention`` for training (no KV cache) with the rotary embedding on the projections' own layout."""

        def forward(
            self,
            hidden_states: torch.Tensor,
            position_embeddings: Any = None,
            attention_mask: Any = None,
            *args: Any,
            **kwargs: Any,
        ) -> Any:
            if args or kwargs.get("cache") is not None or kwargs.get("past_key_values") is not None:
                return super().forward(hidden_states, position_embeddings, attention_mask, *args, **kwargs)
            from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

            kwargs.pop("cache", None)
            kwargs.pop("past_key_values", None)
            b, s = hidden_states.shape[:2]
            q = self.q_proj(hidden_states).view(b, s, -1, self.head_dim)
            k = self.k_proj(hidden_states).view(b, s, -1, self.head_dim)
            v = self.v_proj(hidden_states).view(b, s, -1, self.head_dim)
            cos, sin = position_embeddings
            q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
            attend = ALL_ATTENTION_FUNCTIONS[self.config._attn_implementation]
            out, weights = attend(
                self,
                q.transpose(1, 2),
                k.transpose(1, 2),
                v.transpose(1, 2),
                attention_mask,
                dropout=0.0 if not self.training else self.attention_dropout,
                scaling=self.scaling,
                **kwargs,
            )
            return self.o_proj(out.reshape(b, s, -1).contiguous()), weights

    for cls in (FusedRMSNorm, RopeAttention):
        cls.__module__, cls.__qualname__ = __name__, cls.__name__  # found by pickle as fused_kernels.<name>
    return FusedRMSNorm, RopeAttention


def use_fused_kernels(lm: nn.Module) -> int:
    """Swap the fused RMSNorm and rotary attention into a ``LlamaForCausalLM``'s modules; returns how many were swapped.

    The attention is swapped only when it goes through an attention function (SDPA or the
    trainer's): Hugging Face's eager attention stays as it is.
    """
    from transformers.models.llama.modeling_llama import LlamaAttention, LlamaRMSNorm

    norm_cls, attn_cls = _rope_attention_classes()
    swap_attention = getattr(lm.config, "_attn_implementation", "eager") != "eager"
    swapped = 0
    for module in lm.modules():
        if type(module) is LlamaRMSNorm:
            module.__class__ = norm_cls
            swapped += 1
        elif type(module) is LlamaAttention and swap_attention:
            module.__class__ = attn_cls
            swapped += 1
    return swapped


class FusedKernels(ModelConverter):
    """``model.fused_kernels``: swaps the fused RMSNorm and rotary attention into the model (module docstring)."""

    name = "fused_kernels"
    stage = "build"

    def convert(self, model: nn.Module) -> None:
        self.swapped = use_fused_kernels(model.lm)

    def summary(self) -> dict[str, int]:
        return {"fused_kernel_modules": self.swapped}

"""The model: a Hugging Face ``LlamaForCausalLM`` inside a wrapper that computes its own loss.

``CausalLMWithLoss`` runs the decoder to hidden states and computes the loss with
a chunked lm_head + cross-entropy, checkpointing each chunk, so the full
``[batch, seq, vocab]`` logits (2 GiB in fp32 for one 4096-token Llama-3 sequence)
never exist: only one chunk's logits live at a time, in forward and in backward.
The wrapper is the FSDP root, so the root's hooks gather the embeddings, final
norm and lm_head around its forward.
"""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from .config import ModelConfig
from .errors import ConfigError
from .presets import PRESETS

IGNORE_INDEX = -100
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def build_hf_config(cfg: ModelConfig) -> Any:
    """The ``LlamaConfig`` of ``model.name_or_path`` when set, else of ``model.preset``."""
    from transformers import AutoConfig, LlamaConfig

    if cfg.name_or_path:
        hf = AutoConfig.from_pretrained(cfg.name_or_path, token=os.environ.get("HF_TOKEN"))
        if hf.model_type != "llama":
            raise ConfigError(f"--model.name_or_path: {cfg.name_or_path} is a {hf.model_type!r} model; this trainer trains Llama models")
        hf._attn_implementation = cfg.attn_implementation
    else:
        hf = LlamaConfig(**PRESETS[cfg.preset](), attn_implementation=cfg.attn_implementation)
    hf.use_cache = False
    return hf


def _chunk_loss(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    logits = F.linear(hidden, weight)
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()  # cross-entropy in fp32 for this chunk only
    return F.cross_entropy(logits, labels, ignore_index=IGNORE_INDEX, reduction="sum")


def chunked_cross_entropy(
    hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, chunk_tokens: int, loss_fn: Any = _chunk_loss
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sum of token losses and count of non-ignored labels, one checkpointed chunk of ``chunk_tokens`` at a time."""
    h = hidden.reshape(-1, hidden.shape[-1])
    y = labels.reshape(-1)
    parts = []
    for h_chunk, y_chunk in zip(h.split(chunk_tokens), y.split(chunk_tokens)):
        if torch.is_grad_enabled():
            parts.append(checkpoint(loss_fn, h_chunk, weight, y_chunk, use_reentrant=False))
        else:
            parts.append(loss_fn(h_chunk, weight, y_chunk))
    return torch.stack(parts).sum(), (y != IGNORE_INDEX).sum()


class CausalLMWithLoss(nn.Module):
    """``forward(input_ids, labels) -> (loss_sum, num_tokens)``; ``self.lm`` is the untouched HF model."""

    def __init__(self, lm: nn.Module, loss_chunk_tokens: int, compile_loss: bool = False):
        super().__init__()
        self.lm = lm
        self.loss_chunk_tokens = loss_chunk_tokens
        self._loss_fn = torch.compile(_chunk_loss) if compile_loss else _chunk_loss

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        hidden = self.lm.model(input_ids=input_ids, use_cache=False).last_hidden_state
        return chunked_cross_entropy(hidden, self.lm.lm_head.weight, labels, self.loss_chunk_tokens, self._loss_fn)


def count_params(lm: nn.Module) -> tuple[int, int]:
    """(all parameters, input-embedding parameters), counted on the unsharded (meta or real) model."""
    total = sum(p.numel() for p in lm.parameters())
    return total, lm.get_input_embeddings().weight.numel()


def meta_model(hf_config: Any) -> nn.Module:
    """``LlamaForCausalLM`` with no storage: shapes only, nothing allocated."""
    from transformers import LlamaForCausalLM

    with torch.device("meta"):
        return LlamaForCausalLM(hf_config)


@torch.no_grad()
def init_module_(module: nn.Module, std: float, generator: torch.Generator | None = None) -> None:
    """Llama initialisation of one module's own parameters: normal(0, std) for Linear/Embedding, ones for RMSNorm.

    Works on plain tensors and on FSDP2's DTensor shards; draws from ``generator``
    (a generator on the parameters' device), or from torch's global one when None.
    """
    if isinstance(module, (nn.Linear, nn.Embedding)):
        module.weight.normal_(mean=0.0, std=std, generator=generator)
        if getattr(module, "bias", None) is not None:
            module.bias.zero_()
    elif type(module).__name__.endswith("RMSNorm"):
        module.weight.fill_(1.0)


def init_weights_(model: nn.Module, std: float, seed: int) -> None:
    """Initialise every parameter of ``model`` in module order from ``seed``, leaving torch's global generators as they were.

    Plain tensors draw from a private ``torch.Generator`` (same numbers as
    ``torch.manual_seed(seed)`` would give). FSDP2's DTensor shards keep drawing
    through DTensor's own RNG handling, inside ``fork_rng`` so that the global state
    (``runtime.seed``'s) is restored afterwards.
    """
    from torch.distributed.tensor import DTensor

    params = list(model.parameters())
    if not params:
        return
    if any(isinstance(p, DTensor) for p in params):
        cuda = sorted({p.device for p in params if p.device.type == "cuda"}, key=str)
        with torch.random.fork_rng(devices=cuda):
            torch.manual_seed(seed)
            for module in model.modules():
                init_module_(module, std)
        return
    generator = torch.Generator(device=params[0].device).manual_seed(seed)
    for module in model.modules():
        init_module_(module, std, generator)


@torch.no_grad()
def reset_rotary_(model: nn.Module, device: torch.device | str) -> None:
    """Recompute rotary-embedding buffers (non-persistent, so ``to_empty`` and state dicts leave them garbage)."""
    for module in model.modules():
        if hasattr(module, "inv_freq") and hasattr(module, "config") and "Rotary" in type(module).__name__:
            with torch.device(device):
                fresh = type(module)(module.config)
            for name, buf in fresh.named_buffers(recurse=False):
                module._buffers[name] = buf
            if hasattr(fresh, "attention_scaling"):
                module.attention_scaling = fresh.attention_scaling


def load_pretrained_state_dict(name_or_path: str) -> dict[str, torch.Tensor]:
    """The full fp32 state dict of a HF checkpoint on CPU, keyed like ``CausalLMWithLoss`` (``lm.`` prefix)."""
    from transformers import LlamaForCausalLM

    lm = LlamaForCausalLM.from_pretrained(name_or_path, dtype=torch.float32, token=os.environ.get("HF_TOKEN"))
    return {f"lm.{k}": v for k, v in lm.state_dict().items()}

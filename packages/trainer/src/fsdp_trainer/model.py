"""The model: a Hugging Face ``LlamaForCausalLM`` inside a wrapper that computes its own loss.

``CausalLMWithLoss`` runs the decoder to hidden states and computes the loss with
a chunked lm_head + cross-entropy, so the full ``[batch, seq, vocab]`` logits
(2 GiB in fp32 for one 4096-token Llama-3 sequence) never exist: only one chunk's
logits live at a time. Two implementations (``train.fused_loss``):

- fused (default): ``LinearCrossEntropy`` computes each chunk's loss *and* its
  gradients for the hidden states and the lm_head weight in the forward, keeps
  those gradients, and its backward only scales them. No logits are kept and the
  lm_head matmul is not recomputed (a 2% saving of the step's FLOPs for
  Llama-3's 128k vocabulary).
- chunked: each chunk under activation checkpointing; its backward recomputes the
  chunk's logits. Holds no lm_head-sized gradient between forward and backward.

The loss lives on the lm_head itself (``LossHead``, an ``nn.Linear`` with a ``loss``
method), so under FSDP2 the lm_head can be its own unit: its all-gather is separate
from the embeddings', and its gradient is reduce-scattered as soon as the loss's
backward has run, overlapping the last decoder block's backward instead of waiting
for the root at the very end (see ``parallelize.apply_fsdp2``).
"""

from __future__ import annotations

import functools
import os
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from .config import ModelConfig
from .errors import ConfigError
from .presets import PRESETS
from .storage import is_s3, s3_model_files, s3_safetensors

IGNORE_INDEX = -100
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def build_hf_config(cfg: ModelConfig) -> Any:
    """The ``LlamaConfig`` of ``model.name_or_path`` when set, else of ``model.preset``."""
    from transformers import AutoConfig, LlamaConfig

    if cfg.name_or_path:
        source = cfg.name_or_path
        if is_s3(source):  # the small files only; the weights are streamed by load_pretrained_state_dict
            source = s3_model_files(source)
        hf = AutoConfig.from_pretrained(source, token=os.environ.get("HF_TOKEN"))
        if hf.model_type != "llama":
            raise ConfigError(
                f"--model.name_or_path: {cfg.name_or_path} is a {hf.model_type!r} model; this trainer trains Llama models"
            )
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
    for h_chunk, y_chunk in zip(h.split(chunk_tokens), y.split(chunk_tokens), strict=True):
        if torch.is_grad_enabled():
            parts.append(checkpoint(loss_fn, h_chunk, weight, y_chunk, use_reentrant=False))
        else:
            parts.append(loss_fn(h_chunk, weight, y_chunk))
    return torch.stack(parts).sum(), (y != IGNORE_INDEX).sum()


def _chunk_loss_and_grads(
    hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One chunk: (sum of token losses, d loss/d hidden, d loss/d logits), the gradients in the inputs' dtype
    (``LinearCrossEntropy`` makes d loss/d weight from the last).

    d loss/d logits = softmax(logits) - onehot(label) on counted rows, 0 on ignored ones;
    computed in fp32 from fp32 logits, then cast, as autograd does for ``_chunk_loss``.
    """
    logits = F.linear(hidden, weight)
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()
    valid = labels != IGNORE_INDEX
    target = torch.where(valid, labels, 0).unsqueeze(1)
    lse = torch.logsumexp(logits, dim=-1, keepdim=True)
    loss = ((lse - logits.gather(1, target)).squeeze(1) * valid).sum()
    grad_logits = logits.sub_(lse).exp_()  # softmax, in the logits' own buffer (eager: no second fp32 copy)
    grad_logits.scatter_add_(1, target, torch.full_like(lse, -1.0))
    grad_logits = grad_logits.mul_(valid.unsqueeze(1)).to(hidden.dtype)
    return loss, grad_logits @ weight, grad_logits


@functools.cache
def _fp32_output_matmul(device: torch.device) -> bool:
    """Whether ``torch.mm`` / ``torch.addmm`` take ``out_dtype=torch.float32`` for 16-bit inputs on ``device``
    (CUDA, torch 2.8+): the weight gradient then adds up in the matmul's own fp32 output."""
    try:
        a = torch.zeros(2, 2, dtype=torch.bfloat16, device=device)
        torch.addmm(torch.mm(a, a, out_dtype=torch.float32), a, a, out_dtype=torch.float32)
        return True
    except (RuntimeError, TypeError, NotImplementedError):
        return False


class LinearCrossEntropy(torch.autograd.Function):
    """``sum_i CE(hidden_i @ weight.T, labels_i)`` over ``[tokens, dim]`` hidden states, gradients made in the forward.

    The forward walks ``chunk_tokens`` rows at a time: logits, loss and both gradients for
    the chunk, then drops the logits. The weight gradient is summed in fp32 across chunks: on CUDA
    by the matmuls themselves, each adding its fp32 result into the sum (``addmm`` with ``out_dtype``);
    elsewhere each chunk's gradient is made in the inputs' dtype and added. Llama-3.1-8B's lm_head
    at micro batch 3 (three chunks of 4,096 tokens, an H200): 20 ms for the three matmuls and their
    sum, against 43 ms with a bf16 result per chunk, cast and added
    (``bench/reports/2026-11-30-llama3.1-8b-h200-fused-loss.md``).
    Backward multiplies the kept gradients by the incoming scalar gradient.
    """

    @staticmethod
    def forward(
        ctx: Any, hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, chunk_tokens: int, chunk_fn: Any
    ) -> torch.Tensor:
        grad_hidden = torch.empty_like(hidden)
        grad_weight = None
        acc_dtype = torch.promote_types(hidden.dtype, torch.float32)  # sums in fp32 at least
        loss = torch.zeros((), dtype=acc_dtype, device=hidden.device)
        one_chunk = hidden.shape[0] <= chunk_tokens
        add_in_matmul = not one_chunk and acc_dtype != hidden.dtype and _fp32_output_matmul(hidden.device)
        for start in range(0, hidden.shape[0], chunk_tokens):
            rows = slice(start, start + chunk_tokens)
            chunk_loss, grad_hidden[rows], grad_logits = chunk_fn(hidden[rows], weight, labels[rows])
            loss += chunk_loss
            if add_in_matmul:
                if grad_weight is None:
                    grad_weight = torch.mm(grad_logits.t(), hidden[rows], out_dtype=acc_dtype)
                else:
                    torch.addmm(grad_weight, grad_logits.t(), hidden[rows], out_dtype=acc_dtype, out=grad_weight)
            elif grad_weight is None:
                grad_weight = grad_logits.t() @ hidden[rows]
                grad_weight = grad_weight if one_chunk else grad_weight.to(acc_dtype)
            else:
                grad_weight += grad_logits.t() @ hidden[rows]
            del grad_logits  # not held while the next chunk makes its logits
        assert grad_weight is not None, "LinearCrossEntropy needs at least one token"
        ctx.save_for_backward(grad_hidden, grad_weight.to(weight.dtype))
        return loss

    @staticmethod
    def backward(ctx: Any, grad_loss: torch.Tensor) -> tuple[Any, ...]:
        grad_hidden, grad_weight = ctx.saved_tensors
        return grad_hidden * grad_loss, grad_weight * grad_loss, None, None, None


def linear_cross_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    labels: torch.Tensor,
    chunk_tokens: int,
    chunk_fn: Any = _chunk_loss_and_grads,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Same result as ``chunked_cross_entropy`` (sum of token losses, count of counted labels) through ``LinearCrossEntropy``."""
    h = hidden.reshape(-1, hidden.shape[-1])
    y = labels.reshape(-1)
    return LinearCrossEntropy.apply(h, weight, y, chunk_tokens, chunk_fn), (y != IGNORE_INDEX).sum()


class LossHead(nn.Linear):
    """The lm_head with a ``loss(hidden, labels) -> (loss_sum, num_tokens)`` method; ``forward`` stays the plain projection.

    FSDP2 treats ``loss`` as a forward method (``register_fsdp_forward_method``), so its
    parameter is gathered around it like around a forward.
    """

    def configure(self, chunk_tokens: int, compile_loss: bool, fused: bool) -> LossHead:
        self.chunk_tokens, self.fused = chunk_tokens, fused
        self._loss_fn = torch.compile(_chunk_loss) if compile_loss else _chunk_loss
        self._fused_fn = torch.compile(_chunk_loss_and_grads) if compile_loss else _chunk_loss_and_grads
        return self

    @classmethod
    def replace(cls, linear: nn.Linear) -> LossHead:
        """A LossHead sharing ``linear``'s weight (meta or real), to put in its place."""
        head = cls(linear.in_features, linear.out_features, bias=False, device="meta")
        head.weight = linear.weight
        return head

    def loss(self, hidden: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        weight = self.weight
        # fp16 keeps the checkpointed loss: the fused one casts its gradients to fp16 before
        # backward brings the loss scale, and softmax terms of ~1/vocab would underflow.
        # (parallel.api none runs fp16 under autocast, with fp32 hidden states.)
        device = hidden.device.type
        fp16 = hidden.dtype == torch.float16 or (
            torch.is_autocast_enabled(device) and torch.get_autocast_dtype(device) == torch.float16
        )
        fused = self.fused and not fp16
        if fused and torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad):
            return linear_cross_entropy(hidden, weight, labels, self.chunk_tokens, self._fused_fn)
        return chunked_cross_entropy(hidden, weight, labels, self.chunk_tokens, self._loss_fn)


class CausalLMWithLoss(nn.Module):
    """``forward(input_ids, labels) -> (loss_sum, num_tokens)``; ``self.lm`` is the HF model, its lm_head a ``LossHead``."""

    def __init__(self, lm: nn.Module, loss_chunk_tokens: int, compile_loss: bool = False, fused_loss: bool = True):
        super().__init__()
        if lm.lm_head.bias is not None:
            raise ValueError("CausalLMWithLoss: an lm_head with a bias is not supported")
        if not isinstance(lm.lm_head, LossHead):
            lm.lm_head = LossHead.replace(lm.lm_head)
        lm.lm_head.configure(loss_chunk_tokens, compile_loss, fused_loss)
        self.lm = lm

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        hidden = self.lm.model(input_ids=input_ids, use_cache=False).last_hidden_state
        return self.lm.lm_head.loss(hidden, labels)


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
    from transformers import AutoConfig, LlamaForCausalLM

    if is_s3(name_or_path):  # read from S3 into memory: no copy of the weights on local disk
        hf = AutoConfig.from_pretrained(s3_model_files(name_or_path))
        loaded = s3_safetensors(name_or_path)
        expected = list(meta_model(hf).state_dict())
        if getattr(hf, "tie_word_embeddings", False) and "lm_head.weight" not in loaded:
            loaded["lm_head.weight"] = loaded.get("model.embed_tokens.weight")
        missing = [k for k in expected if loaded.get(k) is None]
        if missing:
            raise ConfigError(
                f"--model.name_or_path: {name_or_path} lacks {len(missing)} weights of its config's model "
                f"(first: {missing[0]}); expected a Llama save_pretrained directory"
            )
        return {f"lm.{k}": loaded[k].to(torch.float32) for k in expected}
    lm = LlamaForCausalLM.from_pretrained(name_or_path, dtype=torch.float32, token=os.environ.get("HF_TOKEN"))
    return {f"lm.{k}": v for k, v in lm.state_dict().items()}

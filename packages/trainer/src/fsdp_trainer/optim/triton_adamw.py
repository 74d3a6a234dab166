"""AdamW as one Triton kernel per parameter shard: one read and one write of each state, at memory speed.

``torch.optim.AdamW(fused=True)`` walks the parameters through ``multi_tensor_apply``: chunks of 64K elements, at most
a few hundred blocks per launch, so a shard of tens of millions of elements takes hundreds of short launches. Here
every shard is one launch over a grid that covers it. Over one rank's shards of Llama-3.1-8B (2 ranks) on an H200 it
takes 28 ms where torch's fused kernel takes 38 ms, and the 8B trains 1.2% faster over 2 H200s
(``bench/reports/2026-11-30-llama3.1-8b-h200-triton-adamw.md``, ``bench/adamw_step.py``). ``train.adamw auto`` uses
it on GPUs, except under FP8, where torch's fused kernel measured 1% faster.

``TritonAdamW`` is ``torch.optim.AdamW`` with a different ``step``: same hyperparameters, same per-parameter state
(``step`` as a CPU tensor, ``exp_avg``, ``exp_avg_sq``), so checkpoints move between the two. FSDP2's parameters are
DTensors: the kernel runs on their local shards.

With ``master_weights=True`` the parameters are bf16 and the optimizer keeps their fp32 values
(``precision.master_weights optimizer``: FSDP2 then all-gathers the bf16 parameters without a cast, and its gradients
stay bf16, see ``fsdp_trainer/converters/master_weights.py``). It does not keep a second fp32 copy: a master is the
parameter plus a 16-bit remainder, the ``master_low`` state (int16), ``bits(master) = bits(parameter) << 16 +
master_low``. The parameter is the master rounded to nearest even, exactly torch's cast, so the remainder lies in
[-2**15, 2**15]: 2**16 + 1 values, one more than 16 bits hold. The one left out, 2**15 (a master exactly halfway
between two bf16 values that rounds down to the even one), is stored as 2**15 - 1. That master moves by one unit in
its last place (at most 2**-23 of a normal value: twice the rounding of the update's own fp32 arithmetic), about once
in 131,072 updates; every other master is kept bit for bit. The remainder costs 2 bytes per parameter where an fp32
copy costs 4: 7.5 GiB less per GPU for Llama-3.1-8B over 2 GPUs. The kernel reads the gradient, the parameter and the
remainder, and writes the parameter and the remainder, in one pass. ``master_of`` / ``set_master`` join and split
masters for checkpoints and exports.

Triton is imported on first use. The kernel runs on CUDA tensors, and on CPU tensors under ``TRITON_INTERPRET=1``
(how the tests check it against ``torch.optim.AdamW``).
"""

from __future__ import annotations

import functools
import math
from typing import Any

import torch

BLOCK = 2048  # elements per program: 8 per thread at 8 warps, two 16-byte loads of each fp32 stream
NUM_WARPS = 8


@functools.cache
def _kernel() -> Any:
    import triton
    import triton.language as tl

    @triton.jit
    def adamw_kernel(
        param_ptr,
        low_ptr,
        grad_ptr,
        exp_avg_ptr,
        exp_avg_sq_ptr,
        n_elements,
        beta1,
        beta2,
        eps,
        decay_factor,
        step_size,
        inv_sqrt_bias_correction2,
        HAS_MASTER: tl.constexpr,
        BLOCK: tl.constexpr,
    ):
        offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n_elements
        grad = tl.load(grad_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
        if HAS_MASTER:  # the fp32 master: the bf16 parameter's bits as its upper half, plus the int16 remainder
            high = tl.load(param_ptr + offsets, mask=mask, other=0.0).to(tl.uint16, bitcast=True).to(tl.uint32)
            low = tl.load(low_ptr + offsets, mask=mask, other=0).to(tl.int32).to(tl.uint32, bitcast=True)
            param = ((high << 16) + low).to(tl.float32, bitcast=True)
        else:
            param = tl.load(param_ptr + offsets, mask=mask, other=0.0)
        exp_avg = tl.load(exp_avg_ptr + offsets, mask=mask, other=0.0)
        exp_avg_sq = tl.load(exp_avg_sq_ptr + offsets, mask=mask, other=0.0)
        # torch's order: decoupled weight decay, then exp_avg.lerp_(grad, 1 - beta1), then the second moment.
        exp_avg = exp_avg + (1.0 - beta1) * (grad - exp_avg)
        exp_avg_sq = beta2 * exp_avg_sq + (1.0 - beta2) * grad * grad
        denom = tl.sqrt(exp_avg_sq) * inv_sqrt_bias_correction2 + eps
        param = param * decay_factor - step_size * (exp_avg / denom)
        if HAS_MASTER:
            # Round to nearest even by hand, as torch's .to(bfloat16) does: the same bits on GPUs and in Triton's
            # CPU interpreter (whose own cast truncates); a NaN stays a NaN. The remainder is what the rounding left
            # out, in [-2**15, 2**15]; the one value that does not fit in 16 bits, 2**15 (halfway, rounded down to
            # even), is stored as 2**15 - 1: one unit in the master's last place (module docstring).
            bits = param.to(tl.uint32, bitcast=True)
            upper = tl.where(param != param, 0x7FC0, (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16)
            tl.store(param_ptr + offsets, upper.to(tl.uint16).to(tl.bfloat16, bitcast=True), mask=mask)
            remainder = tl.where(param != param, 0, (bits - (upper << 16)).to(tl.int32, bitcast=True))
            tl.store(low_ptr + offsets, tl.minimum(remainder, 0x7FFF).to(tl.int16), mask=mask)
        else:
            tl.store(param_ptr + offsets, param.to(param_ptr.dtype.element_ty), mask=mask)
        tl.store(exp_avg_ptr + offsets, exp_avg, mask=mask)
        tl.store(exp_avg_sq_ptr + offsets, exp_avg_sq, mask=mask)

    return adamw_kernel


def available() -> bool:
    """Whether Triton can be imported (the kernel also needs CUDA tensors, or ``TRITON_INTERPRET=1``)."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def _local(t: torch.Tensor) -> torch.Tensor:
    """The plain tensor that holds ``t``'s local values (call under ``torch.no_grad``): a DTensor's local shard, then,
    through a wrapper subclass with exactly one inner tensor of its own shape and dtype (torchao's
    float8 weights for FP8 all-gathers: the fp32 weight, beside a precomputed scalar scale), that inner tensor. The
    kernel writes it in place. Anything else is refused."""
    from torch.distributed.tensor import DTensor

    if isinstance(t, DTensor):
        t = t.to_local()  # without grad mode: the local tensor itself, no autograd wrapper
    while type(t) not in (torch.Tensor, torch.nn.Parameter):
        names = t.__tensor_flatten__()[0] if hasattr(t, "__tensor_flatten__") else []
        same = [getattr(t, n) for n in names if getattr(t, n).shape == t.shape and getattr(t, n).dtype == t.dtype]
        inner = same[0] if len(same) == 1 else None
        if inner is None:
            raise RuntimeError(
                f"TritonAdamW: {type(t).__name__} parameters are tensor subclasses the kernel cannot "
                "read; use --train.adamw fused"
            )
        t = inner
    return t


def split_master(master: torch.Tensor, param: torch.Tensor) -> torch.Tensor:
    """Write ``master``'s bf16 rounding (to nearest even, torch's cast) into ``param`` and return the int16 remainder
    that ``join_master`` adds back, one short for a value halfway that rounded down (as the kernel does, see the
    module docstring): plain tensors of one shape, ``master`` fp32 and ``param`` bf16. One int32 temporary."""
    param.copy_(master)
    low = param.view(torch.int16).to(torch.int32)  # sign-extended: the same 32 bits as uint32 arithmetic
    low.bitwise_left_shift_(16)
    torch.sub(master.view(torch.int32), low, out=low)
    return low.clamp_(max=0x7FFF).to(torch.int16)


def join_master(param: torch.Tensor, low: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """The fp32 master held as ``param`` (bf16, its upper half) and ``low`` (int16 remainder), written into ``out``
    (fp32, of their shape) or a new tensor, with no other temporary."""
    bits = (
        out.view(torch.int32) if out is not None else torch.empty(param.shape, dtype=torch.int32, device=param.device)
    )
    bits.copy_(param.view(torch.int16))
    bits.bitwise_left_shift_(16)
    bits.add_(low)
    return bits.view(torch.float32)


class TritonAdamW(torch.optim.AdamW):
    """``torch.optim.AdamW`` whose ``step`` runs one Triton kernel per parameter (see the module docstring)."""

    def __init__(
        self,
        params: Any,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        master_weights: bool = False,
    ) -> None:
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, foreach=False, fused=False)
        self.master_weights = master_weights
        self._seeded: dict[torch.Tensor, torch.Tensor] = {}  # remainders of seeded masters, until the first step

    def seed_masters(self, masters: dict[torch.Tensor, torch.Tensor]) -> None:
        """fp32 values to start each parameter's master from (parameter -> tensor of its shape), instead of the bf16
        parameter itself: the weights as initialised or loaded before the parameters were cast. Each is split into
        the parameter and its remainder now, so the fp32 tensors can be freed. The remainders join the optimizer's
        state at the first step: until then the state stays empty, as torch's state-dict helpers expect of an
        optimizer that has not stepped (they step it once at lr 0 to create the state they load into). Until then
        the parameters must change only through ``set_master`` (how a checkpoint's masters replace the seeds,
        ``converters.master_weights.attach_masters``) or ``load_state_dict``. Parameters the optimizer does not step are left out."""
        owned = self._owned()
        for p, master in masters.items():
            if id(p) in owned:
                self._seeded[p] = self._split(p, master)

    def _owned(self) -> set[int]:
        return {id(p) for group in self.param_groups for p in group["params"]}

    @torch.no_grad()
    def master_of(self, p: torch.Tensor) -> torch.Tensor | None:
        """``p``'s fp32 master as a new tensor (a DTensor like ``p`` when ``p`` is one), or None before it has one."""
        low = self.state.get(p, {}).get("master_low", self._seeded.get(p)) if self.master_weights else None
        if low is None:
            return None
        out = torch.empty_like(p, dtype=torch.float32)
        join_master(_local(p.detach()), _local(low), out=_local(out))
        return out

    def set_master(self, p: torch.Tensor, master: torch.Tensor) -> None:
        """Make ``master`` (fp32, ``p``'s shape and placement) the master of ``p``: its rounding into ``p``, the rest
        into the ``master_low`` state."""
        if not self.master_weights:
            raise RuntimeError("TritonAdamW: set_master needs master_weights=True")
        if id(p) not in self._owned():
            raise ValueError("TritonAdamW: set_master got a parameter that is in none of the optimizer's groups")
        self._seeded.pop(p, None)
        self.state[p]["master_low"] = self._split(p, master)

    @staticmethod
    @torch.no_grad()
    def _split(p: torch.Tensor, master: torch.Tensor) -> torch.Tensor:
        low = torch.empty_like(p, dtype=torch.int16)
        _local(low).copy_(split_master(_local(master.detach()).to(torch.float32), _local(p.detach())))
        return low

    def _state_of(self, p: torch.Tensor) -> dict[str, torch.Tensor]:
        state = self.state[p]
        if "step" not in state:
            state["step"] = torch.tensor(0.0, dtype=torch.float32)
            state["exp_avg"] = torch.zeros_like(p, dtype=torch.float32, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(p, dtype=torch.float32, memory_format=torch.preserve_format)
        elif state["step"].device.type != "cpu":  # loaded from a checkpoint of torch's fused AdamW (step on the device)
            state["step"] = state["step"].detach().to("cpu", torch.float32)
        if self.master_weights and "master_low" not in state:
            seeded = self._seeded.pop(p, None)  # else neither seeded nor loaded: the master is the parameter's value
            state["master_low"] = seeded if seeded is not None else torch.zeros_like(p, dtype=torch.int16)
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """torch's ``load_state_dict``, except that the fp32 state stays fp32 beside bf16 parameters.

        ``Optimizer.load_state_dict`` casts every state tensor to its parameter's dtype, which with master weights
        would round ``exp_avg`` and ``exp_avg_sq`` to bf16 and turn the int16 remainders into bf16 numbers. A
        ``master`` entry (fp32, as other optimizers keep masters) is split into the parameter and its remainder.
        Seeds not yet stepped are dropped: the loaded state replaces them.
        """
        self._seeded.clear()
        super().load_state_dict(state_dict)
        if not self.master_weights:
            return
        saved_ids = [i for g in state_dict["param_groups"] for i in g["params"]]
        params = [p for g in self.param_groups for p in g["params"]]
        for saved_id, p in zip(saved_ids, params, strict=True):
            for key, value in state_dict["state"].get(saved_id, {}).items():
                if not isinstance(value, torch.Tensor) or key == "step":
                    continue
                if key == "master_low":
                    self.state[p][key] = value.to(device=p.device, dtype=torch.int16)
                elif key == "master":
                    del self.state[p][key]
                    self.set_master(p, value.to(device=p.device, dtype=torch.float32))
                elif value.is_floating_point():
                    self.state[p][key] = value.to(device=p.device, dtype=torch.float32)

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        kernel = _kernel()
        for group in self.param_groups:
            if group.get("amsgrad") or group.get("maximize"):
                raise ValueError("TritonAdamW: amsgrad and maximize are not supported; use torch.optim.AdamW")
            lr = float(group["lr"])
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self._state_of(p)
                state["step"] += 1
                step = float(state["step"])
                low = _local(state["master_low"]) if self.master_weights else None
                tensors = [_local(t) for t in (p, p.grad, state["exp_avg"], state["exp_avg_sq"])]
                param, grad, exp_avg, exp_avg_sq = tensors
                if low is not None:
                    tensors.append(low)
                if not all(t.is_contiguous() and t.numel() == param.numel() for t in tensors):
                    raise RuntimeError(
                        "TritonAdamW: a parameter, its gradient and its state must be contiguous and "
                        "of one size; use --train.adamw fused"
                    )
                if low is not None and (param.dtype != torch.bfloat16 or low.dtype != torch.int16):
                    raise RuntimeError(
                        f"TritonAdamW: master weights need bf16 parameters and int16 remainders, got "
                        f"{param.dtype} and {low.dtype}; use --precision.master_weights params"
                    )
                if any(t.dtype != torch.float32 for t in (exp_avg, exp_avg_sq)) or (
                    low is None and param.dtype != torch.float32
                ):
                    raise RuntimeError(
                        f"TritonAdamW: parameters and state must be fp32, got {param.dtype}; "
                        "use --train.adamw fused or --precision.master_weights optimizer"
                    )
                n = param.numel()
                if n == 0:
                    continue
                bias_correction1 = 1.0 - beta1**step
                bias_correction2 = 1.0 - beta2**step
                kernel[(triton_cdiv(n, BLOCK),)](
                    param,
                    low if low is not None else param,
                    grad,
                    exp_avg,
                    exp_avg_sq,
                    n,
                    beta1,
                    beta2,
                    group["eps"],
                    1.0 - lr * group["weight_decay"],
                    lr / bias_correction1,
                    1.0 / math.sqrt(bias_correction2),
                    HAS_MASTER=low is not None,
                    BLOCK=BLOCK,
                    num_warps=NUM_WARPS,
                )
        return loss


def triton_cdiv(n: int, block: int) -> int:
    return (n + block - 1) // block

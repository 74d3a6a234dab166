"""``precision.master_weights optimizer``: bf16 parameters, with their fp32 values held by the optimizer.

With fp32 parameters (``params``: what auto picks on CPU, under FP8 and with gradient accumulation) FSDP2 makes two
passes over every shard per all-gather: it casts the fp32 shards to bf16 into a temporary, then copies that into the
all-gather buffer. Its reduced bf16 gradients are cast up to fp32 into new tensors, and AdamW reads those. Kept in
bf16, the parameters are copied into the buffer once, and the gradients stay as reduced: Llama-3.1-8B on 2 H200s
trains 1.9% faster, and the memory this saves over whole fp32 copies makes room for a larger micro-batch
(``bench/reports/2026-11-30-llama3.1-8b-h200x2-master-weights.md``). Use it on GPUs (auto does); it needs FSDP2, bf16,
the Triton AdamW and no gradient accumulation.

The fp32 values are not lost: ``TritonAdamW(master_weights=True)`` keeps, beside ``exp_avg`` and ``exp_avg_sq``, a
16-bit ``master_low`` state that, added below the bf16 parameter's bits, gives each fp32 master (2 bytes per
parameter where an fp32 copy would take 4; bit for bit but in one rounding case, see
``fsdp_trainer/optim/triton_adamw.py``), and writes the parameter as the master's bf16 rounding in the same kernel.
The forward and backward see exactly what FSDP's cast would have given them, and the update is computed in fp32. What
differs: the gradients that the norm and AdamW read stay bf16. With ``precision.reduce_dtype bf16`` those are the very
values the fp32 copies held; with fp32 reduction the reduced sum is rounded to bf16 once; a clipped step's gradients
are multiplied by the clip factor in bf16 (one rounding, ``optim.clip_grad_norm_``). Gradient accumulation over
micro-batches would add in bf16, which is why it is refused. The weights are drawn or loaded in fp32 and cast after
sharding (``MasterWeights.convert``): the masters start from those values, not from their rounding.

Checkpoints do not change: the model's entries hold the joined fp32 masters (``with_masters``), the optimizer's hold
``exp_avg`` and ``exp_avg_sq`` as always, so a checkpoint moves between ``params`` and ``optimizer`` runs (and world
sizes) without rounding. The Hugging Face export also reads the masters. Joined masters are new tensors, held for the
time of a save or load: 4 bytes per sharded parameter, between steps, when no activations are held.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn

from . import ModelConverter

#: Optimizer states that hold a master (its remainder beside the bf16 parameter); checkpoints keep the joined fp32
#: master in the model's entries instead.
MASTER_STATES = ("master_low", "master")
#: Module attributes that wrappers insert into parameter names; state-dict keys leave them out.
WRAPPER_PREFIXES = ("_orig_mod.", "_checkpoint_wrapped_module.", "_fsdp_wrapped_module.")


def cast_params_keeping_masters_(module: nn.Module, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Cast every floating-point parameter of ``module`` (FSDP2-sharded or not) to ``dtype`` in place; returns fp32
    copies of their values from before the cast, by parameter name, to seed the optimizer's masters with
    (``TritonAdamW.seed_masters``): the weights as drawn or loaded, not their rounding.

    Buffers keep their dtype (the rotary embedding's ``inv_freq`` stays fp32). The cast goes through
    ``Module._apply``, which FSDP2's units follow with a reset of their sharded parameters (what ``model.to(dtype)``
    does); the ``Parameter`` objects stay the same, so tied weights stay tied.
    """
    params = {name: p for name, p in module.named_parameters() if p.is_floating_point() and p.dtype != dtype}
    masters = {name: p.detach().to(torch.float32, copy=True) for name, p in params.items()}
    targets = {id(p) for p in params.values()}
    module._apply(lambda t: t.to(dtype) if id(t) in targets else t)
    return masters


def state_dict_key(name: str) -> str:
    """A ``named_parameters`` name as a state-dict key: without compile, checkpoint and FSDP1 wrapper attributes."""
    for prefix in WRAPPER_PREFIXES:
        name = name.replace(prefix, "")
    return name


def masters_by_key(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    """State-dict key -> the fp32 master of that parameter, joined from the parameter and its remainder
    (``TritonAdamW.master_of``: new tensors, one per parameter, shared by a tied weight's names); empty when the
    optimizer keeps no masters."""
    if not getattr(optimizer, "master_weights", False):
        return {}
    out: dict[str, torch.Tensor] = {}
    joined: dict[int, torch.Tensor | None] = {}
    for name, p in model.named_parameters(remove_duplicate=False):  # every name of a tied weight
        if id(p) not in joined:
            joined[id(p)] = optimizer.master_of(p)
        if joined[id(p)] is not None:
            out[state_dict_key(name)] = joined[id(p)]
    return out


def with_masters(
    model: nn.Module, optimizer: torch.optim.Optimizer, model_sd: dict[str, Any], optim_sd: dict[str, Any]
) -> dict[str, torch.Tensor]:
    """Put the fp32 masters in ``model_sd`` in place of the bf16 parameters, and take them out of ``optim_sd``.

    ``model_sd`` / ``optim_sd`` come from ``get_state_dict`` (keys are state-dict keys; the optimizer's state is
    keyed the same way). Returns the masters by key: after ``dcp.load`` has filled them in place, ``attach_masters``
    gives them back to the optimizer, whose ``load_state_dict`` only sees ``exp_avg`` and ``exp_avg_sq``.
    Nothing happens (and ``{}`` is returned) when the optimizer keeps no masters.
    """
    masters = masters_by_key(model, optimizer)
    if not masters:
        return {}
    missing = sorted(set(masters) - set(model_sd))
    if missing:
        raise RuntimeError(f"master weights: no model state-dict entry for {missing[0]} (and {len(missing) - 1} more)")
    states = optim_sd.get("state", {})
    for key, master in masters.items():
        model_sd[key] = master
        if isinstance(states.get(key), dict):  # a new dict: the optimizer's own state may be this very object
            states[key] = {name: value for name, value in states[key].items() if name not in MASTER_STATES}
    return masters


def attach_masters(model: nn.Module, optimizer: torch.optim.Optimizer, masters: dict[str, torch.Tensor]) -> None:
    """Give loaded masters back to the optimizer's state (after ``set_state_dict`` replaced it)."""
    if not masters:
        return
    for name, p in model.named_parameters():  # a tied weight once
        key = state_dict_key(name)
        if key in masters:
            optimizer.set_master(p, masters[key])


class MasterWeights(ModelConverter):
    """``precision.master_weights`` resolved to ``optimizer`` (``optim.use_master_weights``): casts the sharded
    parameters to bf16 and hands their fp32 values to the optimizer as its masters (module docstring)."""

    name = "master_weights"
    stage = "sharded"

    def convert(self, model: nn.Module) -> None:
        self.masters = cast_params_keeping_masters_(model, torch.bfloat16)

    def attach_optimizer(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        if not getattr(optimizer, "master_weights", False):
            raise RuntimeError(f"master weights: {type(optimizer).__name__} keeps no masters")
        optimizer.seed_masters({p: self.masters[name] for name, p in model.named_parameters() if name in self.masters})
        self.masters = {}  # split into parameters and remainders: the fp32 copies can go

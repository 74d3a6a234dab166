"""``experimental.flat_shards``: each FSDP2 unit's parameter shards in one flat buffer, which its all-gather sends as is.

FSDP2 gathers a unit in place. Before every all-gather it allocates the output and copies each of the unit's shards
into this rank's slice of it (``torch.ops.fsdp.all_gather_copy_in``, one foreach copy per unit). When the
parameters are already in the dtype they are gathered in (bf16 with the fp32 masters in the optimizer, or fp32
runs), that copy only moves the shards to where the collective reads them: on Llama-3.1-8B over 2 H200s it is a
multi-tensor kernel of about 24 ms per 1.1 s step (``bench/reports/2026-11-30-llama3.1-8b-h200x2-step-profile.md``),
running beside the matmuls it overlaps.

Here the shards are moved there once instead:

- ``flatten_shards`` makes the shards of every unit consecutive views of one buffer (from NCCL's symmetric-memory
  pool when the unit's collectives use it, so NCCL may read it directly). The ``Parameter`` objects stay the same;
  only where their local shards live changes. The optimizer, checkpoints and ``state_dict`` see no difference.
- ``install`` registers a copy-in that, when handed exactly such a buffer (every shard of a unit, in order, as
  views of it), passes the buffer itself to the all-gather as its input; the all-gather then runs out of place and
  the collective copies this rank's slice. Any other input (cast parameters, FP8, padded shards, a unit resharded to
  a smaller group) is copied as FSDP2 does it.

The parameters are written between all-gathers only by the optimizer, on the compute stream, and FSDP2's root
makes its all-gather streams wait for that stream before the first all-gather of a step, as it does for its own
copy-in.

Why it is experimental: it replaces FSDP2's private ``fsdp::all_gather_copy_in`` op for the whole process and reads
FSDP2's private parameter-group state, and it gained 0.3% on Llama-3.1-8B over 2 H200s, within run-to-run noise
(``bench/reports/2026-11-30-llama3.1-8b-h200x2-flat-shards.md``). Off by default; the copy it removes ran beside the
matmuls, so its cost to the step was a small share of its 24 ms.
"""

from __future__ import annotations

import logging
import warnings
import weakref
from collections.abc import Callable, Sequence

import torch
import torch.nn as nn

from ..converters import ModelConverter

log = logging.getLogger(__name__)

Allocate = Callable[[int, torch.dtype, torch.device], torch.Tensor]

#: storage address -> the flat buffer of one unit's shards (held by that unit; see ``flatten_shards``).
_BUFFERS: weakref.WeakValueDictionary[int, torch.Tensor] = weakref.WeakValueDictionary()
_LIBRARIES: list[torch.library.Library] = []  # a Library unregisters its kernels when it is collected
#: all-gathers that took a flat buffer as their input, and those whose shards were copied (for the summary)
sent_as_is = 0
copied_in = 0


def _flat_input(inputs: Sequence[torch.Tensor], dtype: torch.dtype, numel: int) -> torch.Tensor | None:
    """The flat buffer that ``inputs`` are the consecutive views of, from first byte to last; else None."""
    if not inputs or inputs[0].dtype != dtype:
        return None
    flat = _BUFFERS.get(inputs[0].untyped_storage().data_ptr())
    if flat is None or flat.dtype != dtype or flat.numel() != numel:
        return None
    address, itemsize = flat.data_ptr(), flat.element_size()
    for t in inputs:
        if t.dtype != dtype or not t.is_contiguous() or t.data_ptr() != address:
            return None
        address += t.numel() * itemsize
    return flat if address == flat.data_ptr() + numel * itemsize else None


def _copy_in(
    all_gather_inputs: list[torch.Tensor],
    all_gather_output: torch.Tensor,
    inp_split_sizes: list[int],
    all_gather_input_numel: int,
    rank: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``fsdp::all_gather_copy_in``: returns (the all-gather's input, its output)."""
    global sent_as_is, copied_in
    flat = _flat_input(all_gather_inputs, all_gather_output.dtype, all_gather_input_numel)
    if flat is not None:
        sent_as_is += 1
        return flat, all_gather_output
    copied_in += 1
    # FSDP2's own: this rank's slice of the output, with every shard copied into it
    all_gather_input = all_gather_output.narrow(0, all_gather_input_numel * rank, all_gather_input_numel)
    with torch.no_grad():
        torch._foreach_copy_(torch.split(all_gather_input, inp_split_sizes), all_gather_inputs)
    return all_gather_input, all_gather_output


#: the op ``_copy_in`` stands in for, as torch 2.11 to 2.13 define it
SCHEMA = (
    "fsdp::all_gather_copy_in(Tensor[] all_gather_inputs, Tensor all_gather_output, SymInt[] inp_split_sizes, "
    "SymInt all_gather_input_numel, SymInt rank) -> (Tensor, Tensor)"
)


def install() -> bool:
    """Register ``_copy_in`` as ``fsdp::all_gather_copy_in`` on CPU and CUDA (once per process); False, and nothing
    registered, where this torch's FSDP2 defines the op otherwise."""
    if _LIBRARIES:
        return True
    from torch.distributed.fsdp._fully_shard import _fsdp_collectives  # noqa: F401  (defines the op)

    op = getattr(torch.ops.fsdp, "all_gather_copy_in", None)
    schema = None if op is None else str(op.default._schema)
    if schema != SCHEMA:
        log.warning(
            "experimental.flat_shards: torch %s's FSDP2 copy-in is not the one known (%s); its shards are copied as usual",
            torch.__version__,
            schema,
        )
        return False
    library = torch.library.Library("fsdp", "IMPL")
    with warnings.catch_warnings():  # "Overriding a previously registered kernel": that is the point
        warnings.simplefilter("ignore")
        for key in ("CPU", "CUDA"):
            library.impl("all_gather_copy_in", _copy_in, key, allow_override=True)
    _LIBRARIES.append(library)
    return True


def _eligible(group: object) -> bool:
    """Whether FSDP2 sends the shards of this unit's parameters as they are: plain tensors on the device, all of one
    dtype which is also the one they are gathered in, and sharded on dim 0 evenly (no rank padded or empty).

    Every test here gives the same answer on every rank (the evenness comes from the full sizes, not from this
    rank's shard): under symmetric memory each buffer is registered by a collective that all ranks must join."""
    from torch.distributed.fsdp._fully_shard._fsdp_param import ShardedState

    fsdp_params = group.fsdp_params  # type: ignore[attr-defined]
    gathered = group.mp_policy.param_dtype  # type: ignore[attr-defined]  (None: as they are)
    dtypes = set()
    for fp in fsdp_params:
        local, data = fp.sharded_param._local_tensor, fp._sharded_param_data
        ranks, rows = fp.mesh_info.shard_mesh_size, fp._orig_size[0] if len(fp._orig_size) else 0
        if (
            fp.sharded_state != ShardedState.SHARDED
            or getattr(fp, "offload_to_cpu", True)
            or fp.fsdp_placement.dim != 0
            or type(local) is not torch.Tensor
            or type(data) is not torch.Tensor
            or not local.is_floating_point()
            or rows == 0
            or rows % ranks != 0
            or local.numel() != data.numel()
            or not local.is_contiguous()
        ):
            return False
        dtypes.add(local.dtype)
    return len(dtypes) == 1 and gathered in (None, *dtypes)


def flatten_shards(model: nn.Module, allocate: Allocate | None = None) -> int:
    """Put the shards of every eligible FSDP2 unit of ``model`` into one buffer per unit (see the module docstring);
    returns how many units now have one. ``allocate(numel, dtype, device)`` makes the buffers (default:
    ``torch.empty``). Call it on every rank, after the parameters have their final dtype and before the optimizer
    is built."""
    if not install():
        return 0
    flattened = 0
    for unit, group in _param_groups(model):
        if not group.fsdp_params or not _eligible(group):
            continue
        first = group.fsdp_params[0].sharded_param._local_tensor
        numel = sum(fp._sharded_param_data.numel() for fp in group.fsdp_params)
        flat = (allocate or _empty)(numel, first.dtype, first.device)
        offset = 0
        with torch.no_grad():
            for fp in group.fsdp_params:
                local = fp.sharded_param._local_tensor
                view = flat[offset : offset + local.numel()]
                view.copy_(local.reshape(-1))
                local.data = view.view(local.shape)  # the same tensor object, now a view of the buffer
                fp.reset_sharded_param()  # FSDP2 re-reads its flat view of the shard from the local tensor
                offset += local.numel()
        if not all(
            fp._sharded_param_data.data_ptr() == fp.sharded_param._local_tensor.data_ptr() for fp in group.fsdp_params
        ):
            raise RuntimeError(
                "experimental.flat_shards: FSDP2 did not take the moved shards; use --experimental.flat_shards false"
            )
        unit._flat_shards = [
            *getattr(unit, "_flat_shards", []),
            flat,
        ]  # the unit holds its buffers; the registry only points at them
        _BUFFERS[flat.untyped_storage().data_ptr()] = flat
        flattened += 1
    return flattened


def _param_groups(model: nn.Module) -> list[tuple[nn.Module, object]]:
    """(FSDP2 unit, one of its parameter groups) for every unit of ``model``."""
    out = []
    for unit in model.modules():
        if hasattr(unit, "_get_fsdp_state"):
            state = unit._get_fsdp_state()
            groups = getattr(state, "_fsdp_param_groups", None)
            if groups is None:  # older torch: one group per unit
                groups = [state._fsdp_param_group] if state._fsdp_param_group is not None else []
            out += [(unit, g) for g in groups]
    return out


def _empty(numel: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    return torch.empty(numel, dtype=dtype, device=device)


class FlatShards(ModelConverter):
    """``experimental.flat_shards``: flattens every eligible FSDP2 unit's shards (module docstring), in buffers from
    NCCL's symmetric-memory pool under ``experimental.symmetric_memory``."""

    name = "experimental.flat_shards"
    stage = "sharded"

    def convert(self, model: nn.Module) -> None:
        allocate = None
        if self.cfg.experimental.symmetric_memory and self.device.type == "cuda":
            from .symmetric_memory import symmetric_allocator

            mesh = self.mesh
            allocate = symmetric_allocator(None if mesh is None else mesh.get_group(mesh.ndim - 1))
        self.units = flatten_shards(model, allocate)
        log.info("experimental.flat_shards: %d FSDP units send their shards as they are", self.units)

    def summary(self) -> dict[str, int]:
        return {
            "flat_shard_units": self.units,
            "all_gathers_sent_as_is": sent_as_is,
            "all_gathers_copied_in": copied_in,
        }

"""``parallel.copy_out``: where each FSDP2 unit's gathered parameters are copied out of its all-gather buffer.

FSDP2 all-gathers a unit into one flat buffer, rank after rank, then copies each parameter's pieces out of it into
the parameter's own storage (``fsdp::split_with_sizes_copy``). It allocates that storage and makes the copy on the
compute stream, just before the unit runs, so the GPU's compute waits for every copy: on Llama-3.1-8B over 2 H200s,
64 copies per step, 16 ms of a 1.74 s step at micro batch 5 (``bench/profile_step.py``, bench/RESULTS.md session 10).

- ``compute``: FSDP2's own way.
- ``copy_engine``: the copy runs on the all-gather stream, right after the all-gather, while the previous unit
  computes; the compute stream only waits for it. It is one ``cudaMemcpyAsync`` per parameter and rank (``copy_``
  of contiguous pieces), which the GPU's copy engines run, so no SM is taken from compute.
- ``all_gather_stream``: the same place, with FSDP2's copy kernel.

The storage is still allocated on the compute stream, as FSDP2 does, but one unit earlier in the pass: when the unit
before starts its all-gather (in forward, the next block's storage is allocated before this block's compute is
queued; in backward, the previous block's). The caching allocator gives a stream only memory whose earlier uses
on that stream are already queued, so the all-gather stream waits for an event recorded right after that
allocation: its writes come after every earlier use of that memory, and the unit's compute waits for the writes.
Nothing is allocated on one stream and freed on another. (Session 9 tried the copy on the all-gather stream with
the storage allocated there and the compute stream's use recorded for the allocator: 11% slower near the memory
limit, bench/RESULTS.md.) One more unit's storage exists at a time, but not at a step's peak, the loss: nothing
comes after the lm_head in forward.

Units where FSDP2 does more than this one split copy keep FSDP2's copy: parameters sharded on another dim, tensor
subclasses that gather through ``fsdp_pre_all_gather`` (FP8 all-gathers), CPU offload, one-rank shard groups. So do
unshards outside forward and backward (explicit ``unshard()`` calls run their collectives on the compute stream).
"""

from __future__ import annotations

import functools
import logging
import warnings
from typing import Any

import torch
import torch.nn as nn

log = logging.getLogger(__name__)

METHODS = ("copy_engine", "all_gather_stream")
#: the op ``_split_copy`` stands in for, as torch 2.11 to 2.13 define it
SCHEMA = ("fsdp::split_with_sizes_copy(Tensor all_gather_output, SymInt[] all_gather_input_split_sizes, int dim=0, *, "
          "Tensor(a!)[] out) -> ()")
_LIBRARIES: list[torch.library.Library] = []  # a Library unregisters its kernels when it is collected
#: (data pointer, size) of the all-gather buffer whose copy-out ran already: set by ``_wait_for_unshard`` around
#: FSDP2's own, which then calls ``_split_copy`` on it (the same thread, within the call)
_armed: list[tuple[int, int]] = []
#: copy-outs made on the all-gather stream, and those FSDP2 made on the compute stream (read by the tests)
early = 0
on_compute = 0


def _split_copy(all_gather_output: torch.Tensor, all_gather_input_split_sizes: list[int], dim: int = 0, *,
                out: list[torch.Tensor]) -> None:
    """``fsdp::split_with_sizes_copy``: nothing when the all-gather stream made this copy already, else FSDP2's copy."""
    global on_compute
    if _armed and _armed[-1] == (all_gather_output.data_ptr(), all_gather_output.numel()):
        _armed.pop()
        return
    on_compute += 1
    torch.split_with_sizes_copy(all_gather_output, all_gather_input_split_sizes, dim=dim, out=out)


def _install_op() -> bool:
    """Register ``_split_copy`` as ``fsdp::split_with_sizes_copy`` on CPU and CUDA (once per process); False, and
    nothing registered, where this torch's FSDP2 defines the op otherwise."""
    if _LIBRARIES:
        return True
    from torch.distributed.fsdp._fully_shard import _fsdp_collectives  # noqa: F401  (defines the op)

    op = getattr(torch.ops.fsdp, "split_with_sizes_copy", None)
    schema = None if op is None else str(op.default._schema)
    if schema != SCHEMA:
        log.warning("parallel.copy_out: torch %s's FSDP2 copy-out is not the one known (%s); it stays on the compute stream",
                    torch.__version__, schema)
        return False
    library = torch.library.Library("fsdp", "IMPL")
    with warnings.catch_warnings():  # "Overriding a previously registered kernel": that is the point
        warnings.simplefilter("ignore")
        for key in ("CPU", "CUDA"):
            library.impl("split_with_sizes_copy", _split_copy, key, allow_override=True)
    _LIBRARIES.append(library)
    return True


def _eligible(group: Any) -> bool:
    """Whether FSDP2's copy-out of this parameter group is exactly one split copy into each parameter's storage."""
    params = group.fsdp_params
    return bool(params) and all(
        fp.fsdp_placement.dim == 0 and not getattr(fp, "offload_to_cpu", True) and fp.mesh_info.shard_mesh_size > 1
        and not hasattr(fp.sharded_param._local_tensor, "fsdp_pre_all_gather") for fp in params)


def install(model: nn.Module, method: str) -> int:
    """Make the copy-out of every eligible FSDP2 unit of ``model`` with ``method`` (``copy_engine`` or
    ``all_gather_stream``); returns how many parameter groups it applies to. Call it once, after ``fully_shard``."""
    if method not in METHODS:
        raise ValueError(f"parallel.copy_out: {method!r} is not one of {METHODS}")
    if not _install_op():
        return 0
    from .shards import _param_groups

    groups = [g for _, g in _param_groups(model) if _eligible(g)]
    # module order is the forward's: the root (embeddings, final norm), the blocks, the lm_head
    for i, group in enumerate(groups):
        after = groups[i + 1] if i + 1 < len(groups) else None
        before = groups[i - 1] if i > 0 else None
        group.unshard = functools.partial(_unshard, group, group.unshard, after, before, method)
        group.wait_for_unshard = functools.partial(_wait_for_unshard, group, group.wait_for_unshard)
    return len(groups)


def _storage_bytes(t: torch.Tensor) -> int:
    return t.untyped_storage().size()


@torch.no_grad()
def _unshard(group: Any, original: Any, after: Any, before: Any, method: str, async_op: bool = False) -> None:
    """FSDP2's ``unshard``, then, for an all-gather on the all-gather stream, the copy-out there (module docstring)."""
    global early
    from torch.distributed.fsdp._fully_shard._fsdp_common import TrainingState

    pending = group._all_gather_result
    original(async_op)
    result, state = group._all_gather_result, group._training_state
    if (result is None or result is pending or async_op or result.all_gather_work is not None
            or state not in (TrainingState.FORWARD, TrainingState.PRE_BACKWARD)):
        return  # nothing gathered now, or not on the all-gather stream: FSDP2 copies out as usual
    output = result.all_gather_output
    if any(dtype != output.dtype for dtypes in result.param_all_gather_input_dtypes for dtype in dtypes):
        return  # gathered as bytes (mixed dtypes): FSDP2 copies out as usual
    handle = group.device_handle
    _, stream = group.comm_ctx.get_all_gather_streams(async_op, state)
    sizes = result.all_gather_input_split_sizes
    world = output.numel() // sum(sizes)
    ready = group.__dict__.pop("_copy_out_ready", None)
    destinations = []
    for fp, numels, dtypes in zip(group.fsdp_params, result.param_all_gather_input_numels,
                                  result.param_all_gather_input_dtypes, strict=True):
        if not fp.all_gather_outputs or _storage_bytes(fp.all_gather_outputs[0]) == 0:
            ready = None  # allocated now, after the compute stream's work queued so far: wait for all of it
        fp.init_all_gather_outputs(numels, dtypes, world, output.device)
        fp.alloc_all_gather_outputs()
        destinations += fp.all_gather_outputs
    if ready is None:
        ready = handle.Event()
        ready.record()  # on the compute stream, where the storage was allocated
    with handle.stream(stream):
        stream.wait_event(ready)
        rows = output.view(world, -1)
        # FSDP2 does not count its copy-out as a change of the parameters (their autograd version stays the same)
        with torch.autograd._unsafe_preserve_version_counter(tuple(destinations)):
            if method == "all_gather_stream":
                torch.split_with_sizes_copy(rows, sizes, dim=1, out=[d.view(world, -1) for d in destinations])
            else:
                offset = 0
                for destination, size in zip(destinations, sizes, strict=True):
                    pieces = destination.view(world, size)
                    for rank in range(world):
                        pieces[rank].copy_(rows[rank, offset:offset + size])
                    offset += size
        copied = handle.Event()
        copied.record()
    group._all_gather_result = result._replace(all_gather_event=copied)
    group._copy_out_done = (rows.data_ptr(), rows.numel())
    early += 1
    _allocate_early(after if state == TrainingState.FORWARD else before)


def _allocate_early(group: Any) -> None:
    """Allocate the storage of ``group`` (the unit whose all-gather comes next in this pass) on the compute stream
    now, with an event its copy-out waits for (module docstring)."""
    if group is None or not group.is_sharded or "_copy_out_ready" in group.__dict__:
        return
    outputs = [t for fp in group.fsdp_params for t in fp.all_gather_outputs]
    if not outputs or len(outputs) != len(group.fsdp_params):
        return  # before its first all-gather, FSDP2 has not sized them yet
    if any(_storage_bytes(t) != 0 for t in outputs):
        return  # allocated by someone else: its copy-out records its own event
    for fp in group.fsdp_params:
        fp.alloc_all_gather_outputs()
    ready = group.device_handle.Event()
    ready.record()
    group._copy_out_ready = ready


def _wait_for_unshard(group: Any, original: Any) -> None:
    """FSDP2's ``wait_for_unshard``, with its split copy skipped when the all-gather stream made it already."""
    done = group.__dict__.pop("_copy_out_done", None)
    result = group._all_gather_result
    if done is None or result is None or (result.all_gather_output.data_ptr(), result.all_gather_output.numel()) != done:
        return original()
    _armed.append(done)
    try:
        return original()
    finally:
        if _armed and _armed[-1] == done:
            _armed.pop()

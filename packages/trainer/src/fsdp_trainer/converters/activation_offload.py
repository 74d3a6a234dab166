"""``ac.offload_layers``: the first decoder blocks keep their saved activations in pinned host memory.

``ac.offload_layers N`` installs :class:`ActivationOffload` on blocks ``0 .. N-1``. While such a block runs its
forward, every tensor autograd saves for its backward goes through ``torch.autograd.graph.saved_tensors_hooks``:

- a tensor that owns its whole storage, is not one of the block's parameters and holds at least ``min_bytes`` is
  copied to a pinned host buffer on a side stream (the copy engines, over PCIe), and autograd keeps only a handle.
  ``record_stream`` tells the caching allocator that the side stream reads the GPU memory, so it is reused only
  once the copy is done; the memory comes free without waiting for it on the compute stream.
- anything else (parameters, small tensors such as the rotary tables, views into larger buffers) stays as it is.

The blocks' backward runs in the reverse order, so the offloaded blocks are the last to need their tensors. When
the backward of block ``j`` unpacks its tensors, the copies back of every offloaded block ``i >= j - D`` start
(on the side stream, into memory the compute stream allocates), with ``D = min(N, L - 1 - N)`` for ``L`` blocks:
each copy has about ``D`` blocks' backward time to arrive, and no more blocks come back early than blocks above
have freed their activations. Blocks ``N .. N+D-1`` wrap what they save in a marker for this (no copy). A tensor
asked for before its copy was started is fetched on the spot. The compute stream waits on each copy's event
before using it.

The memory this frees is about one block's activations per offloaded block (the peak is at the start of backward,
when every block's activations are held), which makes room for a larger micro-batch. The PCIe traffic is the
offloaded activations once each way per step. Host buffers are allocated once per saved tensor (by block and
position) and reused every step; the side stream orders each step's copies out after the last step's copies back.

It is a memory option, not a speed one: on Llama-3.1-8B over 2 H200s two offloaded blocks freed 4.3 GiB at 0.4% of
the speed, and the larger micro-batches it made room for ran slower than the largest that fits without it
(``bench/reports/2026-11-30-llama3.1-8b-h200x2-activation-offload.md``). Use it when a run does not fit otherwise.

The hooks run outside compiled code (forward hooks of the block module, after FSDP's pre-forward and before its
post-forward), so compiled blocks offload the tensors their compiled backward keeps.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ..errors import ConfigError
from . import ModelConverter

log = logging.getLogger(__name__)

MIN_BYTES = 1 << 20  # tensors below 1 MiB stay on the device: not worth a copy each way


@dataclass
class _Saved:
    """A saved tensor held on the host: its layout, host copy, and (once fetched) device copy and event."""

    block: int
    host: torch.Tensor
    device: torch.device
    gpu: torch.Tensor | None = None
    ready: Any = None  # torch.cuda.Event of the copy back, None off CUDA


@dataclass
class _Kept:
    """A tensor a marker block keeps on the device, tagged with its block so its unpacking can fetch ahead."""

    block: int
    tensor: torch.Tensor


@dataclass
class _BlockState:
    saved: list[_Saved] = field(default_factory=list)
    fetched: bool = False


class ActivationOffload:
    """Saved-tensor hooks for the offloaded blocks (module docstring). ``install`` registers them on ``blocks``.

    On CUDA the copies are asynchronous on a side stream into pinned memory; on other devices (tests) they are
    plain synchronous copies to CPU tensors, so the bookkeeping can be checked anywhere.
    """

    def __init__(self, num_blocks: int, total_blocks: int, min_bytes: int = MIN_BYTES):
        if not 0 < num_blocks < total_blocks:
            raise ValueError(
                f"offload: {num_blocks} of {total_blocks} blocks; offload at least one and leave at least one"
            )
        self.num_blocks = num_blocks
        self.distance = min(num_blocks, total_blocks - 1 - num_blocks)  # D in the module docstring
        self.min_bytes = min_bytes
        self.blocks: dict[int, _BlockState] = {}
        self._pool: dict[tuple[int, int], torch.Tensor] = {}  # (block, position) -> host buffer, reused every step
        self._stream: Any = None
        self._active: int | None = None  # block whose forward is running
        self._param_storages: set[int] = set()
        self._hooks: Any = None
        self.offloaded_bytes = 0  # per step, for the logs
        self.kept = 0  # saved tensors left on the device (parameters, small, views)

    # forward: pack
    def enter(self, index: int, module: nn.Module) -> None:
        """Start packing what ``module`` (block ``index``) saves: offloading below ``num_blocks``, marking above.
        FSDP has gathered its parameters already."""
        self._active = index
        if index < self.num_blocks:
            self.blocks[index] = _BlockState()
            self._param_storages = {p.untyped_storage().data_ptr() for p in module.parameters()}
        if index == 0:
            self.offloaded_bytes = 0
            self.kept = 0
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        self._hooks.__enter__()

    def exit(self) -> None:
        if self._hooks is not None:
            self._hooks.__exit__(None, None, None)
        self._hooks, self._active = None, None

    def _eligible(self, t: torch.Tensor) -> bool:
        storage = t.untyped_storage()
        nbytes = t.numel() * t.element_size()
        return (
            type(t) is torch.Tensor
            and nbytes >= self.min_bytes
            and t.storage_offset() == 0
            and storage.nbytes() == nbytes
            and storage.data_ptr() not in self._param_storages
        )

    def _pack(self, t: torch.Tensor) -> Any:
        block = self._active
        if block is None:
            return t
        if block >= self.num_blocks:
            return _Kept(block, t)
        if not self._eligible(t):
            self.kept += 1
            return _Kept(block, t)
        state = self.blocks[block]
        key = (block, len(state.saved))
        host = self._pool.get(key)
        if host is None or host.shape != t.shape or host.stride() != t.stride() or host.dtype != t.dtype:
            host = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="cpu", pin_memory=t.is_cuda)
            self._pool[key] = host
        if t.is_cuda:
            stream = self._side_stream(t.device)
            stream.wait_stream(torch.cuda.current_stream(t.device))
            with torch.cuda.stream(stream):
                host.copy_(t, non_blocking=True)
            t.record_stream(stream)  # its memory is reused only once the copy is done
        else:
            host.copy_(t)
        saved = _Saved(block, host, t.device)
        state.saved.append(saved)
        self.offloaded_bytes += host.numel() * host.element_size()
        return saved

    # backward: unpack, and fetch ahead
    def _unpack(self, saved: Any) -> torch.Tensor:
        if isinstance(saved, torch.Tensor):
            return saved
        self._prefetch(saved.block)
        if isinstance(saved, _Kept):
            return saved.tensor
        if saved.gpu is None:
            self._fetch(saved)
        gpu = saved.gpu
        if saved.ready is not None:
            torch.cuda.current_stream(saved.device).wait_event(saved.ready)
        return gpu

    def _prefetch(self, block: int) -> None:
        """The backward of ``block`` has begun: start the copies back of offloaded blocks ``>= block - D``."""
        for i in range(max(0, block - self.distance), min(block, self.num_blocks - 1) + 1):
            state = self.blocks.get(i)
            if state is not None and not state.fetched:
                state.fetched = True
                for saved in state.saved:
                    if saved.gpu is None:
                        self._fetch(saved)

    def _fetch(self, saved: _Saved) -> None:
        host = saved.host
        gpu = torch.empty_strided(host.shape, host.stride(), dtype=host.dtype, device=saved.device)
        if saved.device.type == "cuda":
            stream = self._side_stream(saved.device)
            stream.wait_stream(torch.cuda.current_stream(saved.device))  # the memory's last use on the compute stream
            with torch.cuda.stream(stream):
                gpu.copy_(host, non_blocking=True)
                saved.ready = torch.cuda.Event()
                saved.ready.record(stream)
        else:
            gpu.copy_(host)
        saved.gpu = gpu

    def _side_stream(self, device: torch.device) -> Any:
        if self._stream is None:
            self._stream = torch.cuda.Stream(device=device)
        return self._stream

    def install(self, blocks: nn.ModuleList) -> list[Any]:
        """Forward hooks on the offloaded and marker blocks: registered last (after FSDP's pre-forward hook) and,
        for the end, first (before FSDP's post-forward hook). Returns the hook handles."""
        handles = []
        for index in range(min(len(blocks), self.num_blocks + self.distance)):
            block = blocks[index]

            def pre(module: nn.Module, args: Any, index: int = index) -> None:
                if torch.is_grad_enabled():
                    self.enter(index, module)

            def post(module: nn.Module, args: Any, output: Any) -> None:
                self.exit()

            handles.append(block.register_forward_pre_hook(pre))
            handles.append(block.register_forward_hook(post, prepend=True))
        return handles


class ActivationOffloadConverter(ModelConverter):
    """``ac.offload_layers N``: installs :class:`ActivationOffload` on the first ``N`` decoder blocks (CUDA only)."""

    name = "activation_offload"
    stage = "sharded"

    def __init__(self, cfg: Any, device: torch.device, mesh: Any) -> None:
        super().__init__(cfg, device, mesh)
        if device.type != "cuda":
            raise ConfigError(
                f"--ac.offload_layers: needs CUDA GPUs (pinned host memory, copy engines); this run is on {device.type} "
                "(set it to 0)"
            )
        self.offload: ActivationOffload | None = None

    def convert(self, model: nn.Module) -> None:
        n = self.cfg.activation_checkpointing.offload_layers
        blocks = model.lm.model.layers
        if n >= len(blocks):
            raise ConfigError(
                f"--ac.offload_layers: {n} is not below the model's {len(blocks)} decoder blocks; "
                f"use 1 to {len(blocks) - 1}"
            )
        self.offload = ActivationOffload(n, len(blocks))
        self.offload.install(blocks)
        log.info(
            "ac.offload_layers: blocks 0-%d keep their saved activations in pinned host memory (blocks come back %d ahead)",
            n - 1,
            self.offload.distance,
        )

    def summary(self) -> dict[str, float]:
        offloaded = self.offload.offloaded_bytes if self.offload is not None else 0
        return {"offloaded_gib_per_step": round(offloaded / 2**30, 2)}

"""Model converters: the features that change the model or the optimizer, applied through one protocol.

The training loop never names a feature. ``build_converters`` reads the config and returns the converters it turns
on, in the order they apply; the trainer calls them at four points and knows nothing else about them:

1. ``convert(model)`` of every ``stage = "build"`` converter, on the unsharded ``CausalLMWithLoss`` just before
   parallelization (activation checkpointing, compile, FSDP), while its weights are on the meta device or on CPU.
   Module swaps belong here, so that FSDP shards what they made: ``fused_kernels``, ``float8``.
2. ``convert(model)`` of every ``stage = "sharded"`` converter, after parallelization, once the weights are in place.
   What needs the final parameters or the FSDP units belongs here: ``master_weights`` (bf16 parameters, fp32 masters
   in the optimizer), ``activation_offload`` (hooks on the blocks), and the experimental collectives.
3. ``attach_optimizer(model, optimizer)``, once the optimizer is built and before its first step.
4. ``post_optimizer_hook(model)``, after every optimizer step that updated the weights.

``summary()`` returns what a converter adds to ``summary.json``. A converter checks in its constructor that it can
run on this machine and raises ``ConfigError`` naming its flag when it cannot.

The protocol is torchtitan's (``torchtitan/protocols/model_converter.py``: ``convert`` and ``post_optimizer_hook``)
with the stage made explicit and one hook for converters that own optimizer state. A new feature is one module here,
one class, and one line in ``build_converters``. Features that rely on private torch internals, or whose measured gain
is within noise, live in ``fsdp_trainer.experimental`` and are imported from here only when their option is on.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, ClassVar, Literal

if TYPE_CHECKING:
    import torch
    import torch.nn as nn
    from torch.distributed.device_mesh import DeviceMesh

    from ..config import TrainerConfig

Stage = Literal["build", "sharded"]
log = logging.getLogger(__name__)


class ModelConverter:
    """One feature that changes the model or the optimizer. Subclasses set ``name`` and ``stage`` and override
    ``convert``; the other hooks do nothing unless overridden.

    ``__init__(cfg, device, mesh)``: the run's config, its device and FSDP's device mesh (None without FSDP).
    """

    #: How the summary and the logs name it.
    name: ClassVar[str] = ""
    #: When ``convert`` runs: ``build`` (before parallelization) or ``sharded`` (after, with the weights in place).
    stage: ClassVar[Stage] = "build"

    def __init__(self, cfg: TrainerConfig, device: torch.device, mesh: DeviceMesh | None) -> None:
        self.cfg, self.device, self.mesh = cfg, device, mesh

    def convert(self, model: nn.Module) -> None:
        """Change ``model`` (a ``CausalLMWithLoss``, wrapped by FSDP at the ``sharded`` stage) in place."""
        raise NotImplementedError

    def attach_optimizer(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        """Called once the optimizer exists, before its first step."""

    def post_optimizer_hook(self, model: nn.Module) -> None:
        """Called after every optimizer step that updated the weights (an fp16 step skipped on overflow does not)."""

    def summary(self) -> dict[str, Any]:
        """Fields for ``summary.json``."""
        return {}


class ModelConverters:
    """The run's converters in the order they apply; every hook runs them all, in that order."""

    def __init__(self, converters: list[ModelConverter]) -> None:
        self.converters = converters

    def __iter__(self) -> Iterator[ModelConverter]:
        return iter(self.converters)

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.converters]

    def convert(self, model: nn.Module, stage: Stage) -> None:
        for converter in self.converters:
            if converter.stage == stage:
                converter.convert(model)

    def attach_optimizer(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        for converter in self.converters:
            converter.attach_optimizer(model, optimizer)

    def post_optimizer_hook(self, model: nn.Module) -> None:
        for converter in self.converters:
            converter.post_optimizer_hook(model)

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"converters": self.names}
        for converter in self.converters:
            out.update(converter.summary())
        return out


#: name -> "module:class", imported only when the config turns the converter on. The order is the order they apply
#: within a stage: the masters are split from the fp32 weights before anything moves the parameters' storage, and the
#: flat shards take their buffers where the collectives read them.
CONVERTERS = {
    "fused_kernels": "fsdp_trainer.converters.fused_kernels:FusedKernels",
    "float8": "fsdp_trainer.converters.float8:Float8",
    "master_weights": "fsdp_trainer.converters.master_weights:MasterWeights",
    "experimental.symmetric_memory": "fsdp_trainer.experimental.symmetric_memory:SymmetricMemory",
    "experimental.flat_shards": "fsdp_trainer.experimental.flat_shards:FlatShards",
    "activation_offload": "fsdp_trainer.converters.activation_offload:ActivationOffloadConverter",
}


def enabled(cfg: TrainerConfig, device_type: str) -> list[str]:
    """Names of the converters ``cfg`` turns on for a run on ``device_type``, in the order of ``CONVERTERS``."""
    from ..optim import use_master_weights

    on = {
        "fused_kernels": cfg.model.fused_kernels,
        "float8": cfg.fp8.enabled,
        "master_weights": use_master_weights(cfg, device_type),
        "experimental.symmetric_memory": cfg.experimental.symmetric_memory,
        "experimental.flat_shards": cfg.experimental.flat_shards,
        "activation_offload": cfg.activation_checkpointing.offload_layers > 0,
    }
    return [name for name in CONVERTERS if on[name]]


def build_converters(cfg: TrainerConfig, device: torch.device, mesh: DeviceMesh | None) -> ModelConverters:
    """The converters ``cfg`` turns on (``enabled``), constructed; raises ``ConfigError`` for one that cannot run here."""
    built = []
    for name in enabled(cfg, device.type):
        module, _, cls = CONVERTERS[name].partition(":")
        built.append(getattr(importlib.import_module(module), cls)(cfg, device, mesh))
    log.info("model converters: %s", ", ".join(c.name for c in built) or "none")
    return ModelConverters(built)

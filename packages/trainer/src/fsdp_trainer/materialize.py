"""Build the model and give it weights without a full copy per process.

Three ways, chosen by ``model.init`` and ``model.random_init``:

* replicated random: every rank draws the whole model on CPU from ``train.seed``,
  then shards it. Identical weights whatever the sharding (the parity tests rely
  on it); costs one full fp32 copy per process, so ``auto`` uses it only up to 1B
  parameters.
* sharded random: the model is built on the meta device, sharded, then each rank
  allocates and draws only its own shards on the device (FSDP2: ``to_empty`` and
  in-place init of the DTensor shards; FSDP1: ``param_init_fn`` per wrapped unit).
  No full copy anywhere; the values depend on the sharding.
* pretrained: rank 0 loads the HF checkpoint on CPU, every other rank builds on
  meta. FSDP2 shards the meta model, allocates shards and receives them from
  rank 0 with ``set_model_state_dict(..., full_state_dict=True,
  broadcast_from_rank0=True)``; FSDP1 uses ``sync_module_states``. Only rank 0
  ever holds the full model (on CPU). FSDP1 cannot sync module states on CPU, so
  there every rank receives a full copy by broadcast (CPU runs are small).

The run's model converters (``fsdp_trainer.converters``) are applied here: the ``build`` ones just before
parallelization, the ``sharded`` ones once the weights are in place.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import DeviceMesh

from .attention import configure_attention
from .config import TrainerConfig
from .converters import ModelConverters
from .distributed import DistEnv
from .model import (
    DTYPES,
    CausalLMWithLoss,
    build_hf_config,
    count_params,
    init_module_,
    init_weights_,
    load_pretrained_state_dict,
    meta_model,
    reset_rotary_,
)
from .parallelize import parallelize_llama

log = logging.getLogger(__name__)

REPLICATED_INIT_MAX_PARAMS = 1_000_000_000


@dataclass
class BuiltModel:
    """The model to train and what the rest of the run needs to know about it."""

    model: nn.Module
    hf_config: Any
    num_params: int
    num_embedding_params: int


def init_strategy(cfg: TrainerConfig, num_params: int) -> str:
    """replicated, sharded or pretrained (see the module docstring)."""
    if cfg.model.init == "pretrained":
        return "pretrained"
    if cfg.model.random_init == "auto":
        return "replicated" if num_params <= REPLICATED_INIT_MAX_PARAMS else "sharded"
    return cfg.model.random_init


def tie_embeddings_(lm: nn.Module, hf_config: Any) -> None:
    """Re-tie lm_head to the input embeddings when the config ties them.

    ``to_empty`` allocates each parameter separately, so it silently unties shared
    weights: the model would train two matrices and export a tied config.
    """
    if getattr(hf_config, "tie_word_embeddings", False) and lm.lm_head.weight is not lm.get_input_embeddings().weight:
        lm.tie_weights()


def materialize_device(cfg: TrainerConfig, device: torch.device) -> torch.device:
    """Where FSDP2's meta-built shards are allocated: CPU under ``parallel.cpu_offload``, else the training device.

    ``CPUOffloadPolicy`` refuses parameters materialised on CUDA ("FSDP parameters should be
    materialized on CPU when enabling CPU offloading"); the optimizer then runs on CPU and FSDP
    copies each shard to the GPU for its all-gather. Buffers that are not parameters (the
    rotary-embedding ``inv_freq``) are not offloaded and stay on the training device.
    """
    return torch.device("cpu") if cfg.parallel.cpu_offload else device


def build_model(
    cfg: TrainerConfig, env: DistEnv, mesh: DeviceMesh | None, converters: ModelConverters | None = None
) -> BuiltModel:
    """Build ``CausalLMWithLoss``, give it weights, apply ``converters`` and parallelize it; returns it on
    ``env.device``."""
    converters = converters or ModelConverters([])
    hf_config = build_hf_config(cfg.model)
    compute_dtype = torch.float32 if env.device.type == "cpu" else DTYPES[cfg.precision.param_dtype or "fp32"]
    attention = configure_attention(hf_config, cfg.model.sdpa_backend, env.device, compute_dtype, cfg.data.seq_len)
    lm = meta_model(hf_config)
    log.info("attention: %s [%s]", attention, lm.config._attn_implementation)
    num_params, num_embedding = count_params(lm)
    strategy = init_strategy(cfg, num_params)
    log.info("model: %.2fM parameters, %d layers, init=%s", num_params / 1e6, hf_config.num_hidden_layers, strategy)
    wrapper = CausalLMWithLoss(lm, cfg.train.loss_chunk_tokens, cfg.compile.loss, cfg.train.fused_loss)
    std, seed, device, api = hf_config.initializer_range, cfg.train.seed, env.device, cfg.parallel.api

    # FSDP1's sync_module_states needs CUDA: on CPU (small test runs) every rank takes a full copy from rank 0.
    fsdp1_cpu_copy = strategy == "pretrained" and api == "fsdp1" and device.type == "cpu"
    # Full weights on CPU before sharding: replicated random init, and pretrained where this rank holds them.
    full_on_cpu = (
        strategy == "replicated"
        or fsdp1_cpu_copy
        or (strategy == "pretrained" and (api == "none" or (api == "fsdp1" and env.is_leader)))
    )
    if full_on_cpu:
        wrapper.to_empty(device="cpu")
        tie_embeddings_(lm, hf_config)
        if strategy == "replicated":
            init_weights_(wrapper, std, seed)
        elif env.is_leader or api == "none":
            wrapper.load_state_dict(load_pretrained_state_dict(cfg.model.name_or_path or ""), strict=True)
        if fsdp1_cpu_copy:
            for tensor in wrapper.state_dict().values():
                dist.broadcast(tensor, src=0)
        reset_rotary_(wrapper, "cpu")
    converters.convert(wrapper, "build")

    if api == "fsdp1" or full_on_cpu:
        param_init_fn = None
        if not full_on_cpu:  # FSDP1 materialises each meta unit on the device, just before sharding it
            generator = torch.Generator(device=device).manual_seed(
                seed
            )  # private: runtime.seed's global generator stays

            tied = (lm.get_input_embeddings(), lm.lm_head) if getattr(hf_config, "tie_word_embeddings", False) else ()

            def param_init_fn(module: nn.Module) -> None:
                if module in tied:  # the second of the tied pair takes the first one's materialised weight
                    other = tied[1] if module is tied[0] else tied[0]
                    if not other.weight.is_meta:
                        module.weight = other.weight
                        return
                module.to_empty(device=device, recurse=False)
                if strategy == "sharded":
                    init_module_(module, std, generator)
                reset_rotary_(module, device)

        model = parallelize_llama(
            wrapper,
            cfg,
            mesh,
            device=device,
            param_init_fn=param_init_fn,
            sync_module_states=strategy == "pretrained" and api == "fsdp1" and not fsdp1_cpu_copy,
        )
        if api == "none":  # FSDP placed its shards itself (and keeps them on CPU with parallel.cpu_offload)
            model.to(device)
        converters.convert(model, "sharded")
        return BuiltModel(model, hf_config, num_params, num_embedding)

    # FSDP2 from the meta device: shard first, then allocate only the local shards.
    full_sd = (
        load_pretrained_state_dict(cfg.model.name_or_path or "") if strategy == "pretrained" and env.is_leader else {}
    )
    model = parallelize_llama(wrapper, cfg, mesh, device=device)
    # With parallel.cpu_offload the shards live on CPU (not yet run on GPU: CPU runs refuse cpu_offload);
    # set_model_state_dict then broadcasts over the CPU (gloo) side of the group.
    model.to_empty(device=materialize_device(cfg, device))
    reset_rotary_(model, device)  # non-persistent, not offloaded: on the training device
    if strategy == "sharded":
        init_weights_(model, std, seed)
    else:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

        set_model_state_dict(model, full_sd, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))
    converters.convert(model, "sharded")
    return BuiltModel(model, hf_config, num_params, num_embedding)

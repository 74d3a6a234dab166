"""Entry point: set up logging, parse the config, join the process group, build, train, close.

torchrun --standalone --nproc-per-node 8 -m fsdp_trainer --model.preset llama3.1-8b --data.seq_len 4096
python -m fsdp_trainer --model.preset tiny --train.steps 200      # one process, CPU or GPU
"""

from __future__ import annotations

import json
import logging
import os
import random
import sys

from .config import TrainerConfig
from .errors import ConfigError, StoreStalled, TrainerError

log = logging.getLogger("fsdp_trainer")


def run(cfg: TrainerConfig) -> dict:
    """Train with ``cfg`` in this process (one rank of a torchrun job, or a world of one); returns the summary."""
    import torch

    from .distributed import destroy_distributed, init_distributed, resolve_device
    from .trainer import Trainer

    check_inputs(cfg)
    device = resolve_device(cfg.runtime)
    if cfg.parallel.cpu_offload and device.type != "cuda":
        raise ConfigError("--parallel.cpu_offload: offloading to CPU needs CUDA; this run is on cpu")
    if cfg.model.attn_implementation == "flash_attention_2" and device.type != "cuda":
        raise ConfigError(
            f"--model.attn_implementation: flash_attention_2 needs CUDA; this run is on {device.type} (use sdpa or eager)"
        )
    if cfg.train.adamw == "triton":
        from .optim.triton_adamw import available

        if device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":  # Triton's interpreter: tests on CPU
            raise ConfigError(f"--train.adamw: triton needs CUDA; this run is on {device.type} (use foreach or auto)")
        if not available():
            raise ConfigError("--train.adamw: triton is not installed (pip install triton, or use --train.adamw fused)")
    from .optim import use_master_weights

    use_master_weights(cfg, device.type)  # refuses an explicit optimizer where the Triton AdamW does not run
    from .storage import check_s3_locations

    check_s3_locations(cfg)  # an s3:// location that cannot work: one line, before the process group starts
    random.seed(cfg.runtime.seed)
    torch.manual_seed(cfg.runtime.seed or 0)
    if cfg.experimental.symmetric_memory and device.type == "cuda":
        from .experimental.symmetric_memory import nccl_env

        for key, value in nccl_env().items():  # read by NCCL when the communicator is created
            os.environ[key] = value
            log.info("%s=%s (for --experimental.symmetric_memory)", key, value)
    from . import heartbeat

    heartbeat.start(int(os.environ.get("RANK", "0")), cfg.runtime.timeout_s)  # under fsdp-sdk run: what it does
    env = init_distributed(cfg.runtime, device)
    try:
        if cfg.auto.enabled:
            _apply_auto(cfg, env)
        summary = Trainer(cfg, env).fit()
        if env.is_leader:
            print(json.dumps(summary), flush=True)  # last stdout line: the run's summary
        heartbeat.phase("end")
        env.barrier()  # leave together: a rank tearing down its group while a peer still uses it can abort
    except StoreStalled:
        raise  # a request is stuck in a thread: no teardown (main_with_config exits at once)
    except TrainerError:
        destroy_distributed()  # our own errors are raised alike on every rank: tear down together
        raise
    # Any other failure skips the teardown: a rank that failed alone must not wait on peers
    # still inside a collective (destroying an NCCL group can hang); torchrun stops them.
    destroy_distributed()
    return summary


def check_inputs(cfg: TrainerConfig) -> None:
    """Refuse, before anything is built, data and tokenizer settings this machine cannot serve: a data path that is
    not there, the Hub without the ``datasets`` package, a tokenizer that does not load.

    These checks belong to the process that trains (the SDK validates a configuration offline, on a machine that
    may not have the pod's files or packages).
    """
    import importlib.util
    from pathlib import Path

    data, model = cfg.data, cfg.model
    if data.source in ("text", "jsonl") and data.path and not Path(data.path).exists():
        raise ConfigError(f"--data.path: {data.path} does not exist; pass a file or directory of the training text")
    if data.source == "hf" and importlib.util.find_spec("datasets") is None:
        raise ConfigError(
            "--data.source: data.source=hf reads the Hub with the datasets package, which is not installed; "
            "pip install 'fsdp-trainer[hub]'"
        )
    if model.tokenizer and model.tokenizer != "bytes":
        from .tokenizer import load_tokenizer

        try:
            load_tokenizer(model.tokenizer)
        except (OSError, ValueError) as error:  # no tokenizer files in a config-only directory, a bad Hub id
            raise ConfigError(
                f"--model.tokenizer: cannot load a tokenizer from {model.tokenizer} "
                f"({' '.join(str(error).split())[:200]}); pass --model.tokenizer DIR|HUB_ID or 'bytes'"
            ) from None


def _apply_auto(cfg: TrainerConfig, env) -> None:
    """``--auto``: choose the settings from the smallest device memory among the ranks, the same on every rank."""
    import os

    import torch
    import torch.distributed as dist

    from .autotune import apply_auto
    from .model import build_hf_config
    from .optim import use_master_weights

    if env.device.type == "cuda":
        total = torch.cuda.get_device_properties(env.device).total_memory
    else:  # CPU: this process's share of the host's memory
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // env.local_world_size
    smallest = torch.tensor([total], dtype=torch.int64, device=env.device)
    if env.world_size > 1:
        dist.all_reduce(smallest, op=dist.ReduceOp.MIN)
    record = apply_auto(
        cfg,
        build_hf_config(cfg.model),
        world_size=env.world_size,
        local_world_size=env.local_world_size,
        device_bytes=int(smallest.item()),
        on_gpu=env.device.type == "cuda",
        master_weights=use_master_weights(cfg, env.device.type, grad_accum_steps=1),
    )
    cfg.auto_choice = record
    log.info(
        "auto: %s, global batch %d sequences (estimated peak %.1f GiB of %.1f GiB per device; kept as given: %s)",
        record["chosen"],
        record["global_batch_sequences"],
        record["estimated_peak_gib"],
        record["device_gib"],
        ", ".join(record["kept"]) or "nothing",
    )


def main_with_config(cfg: TrainerConfig) -> int:
    """Run and map failures to exit codes: 2 for settings (one line naming the flag), 1 otherwise."""
    try:
        run(cfg)
    except StoreStalled as e:  # the stalled request's thread cannot be joined: leave without waiting for it
        print(f"error: {e}", file=sys.stderr, flush=True)
        os._exit(e.exit_code)
    except TrainerError as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return e.exit_code
    except Exception:
        log.exception("training failed")
        return 1
    return 0

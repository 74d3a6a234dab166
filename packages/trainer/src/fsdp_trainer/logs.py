"""Logging with a rank prefix. Human-readable logs go to stderr; stdout carries only JSON lines."""

from __future__ import annotations

import logging
import os
import sys
import warnings


def setup_logging(log_all_ranks: bool = False, *, fp8: bool = False) -> None:
    """Configure the root logger: ``[rank3] 12:00:01 INFO fsdp_trainer.train: ...``; only the leader logs INFO unless asked.

    transformers imports torchao whenever it is installed (``transformers.quantizers``), FP8 or not. Without
    FP8 nothing of torchao runs, so its warnings (its CUDA kernel libraries failing to load on a CPU build)
    are dropped, and so is torch's deprecation notice about torchao registering its enums as pytree constants.
    """
    rank = int(os.environ.get("RANK", "0"))
    level = logging.INFO if rank == 0 or log_all_ranks else logging.WARNING
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"[rank{rank}] %(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # torch's FSDP1 state-dict path warns on every save about its own internals.
    warnings.filterwarnings("ignore", message=".*ShardedTensor.*", category=FutureWarning)
    warnings.filterwarnings("ignore", message=".*_get_pg_default_device.*")
    warnings.filterwarnings("ignore", message="Multiple backends are registered with this ProcessGroup.*")
    for noisy in ("torch.distributed", "transformers", "urllib3", "filelock", "httpx"):
        logging.getLogger(noisy).setLevel(max(level, logging.WARNING))
    if not fp8:
        logging.getLogger("torchao").setLevel(logging.ERROR)
    logging.getLogger("torch.utils._pytree").addFilter(_EnumConstantNotice())


class _EnumConstantNotice(logging.Filter):
    """Drops torch's "Calling register_constant() on Enum subclasses is deprecated" (torchao's call, not ours)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "register_constant() on Enum subclasses is deprecated" not in record.getMessage()

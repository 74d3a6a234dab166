"""torchtitan 0.3.0's configuration for a benchmark run: a ``config_registry`` module of one function.

torchtitan 0.3.0 builds its run from a Python config function named on the command line (``--module M --config F``;
a module path outside torchtitan is accepted). This one is ``llama3_bench``: a Llama-3 flavor of torchtitan's own
(``1B``, ``3B``, ``8B``, ...) with the settings a throughput comparison needs, read from the environment so that
``bench/peers/torchtitan_run.py`` can start it under torchrun::

    TT_FLAVOR=1B TT_BATCH=4 TT_SEQ=4096 TT_STEPS=20 TT_COMPILE=1 TT_AC=none TT_ASSETS=<tokenizer dir> \\
        torchrun --standalone --nproc-per-node 1 -m torchtitan.train --module peers.torchtitan3_registry \\
        --config llama3_bench

AdamW at lr 8e-4 with 2 warm-up steps, no checkpoints, no validation, a log line every step, ``c4_test`` text (read
from ``tests/assets/c4_test`` under the working directory).
"""

from __future__ import annotations

import os
from typing import Any


def llama3_bench() -> Any:
    from torchtitan.components.loss import ChunkedLossWrapper, CrossEntropyLoss
    from torchtitan.components.metrics import MetricsProcessor
    from torchtitan.components.optimizer import LRSchedulersContainer, default_adamw
    from torchtitan.config import CompileConfig, TrainingConfig
    from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC
    from torchtitan.hf_datasets.text_datasets import HuggingFaceTextDataLoader
    from torchtitan.models.common.config_utils import decoder_vocab_size
    from torchtitan.models.llama3 import model_registry
    from torchtitan.trainer import Trainer

    spec = model_registry(os.environ["TT_FLAVOR"])
    ac = {"none": None, "full": FullAC.Config(), "selective": SelectiveAC.Config()}[os.environ.get("TT_AC", "none")]
    return Trainer.Config(
        loss=ChunkedLossWrapper.Config(loss_fn=CrossEntropyLoss.Config(global_vocab_size=decoder_vocab_size(spec))),
        hf_assets_path=os.environ["TT_ASSETS"],
        model_spec=spec,
        optimizer=default_adamw(lr=8e-4),
        lr_scheduler=LRSchedulersContainer.Config(warmup_steps=2),
        training=TrainingConfig(
            local_batch_size=int(os.environ["TT_BATCH"]),
            seq_len=int(os.environ["TT_SEQ"]),
            steps=int(os.environ["TT_STEPS"]),
        ),
        dataloader=HuggingFaceTextDataLoader.Config(dataset="c4_test"),
        metrics=MetricsProcessor.Config(log_freq=1),
        activation_checkpoint=ac,
        compile=CompileConfig(enable=os.environ.get("TT_COMPILE") == "1"),
    )

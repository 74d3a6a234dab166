"""Data: documents -> tokens -> packed sequences -> a seeded global order split across data-parallel ranks.

Sharding rule (what makes loss parity and resume exact): the global sample order
is a seeded permutation per epoch. Each micro-step takes the next
``dp_size * micro_batch_size`` samples of it (the global micro-batch; an epoch's
tail too short for a whole one is skipped, so a micro-batch never repeats a
sample) and data-parallel rank ``r`` takes its contiguous slice
``[r * mb, (r + 1) * mb)``. So no two ranks ever read the same sample in a step,
the same seed gives the same order, and one process with micro batch
``dp_size * mb`` sees exactly the same global batch. Every rank in FSDP and HSDP
is data-parallel, so ``dp_size`` is the world size. The position in the stream
(epoch, index) is saved in checkpoints.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .config import DataConfig
from .corpus import builtin_documents
from .errors import ConfigError
from .model import IGNORE_INDEX
from .tokenizer import encode_documents

log = logging.getLogger(__name__)

SAMSUM_PROMPT = "Summarize this dialog:\n{dialogue}\n---\nSummary:\n{summary}"


def _files(path: str, suffix: str, flag: str) -> list[Path]:
    p = Path(path)
    if p.is_file():
        return [p]
    if p.is_dir():
        found = sorted(f for f in p.rglob(f"*{suffix}") if f.is_file())
        if found:
            return found
        raise ConfigError(f"{flag}: no {suffix} files under {path}")
    raise ConfigError(f"{flag}: {path} does not exist")


def text_documents(path: str) -> list[str]:
    """Documents of .txt files: blocks separated by blank lines."""
    docs: list[str] = []
    for f in _files(path, ".txt", "--data.path"):
        docs.extend(d.strip() for d in re.split(r"\n\s*\n", f.read_text(encoding="utf-8")) if d.strip())
    return docs


def jsonl_documents(path: str, text_field: str) -> list[str]:
    """The ``text_field`` of each JSON line of .jsonl files."""
    docs: list[str] = []
    for f in _files(path, ".jsonl", "--data.path"):
        for n, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            row = json.loads(line)
            if text_field not in row:
                raise ConfigError(f"--data.text_field: {f}:{n} has no field {text_field!r} (fields: {', '.join(row)})")
            docs.append(str(row[text_field]))
    return docs


def hub_documents(cfg: DataConfig, is_leader: bool, barrier: Callable[[], None]) -> list[str]:
    """Rows of a Hugging Face dataset; dialogue/summary datasets (samsum) get the summarisation prompt."""
    try:
        import datasets
    except ImportError:
        raise ConfigError("--data.source: 'hf' needs the datasets library; pip install fsdp-trainer[hub]") from None
    token = os.environ.get("HF_TOKEN")
    if not is_leader:
        barrier()  # the leader downloads first, the others then read its cache
    ds = datasets.load_dataset(cfg.dataset, split=cfg.split, token=token)
    if is_leader:
        barrier()
    if {"dialogue", "summary"} <= set(ds.column_names):
        return [SAMSUM_PROMPT.format(dialogue=r["dialogue"], summary=r["summary"]) for r in ds]
    if cfg.text_field not in ds.column_names:
        raise ConfigError(
            f"--data.text_field: dataset {cfg.dataset} has no column {cfg.text_field!r} (columns: {', '.join(ds.column_names)})"
        )
    return [str(t) for t in ds[cfg.text_field]]


def load_documents(cfg: DataConfig, is_leader: bool = True, barrier: Callable[[], None] = lambda: None) -> list[str]:
    """The documents of ``data.source`` (text, jsonl or hf)."""
    if cfg.source == "text":
        return text_documents(cfg.path) if cfg.path else builtin_documents()
    if cfg.source == "jsonl":
        return jsonl_documents(cfg.path or "", cfg.text_field)
    if cfg.source == "hf":
        return hub_documents(cfg, is_leader, barrier)
    raise ValueError(f"load_documents does not handle data.source={cfg.source}")


def pack(token_lists: list[list[int]], seq_len: int) -> torch.Tensor:
    """Concatenate documents and cut them into ``[num_seqs, seq_len + 1]`` windows (the tail is dropped)."""
    flat = torch.tensor([t for doc in token_lists for t in doc], dtype=torch.int32)
    n = flat.numel() // (seq_len + 1)
    return flat[: n * (seq_len + 1)].view(n, seq_len + 1)


class PackedDataset:
    """Fixed-length token windows held in memory (int32)."""

    def __init__(self, windows: torch.Tensor):
        self.windows = windows

    def __len__(self) -> int:
        return self.windows.shape[0]

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.windows[i]


class SyntheticDataset:
    """Endless seeded random tokens: sample ``i`` is the same on every rank and every run."""

    def __init__(self, vocab_size: int, seq_len: int, seed: int):
        self.vocab_size, self.seq_len, self.seed = vocab_size, seq_len, seed

    def __getitem__(self, i: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + i)
        return torch.randint(0, self.vocab_size, (self.seq_len + 1,), generator=g, dtype=torch.int32)


def epoch_seed(seed: int, epoch: int) -> int:
    """The generator seed of one epoch's order: distinct for every (seed, epoch) of realistic size."""
    return seed * 1_000_003 + epoch


class GlobalBatchSampler:
    """The seeded global sample stream, sliced by data-parallel rank (see the module docstring)."""

    def __init__(self, num_samples: int | None, seed: int, dp_rank: int, dp_size: int, micro_batch_size: int):
        """``num_samples=None`` is an endless stream read in index order (synthetic data)."""
        if num_samples is not None and num_samples < dp_size * micro_batch_size:
            raise ConfigError(
                f"--data.seq_len: the data packs into only {num_samples} sequences, fewer than one global "
                f"micro-batch ({dp_size} ranks x {micro_batch_size}); use a shorter --data.seq_len or more data"
            )
        self.num_samples, self.seed = num_samples, seed
        self.dp_rank, self.dp_size, self.mb = dp_rank, dp_size, micro_batch_size
        self.epoch, self.position = 0, 0
        self._perm: torch.Tensor | None = None

    def _order(self) -> torch.Tensor:
        if self._perm is None:
            # Mixed, not seed + epoch: seed 1's epoch 1 would be seed 2's epoch 0 (one order shared by two runs).
            g = torch.Generator().manual_seed(epoch_seed(self.seed, self.epoch))
            self._perm = torch.randperm(self.num_samples or 0, generator=g)
        return self._perm

    def next_global(self) -> list[int]:
        """Sample indices of the next global micro-batch (all ranks' slices, in rank order)."""
        size = self.dp_size * self.mb
        if self.num_samples is None:
            start = self.position
            self.position += size
            return list(range(start, start + size))
        if self.num_samples - self.position < size:  # drop the epoch's tail: a batch never spans two epochs
            self.epoch, self.position, self._perm = self.epoch + 1, 0, None
        out = self._order()[self.position : self.position + size].tolist()
        self.position += size
        return out

    def next_local(self) -> list[int]:
        """This rank's slice of the next global micro-batch."""
        batch = self.next_global()
        return batch[self.dp_rank * self.mb : (self.dp_rank + 1) * self.mb]

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch, self.position, self._perm = int(state["epoch"]), int(state["position"]), None


@dataclass
class Batch:
    """One micro-batch on the training device."""

    input_ids: torch.Tensor
    labels: torch.Tensor
    num_targets: int
    """Labels that count in the loss (not IGNORE_INDEX), counted on CPU to avoid a device sync."""


class DataLoader:
    """Micro-batches of this rank, in the global order; its position is checkpointed."""

    def __init__(self, dataset: Any, sampler: GlobalBatchSampler, device: torch.device):
        self.dataset, self.sampler, self.device = dataset, sampler, device

    def next_batch(self) -> Batch:
        rows = torch.stack([self.dataset[i] for i in self.sampler.next_local()]).long()
        num_targets = int((rows[:, 1:] != IGNORE_INDEX).sum())
        if self.device.type == "cuda":  # pinned, so the copy is queued without waiting for the GPU
            rows = rows.pin_memory()
        rows = rows.to(self.device, non_blocking=True)
        return Batch(input_ids=rows[:, :-1], labels=rows[:, 1:], num_targets=num_targets)

    def state_dict(self) -> dict[str, int]:
        return self.sampler.state_dict()

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.sampler.load_state_dict(state)


def build_dataloader(
    cfg: DataConfig,
    tokenizer: Any,
    vocab_size: int,
    micro_batch_size: int,
    dp_rank: int,
    dp_size: int,
    device: torch.device,
    is_leader: bool = True,
    barrier: Callable[[], None] = lambda: None,
) -> DataLoader:
    """The data pipeline of ``data.source`` for this rank."""
    assert cfg.seed is not None
    if cfg.source == "synthetic":
        dataset: Any = SyntheticDataset(vocab_size, cfg.seq_len, cfg.seed)
    else:
        docs = load_documents(cfg, is_leader, barrier)
        token_lists = encode_documents(tokenizer, docs)
        top = max((max(t) for t in token_lists if t), default=0)
        if top >= vocab_size:
            raise ConfigError(f"--model.tokenizer: token id {top} does not fit the model's vocabulary of {vocab_size}")
        dataset = PackedDataset(pack(token_lists, cfg.seq_len))
        log.info("data: %d documents, %d sequences of %d tokens", len(docs), len(dataset), cfg.seq_len)
    num_samples = None if cfg.source == "synthetic" else len(dataset)
    sampler = GlobalBatchSampler(num_samples, cfg.seed, dp_rank, dp_size, micro_batch_size)
    return DataLoader(dataset, sampler, device)

"""Why an asynchronous save's copies and writes can hold the training loop, measured apart from the trainer.

Two questions from bench/reports/2026-12-06-h100-checkpoint-cost-memory-store.md, one GPU:

* ``copy``: does a device-to-host copy into pinned memory, issued ``non_blocking`` on a side stream, return to the
  host at once (asynchronous) or only once it is done? Host time of the call against the copy's device time, for
  pinned and pageable destinations, one large copy and 64 MiB pieces, and into device memory (the on-device stage).
* ``stall``: a main thread launching small CUDA kernels and synchronizing every 50 (a stand-in for a training step's
  host side), while background threads write a staged state to ``--dir``: DCP's ``FileSystemWriter`` with one and four
  threads, four threads of ``torch.save``, four threads of plain ``write`` + ``fsync`` of the same bytes, and four
  threads of pure-Python work (the GIL held, no I/O). Each case reports the main loop's chunk times while the
  background ran against the idle baseline: which of GIL, torch's serialization or the store's writes holds it.

    python bench/checkpoint_stall.py --dir /mnt/ckfast/stall --gb 4 --out $OUT/checkpoint-stall.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch


def copy_case(gb: float) -> list[dict[str, Any]]:
    dev = torch.device("cuda")
    n = int(gb * 2**30) // 2
    src = torch.randn(n, device=dev, dtype=torch.float32).to(torch.bfloat16)
    out = []
    side = torch.cuda.Stream(dev)
    for dest_kind in ("pinned", "pageable", "device"):
        began = time.perf_counter()
        if dest_kind == "device":
            dst = torch.empty_like(src)
        else:
            dst = torch.empty(n, dtype=src.dtype, pin_memory=dest_kind == "pinned")
        alloc = time.perf_counter() - began
        for pieces in (1, max(1, int(gb * 16))):  # whole, 64 MiB pieces
            torch.cuda.synchronize()
            side.wait_stream(torch.cuda.current_stream())
            ev0, ev1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            began = time.perf_counter()
            with torch.cuda.stream(side):
                ev0.record(side)
                for s, d in zip(src.chunk(pieces), dst.chunk(pieces), strict=True):
                    d.copy_(s, non_blocking=True)
                ev1.record(side)
            host = time.perf_counter() - began
            ev1.synchronize()
            device = ev0.elapsed_time(ev1) / 1000
            out.append(
                {
                    "dest": dest_kind,
                    "is_pinned": bool(dst.is_pinned()) if dest_kind != "device" else None,
                    "alloc_s": round(alloc, 3),
                    "pieces": pieces,
                    "gb": round(src.numel() * 2 / 1e9, 2),
                    "host_s": round(host, 4),
                    "device_s": round(device, 4),
                    "gb_per_s": round(src.numel() * 2 / 1e9 / device, 1),
                }
            )
            print(json.dumps(out[-1]), flush=True)
        del dst
    return out


def main_loop(stop: threading.Event, chunks: list[float], x: torch.Tensor, w: torch.Tensor) -> None:
    while not stop.is_set():
        began = time.perf_counter()
        y = x
        for _ in range(50):
            y = torch.relu(y @ w)
        torch.cuda.synchronize()
        chunks.append(time.perf_counter() - began)


def staged_state(gb: float) -> dict[str, torch.Tensor]:
    pieces = 16
    n = int(gb * 2**30) // 4 // pieces
    return {f"layer{i}.weight": torch.empty(n, dtype=torch.float32, pin_memory=True).fill_(i) for i in range(pieces)}


def writers(state: dict[str, torch.Tensor], root: Path) -> dict[str, Callable[[], None]]:
    import torch.distributed.checkpoint as dcp

    def dcp_save(threads: int, copy_ahead: int = 10_000_000) -> Callable[[], None]:
        def go() -> None:
            target = root / f"dcp-t{threads}"
            writer = dcp.FileSystemWriter(str(target), thread_count=threads, per_thread_copy_ahead=copy_ahead)
            dcp.save(state, storage_writer=writer, no_dist=True)

        return go

    def in_threads(fn: Callable[[int, list[torch.Tensor]], None]) -> Callable[[], None]:
        def go() -> None:
            parts: list[list[torch.Tensor]] = [[] for _ in range(4)]
            for i, t in enumerate(state.values()):
                parts[i % 4].append(t)
            ts = [threading.Thread(target=fn, args=(i, p)) for i, p in enumerate(parts)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()

        return go

    def torch_save(i: int, tensors: list[torch.Tensor]) -> None:
        with open(root / f"ts-{i}.pt", "wb") as f:
            for t in tensors:
                torch.save(t, f)
            f.flush()
            os.fsync(f.fileno())

    def raw_write(i: int, tensors: list[torch.Tensor]) -> None:
        with open(root / f"raw-{i}.bin", "wb") as f:
            for t in tensors:
                f.write(memoryview(t.numpy()).cast("B"))
            f.flush()
            os.fsync(f.fileno())

    def in_one_thread(fn: Callable[[int, list[torch.Tensor]], None]) -> Callable[[], None]:
        return lambda: fn(0, list(state.values()))

    def gil(i: int, tensors: list[torch.Tensor]) -> None:
        deadline = time.perf_counter() + 4.0
        while time.perf_counter() < deadline:
            sum(range(1000))

    return {
        "dcp-1-thread": dcp_save(1),
        "dcp-1-thread-no-copy-ahead": dcp_save(1, 0),
        "dcp-4-threads": dcp_save(4),
        "torch-save-1-thread": in_one_thread(torch_save),
        "raw-write-1-thread": in_one_thread(raw_write),
        "python-only-1-thread": in_one_thread(gil),
        "torch-save-4-threads": in_threads(torch_save),
        "raw-write-4-threads": in_threads(raw_write),
        "python-only-4-threads": in_threads(gil),
    }


def stall_case(gb: float, root: Path, cases: list[str]) -> list[dict[str, Any]]:
    dev = torch.device("cuda")
    x = torch.randn(2048, 2048, device=dev, dtype=torch.bfloat16)
    w = torch.randn(2048, 2048, device=dev, dtype=torch.bfloat16) / 64
    began = time.perf_counter()
    state = staged_state(gb)
    alloc = time.perf_counter() - began
    out: list[dict[str, Any]] = []
    jobs = writers(state, root)
    for name in ["idle", *cases]:
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        stop, chunks = threading.Event(), []
        loop = threading.Thread(target=main_loop, args=(stop, chunks, x, w))
        # the loop is the main thread's stand-in: run the background work in its own thread and time the loop
        loop.start()
        began = time.perf_counter()
        if name == "idle":
            time.sleep(3.0)
        else:
            job = threading.Thread(target=jobs[name])
            job.start()
            job.join()
        background = time.perf_counter() - began
        stop.set()
        loop.join()
        rec = {
            "case": name,
            "background_s": round(background, 2),
            "gb": round(sum(t.numel() * 4 for t in state.values()) / 1e9, 2),
            "write_gb_per_s": None
            if name in ("idle", "python-only-4-threads")
            else round(gb * 2**30 / 1e9 / background, 2),
            "loop_chunks": len(chunks),
            "chunk_median_s": round(statistics.median(chunks), 5) if chunks else None,
            "chunk_max_s": round(max(chunks), 3) if chunks else None,
            "loop_chunks_per_s": round(len(chunks) / background, 1),
        }
        out.append(rec)
        print(json.dumps(rec), flush=True)
    shutil.rmtree(root, ignore_errors=True)
    out.append({"pinned_alloc_s": round(alloc, 2)})
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--dir", required=True, help="where the stall case writes (the checkpoint store)")
    parser.add_argument("--gb", type=float, default=4.0)
    parser.add_argument("--copy-gb", type=float, default=4.0)
    parser.add_argument(
        "--cases",
        default="dcp-1-thread,dcp-1-thread-no-copy-ahead,dcp-4-threads,torch-save-1-thread,torch-save-4-threads,"
        "raw-write-1-thread,raw-write-4-threads,python-only-1-thread,python-only-4-threads",
    )
    args = parser.parse_args()
    record: dict[str, Any] = {
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(),
        "python": sys.version.split()[0],
        "switch_interval_s": sys.getswitchinterval(),
    }
    record["copy"] = copy_case(args.copy_gb)
    Path(args.out).write_text(json.dumps(record, indent=1))
    torch.cuda.empty_cache()
    record["stall"] = stall_case(args.gb, Path(args.dir), args.cases.split(","))
    Path(args.out).write_text(json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""One AdamW step over one rank's parameter shards: torch's fused and foreach kernels against the trainer's Triton kernel.

    python bench/adamw_step.py [--preset llama3.1-8b] [--ranks 2] [--iters 5] [--out DIR]

The shards are those FSDP2 gives one of ``--ranks`` ranks for the preset (every weight split on its first dimension,
padded; fp32 parameters, gradients and both moments), on one GPU. Each implementation steps them ``--iters`` times
after two untimed steps. Printed per implementation: GPU ms per step (CUDA events), host ms per step (to enqueue it), and the memory traffic as GB/s
(28 bytes per element: four fp32 reads, three writes). ``triton-master`` is the Triton kernel with master weights
(``precision.master_weights optimizer``): bf16 parameters and gradients, the masters' 16-bit remainders, 26 bytes
per element (reads: gradient, parameter and remainder 2 each, moments 4 each; writes: parameter, remainder, moments).
Before timing, the Triton kernel is checked against torch's
fused kernel over three steps on the first blocks' shards (the largest difference, as a share of the largest change
the steps made). Writes ``adamw_step_<preset>.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "packages" / "trainer" / "src"))

from fsdp_trainer.optim.triton_adamw import TritonAdamW  # noqa: E402
from fsdp_trainer.presets import PRESETS, kv_dim  # noqa: E402

BETAS, EPS, LR, WD = (0.9, 0.95), 1e-8, 3e-4, 0.1


def shard_sizes(preset: str, ranks: int) -> list[int]:
    """Elements of one rank's shard of every parameter (FSDP2 pads dim 0 to a multiple of the ranks)."""
    spec = PRESETS[preset]()
    h, f, layers, vocab = spec["hidden_size"], spec["intermediate_size"], spec["num_hidden_layers"], spec["vocab_size"]
    kv = kv_dim(spec)
    block = [(h, h), (kv, h), (kv, h), (h, h), (f, h), (f, h), (h, f), (h, 1), (h, 1)]  # q k v o gate up down, 2 norms
    shapes = [(vocab, h)] + block * layers + [(h, 1), (vocab, h)]
    return [-(-rows // ranks) * cols for rows, cols in shapes]


BYTES_PER_ELEMENT = {"triton-master": 26}  # the others: 28


def make(sizes: list[int], seed: int, dtype: torch.dtype = torch.float32) -> list[torch.nn.Parameter]:
    g = torch.Generator(device="cuda").manual_seed(seed)
    params = []
    for n in sizes:
        p = torch.nn.Parameter((torch.randn(n, device="cuda", generator=g) * 0.02).to(dtype))
        p.grad = (torch.randn(n, device="cuda", generator=g) * 1e-3).to(dtype)
        params.append(p)
    return params


def build(impl: str, params: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
    if impl in ("triton", "triton-master"):
        return TritonAdamW(params, lr=LR, betas=BETAS, eps=EPS, weight_decay=WD, master_weights=impl == "triton-master")
    return torch.optim.AdamW(params, lr=LR, betas=BETAS, eps=EPS, weight_decay=WD, **{impl: True})


def check(sizes: list[int]) -> float:
    """Largest difference between Triton and torch fused AdamW parameters after three steps, as a share of the largest
    change the steps made. Each step has new gradients."""
    results = []
    for impl in ("fused", "triton"):
        params = make(sizes, seed=1)
        opt = build(impl, params)
        g = torch.Generator(device="cuda").manual_seed(2)
        for _step in range(3):
            for p in params:
                p.grad = torch.randn(p.shape, device="cuda", generator=g) * 1e-3
            opt.step()
        results.append(params)
    initial = make(sizes, seed=1)
    worst = 0.0
    for a, b, p0 in zip(*results, initial, strict=True):
        worst = max(worst, ((a - b).abs().max() / (b - p0).abs().max()).item())
    return worst


def measure(impl: str, sizes: list[int], iters: int) -> dict:
    params = make(sizes, seed=0, dtype=torch.bfloat16 if impl == "triton-master" else torch.float32)
    opt = build(impl, params)
    for _ in range(2):
        opt.step()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    host = 0.0
    start.record()
    for _ in range(iters):
        t0 = time.perf_counter()
        opt.step()
        host += time.perf_counter() - t0
    end.record()
    torch.cuda.synchronize()
    gpu_ms = start.elapsed_time(end) / iters
    elements = sum(sizes)
    del opt, params
    torch.cuda.empty_cache()
    return {
        "impl": impl,
        "gpu_ms": gpu_ms,
        "host_ms": host * 1e3 / iters,
        "gb_per_s": BYTES_PER_ELEMENT.get(impl, 28) * elements / gpu_ms / 1e6,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="llama3.1-8b")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--impls", default="fused,triton,triton-master,foreach")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    sizes = shard_sizes(args.preset, args.ranks)
    header = {
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "preset": args.preset,
        "ranks": args.ranks,
        "tensors": len(sizes),
        "elements": sum(sizes),
        "bytes_per_step": 28 * sum(sizes),
    }
    print(header, flush=True)
    header["triton_vs_fused_max_rel_diff"] = check(sizes[: 1 + 9 * 2])
    print(
        f"triton against fused after 3 steps: max difference {header['triton_vs_fused_max_rel_diff']:.2e} of the largest update",
        flush=True,
    )
    rows = [measure(impl, sizes, args.iters) for impl in args.impls.split(",")]
    print("| AdamW | GPU ms/step | host ms/step | GB/s |\n|---|---:|---:|---:|")
    for r in rows:
        print(f"| {r['impl']} | {r['gpu_ms']:.1f} | {r['host_ms']:.1f} | {r['gb_per_s']:.0f} |")
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"adamw_step_{args.preset}.json").write_text(json.dumps({**header, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()

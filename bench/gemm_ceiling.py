"""How fast one training step's matmuls can run on this GPU: alone, and beside FSDP's collectives.

    python bench/gemm_ceiling.py [--preset llama3.1-8b] [--tokens 12288] [--nproc 2] [--out DIR]

Every matmul of one optimizer step of the preset (per decoder block: the q, k, v, o, gate, up and down
projections; once: the lm_head), each as its forward (X·Wᵀ), input gradient (dY·W) and weight gradient
(dYᵀ·X), bf16, ``--tokens`` rows (micro batch x sequence: 3 x 4096 by default, the 8B's best setting), is
timed with CUDA events:

- alone, on one GPU;
- beside NCCL: on every one of ``--nproc`` GPUs at once while a second stream keeps all-gathering one block's bf16
  weights and reduce-scattering its fp32 gradients (FSDP2's traffic for the shape), as in a training step
  where communication overlaps compute. The collectives run the whole time, so this is the worst case of the
  contention; in a real step they cover about 15% of it (bench/RESULTS.md, session 3's profile).

The sum over a step is the floor of the step's matmul time on this GPU with cuBLAS (what ``torch.matmul``
picks); set it against a profiled step's GEMM time (bench/profile_step.py) to see what is left to win.
Writes ``gemm_ceiling_<preset>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

ROOT = Path(__file__).resolve().parents[1]
ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def step_matmuls(preset: str) -> list[tuple[str, int, int, int]]:
    """(name, count per step, in features, out features) of every linear layer of one step."""
    sys.path.insert(0, str(ROOT / "packages" / "trainer" / "src"))
    from fsdp_trainer.presets import PRESETS, kv_dim

    spec = PRESETS[preset]()
    h, f, layers = spec["hidden_size"], spec["intermediate_size"], spec["num_hidden_layers"]
    kv = kv_dim(spec)
    block = [("q", h, h), ("k", h, kv), ("v", h, kv), ("o", h, h), ("gate", h, f), ("up", h, f), ("down", f, h)]
    return [(name, layers, i, o) for name, i, o in block] + [("lm_head", 1, h, spec["vocab_size"])]


def time_ms(fn, iters: int) -> float:
    for _ in range(3):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / iters


def measure(matmuls: list[tuple[str, int, int, int]], tokens: int, iters: int) -> dict[str, dict[str, float]]:
    """ms of each pass of each matmul (one call), on the current stream."""
    return {name: _passes(tokens, fan_in, fan_out, iters) for name, _, fan_in, fan_out in matmuls}


def _passes(tokens: int, fan_in: int, fan_out: int, iters: int) -> dict[str, float]:
    x = torch.randn(tokens, fan_in, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(fan_out, fan_in, device="cuda", dtype=torch.bfloat16)
    dy = torch.randn(tokens, fan_out, device="cuda", dtype=torch.bfloat16)
    return {"forward": time_ms(lambda: x @ w.t(), iters), "input_grad": time_ms(lambda: dy @ w, iters),
            "weight_grad": time_ms(lambda: dy.t() @ x, iters)}


def worker(rank: int, world: int, args: argparse.Namespace, queue) -> None:
    try:
        _work(rank, world, args, queue)
    except Exception as e:  # the parent waits on the queue: tell it instead of leaving it waiting
        queue.put({"error": f"rank {rank}: {type(e).__name__}: {e}"[:500]})
        raise


def _work(rank: int, world: int, args: argparse.Namespace, queue) -> None:
    os.environ.update(ENV)
    torch.cuda.set_device(rank)
    matmuls = step_matmuls(args.preset)
    result: dict = {}
    if rank == 0:
        result["alone"] = measure(matmuls, args.tokens, args.iters)
    if world > 1:
        dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", rank))
        # One decoder block's parameters: what FSDP2 gathers (bf16) and reduce-scatters (fp32) per block.
        block_params = sum(i * o for name, _, i, o in matmuls if name != "lm_head")
        shard = (block_params + world - 1) // world
        gathered = torch.empty(shard * world, device="cuda", dtype=torch.bfloat16)
        local = torch.randn(shard, device="cuda", dtype=torch.bfloat16)
        grads = torch.randn(shard * world, device="cuda", dtype=torch.float32)
        reduced = torch.empty(shard, device="cuda", dtype=torch.float32)
        comm = torch.cuda.Stream()

        def collectives(n: int) -> None:
            with torch.cuda.stream(comm):
                for _ in range(n):
                    dist.all_gather_into_tensor(gathered, local)
                    dist.reduce_scatter_tensor(reduced, grads)

        collectives(2)  # NCCL's first calls set up its channels
        torch.cuda.synchronize()
        t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0.record(comm)
        collectives(4)
        t1.record(comm)
        t1.synchronize()
        pair_ms = t0.elapsed_time(t1) / 4
        # Enough collectives to outlast the timed matmuls: measure() runs each pass iters + 3 times.
        alone = result["alone"] if rank == 0 else measure(matmuls, args.tokens, 1)
        matmul_ms = sum(sum(passes.values()) for passes in alone.values()) * (args.iters + 3)
        count = torch.tensor([int(1.5 * matmul_ms / pair_ms) + 4], device="cuda")
        dist.all_reduce(count, op=dist.ReduceOp.MAX)  # every rank must issue the same collectives
        collectives(int(count.item()))
        beside = measure(matmuls, args.tokens, args.iters)
        torch.cuda.synchronize()
        dist.barrier()
        if rank == 0:
            result["beside_nccl"] = beside
            result["collective_pair_ms"] = pair_ms
            result["block_params"] = block_params
        dist.destroy_process_group()
    if rank == 0:
        queue.put(result)


def summarize(result: dict, matmuls: list[tuple[str, int, int, int]], tokens: int) -> dict:
    rows, totals = [], {}
    for mode in ("alone", "beside_nccl"):
        if mode not in result:
            continue
        step_ms = step_flop = 0.0
        for name, count, fan_in, fan_out in matmuls:
            flop = 2 * tokens * fan_in * fan_out
            for kind, ms in result[mode][name].items():
                rows.append({"mode": mode, "matmul": name, "pass": kind, "m_k_n": _mkn(kind, tokens, fan_in, fan_out),
                             "ms": ms, "tflops": flop / ms / 1e9})
                step_ms += count * ms
                step_flop += count * flop
        totals[mode] = {"step_matmul_ms": step_ms, "tflops": step_flop / step_ms / 1e9}
    return {"rows": rows, "totals": totals}


def _mkn(kind: str, tokens: int, fan_in: int, fan_out: int) -> str:
    return {"forward": f"{tokens}x{fan_in}x{fan_out}", "input_grad": f"{tokens}x{fan_out}x{fan_in}",
            "weight_grad": f"{fan_out}x{tokens}x{fan_in}"}[kind]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="llama3.1-8b")
    parser.add_argument("--tokens", type=int, default=3 * 4096, help="rows of every matmul: micro batch x sequence length")
    parser.add_argument("--nproc", type=int, default=0, help="GPUs for the beside-NCCL timing (default: all visible; 1 skips it)")
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--out", default=os.environ.get("OUT", ".bench"))
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("error: gemm_ceiling.py times CUDA matmuls; no GPU is visible here", file=sys.stderr)
        return 2
    world = args.nproc or torch.cuda.device_count()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(rank, world, args, queue)) for rank in range(world)]
    for p in procs:
        p.start()
    result = queue.get(timeout=600)
    for p in procs:
        p.join(timeout=60 if "error" in result else None)
        if p.is_alive():
            p.kill()
    if "error" in result:
        print(f"error: {result['error']}", file=sys.stderr)
        return 1
    matmuls = step_matmuls(args.preset)
    summary = summarize(result, matmuls, args.tokens)
    header = {"gpu": torch.cuda.get_device_name(), "gpus": world, "torch": torch.__version__, "preset": args.preset, "tokens": args.tokens,
              "collective_pair_ms": result.get("collective_pair_ms"), "block_params": result.get("block_params")}
    print(header)
    print("| matmul | pass | M x K x N | alone ms | alone TFLOP/s | beside NCCL ms | beside NCCL TFLOP/s |")
    print("|---|---|---|---:|---:|---:|---:|")
    by_key = {(r["matmul"], r["pass"], r["mode"]): r for r in summary["rows"]}
    for name, _, _, _ in matmuls:
        for kind in ("forward", "input_grad", "weight_grad"):
            a, b = by_key[(name, kind, "alone")], by_key.get((name, kind, "beside_nccl"))
            tail = f"{b['ms']:.3f} | {b['tflops']:.0f}" if b else "- | -"
            print(f"| {name} | {kind} | {a['m_k_n']} | {a['ms']:.3f} | {a['tflops']:.0f} | {tail} |")
    for mode, t in summary["totals"].items():
        print(f"one step's matmuls, {mode}: {t['step_matmul_ms']:.1f} ms at {t['tflops']:.0f} TFLOP/s")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / f"gemm_ceiling_{args.preset}.json").write_text(json.dumps({**header, **summary}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

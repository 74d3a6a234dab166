"""How fast one training step's matmuls can run on this GPU: alone, and beside FSDP's collectives.

    python bench/gemm_ceiling.py [--preset llama3.1-8b] [--tokens 12288] [--nproc 2] [--out DIR]

Every matmul of one optimizer step of the preset (per decoder block: the q, k, v, o, gate, up and down
projections, over ``--tokens`` rows: micro batch x sequence, 3 x 4096 by default, the 8B's best setting; the
lm_head over ``--loss-chunk`` rows at a time, as the trainer's fused loss runs it), each as its forward (X·Wᵀ),
input gradient (dY·W) and weight gradient (dYᵀ·X), in bf16, is timed with CUDA events, after a second of warm-up:

- alone, on one GPU;
- beside NCCL: on every one of ``--nproc`` GPUs at once while a second stream runs FSDP2's collectives for one
  block (two all-gathers of its bf16 weights per reduce-scatter of its fp32 gradients), as in a training step
  where communication overlaps compute. The collectives run the whole time (the table says whether they
  outlasted each pass), so this is the worst case of the contention; in a real step they cover about 15% of
  it (bench/reports/2026-11-30-llama3.1-8b-h200x2-step-profile.md).

The sum over a step is the floor of the step's matmul time on this GPU with cuBLAS (what ``torch.matmul``
picks); set it against a profiled step's GEMM time (bench/profile_step.py) to see what is left to win.
Writes ``gemm_ceiling_<preset>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from queue import Empty

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from gpu_compare import MULTICAST_OFF  # noqa: E402


def step_matmuls(preset: str, tokens: int, loss_chunk: int) -> list[tuple[str, int, int, int, int]]:
    """(name, calls per step, rows, in features, out features) of every matmul of one step: the blocks' projections over
    all ``tokens``; the lm_head, which the trainer's fused loss runs over ``loss_chunk`` tokens at a time."""
    sys.path.insert(0, str(ROOT / "packages" / "trainer" / "src"))
    from fsdp_trainer.presets import PRESETS, kv_dim

    spec = PRESETS[preset]()
    h, f, layers = spec["hidden_size"], spec["intermediate_size"], spec["num_hidden_layers"]
    kv = kv_dim(spec)
    block = [("q", h, h), ("k", h, kv), ("v", h, kv), ("o", h, h), ("gate", h, f), ("up", h, f), ("down", f, h)]
    chunk = min(loss_chunk, tokens)
    return [(name, layers, tokens, i, o) for name, i, o in block] + [
        ("lm_head", -(-tokens // chunk), chunk, h, spec["vocab_size"])
    ]


def time_ms(fn, iters: int) -> float:
    """Mean ms of ``fn`` on the current stream, after 3 untimed calls."""
    for _ in range(3):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / iters


def pass_fns(rows: int, fan_in: int, fan_out: int) -> dict:
    """The three matmuls of one linear layer in training: forward, input gradient, weight gradient (bf16)."""
    x = torch.randn(rows, fan_in, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(fan_out, fan_in, device="cuda", dtype=torch.bfloat16)
    dy = torch.randn(rows, fan_out, device="cuda", dtype=torch.bfloat16)
    return {"forward": lambda: x @ w.t(), "input_grad": lambda: dy @ w, "weight_grad": lambda: dy.t() @ x}


def warm_up_gpu(seconds: float = 1.0) -> None:
    """Bring the clocks up and load cuBLAS before anything is timed."""
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(10):
            a @ a
        torch.cuda.synchronize()


def worker(rank: int, world: int, args: argparse.Namespace, queue) -> None:
    try:
        _work(rank, world, args, queue)
    except Exception as e:  # the parent waits on the queue: tell it instead of leaving it waiting
        queue.put({"error": f"rank {rank}: {type(e).__name__}: {e}"[:500]})
        raise


def _work(rank: int, world: int, args: argparse.Namespace, queue) -> None:
    torch.cuda.set_device(rank)
    matmuls = step_matmuls(args.preset, args.tokens, args.loss_chunk)
    warm_up_gpu()
    result: dict = {}
    if rank == 0:
        result["alone"] = {
            name: {kind: time_ms(fn, args.iters) for kind, fn in pass_fns(rows, i, o).items()}
            for name, _, rows, i, o in matmuls
        }
    if world > 1:
        result.update(beside_nccl(rank, world, args, matmuls, result.get("alone")))
    if rank == 0:
        queue.put(result)


def beside_nccl(rank: int, world: int, args: argparse.Namespace, matmuls: list, alone: dict | None) -> dict:
    """Every pass timed again on every GPU at once, each while the side stream runs FSDP2's collectives for one block:
    two all-gathers of its bf16 weights (forward, and backward after resharding) per reduce-scatter of its fp32 gradients.
    Each pass gets enough collectives queued to outlast it; ``covered`` says whether they did."""
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", rank))
    shared = [alone]
    dist.broadcast_object_list(shared, src=0)  # rank 0's timings size every rank's collectives alike
    alone = shared[0]
    block_params = sum(i * o for name, _, _, i, o in matmuls if name != "lm_head")
    shard = -(-block_params // world)
    gathered = torch.empty(shard * world, device="cuda", dtype=torch.bfloat16)
    local = torch.randn(shard, device="cuda", dtype=torch.bfloat16)
    grads = torch.randn(shard * world, device="cuda", dtype=torch.float32)
    reduced = torch.empty(shard, device="cuda", dtype=torch.float32)
    comm = torch.cuda.Stream()
    comm.wait_stream(torch.cuda.current_stream())  # the buffers are filled on the default stream

    def rounds(n: int) -> torch.cuda.Event:
        with torch.cuda.stream(comm):
            for _ in range(n):
                dist.all_gather_into_tensor(gathered, local)
                dist.all_gather_into_tensor(gathered, local)
                dist.reduce_scatter_tensor(reduced, grads)
            done = torch.cuda.Event()
            done.record()
        return done

    rounds(2).synchronize()  # NCCL's first calls set up its channels
    t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0.record(comm)
    rounds(4)
    t1.record(comm)
    t1.synchronize()
    round_ms = torch.tensor([t0.elapsed_time(t1) / 4], device="cuda")
    dist.all_reduce(round_ms, op=dist.ReduceOp.MAX)  # one value everywhere: every rank issues the same collectives
    round_ms = float(round_ms.item())
    beside: dict = {}
    covered: dict = {}
    for name, _, rows, i, o in matmuls:
        beside[name], covered[name] = {}, {}
        for kind, fn in pass_fns(rows, i, o).items():
            dist.barrier()
            done = rounds(int(1.5 * alone[name][kind] * (args.iters + 3) / round_ms) + 2)
            beside[name][kind] = time_ms(fn, args.iters)
            covered[name][kind] = not done.query()  # still communicating when the timed matmuls ended
            done.synchronize()
    dist.barrier()
    dist.destroy_process_group()
    return {"beside_nccl": beside, "covered": covered, "collective_round_ms": round_ms, "block_params": block_params}


def summarize(result: dict, matmuls: list[tuple[str, int, int, int, int]]) -> dict:
    """A row per (mode, matmul, pass) with its TFLOP/s, and each mode's total over one step."""
    rows, totals = [], {}
    for mode in ("alone", "beside_nccl"):
        if mode not in result:
            continue
        step_ms = step_flop = 0.0
        for name, count, tokens, fan_in, fan_out in matmuls:
            flop = 2 * tokens * fan_in * fan_out
            for kind, ms in result[mode][name].items():
                rows.append(
                    {
                        "mode": mode,
                        "matmul": name,
                        "pass": kind,
                        "calls_per_step": count,
                        "m_k_n": _mkn(kind, tokens, fan_in, fan_out),
                        "ms": ms,
                        "tflops": flop / ms / 1e9,
                        "covered": result.get("covered", {}).get(name, {}).get(kind) if mode == "beside_nccl" else None,
                    }
                )
                step_ms += count * ms
                step_flop += count * flop
        totals[mode] = {"step_matmul_ms": step_ms, "step_flop": step_flop, "tflops": step_flop / step_ms / 1e9}
    return {"rows": rows, "totals": totals}


def _mkn(kind: str, tokens: int, fan_in: int, fan_out: int) -> str:
    return {
        "forward": f"{tokens}x{fan_in}x{fan_out}",
        "input_grad": f"{tokens}x{fan_out}x{fan_in}",
        "weight_grad": f"{fan_out}x{tokens}x{fan_in}",
    }[kind]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="llama3.1-8b")
    parser.add_argument(
        "--tokens", type=int, default=3 * 4096, help="rows of the blocks' matmuls: micro batch x sequence length"
    )
    parser.add_argument(
        "--loss-chunk",
        type=int,
        default=4096,
        help="rows of each lm_head matmul (the trainer's train.loss_chunk_tokens)",
    )
    parser.add_argument(
        "--nproc", type=int, default=0, help="GPUs for the beside-NCCL timing (default: all visible; 1 skips it)"
    )
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--out", default=os.environ.get("OUT", ".bench"))
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("error: gemm_ceiling.py times CUDA matmuls; no GPU is visible here", file=sys.stderr)
        return 2
    world = args.nproc or torch.cuda.device_count()
    os.environ.update(MULTICAST_OFF)  # before the workers start: they inherit it
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(rank, world, args, queue), daemon=True) for rank in range(world)]
    for p in procs:
        p.start()
    try:
        result = queue.get(timeout=600)
    except Empty:
        result = {"error": "no result in 600 s (a worker died or hung)"}
    for p in procs:
        p.join(timeout=60 if "error" in result else None)
        if p.is_alive():
            p.kill()
    if "error" in result:
        print(f"error: {result['error']}", file=sys.stderr)
        return 1
    matmuls = step_matmuls(args.preset, args.tokens, args.loss_chunk)
    summary = summarize(result, matmuls)
    header = {
        "gpu": torch.cuda.get_device_name(),
        "gpus": world,
        "torch": torch.__version__,
        "preset": args.preset,
        "tokens": args.tokens,
        "loss_chunk": args.loss_chunk,
        "collective_round_ms": result.get("collective_round_ms"),
        "block_params": result.get("block_params"),
    }
    print(header)
    print(
        "| matmul | pass | calls/step | M x K x N | alone ms | alone TFLOP/s | beside NCCL ms | beside NCCL TFLOP/s | NCCL outlasted it |"
    )
    print("|---|---|---:|---|---:|---:|---:|---:|---|")
    by_key = {(r["matmul"], r["pass"], r["mode"]): r for r in summary["rows"]}
    for name, count, *_ in matmuls:
        for kind in ("forward", "input_grad", "weight_grad"):
            a, b = by_key[(name, kind, "alone")], by_key.get((name, kind, "beside_nccl"))
            tail = f"{b['ms']:.3f} | {b['tflops']:.0f} | {'yes' if b['covered'] else 'NO'}" if b else "- | - | -"
            print(f"| {name} | {kind} | {count} | {a['m_k_n']} | {a['ms']:.3f} | {a['tflops']:.0f} | {tail} |")
    for mode, t in summary["totals"].items():
        print(
            f"one step's matmuls, {mode}: {t['step_matmul_ms']:.1f} ms for {t['step_flop']:.3g} FLOP, {t['tflops']:.0f} TFLOP/s"
        )
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / f"gemm_ceiling_{args.preset}.json").write_text(json.dumps({**header, **summary}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Where a training step's GPU time goes: trace a few steps of trainer variants and sum the kernels by kind.

    python bench/profile_step.py --only 8b-fsdp2-noac-mb3-compile --out $OUT [--steps 10 --profile 8-9]

Each variant (a name from ``bench/gpu_compare.py``) runs under torchrun with ``--metrics.profile_steps``;
rank 0's trace is then read back and every GPU kernel is put in one kind: ``gemm``, ``attention``,
``nccl`` (communication), ``multi_tensor`` (every ``multi_tensor_apply`` kernel: fused AdamW, and also
FSDP2's all-gather copy-in and the clip's norm; ``optimizer`` in the oldest records), ``triton``
(compiled fused element-wise code), ``copy`` (memcpy / memset) or ``other`` (eager element-wise and
reductions). Per profiled step it prints the
time of each kind, how much of the communication overlaps compute (``nccl exposed`` is communication
running while no compute kernel runs), and ``idle`` (no kernel at all on the GPU: host-bound gaps,
and the sync that ``metrics.profile_steps`` makes at each traced step's boundary, so ``step_ms`` is
a little longer than an untraced step's time).
Writes ``<out>/profile_<variant>.json`` and the leader's ``kernels.txt`` as ``<out>/kernels_<variant>.txt``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gpu_compare

KINDS = {  # first match wins, on the lower-cased kernel name
    "nccl": ("nccl",),
    "attention": ("cudnn", "fmha", "flash", "attention", "sdpa"),
    "gemm": ("gemm", "nvjet", "cutlass", "xmma", "cublas", "matmul", "splitk"),
    "multi_tensor": ("multi_tensor_apply", "adam"),
    "triton": ("triton",),
}


def kind_of(name: str) -> str:
    low = name.lower()
    for kind, keys in KINDS.items():
        if any(k in low for k in keys):
            return kind
    return "other"


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _length(intervals: list[tuple[float, float]]) -> float:
    return sum(end - start for start, end in intervals)


def _intersection(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """Total overlap of two sorted, disjoint interval lists."""
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        total += max(0.0, hi - lo)
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def analyse(trace_file: Path, steps: int) -> dict:
    """Per-step GPU time by kind (ms), communication overlap and idle time, from one rank's chrome trace."""
    events = json.loads(gzip.decompress(trace_file.read_bytes()))["traceEvents"]
    kernels = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    if not kernels:
        raise SystemExit(f"{trace_file}: no GPU kernels in the trace (was it a CUDA run?)")
    by_kind: dict[str, float] = {}
    spans: dict[str, list[tuple[float, float]]] = {"compute": [], "nccl": []}
    top: dict[str, float] = {}
    for e in kernels:
        kind = "copy" if e["cat"] != "kernel" else kind_of(e["name"])
        by_kind[kind] = by_kind.get(kind, 0.0) + e["dur"]
        span = (float(e["ts"]), float(e["ts"]) + float(e["dur"]))
        spans["nccl" if kind == "nccl" else "compute"].append(span)
        top[e["name"][:90]] = top.get(e["name"][:90], 0.0) + e["dur"]
    compute, nccl = _union(spans["compute"]), _union(spans["nccl"])
    window = max(e["ts"] + e["dur"] for e in kernels) - min(e["ts"] for e in kernels)
    busy = _length(_union(compute + nccl))
    per_step = 1e-3 / steps  # microseconds in the trace -> milliseconds per step
    return {
        "steps": steps,
        "step_ms": window * per_step,
        "by_kind_ms": {k: round(v * per_step, 2) for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])},
        "compute_busy_ms": round(_length(compute) * per_step, 2),
        "nccl_ms": round(_length(nccl) * per_step, 2),
        "nccl_exposed_ms": round((_length(nccl) - _intersection(compute, nccl)) * per_step, 2),
        "idle_ms": round((window - busy) * per_step, 2),
        "top_kernels_ms": {k: round(v * per_step, 2) for k, v in sorted(top.items(), key=lambda kv: -kv[1])[:25]},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", required=True, help="comma-separated variants of bench/gpu_compare.py")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--profile", default="8-9", help="steps traced, A-B")
    parser.add_argument("--timeout", type=int, default=300)
    parser.add_argument("--nproc", type=int, default=0, help="GPUs per run (default: all visible)")
    parser.add_argument("--out", default=os.environ.get("OUT", ".bench"))
    args = parser.parse_args()
    first, _, last = args.profile.partition("-")
    traced = int(last or first) - int(first) + 1
    import torch

    nproc = args.nproc or torch.cuda.device_count()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="fsdp-profile-"))
    run_args = argparse.Namespace(steps=args.steps, warmup=2, timeout=args.timeout)
    results = {}
    for name in args.only.split(","):
        if name not in gpu_compare.TRAINER_VARIANTS:
            parser.error(f"--only: unknown variant {name!r}; see TRAINER_VARIANTS in bench/gpu_compare.py")
        profiled = f"{name}.profiled"
        gpu_compare.TRAINER_VARIANTS[profiled] = {
            **gpu_compare.TRAINER_VARIANTS[name],
            "metrics.profile_steps": args.profile,
        }
        record = gpu_compare.run_trainer(profiled, run_args, nproc, work)
        trace = work / profiled / "profile" / "trace-rank0.json.gz"
        if not record.get("ok") or not trace.is_file():
            print(f"{name}: failed: {record.get('error')}")
            results[name] = {"run": record}
            continue
        results[name] = {
            "run": {k: record.get(k) for k in ("command", "tokens_per_s_per_gpu", "mfu", "peak_mem_gib")},
            **analyse(trace, traced),
        }
        kernels = work / profiled / "profile" / "kernels.txt"
        if kernels.is_file():
            shutil.copy(kernels, out / f"kernels_{name}.txt")
        (out / f"profile_{name}.json").write_text(json.dumps(results[name], indent=1))
        r = results[name]
        kinds = ", ".join(f"{k} {v:.1f}" for k, v in r["by_kind_ms"].items())
        print(
            f"{name}: step {r['step_ms']:.1f} ms | {kinds} | compute busy {r['compute_busy_ms']:.1f}, nccl {r['nccl_ms']:.1f} "
            f"(exposed {r['nccl_exposed_ms']:.1f}), idle {r['idle_ms']:.1f} ms | {r['run']['tokens_per_s_per_gpu'] or 0:,.0f} tokens/s/GPU"
        )
    return 0 if all("step_ms" in r for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())

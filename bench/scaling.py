"""Weak scaling on one host, driven through the SDK's local backend, and the efficiency chart.

Each point is one `Client.run()` on the local backend: one simulated node with N trainer processes (one per
GPU), the same per-GPU work (micro batch, sequence 4096) at every N, so perfect weak scaling keeps
tokens/s/GPU constant. Efficiency(N) = tokens/s/GPU at N / tokens/s/GPU at 1 GPU.

    python bench/scaling.py --out $OUT                      # the 8-GPU plan (issue: scaling on nvidia-h200-x8)
    python bench/scaling.py --gpus 1,2 --preset tiny --device cpu --steps 4 --out /tmp/scale   # a CPU dry rehearsal

Points: Llama-2-7B FULL_SHARD on each of --gpus; HYBRID_SHARD 2 replicas x 4 GPUs on 8; Llama-2-13B and
Llama-3.1-8B FULL_SHARD on 8, each with the settings the trainer's --auto picks. Writes `<out>/scaling.json`, `<out>/scaling.png` and prints a markdown table.
The local backend starts etcd when it is on PATH and otherwise uses torch's c10d store (and says so).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Required on the lent multi-GPU machines: NVLink multicast must stay off.
GPU_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def points(gpus: list[int], preset: str) -> list[dict]:
    """(label, processes, trainer overrides) for every measurement of the plan."""
    plan = [
        {"label": f"{preset} full_shard x{n}", "nproc": n, "preset": preset, "sharding": "full_shard"} for n in gpus
    ]
    top = max(gpus)
    if top >= 8 and top % 4 == 0:
        plan.append(
            {
                "label": f"{preset} hybrid_shard {top // 4}x4",
                "nproc": top,
                "preset": preset,
                "sharding": "hybrid_shard",
                "replicate_size": top // 4,
                "shard_size": 4,
            }
        )
    if top >= 8:  # other shapes: not part of the sweep, so each at the settings --auto picks for it
        for other in ("llama2-13b", "llama3.1-8b"):
            plan.append(
                {
                    "label": f"{other} full_shard x{top} (--auto)",
                    "nproc": top,
                    "preset": other,
                    "sharding": "full_shard",
                    "auto": True,
                }
            )
    return plan


def run_point(point: dict, args: argparse.Namespace) -> dict:
    from fsdp_sdk import Client
    from fsdp_sdk.errors import FsdpSdkError

    overrides = {
        "model.preset": point["preset"],
        "model.init": "random",
        "data.source": "synthetic",
        "data.seq_len": args.seq_len,
        "precision.mode": "bf16",
        "parallel.api": "fsdp2",
        "parallel.sharding": point["sharding"],
        "ac.mode": args.ac,
        "compile.enabled": args.compile,
        "compile.loss": args.compile,
        "train.micro_batch_size": args.micro_batch,
        "train.steps": args.steps,
        "metrics.warmup_steps": args.warmup,
        "checkpoint.enabled": False,
        "runtime.device": args.device,
    }
    for key in ("replicate_size", "shard_size"):
        if key in point:
            overrides[f"parallel.{key}"] = point[key]
    if point.get("auto"):
        for key in ("ac.mode", "compile.enabled", "compile.loss", "train.micro_batch_size"):
            del overrides[key]
        overrides["auto.enabled"] = True
    client = Client.from_sources(
        overrides={"cluster.backend": "local", "job.num_workers": 1, "job.nproc_per_node": point["nproc"]},
        read_default_env_file=False,
    )
    try:
        summary = client.run(trainer_overrides=overrides).summary
    except FsdpSdkError as exc:
        return {**point, "ok": False, "error": str(exc)}
    summary.pop("config", None)
    return {**point, "ok": True, **summary}


def chart(records: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    base = [r for r in records if r["ok"] and r["sharding"] == "full_shard" and r["preset"] == records[0]["preset"]]
    if not base:
        return
    ref = base[0]["tokens_per_s_per_gpu"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    n = [r["nproc"] for r in base]
    ax1.plot(n, [r["tokens_per_s_per_gpu"] * r["nproc"] for r in base], "o-", label="measured")
    ax1.plot(n, [ref * k for k in n], "--", color="grey", label="perfect")
    ax1.set(
        xlabel="GPUs", ylabel="tokens/s (all GPUs)", title=f"{base[0]['preset']} throughput", xscale="log", xticks=n
    )
    ax1.set_xticklabels([str(k) for k in n])
    ax1.legend()
    eff = [100 * r["tokens_per_s_per_gpu"] / ref for r in base]
    ax2.plot(n, eff, "o-")
    ax2.axhline(95, ls="--", color="grey", label="95% target")
    ax2.set(
        xlabel="GPUs",
        ylabel="weak-scaling efficiency (%)",
        title="efficiency vs 1 GPU",
        xscale="log",
        xticks=n,
        ylim=(0, max(110, max(eff) + 10)),
    )
    ax2.set_xticklabels([str(k) for k in n])
    ax2.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.environ.get("OUT", ".bench"), help="folder for scaling.json / scaling.png")
    parser.add_argument("--gpus", default="1,2,4,8", help="processes (GPUs) per point of the sweep")
    parser.add_argument("--preset", default="llama2-7b", help="model of the sweep")
    parser.add_argument(
        "--micro-batch",
        type=int,
        default=2,
        help="per-GPU micro batch, the same at every point: 2 is the largest that leaves the 1-GPU point of the 7B "
        "headroom (micro batch 3 peaked at 126 of 140 GiB there, where the allocator slows down)",
    )
    parser.add_argument("--ac", default="none", help="activation checkpointing mode")
    parser.add_argument(
        "--compile", action=argparse.BooleanOptionalAction, default=True, help="compiled blocks and loss"
    )
    parser.add_argument("--seq-len", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--warmup", type=int, default=4)
    parser.add_argument("--device", default="auto", help="runtime.device (cpu for a rehearsal)")
    args = parser.parse_args()
    os.environ.update(GPU_ENV)
    sys.path.insert(0, str(ROOT / "bench"))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    records = []
    for point in points([int(g) for g in args.gpus.split(",")], args.preset):
        print(f"== {point['label']}", file=sys.stderr, flush=True)
        records.append(run_point(point, args))
        (out / "scaling.json").write_text(json.dumps(records, indent=1, default=str))
    chart(records, out / "scaling.png")
    ref = next((r["tokens_per_s_per_gpu"] for r in records if r["ok"]), None)
    print("| point | GPUs | tokens/s/GPU | MFU | peak GiB | efficiency vs 1 GPU |\n|---|---:|---:|---:|---:|---:|")
    for r in records:
        if not r["ok"]:
            print(f"| {r['label']} | {r['nproc']} | failed: {r['error'][:100]} | | | |")
            continue
        mfu = "-" if r.get("mfu") is None else f"{100 * r['mfu']:.1f}%"
        eff = f"{100 * r['tokens_per_s_per_gpu'] / ref:.1f}%" if ref and r["preset"] == args.preset else "-"
        print(
            f"| {r['label']} | {r['nproc']} | {r['tokens_per_s_per_gpu']:,.0f} | {mfu} | {r.get('peak_mem_gib') or 0:.1f} | {eff} |"
        )
    return 0 if all(r["ok"] for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())

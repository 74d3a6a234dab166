"""What checkpointing costs a training run: no checkpoints, synchronous saves and asynchronous saves, on one GPU.

Each case trains the same model for ``--steps`` steps under ``torchrun --standalone --nproc-per-node 1`` (synthetic
tokens, random weights), saving every ``--every`` steps to ``--ckpt-root`` (a local disk; ``keep 1``), and reads the
trainer's ``summary.json`` (the saves' blocking times) and ``metrics.jsonl`` (each step's time):

* effective throughput = tokens of the steps after ``--warmup`` / (their step times + the blocking time of every save
  in that span: what ``save()`` held the training loop);
* cost = 1 - effective throughput / the no-checkpoint run's.

The model: Llama-2-7B's layer shape (hidden 4096, MLP 11008, 32 heads, vocabulary 32000) with ``--layers`` of its
32 layers, the most that leave two checkpoints (12 bytes a parameter: fp32 weights and AdamW's two moments) room on
the disk (``--layers auto``). Step time and checkpoint size both grow with the layer count, so the cost's share is
close to the full model's.

    python bench/checkpoint_cost.py --out $OUT/checkpoint-cost.json          # the GPU machine
    python bench/checkpoint_cost.py --device cpu --layers 1 --hidden 256 --steps 12 --every 4 --seq-len 64 \\
        --ckpt-root s3://bucket/prefix --out /tmp/cpu.json                   # the S3 path's functional check
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [str(ROOT / "packages" / "trainer" / "src")]
BYTES_PER_PARAM = 12  # fp32 weights + AdamW's exp_avg and exp_avg_sq


def llama2_7b_shape(layers: int, hidden: int) -> dict[str, Any]:
    """Llama-2-7B's config with ``layers`` layers (``hidden`` scales the width for the CPU check only)."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": 11008 * hidden // 4096,
        "num_attention_heads": max(1, hidden // 128),
        "num_key_value_heads": max(1, hidden // 128),
        "num_hidden_layers": layers,
        "vocab_size": 32000,
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }


def params(cfg: dict[str, Any]) -> int:
    h, f, v, n = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    return 2 * v * h + n * (4 * h * h + 3 * h * f + 2 * h) + h


def pick_layers(root: str, hidden: int) -> int:
    """The most layers (<= 32, >= 1) whose two checkpoints fit in 90% of the free space under ``root``."""
    if root.startswith("s3://"):
        return 8
    Path(root).mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(root).free
    layers = 32
    while layers > 1 and 2 * BYTES_PER_PARAM * params(llama2_7b_shape(layers, hidden)) > 0.9 * free:
        layers -= 1
    return layers


def _env() -> dict[str, str]:
    env = dict(os.environ)
    # a PYTHONPATH given (the lent machine: the trainer under test, carried beside the checkout) comes first
    env["PYTHONPATH"] = os.pathsep.join([*filter(None, [env.get("PYTHONPATH")]), *SOURCES])
    env.setdefault("NCCL_NVLS_ENABLE", "0")  # the lent machines: NVLink multicast stays off
    env.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    return env


def run_case(name: str, ckpt: list[str], model_dir: Path, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    out = work / name
    flags = [
        "--model.name_or_path", str(model_dir), "--model.init", "random", "--data.source", "synthetic",
        "--model.tokenizer", "bytes", "--data.seq_len", str(args.seq_len),
        "--train.micro_batch_size", str(args.micro_batch), "--train.steps", str(args.steps),
        "--metrics.warmup_steps", str(args.warmup), "--train.output_dir", str(out),
        "--runtime.device", args.device, "--precision.mode", "bf16" if args.device == "cuda" else "fp32",
        "--parallel.api", "fsdp2", *ckpt,
    ]  # fmt: skip
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1"]
    command += ["-m", "fsdp_trainer", *flags]
    start = time.perf_counter()
    with open(work / f"{name}.log", "w") as log:
        done = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=_env(), timeout=args.timeout)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        tail = (work / f"{name}.log").read_text()[-2000:]
        raise RuntimeError(f"{name}: the trainer failed ({done.returncode}):\n{tail}")
    summary = json.loads((out / "summary.json").read_text())
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    measured = [r for r in records if r["step"] > args.warmup]
    step_time = sum(r["step_time_s"] for r in measured)
    tokens = sum(r["tokens"] for r in measured)
    ck = summary.get("checkpoint") or {}
    saves = [s for s in range(args.every, args.steps + 1, args.every) if s > args.warmup] if ck else []
    blocking = ck.get("blocking_s", [])[-len(saves) :] if saves else []
    effective_time = step_time + sum(blocking)
    alloc = sum(ck.get("alloc_s", [])[-len(saves) :]) if saves else 0.0
    extra = {}
    if ck.get("background_s"):
        extra = {
            "tokens_per_s_effective_without_alloc": round(tokens / (effective_time - alloc), 1),
            **_steps_during_writes(measured, saves, ck["background_s"][-len(saves) :]),
        }
    return {
        "case": name,
        "command": command,
        "wall_s": round(wall, 1),
        "measured_steps": len(measured),
        "tokens": tokens,
        "step_time_s": round(step_time, 4),
        "tokens_per_s_steps_only": round(tokens / step_time, 1),
        "tokens_per_s_effective": round(tokens / effective_time, 1),
        "saves_counted": len(blocking),
        "blocking_s": blocking,
        "final_wait_s": ck.get("final_wait_s"),
        "async": ck.get("async"),
        **{
            k: ck[k]
            for k in (
                "wait_s",
                "alloc_s",
                "stage_s",
                "copy_s",
                "offload_s",
                "write_s",
                "background_s",
                "staged_on",
                "store_advice",
            )
            if k in ck
        },
        **extra,
        "step_times_s": [round(r["step_time_s"], 5) for r in measured],
        "summary": summary,
    }


def _steps_during_writes(measured: list[dict[str, Any]], saves: list[int], background: list[float]) -> dict[str, Any]:
    """Mean step time while a background save ran (the steps after each save until its ``background_s`` had
    elapsed in step time) and otherwise."""
    during: set[int] = set()
    by_step = {r["step"]: r["step_time_s"] for r in measured}
    for step, seconds in zip(saves, background, strict=False):
        elapsed, s = 0.0, step + 1
        while s in by_step and elapsed < seconds:
            during.add(s)
            elapsed += by_step[s]
            s += 1
    inside = [t for s, t in by_step.items() if s in during]
    outside = [t for s, t in by_step.items() if s not in during]
    mean = lambda xs: round(sum(xs) / len(xs), 5) if xs else None  # noqa: E731
    return {"steps_during_writes": len(inside), "step_s_during_writes": mean(inside), "step_s_otherwise": mean(outside)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="the raw record (JSON)")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--ckpt-root", default="/tmp/fsdp-ckpt-bench", help="a directory or s3://bucket/prefix")
    parser.add_argument(
        "--layers",
        default="auto",
        help="layers of the 7B shape (fewer if two checkpoints do not fit), or auto (most that fit)",
    )
    parser.add_argument("--hidden", type=int, default=4096, help="width (4096: Llama-2-7B's; smaller: CPU check)")
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--every", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=4096)
    parser.add_argument("--micro-batch", type=int, default=2)
    parser.add_argument("--keep", type=int, default=1, help="checkpoint.keep")
    parser.add_argument(
        "--cases",
        default="none,sync,async",
        help="none, sync, async; -tN: N write threads (async-t8); -host, -device: where async saves stage",
    )
    parser.add_argument("--timeout", type=float, default=400)
    args = parser.parse_args()

    work = Path(os.environ.get("BENCH_WORK", "/tmp/checkpoint-cost"))
    work.mkdir(parents=True, exist_ok=True)
    fit = pick_layers(args.ckpt_root, args.hidden)
    layers = fit if args.layers == "auto" else min(int(args.layers), fit)
    cfg = llama2_7b_shape(layers, args.hidden)
    model_dir = work / "model"
    model_dir.mkdir(exist_ok=True)
    (model_dir / "config.json").write_text(json.dumps(cfg, indent=1))
    record: dict[str, Any] = {
        "model": f"Llama-2-7B layer shape, {layers} layers, hidden {args.hidden}",
        "params": params(cfg),
        "checkpoint_gb": round(BYTES_PER_PARAM * params(cfg) / 1e9, 2),
        "ckpt_root": args.ckpt_root,
        "layers_asked": args.layers,
        "steps": args.steps,
        "keep": args.keep,
        "every": args.every,
        "warmup": args.warmup,
        "seq_len": args.seq_len,
        "micro_batch": args.micro_batch,
        "runs": [],
    }
    if not args.ckpt_root.startswith("s3://"):
        Path(args.ckpt_root).mkdir(parents=True, exist_ok=True)
        record["disk_free_gb"] = round(shutil.disk_usage(args.ckpt_root).free / 1e9, 1)
    for case in args.cases.split(","):
        root = f"{args.ckpt_root.rstrip('/')}/{case}"
        kind, *options = case.split("-")  # async-t8: checkpoint.write_threads 8; async-host, async-device: where
        threads = next((o[1:] for o in options if o.startswith("t") and o[1:].isdigit()), "")  # async saves stage
        staging = {
            "host": ["--experimental.stage_on_device", "false"],
            "device": ["--experimental.stage_on_device", "true"],
        }
        stage = [flag for o in options for flag in staging.get(o, [])]
        ckpt = ["--checkpoint.enabled", "false"]
        if kind in ("sync", "async"):
            ckpt = ["--checkpoint.dir", root, "--checkpoint.every_steps", str(args.every), "--checkpoint.keep",
                    str(args.keep), "--checkpoint.async_mode", "async" if kind == "async" else "disabled",
                    "--checkpoint.write_threads", threads or "1", *stage]  # fmt: skip
        try:
            result = run_case(case, ckpt, model_dir, args, work)
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            result = {"case": case, "error": str(exc)[-2000:]}
        record["runs"].append(result)
        if not root.startswith("s3://"):
            shutil.rmtree(root, ignore_errors=True)  # room for the next case
        Path(args.out).write_text(json.dumps(record, indent=1))
        print(json.dumps({k: v for k, v in result.items() if k not in ("summary", "command")}), flush=True)
    base = next((r for r in record["runs"] if r["case"] == "none" and "error" not in r), None)
    if base:
        for r in record["runs"]:
            if "error" not in r:
                r["cost_vs_none"] = round(1 - r["tokens_per_s_effective"] / base["tokens_per_s_effective"], 4)
    Path(args.out).write_text(json.dumps(record, indent=1))
    return 0 if all("error" not in r for r in record["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main())

"""The trainer (``--auto``) against torchtitan 0.3.0 on Llama shapes torchtitan 0.2.2 has no flavor for, one GPU.

torchtitan 0.3.0 ships Llama-3.2's 1B and 3B shapes (128,256-token vocabulary, tied embeddings, 8 key/value heads:
the large-vocabulary and grouped-query shapes where the embedding, output projection and loss weigh most). Each
shape runs once through the trainer with ``--auto`` (it picks micro batch, checkpointing and compile) on synthetic
tokens, and through torchtitan 0.3.0 (``peers/torchtitan3_registry.py``) at each ``--tt-batches`` micro batch with
``torch.compile`` and no activation checkpointing, on its ``c4_test`` loader over local text. Both: bf16, sequence
4096, AdamW, random initialization; torchtitan's figure is the median of its per-step ``tps`` after the first third,
the trainer's its summary's mean after the warm-up steps. torchtitan 0.3.0 and its dependencies must be importable
(carried wheels: bench/README.md).

    python bench/peer_shapes.py --shapes 1B,3B --tt-batches 2,4 --steps 24 --out $OUT/peer-shapes.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
TRAINER_SRC = BENCH.parent / "packages" / "trainer" / "src"
sys.path.insert(0, str(BENCH))

SHAPES = {  # torchtitan flavor -> the same shape as a Hugging Face config (Llama-3.2)
    "1B": {"hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32},
    "3B": {"hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 28, "num_attention_heads": 24},
}
ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
    "OMP_NUM_THREADS": "4",
}


def hf_config(flavor: str) -> dict[str, Any]:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        **SHAPES[flavor],
        "num_key_value_heads": 8,
        "head_dim": SHAPES[flavor]["hidden_size"] // SHAPES[flavor]["num_attention_heads"],
        "vocab_size": 128256,
        "max_position_embeddings": 131072,
        "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0,
        "rope_scaling": {
            "rope_type": "llama3",
            "factor": 32.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
    }


def run_trainer(flavor: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    model_dir = work / f"hf-{flavor}"
    model_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / "config.json").write_text(json.dumps(hf_config(flavor), indent=1))
    out = work / f"trainer-{flavor}"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=1", "-m", "fsdp_trainer",
           "--model.name_or_path", str(model_dir), "--model.init", "random", "--data.source", "synthetic",
           "--model.tokenizer", "bytes", "--data.seq_len", "4096", "--precision.mode", "bf16",
           "--train.warmup_steps", "2", "--train.steps", str(args.steps), "--metrics.warmup_steps", "4",
           "--checkpoint.enabled", "false", "--auto.enabled", "true", "--train.output_dir", str(out)]  # fmt: skip
    env = {
        **os.environ,
        **ENV,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(TRAINER_SRC), os.environ.get("PYTHONPATH")])),
    }
    began = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.timeout)
    (work / f"trainer-{flavor}.log").write_text(proc.stdout + proc.stderr)
    rec: dict[str, Any] = {"kind": "trainer", "flavor": flavor, "command": " ".join(["torchrun", *cmd[3:]])}
    rec["wall_s"] = round(time.perf_counter() - began, 1)
    summary = out / "summary.json"
    if proc.returncode != 0 or not summary.is_file():
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-3:]
        return {**rec, "error": f"rc={proc.returncode}: " + " | ".join(tail)[:600]}
    s = json.loads(summary.read_text())
    train = s["config"]["train"]
    return {
        **rec,
        "tokens_per_s_per_gpu": s["tokens_per_s_per_gpu"],
        "mfu": s.get("mfu"),
        "peak_mem_gib": s.get("peak_mem_gib"),
        "micro_batch_size": train["micro_batch_size"],
        "auto": s.get("auto"),
        "summary": s,
    }


def run_torchtitan3(flavor: str, batch: int, args: argparse.Namespace, work: Path, assets: Path) -> dict[str, Any]:
    from peers.torchtitan_run import ANSI, STEP_LINE

    cwd = work / "tt3-cwd"
    c4 = cwd / "tests" / "assets" / "c4_test"
    if not c4.exists():
        c4.parent.mkdir(parents=True, exist_ok=True)
        c4.symlink_to(assets / "data")
    name = f"torchtitan030-{flavor}-mb{batch}-compile"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=1", "-m",
           "torchtitan.train", "--module", "peers.torchtitan3_registry", "--config", "llama3_bench",
           "--dump_folder", str(work / name)]  # fmt: skip
    env = {
        **os.environ,
        **ENV,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(BENCH), os.environ.get("PYTHONPATH")])),
        "TT_FLAVOR": flavor,
        "TT_BATCH": str(batch),
        "TT_SEQ": "4096",
        "TT_STEPS": str(args.steps),
        "TT_COMPILE": "1",
        "TT_AC": "none",
        "TT_ASSETS": str(assets / "tokenizer"),
        "HF_DATASETS_OFFLINE": "1",
        "HF_HUB_OFFLINE": "1",
    }
    began = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.timeout, cwd=cwd)
        log, rc = ANSI.sub("", proc.stdout + proc.stderr), proc.returncode
    except subprocess.TimeoutExpired as e:
        log, rc = ANSI.sub("", (e.stdout or b"").decode() + (e.stderr or b"").decode()), "timeout"
    (work / f"{name}.log").write_text(log)
    rec: dict[str, Any] = {"kind": "torchtitan 0.3.0", "flavor": flavor, "micro_batch_size": batch, "variant": name}
    rec["command"] = " ".join(f"{k}={env[k]}" for k in env if k.startswith("TT_")) + " torchrun " + " ".join(cmd[3:])
    rec["wall_s"] = round(time.perf_counter() - began, 1)
    rows = [m.groupdict() for m in STEP_LINE.finditer(log)]
    if rc != 0 or len(rows) < 4:
        tail = log.strip().splitlines()[-4:]
        return {**rec, "error": f"rc={rc}: " + " | ".join(tail)[:800]}
    rows = rows[len(rows) // 3 :]
    return {
        **rec,
        "tokens_per_s_per_gpu": statistics.median(float(r["tps"].replace(",", "")) for r in rows),
        "mfu": statistics.median(float(r["mfu"]) for r in rows) / 100,
        "peak_mem_gib": max(float(r["mem"]) for r in rows),
        "memory_note": "torchtitan reports max reserved memory",
        "steps_counted": len(rows),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--shapes", default="1B")
    parser.add_argument("--tt-batches", default="2,4")
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--timeout", type=int, default=240)
    parser.add_argument("--order", default="tt,trainer", help="tt,trainer or trainer,tt")
    args = parser.parse_args()
    from peers.torchtitan_run import prepare_assets

    work = Path(os.environ.get("BENCH_WORK", "/tmp/peer-shapes"))
    work.mkdir(parents=True, exist_ok=True)
    assets = work / "assets"
    prepare_assets(assets)
    record: dict[str, Any] = {"steps": args.steps, "seq_len": 4096, "runs": []}
    try:
        import torch

        record["device"] = torch.cuda.get_device_name()
        record["torch"] = torch.__version__
        import torchtitan

        record["torchtitan"] = getattr(torchtitan, "__version__", "?")
    except Exception as e:  # torchtitan missing: recorded, the trainer still runs
        record["import_error"] = f"{type(e).__name__}: {e}"
    for flavor in args.shapes.split(","):
        for side in args.order.split(","):
            if side == "trainer":
                runs = [run_trainer(flavor, args, work)]
            else:
                runs = [run_torchtitan3(flavor, int(b), args, work, assets) for b in args.tt_batches.split(",")]
            for rec in runs:
                record["runs"].append(rec)
                Path(args.out).write_text(json.dumps(record, indent=1))
                print(json.dumps({k: v for k, v in rec.items() if k not in ("summary", "auto")}), flush=True)
        ours = [r for r in record["runs"] if r["flavor"] == flavor and r["kind"] == "trainer" and "error" not in r]
        peers = [r for r in record["runs"] if r["flavor"] == flavor and r["kind"] != "trainer" and "error" not in r]
        if ours and peers:
            best = max(peers, key=lambda r: r["tokens_per_s_per_gpu"])
            record.setdefault("ratios", {})[flavor] = {
                "trainer_over_torchtitan030_best": round(
                    ours[0]["tokens_per_s_per_gpu"] / best["tokens_per_s_per_gpu"], 3
                ),
                "torchtitan_best_micro_batch": best["micro_batch_size"],
            }
    Path(args.out).write_text(json.dumps(record, indent=1))
    print(json.dumps(record.get("ratios")), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

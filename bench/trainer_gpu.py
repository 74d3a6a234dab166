"""GPU benchmark of fsdp_trainer variants: throughput, TFLOP/s, MFU and peak memory per GPU.

Each variant is one ``torchrun --standalone --nproc-per-node N -m fsdp_trainer ...`` run
(random-init Llama, synthetic tokens, bf16, no checkpoints), from source
(``PYTHONPATH=packages/trainer/src``). Its ``summary.json`` is collected; a variant that
fails (say, out of memory) is recorded with its error and the rest still run.

    python bench/trainer_gpu.py --out $OUT                        # all variants, llama2-7b, every GPU
    python bench/trainer_gpu.py --variants fsdp2-ac-mb1,fsdp1-noac-mb2 --preset llama3.1-8b --steps 12

Writes ``<out>/bench_results.json`` and prints a markdown table. The tokens check compares
the trainer's side count of consumed tokens with steps x GPUs x micro batch x seq_len.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRAINER_SRC = ROOT / "packages" / "trainer" / "src"

# name: (parallel.api, ac.mode, micro batch)
VARIANTS: dict[str, tuple[str, str, int]] = {
    "fsdp2-ac-mb1": ("fsdp2", "full", 1),
    "fsdp2-ac-mb2": ("fsdp2", "full", 2),
    "fsdp2-noac-mb1": ("fsdp2", "none", 1),
    "fsdp2-noac-mb2": ("fsdp2", "none", 2),
    "fsdp1-noac-mb2": ("fsdp1", "none", 2),
    "fsdp1-ac-mb1": ("fsdp1", "full", 1),
}

# Required on the benchmark machines: NVLink multicast must stay off.
CHILD_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def gpu_count() -> int:
    import torch

    return torch.cuda.device_count()


def run_variant(name: str, args: argparse.Namespace, nproc: int, workdir: Path) -> dict:
    """One torchrun of the trainer; returns its summary plus the bench's own fields, or the error."""
    api, ac, mb = VARIANTS[name]
    out_dir = workdir / name
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc),
        "-m", "fsdp_trainer",
        "--model.preset", args.preset, "--model.init", "random",
        "--data.source", "synthetic", "--data.seq_len", str(args.seq_len),
        "--precision.mode", "bf16",
        "--parallel.api", api, "--ac.mode", ac,
        "--train.micro_batch_size", str(mb), "--train.steps", str(args.steps), "--train.warmup_steps", "2",
        "--metrics.warmup_steps", str(args.warmup),
        "--checkpoint.enabled", "false",
        "--train.output_dir", str(out_dir),
    ]
    env = {**os.environ, **CHILD_ENV, "PYTHONPATH": os.pathsep.join(filter(None, [str(TRAINER_SRC), os.environ.get("PYTHONPATH")]))}
    started = time.perf_counter()
    print(f"== {name}: {' '.join(cmd[3:])}", file=sys.stderr, flush=True)
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
        returncode, stderr = proc.returncode, proc.stderr
    except subprocess.TimeoutExpired as e:
        returncode, stderr = -1, f"timed out after {args.timeout}s\n{(e.stderr or b'')[-2000:]!r}"
    (workdir / f"{name}.log").write_text(stderr)
    record: dict = {"variant": name, "api": api, "ac": ac, "micro_batch_size": mb, "nproc": nproc, "run_s": time.perf_counter() - started}
    summary_file = out_dir / "summary.json"
    if returncode == 0 and summary_file.is_file():
        summary = json.loads(summary_file.read_text())
        expected = summary["steps_run"] * nproc * mb * args.seq_len
        record.update(summary, ok=True, tokens_expected=expected, tokens_check=summary["tokens_processed"] == expected)
    else:
        oom = "out of memory" in stderr.lower() or "OutOfMemoryError" in stderr
        lines = [line for line in stderr.splitlines() if "Error" in line or "error" in line]
        record.update(ok=False, returncode=returncode, error="CUDA out of memory" if oom else (lines[-1] if lines else stderr[-500:]))
    return record


def fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def table(records: list[dict]) -> str:
    rows = [
        "| variant | tokens/s/GPU | TFLOP/s/GPU | MFU | peak GiB | tokens_processed check |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for r in records:
        if not r["ok"]:
            rows.append(f"| {r['variant']} | failed: {r['error'][:80]} | | | | |")
            continue
        mfu = None if r.get("mfu") is None else f"{100 * r['mfu']:.1f}%"
        check = f"ok ({r['tokens_processed']})" if r["tokens_check"] else f"MISMATCH {r['tokens_processed']} != {r['tokens_expected']}"
        rows.append(
            f"| {r['variant']} | {fmt(r['tokens_per_s_per_gpu'], ',.0f')} | {fmt(r['tflops_per_gpu'], '.1f')} | "
            f"{mfu or '-'} | {fmt(r['peak_mem_gib'], '.1f')} | {check} |"
        )
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.environ.get("OUT", ".bench"), help="folder for bench_results.json (default: $OUT or .bench)")
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated subset of: {', '.join(VARIANTS)}")
    parser.add_argument("--preset", default="llama2-7b", help="model.preset of every variant")
    parser.add_argument("--steps", type=int, default=12, help="optimizer steps per variant")
    parser.add_argument("--warmup", type=int, default=3, help="first steps left out of the averages")
    parser.add_argument("--seq-len", type=int, default=4096, help="data.seq_len")
    parser.add_argument("--nproc", type=int, default=0, help="GPUs to use (default: all visible)")
    parser.add_argument("--timeout", type=int, default=900, help="seconds per variant before it is recorded as failed")
    args = parser.parse_args()

    names = [n.strip() for n in args.variants.split(",") if n.strip()]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        parser.error(f"--variants: unknown {', '.join(unknown)} (known: {', '.join(VARIANTS)})")
    nproc = args.nproc or gpu_count()
    if nproc < 1:
        parser.error("--nproc: no GPU visible")
    out = Path(args.out)
    workdir = out / "trainer_runs"
    workdir.mkdir(parents=True, exist_ok=True)

    records = []
    for name in names:
        record = run_variant(name, args, nproc, workdir)
        records.append(record)
        (out / "bench_results.json").write_text(json.dumps(records, indent=1))  # partial results survive a kill
        print(f"   {name}: {'ok' if record['ok'] else 'FAILED: ' + record['error']}", file=sys.stderr, flush=True)

    print(f"\n{args.preset}, seq_len {args.seq_len}, bf16, {nproc} GPU(s), {args.steps} steps (first {args.warmup} not averaged)\n")
    print(table(records))
    return 0 if all(r["ok"] for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())

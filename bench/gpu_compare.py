"""One call, every GPU measurement: the trainer's variants, torchtitan and accelerate, side by side.

Run on a machine with N GPUs (2 x H200 for every figure in bench/README.md), from the repository root:

    python bench/gpu_compare.py --suite speed --out $OUT      # the current-best table: 8B vs torchtitan, 7B bf16 and FP8
    python bench/gpu_compare.py --suite reference --out $OUT  # Llama-2-7B, FSDP2 + FSDP1 at the plain script's settings
    python bench/gpu_compare.py --only 8b-mb3-symmetric,8b-mb3-default-buffers --out $OUT

Each variant reproduces a figure of one report in bench/reports/ (the report names the variants). Every variant is a
separate `torchrun --standalone` process (random init, synthetic tokens unless the variant reads torchtitan's text,
seq 4096, bf16): the trainer runs from source (`PYTHONPATH=packages/trainer/src`), torchtitan and accelerate from
what is installed (carry torchtitan's wheels: bench/README.md). A variant that fails (out of memory, say) is recorded
with its error and the rest go on. Results go to `<out>/results.json` and a markdown table is printed last; the logs
are packed into `<out>/logs.tar.gz`.

With `--telemetry`, `nvidia-smi` samples every GPU's SM clock, power draw and clock-event reasons every 250 ms
during each variant; the record gets their medians over the busy samples (power at least half the run's highest),
which is the training steps rather than start-up and compile, and the most frequent clock-event bitmask then
(0x4: software power cap, 0x20/0x40: thermal slowdown, 0x80: power brake).

The tokens check compares the trainer's side count of consumed tokens (`tokens_processed`) with
steps x GPUs x micro batch x seq_len: the throughput figures and the work actually done must agree.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
TRAINER_SRC = ROOT / "packages" / "trainer" / "src"

# NVLink multicast stays off on the lent machines (it can take the host's shared GPUs out of service).
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
CHILD_ENV = {**MULTICAST_OFF, "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "OMP_NUM_THREADS": "4"}

# torchtitan's inputs for the trainer: its text and tokenizer, written by peers.torchtitan_run.prepare_assets under the
# run's work folder ({tt_assets} is filled in by run_trainer).
TT_TEXT = {
    "data.source": "jsonl",
    "data.path": "{tt_assets}/data/train.jsonl",
    "model.tokenizer": "{tt_assets}/tokenizer",
}

# What every trainer variant shares.
BASE = {
    "model.init": "random",
    "data.source": "synthetic",
    "data.seq_len": "4096",
    "precision.mode": "bf16",
    "train.warmup_steps": "2",
    "checkpoint.enabled": "false",
}


def tv(preset: str, api: str, ac: str, mb: int, **extra: str) -> dict[str, str]:
    return {"model.preset": preset, "parallel.api": api, "ac.mode": ac, "train.micro_batch_size": str(mb), **extra}


COMPILED = {"compile.enabled": "true", "compile.loss": "true"}
#: The 8B's and the 7B's communication settings: bf16 gradient reduction, collectives in NCCL symmetric memory
#: (all-gathers on the copy engines) and flat shards (the two experiments; flat shards were on by default when these
#: settings were measured).
FAST_COMM = {
    "precision.reduce_dtype": "bf16",
    "experimental.symmetric_memory": "true",
    "experimental.flat_shards": "true",
}
FP8 = {"fp8.enabled": "true", "fp8.all_gather": "true"}

#: Trainer variants: name -> trainer overrides on top of BASE. Each reproduces a figure of a report in bench/reports/
#: (the report names the variants; a report's raw record may carry the name the variant had when it was measured).
TRAINER_VARIANTS: dict[str, dict[str, str]] = {
    # Llama-2-7B at the settings of the plain FSDP2 reference script (no AC mb1 8,240; mb2 9,370; full AC mb1 6,700;
    # mb2 7,500): bench/reports/2026-11-30-llama2-7b-h200x2-reference-settings.md
    "fsdp2-ac-mb1": tv("llama2-7b", "fsdp2", "full", 1),
    "fsdp2-ac-mb2": tv("llama2-7b", "fsdp2", "full", 2),
    "fsdp2-noac-mb1": tv("llama2-7b", "fsdp2", "none", 1),
    "fsdp2-noac-mb2": tv("llama2-7b", "fsdp2", "none", 2),
    "fsdp1-ac-mb1": tv("llama2-7b", "fsdp1", "full", 1),
    "fsdp1-noac-mb2": tv("llama2-7b", "fsdp1", "none", 2),
    # Hugging Face's element-wise RMSNorm and rotary code, against fsdp2-noac-mb1:
    # bench/reports/2026-11-30-llama2-7b-h200x2-fused-kernels.md
    "fsdp2-noac-mb1-hfkernels": tv("llama2-7b", "fsdp2", "none", 1, **{"model.fused_kernels": "false"}),
    # torch's fused AdamW against the Triton AdamW, fp32 parameters, Llama-3.1-8B at micro batch 3:
    # bench/reports/2026-11-30-llama3.1-8b-h200-triton-adamw.md
    **{
        f"8b-mb3-{name}-adamw": tv(
            "llama3.1-8b",
            "fsdp2",
            "none",
            3,
            **COMPILED,
            **{"precision.reduce_dtype": "bf16", "train.adamw": name, "precision.master_weights": "params"},
        )
        for name in ("fused", "triton")
    },
    # the same under FP8 (Llama-2-7B, micro batch 3), where torch's fused AdamW measured faster
    **{
        f"7b-mb3-fp8-{name}-adamw": tv("llama2-7b", "fsdp2", "none", 3, **COMPILED, **FP8, **{"train.adamw": name})
        for name in ("fused", "triton")
    },
    # Default collective buffers against NCCL symmetric memory, and master weights against fp32 parameters, at micro
    # batch 3 with bf16 reduction: bench/reports/2026-11-30-llama3.1-8b-h200x2-symmetric-memory.md and
    # bench/reports/2026-11-30-llama3.1-8b-h200x2-master-weights.md
    "8b-mb3-default-buffers": tv("llama3.1-8b", "fsdp2", "none", 3, **COMPILED, **{"precision.reduce_dtype": "bf16"}),
    "8b-mb3-symmetric": tv(
        "llama3.1-8b",
        "fsdp2",
        "none",
        3,
        **COMPILED,
        **{"precision.reduce_dtype": "bf16", "experimental.symmetric_memory": "true"},
    ),
    "8b-mb3-symmetric-fp32-params": tv(
        "llama3.1-8b",
        "fsdp2",
        "none",
        3,
        **COMPILED,
        **{
            "precision.reduce_dtype": "bf16",
            "experimental.symmetric_memory": "true",
            "precision.master_weights": "params",
        },
    ),
    # Flat shards on and off: bench/reports/2026-11-30-llama3.1-8b-h200x2-flat-shards.md
    "8b-mb3-symmetric-flat-shards": tv("llama3.1-8b", "fsdp2", "none", 3, **COMPILED, **FAST_COMM),
    # The lean memory budget and the micro-batches it makes room for:
    # bench/reports/2026-11-30-llama3.1-8b-h200x2-memory-budget.md
    **{
        f"8b-fsdp2-noac-mb{mb}-compile-bf16reduce-symm-budget7": tv(
            "llama3.1-8b", "fsdp2", "none", mb, **COMPILED, **FAST_COMM, **{"compile.memory_budget": "0.7"}
        )
        for mb in (3, 4, 5, 6)
    },
    # The 8B at its fastest, on torchtitan's own text, tokenizer and learning rate (bench/peers/torchtitan_run.py):
    # bench/reports/2026-12-01-llama3.1-8b-h200x2-vs-torchtitan.md; with the first blocks' activations offloaded:
    # bench/reports/2026-11-30-llama3.1-8b-h200x2-activation-offload.md
    **{
        f"8b-fsdp2-noac-mb{mb}-compile-bf16reduce-symm-budget7-tttext-lr8{suffix}": tv(
            "llama3.1-8b",
            "fsdp2",
            "none",
            mb,
            **COMPILED,
            **FAST_COMM,
            **{"compile.memory_budget": "0.7", **TT_TEXT, "train.lr": "8e-4", **extra},
        )
        for mb, suffix, extra in ((6, "", {}), (6, "-off2", {"ac.offload_layers": "2"}))
    },
    # Llama-2-7B at its fastest in bf16 (the MFU figure) and in FP8, each at its best micro-batch:
    # bench/reports/2026-12-01-llama2-7b-h200x2-bf16-and-fp8-throughput.md
    "fsdp2-noac-mb6-compile-bf16reduce-symm-budget7": tv(
        "llama2-7b", "fsdp2", "none", 6, **COMPILED, **FAST_COMM, **{"compile.memory_budget": "0.7"}
    ),
    **{
        f"fsdp2-noac-mb{mb}-compile-fp8-bf16reduce-symm": tv(
            "llama2-7b", "fsdp2", "none", mb, **COMPILED, **FP8, **FAST_COMM
        )
        for mb in (4, 5, 6, 7)
    },
    # --auto's picks: bench/reports/2026-12-01-h200x2-auto.md
    "8b-auto": {"model.preset": "llama3.1-8b", "auto.enabled": "true"},
    "8b-auto-symmetric": {
        "model.preset": "llama3.1-8b",
        "auto.enabled": "true",
        "experimental.symmetric_memory": "true",
    },
    "7b-fp8-auto": {"model.preset": "llama2-7b", "auto.enabled": "true", **FP8, **FAST_COMM},
    # smoke: a tiny model through both APIs with compile, to fail fast before the big runs
    "smoke-fsdp2": tv("tiny", "fsdp2", "none", 2, **{"compile.enabled": "true", "data.seq_len": "256"}),
    "smoke-fsdp1": tv("tiny", "fsdp1", "full", 2, **{"data.seq_len": "256"}),
}
TORCHTITAN_VARIANTS = {  # name -> (flavor, batch, ac mode, compile)
    "tt-8b-mb3-compile": ("8B", 3, "none", True),  # torchtitan's fastest measured setting for the 8B on 2 H200s
}
ACCELERATE_VARIANTS = {  # name -> (preset shape, micro batch, activation checkpointing)
    "accelerate-7b-noac-mb2": ("llama2-7b", 2, False),
}
SUITES = {
    # Llama-2-7B at the plain FSDP2 reference script's settings, after two tiny smoke runs (about 6 minutes on 2 H200s)
    "reference": [
        "smoke-fsdp2",
        "smoke-fsdp1",
        "fsdp2-ac-mb1",
        "fsdp2-ac-mb2",
        "fsdp2-noac-mb1",
        "fsdp2-noac-mb2",
        "fsdp1-ac-mb1",
        "fsdp1-noac-mb2",
    ],
    # The current-best table in one call (about 8 minutes on 2 H200s): the 8B head to head with torchtitan on its own
    # inputs (torchtitan first and last: the GPUs run at their power cap, so the inputs' values and the GPUs' warming
    # move both figures), the 7B in bf16 and in FP8 at their best, accelerate, and --auto's picks.
    "speed": [
        "tt-8b-mb3-compile",
        "8b-fsdp2-noac-mb6-compile-bf16reduce-symm-budget7-tttext-lr8",
        "tt-8b-mb3-compile",
        "fsdp2-noac-mb6-compile-bf16reduce-symm-budget7",
        "fsdp2-noac-mb6-compile-fp8-bf16reduce-symm",
        "accelerate-7b-noac-mb2",
        "8b-auto-symmetric",
        "7b-fp8-auto",
    ],
}


def child_env() -> dict[str, str]:
    path = os.pathsep.join(filter(None, [str(TRAINER_SRC), os.environ.get("PYTHONPATH")]))
    return {**os.environ, **CHILD_ENV, "PYTHONPATH": path}


def run_trainer(name: str, args: argparse.Namespace, nproc: int, work: Path) -> dict:
    overrides = {
        **BASE,
        "train.steps": str(args.steps),
        "metrics.warmup_steps": str(args.warmup),
        **TRAINER_VARIANTS[name],
        "train.output_dir": str(work / name),
    }
    if any("{tt_assets}" in v for v in overrides.values()):
        assets = torchtitan_assets(work)
        overrides = {k: v.replace("{tt_assets}", str(assets)) for k, v in overrides.items()}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={nproc}",
        "-m",
        "fsdp_trainer",
    ]
    for key, value in overrides.items():
        cmd += [f"--{key}", value]
    record: dict = {"variant": name, "kind": "trainer", "command": " ".join(["torchrun", *cmd[3:]])}
    proc_rc, log = _run(cmd, work / f"{name}.log", args.timeout)
    summary_file = work / name / "summary.json"
    if proc_rc == 0 and summary_file.is_file():
        summary = json.loads(summary_file.read_text())
        train = summary.pop("config")["train"]  # resolved settings (--auto chooses the micro-batch)
        expected = (
            summary["steps_run"]
            * nproc
            * train["micro_batch_size"]
            * train["grad_accum_steps"]
            * int(overrides["data.seq_len"])
        )
        record.update(summary, ok=True, tokens_expected=expected, tokens_check=summary["tokens_processed"] == expected)
    else:
        record.update(ok=False, error=_error_line(log, proc_rc))
    return record


def torchtitan_assets(work: Path) -> Path:
    """The folder of torchtitan's tokenizer and text under ``work``, written on first use."""
    from peers.torchtitan_run import prepare_assets

    assets = work / "torchtitan_assets"
    if not (assets / "tokenizer" / "tokenizer.json").exists():
        prepare_assets(assets)
    return assets


def run_torchtitan_variant(name: str, args: argparse.Namespace, nproc: int, work: Path) -> dict:
    from peers.torchtitan_run import run_torchtitan

    assets = torchtitan_assets(work)
    flavor, batch, ac, compile_ = TORCHTITAN_VARIANTS[name]
    rec = run_torchtitan(
        nproc=nproc,
        flavor=flavor,
        seq_len=4096,
        batch=batch,
        ac=ac,
        compile_=compile_,
        steps=args.steps + 3,
        assets=assets,
        out_dir=work,
        env=CHILD_ENV,
        timeout=args.timeout,
    )
    rec.update(variant=name, kind="torchtitan", ok="error" not in rec)
    return rec


def run_accelerate_variant(name: str, args: argparse.Namespace, nproc: int, work: Path) -> dict:
    sys.path.insert(0, str(TRAINER_SRC))
    from fsdp_trainer.presets import PRESETS

    preset, mb, ac = ACCELERATE_VARIANTS[name]
    p = PRESETS[preset]()
    out = work / f"{name}.json"
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={nproc}",
        str(ROOT / "bench" / "peers" / "accelerate_fsdp.py"),
        "--hidden",
        str(p["hidden_size"]),
        "--layers",
        str(p["num_hidden_layers"]),
        "--heads",
        str(p["num_attention_heads"]),
        "--kv-heads",
        str(p.get("num_key_value_heads", p["num_attention_heads"])),
        "--ffn",
        str(p["intermediate_size"]),
        "--vocab",
        str(p["vocab_size"]),
        "--rope-theta",
        str(p.get("rope_theta", 10000.0)),
        "--seq-len",
        "4096",
        "--micro-batch",
        str(mb),
        "--steps",
        str(args.steps),
        "--warmup",
        str(args.warmup),
        "--out",
        str(out),
    ] + (["--activation-checkpointing"] if ac else [])
    rc, log = _run(cmd, work / f"{name}.log", args.timeout)
    if rc == 0 and out.is_file():
        return {**json.loads(out.read_text()), "variant": name, "kind": "accelerate", "ok": True}
    return {"variant": name, "kind": "accelerate", "ok": False, "error": _error_line(log, rc)}


class Telemetry:
    """``nvidia-smi`` sampling every GPU while one variant runs (``--telemetry``); ``smi_summary`` reads the samples."""

    FIELDS = "index,clocks.sm,power.draw,clocks_event_reasons.active"

    def __init__(self, path: Path):
        self.path = path
        self.file = path.open("w")
        self.proc = subprocess.Popen(
            ["nvidia-smi", f"--query-gpu={self.FIELDS}", "--format=csv,noheader,nounits", "-lms", "250"],
            stdout=self.file,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def stop(self) -> dict:
        """End the sampling; returns ``smi_summary`` of what it wrote."""
        self.proc.terminate()
        self.proc.wait()
        self.file.close()
        return smi_summary(self.path.read_text())


def smi_summary(text: str) -> dict:
    """Medians over the busy samples of ``Telemetry.FIELDS`` lines (see the module docstring), or the tool's error."""
    import statistics
    from collections import Counter

    samples = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        try:
            samples.append((int(parts[0]), float(parts[1]), float(parts[2]), parts[3]))
        except (IndexError, ValueError):  # a field nvidia-smi could not read ([N/A]), or its error message
            continue
    if not samples:
        return {"telemetry_error": (text.strip().splitlines() or ["no samples"])[-1][:200]}
    top = max(s[2] for s in samples)
    busy = [s for s in samples if s[2] >= top / 2]
    return {
        "sm_clock_mhz_median": statistics.median(s[1] for s in busy),
        "power_w_median": statistics.median(s[2] for s in busy),
        "power_w_max": top,
        "clock_event_reasons": Counter(s[3] for s in busy).most_common(1)[0][0],
        "telemetry_samples": len(busy),
    }


def stop(proc: subprocess.Popen, grace: float = 60.0) -> None:
    """End a torchrun that ran out of time: SIGTERM first, which torchrun passes on to its workers (they run in sessions
    of their own and would outlive a SIGKILL of torchrun, holding the GPUs the next run needs), then SIGKILL."""
    proc.terminate()
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _run(cmd: list[str], log_path: Path, timeout: int) -> tuple[int, str]:
    print(f"== {log_path.stem}", file=sys.stderr, flush=True)
    proc = subprocess.Popen(cmd, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    try:
        log, _ = proc.communicate(timeout=timeout)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        stop(proc)
        try:
            log, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:  # a worker still holds the pipe
            log = ""
        rc, log = -1, f"timed out after {timeout}s\n" + (log or "")
    log_path.write_text(log)
    return rc, log


def _error_line(log: str, rc: int) -> str:
    if "out of memory" in log.lower() or "OutOfMemoryError" in log:
        return "CUDA out of memory"
    lines = [line for line in log.splitlines() if "Error" in line or "error:" in line]
    return f"rc={rc}: " + (lines[-1] if lines else log.strip()[-300:])[:300]


def table(records: list[dict]) -> str:
    rows = [
        "| variant | tokens/s/GPU | TFLOP/s/GPU | MFU | peak GiB | loss | tokens check | SM MHz, W |",
        "|---|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in records:
        if not r["ok"]:
            rows.append(f"| {r['variant']} | failed: {r['error'][:120]} | | | | | | |")
            continue
        check = (
            "-"
            if "tokens_check" not in r
            else ("ok" if r["tokens_check"] else f"MISMATCH {r['tokens_processed']}!={r['tokens_expected']}")
        )
        mfu = "-" if r.get("mfu") is None else f"{100 * r['mfu']:.1f}%"
        rows.append(
            f"| {r['variant']} | {r['tokens_per_s_per_gpu']:,.0f} | {r['tflops_per_gpu']:.1f} | {mfu} | "
            f"{r.get('peak_mem_gib') or 0:.1f} | {r.get('final_loss', float('nan')):.3f} | {check} | {_power(r)} |"
        )
    return "\n".join(rows)


def _power(r: dict) -> str:
    if "sm_clock_mhz_median" not in r:
        return r.get("telemetry_error", "-")
    return f"{r['sm_clock_mhz_median']:.0f}, {r['power_w_median']:.0f} ({r['clock_event_reasons']})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out",
        default=os.environ.get("OUT", ".bench"),
        help="folder for results.json and logs.tar.gz (default: $OUT or .bench)",
    )
    parser.add_argument("--suite", default="reference", help=f"a named list of variants: {', '.join(SUITES)}, or 'all'")
    parser.add_argument("--only", default="", help="comma-separated variants instead of a suite")
    parser.add_argument("--steps", type=int, default=12, help="optimizer steps per variant")
    parser.add_argument("--warmup", type=int, default=4, help="first steps left out of the averages")
    parser.add_argument("--nproc", type=int, default=0, help="GPUs per run (default: all visible)")
    parser.add_argument("--timeout", type=int, default=420, help="seconds per variant before it is recorded as failed")
    parser.add_argument(
        "--deadline",
        type=int,
        default=0,
        help="start no variant after this many seconds (0: no limit); skipped ones are listed",
    )
    parser.add_argument(
        "--telemetry", action="store_true", help="sample SM clocks and power with nvidia-smi during each variant"
    )
    args = parser.parse_args()

    if args.telemetry and shutil.which("nvidia-smi") is None:
        parser.error("--telemetry: nvidia-smi is not on PATH; install the NVIDIA driver's tools or drop --telemetry")
    known = {**TRAINER_VARIANTS, **TORCHTITAN_VARIANTS, **ACCELERATE_VARIANTS}
    if args.only:
        names = [n for n in args.only.split(",") if n]
    elif args.suite == "all":
        names = [n for suite in SUITES.values() for n in suite]
    else:
        names = SUITES.get(args.suite) or parser.error(
            f"--suite: unknown {args.suite!r}; use one of {', '.join(SUITES)} or all"
        )
    unknown = [n for n in names if n not in known]
    if unknown:
        parser.error(f"--only: unknown variants {', '.join(unknown)}; known: {', '.join(known)}")
    import torch

    nproc = args.nproc or torch.cuda.device_count()
    if nproc < 1:
        parser.error("--nproc: no GPU visible; this benchmark needs CUDA GPUs")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="fsdp-bench-"))
    header = {
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        "gpus": nproc,
        "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%d"),
        "steps": args.steps,
        "warmup": args.warmup,
    }
    records: list[dict] = []
    started = time.perf_counter()
    for name in names:
        t0 = time.perf_counter()
        if args.deadline and t0 - started > args.deadline:
            records.append({"variant": name, "ok": False, "error": f"skipped: past --deadline {args.deadline}s"})
            continue
        telemetry = Telemetry(work / f"{name}.smi.log") if args.telemetry else None
        try:
            if name in TRAINER_VARIANTS:
                rec = run_trainer(name, args, nproc, work)
            elif name in TORCHTITAN_VARIANTS:
                rec = run_torchtitan_variant(name, args, nproc, work)
            else:
                rec = run_accelerate_variant(name, args, nproc, work)
        finally:
            smi = telemetry.stop() if telemetry is not None else {}
        rec.update(smi)
        rec["run_s"] = round(time.perf_counter() - t0, 1)
        records.append(rec)
        (out / "results.json").write_text(json.dumps({"header": header, "records": records}, indent=1))
        print(
            f"   {name}: {'ok' if rec['ok'] else 'FAILED ' + rec['error']} ({rec['run_s']} s)",
            file=sys.stderr,
            flush=True,
        )
        if name.startswith("smoke") and not rec["ok"]:
            print("smoke run failed: stopping before the large runs", file=sys.stderr)
            break
    with tarfile.open(out / "logs.tar.gz", "w:gz") as tar:
        for log in sorted(work.glob("*.log")):  # with --telemetry, each variant's nvidia-smi samples too
            tar.add(log, arcname=log.name)
    print(f"\n{header}\n")
    print(table(records))
    return 0 if all(r["ok"] for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())

"""The estimate against the trainer on one GPU: peak memory and step time, for models and checkpointing settings
the estimate's model was not fitted to.

For each configuration it asks ``fsdp-sdk estimate --json`` (one node of ``--instance-type`` with one GPU), runs
the trainer with the same settings under ``torchrun --standalone --nproc-per-node 1``, reads its ``summary.json``
and compares: peak memory within 10% and step time within 15% of the estimate. It writes one JSON record to
``<out>/estimate-check.json`` after every configuration (so a run cut short keeps what it measured).

    python bench/estimate_check.py --out $OUT                              # one H200: 4 runs, about 6 minutes
    python bench/estimate_check.py --plan cpu --out /tmp/check --device cpu   # a rehearsal on CPU (tiny shapes)

The GPU plan: a Llama-3.2-3B shape (its Hugging Face ``config.json``, written under ``<out>/models``; no weights
needed) without and with full activation checkpointing, Llama-2-7B with selective (every 2nd block) and full
checkpointing, then, in the time left, a TinyLlama-1.1B shape without checkpointing; all compiled, sequence 4096,
bf16, FSDP2 over the one GPU, random weights, synthetic tokens.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [str(ROOT / "packages" / "core" / "src"), str(ROOT / "packages" / "trainer" / "src")]
MEMORY_TOLERANCE, STEP_TOLERANCE = 0.10, 0.15

#: Llama-3.2-3B's architecture, as in its config.json on the Hugging Face Hub (tied embeddings).
LLAMA_32_3B = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "vocab_size": 128256,
    "hidden_size": 3072,
    "intermediate_size": 8192,
    "num_hidden_layers": 28,
    "num_attention_heads": 24,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "max_position_embeddings": 131072,
    "rope_theta": 500000.0,
    "rope_scaling": {
        "rope_type": "llama3",
        "factor": 32.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    },
    "rms_norm_eps": 1e-05,
    "tie_word_embeddings": True,
    "bos_token_id": 128000,
    "eos_token_id": 128001,
    "torch_dtype": "bfloat16",
}
#: TinyLlama-1.1B's architecture (untied embeddings, 4 key/value heads), from its config.json on the Hub.
TINYLLAMA_11B = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "vocab_size": 32000,
    "hidden_size": 2048,
    "intermediate_size": 5632,
    "num_hidden_layers": 22,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "max_position_embeddings": 2048,
    "rope_theta": 10000.0,
    "rms_norm_eps": 1e-05,
    "tie_word_embeddings": False,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "torch_dtype": "bfloat16",
}
#: A toy of the same form for the CPU rehearsal.
TINY_TIED = {
    **LLAMA_32_3B,
    "vocab_size": 512,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "rope_scaling": None,
    "bos_token_id": 256,
    "eos_token_id": 257,
}

# name -> (model: preset or the key of a config.json written under <out>/models, trainer settings)
PLANS: dict[str, dict[str, tuple[str, dict[str, Any]]]] = {
    "h200": {
        "llama3.2-3b-noac-mb4": ("llama-3.2-3b", {"ac.mode": "none", "train.micro_batch_size": 4}),
        "llama2-7b-sel2-mb2": ("llama2-7b", {"ac.mode": "selective", "ac.every": 2, "train.micro_batch_size": 2}),
        "llama3.2-3b-fullac-mb8": ("llama-3.2-3b", {"ac.mode": "full", "train.micro_batch_size": 8}),
        "llama2-7b-fullac-mb4": ("llama2-7b", {"ac.mode": "full", "train.micro_batch_size": 4}),
        # runs when time is left (a third model, untied, should the tied 3B not run)
        "tinyllama-1.1b-noac-mb8": ("tinyllama-1.1b", {"ac.mode": "none", "train.micro_batch_size": 8}),
    },
    "cpu": {
        "tiny-tied-noac-mb2": ("tiny-tied", {"ac.mode": "none", "train.micro_batch_size": 2}),
        "tiny-fullac-mb2": ("tiny", {"ac.mode": "full", "train.micro_batch_size": 2}),
    },
}
CONFIGS = {"llama-3.2-3b": LLAMA_32_3B, "tinyllama-1.1b": TINYLLAMA_11B, "tiny-tied": TINY_TIED}


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([*SOURCES, *filter(None, [env.get("PYTHONPATH")])])
    env.setdefault("NCCL_NVLS_ENABLE", "0")  # the lent machines: NVLink multicast stays off
    env.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    return env


def _model_flag(model: str, models_dir: Path) -> tuple[str, list[str]]:
    """(what ``fsdp-sdk estimate --model`` takes, the trainer's model flags)."""
    if model not in CONFIGS:
        return model, ["--model.preset", model]
    directory = models_dir / model
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(CONFIGS[model], indent=1))
    # the architecture from the directory, random weights, synthetic tokens: no tokenizer or weights needed
    return str(directory), [
        "--model.name_or_path",
        str(directory),
        "--model.init",
        "random",
        "--data.source",
        "synthetic",
        "--model.tokenizer",
        "bytes",
    ]


def _settings(args: argparse.Namespace, settings: dict[str, Any]) -> dict[str, Any]:
    return {
        "data.seq_len": args.seq_len,
        "precision.mode": "bf16",
        "parallel.api": "fsdp2",
        "compile.enabled": args.compile,
        "compile.loss": args.compile,
        **settings,
    }


def estimate(model: str, settings: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """``fsdp-sdk estimate --json`` for one GPU of ``args.instance_type``."""
    command = [
        sys.executable,
        "-c",
        "from fsdp_sdk.cli import main; main()",
        "estimate",
        "--model",
        model,
        "--instance-type",
        args.instance_type,
        "--nodes",
        "1",
        "--gpus-per-node",
        "1",
        "--json",
        "--",
    ]
    for key, value in settings.items():
        command += [f"--{key}", str(value).lower() if isinstance(value, bool) else str(value)]
    done = subprocess.run(command, capture_output=True, text=True, env=_env(), timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"fsdp-sdk estimate failed: {done.stderr.strip()[-500:]}")
    return json.loads(done.stdout)


def train(
    model_flags: list[str], settings: dict[str, Any], out: Path, args: argparse.Namespace, timeout: float
) -> dict:
    """One trainer run on one GPU; its summary.json."""
    flags = [
        *model_flags,
        "--train.steps",
        str(args.steps),
        "--metrics.warmup_steps",
        str(args.warmup),
        "--checkpoint.enabled",
        "false",
        "--train.output_dir",
        str(out),
        "--runtime.device",
        args.device,
    ]
    for key, value in settings.items():
        flags += [f"--{key}", str(value).lower() if isinstance(value, bool) else str(value)]
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "1",
        "-m",
        "fsdp_trainer",
        *flags,
    ]
    log = out / "train.log"
    out.mkdir(parents=True, exist_ok=True)
    with log.open("w") as handle:
        done = subprocess.run(command, stdout=handle, stderr=subprocess.STDOUT, env=_env(), timeout=timeout)
    if done.returncode != 0:
        tail = log.read_text()[-1500:]
        raise RuntimeError(f"the trainer exited with {done.returncode}: {tail}")
    return {**json.loads((out / "summary.json").read_text()), "command": command}


def compare(est: dict[str, Any], summary: dict[str, Any], settings: dict[str, Any], seq_len: int) -> dict[str, Any]:
    """Measured against estimated; None where the run has no figure (CPU: no CUDA peak)."""
    tokens = settings["train.micro_batch_size"] * seq_len
    measured_step = tokens / summary["tokens_per_s_per_gpu"] if summary.get("tokens_per_s_per_gpu") else None
    est_peak, est_step = est["memory"]["peak_gib"], (est["speed"] or {}).get("step_s")
    peak = summary.get("peak_mem_gib")
    memory_error = peak / est_peak - 1 if peak else None
    step_error = measured_step / est_step - 1 if measured_step and est_step else None
    return {
        "measured": {
            "peak_gib": peak,
            "step_s": measured_step,
            "tokens_per_s_per_gpu": summary.get("tokens_per_s_per_gpu"),
            "mfu": summary.get("mfu"),
            "gpu_name": summary.get("gpu_name"),
            "torch_version": summary.get("torch_version"),
            "final_loss": summary.get("final_loss"),
        },
        "estimated": {
            "peak_gib": est_peak,
            "step_s": est_step,
            "tokens_per_s_per_gpu": (est["speed"] or {}).get("tokens_per_s_per_gpu"),
            "mfu": (est["speed"] or {}).get("mfu"),
            "fits": est["memory"]["fits"],
        },
        "memory_error": memory_error,
        "step_error": step_error,
        "memory_within_10pct": None if memory_error is None else abs(memory_error) <= MEMORY_TOLERANCE,
        "step_within_15pct": None if step_error is None else abs(step_error) <= STEP_TOLERANCE,
    }


def _write(path: Path, record: dict[str, Any]) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w") as handle:
        json.dump(record, handle, indent=1, default=str)
    os.replace(tmp, path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.environ.get("OUT", ".bench"), help="where estimate-check.json goes")
    parser.add_argument("--plan", choices=sorted(PLANS), default="h200", help="which configurations")
    parser.add_argument("--only", default="", help="comma-separated configuration names of the plan")
    parser.add_argument("--instance-type", default="p5en.48xlarge", help="what the estimate is for (one of its GPUs)")
    parser.add_argument("--seq-len", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=4, help="first steps left out of the averages")
    parser.add_argument(
        "--compile", action=argparse.BooleanOptionalAction, default=None, help="compiled blocks (default: on GPUs)"
    )
    parser.add_argument("--device", default="auto", help="runtime.device (cpu for the rehearsal)")
    parser.add_argument("--deadline", type=float, default=450, help="seconds; no run starts after it, each ends by it")
    args = parser.parse_args()
    if args.compile is None:
        args.compile = args.plan != "cpu"
    start = time.monotonic()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "estimate-check.json"
    plan = PLANS[args.plan]
    names = [n for n in args.only.split(",") if n] or list(plan)
    record: dict[str, Any] = {
        "plan": args.plan,
        "command": sys.argv,
        "instance_type": args.instance_type,
        "seq_len": args.seq_len,
        "steps": args.steps,
        "warmup": args.warmup,
        "tolerances": {"memory": MEMORY_TOLERANCE, "step_time": STEP_TOLERANCE},
        "runs": {},
    }
    for name in names:
        model, own = plan[name]
        settings = _settings(args, own)
        left = args.deadline - (time.monotonic() - start)
        entry: dict[str, Any] = {"model": model, "settings": settings}
        if left < 30:
            entry["status"] = "skipped: the deadline passed"
        else:
            print(f"== {name}", file=sys.stderr, flush=True)
            estimate_model, model_flags = _model_flag(model, out / "models")
            try:
                est = estimate(estimate_model, settings, args)
                summary = train(model_flags, settings, out / name, args, timeout=left)
                entry.update(status="ok", **compare(est, summary, settings, args.seq_len))
                entry["estimate_assumptions"] = est["assumptions"]
            except (RuntimeError, subprocess.TimeoutExpired, OSError, ValueError) as exc:
                entry["status"] = f"failed: {' '.join(str(exc).split())[:1500]}"
        record["runs"][name] = entry
        _write(path, record)
    runs = record["runs"].values()
    checked = [r for r in runs if r.get("memory_within_10pct") is not None]
    record["all_within_tolerance"] = bool(checked) and all(
        r["memory_within_10pct"] and r["step_within_15pct"] for r in checked
    )
    _write(path, record)
    print("| configuration | peak GiB measured / estimated | step s measured / estimated |\n|---|---:|---:|")
    for name, r in record["runs"].items():
        if r.get("status") != "ok":
            print(f"| {name} | {r['status'][:80]} | |")
            continue
        m, e = r["measured"], r["estimated"]
        peak = "-" if m["peak_gib"] is None else f"{m['peak_gib']:.1f} / {e['peak_gib']:.1f} ({r['memory_error']:+.1%})"
        step = "-" if r["step_error"] is None else f"{m['step_s']:.3f} / {e['step_s']:.3f} ({r['step_error']:+.1%})"
        print(f"| {name} | {peak} | {step} |")
    print(f"record: {path}", file=sys.stderr)
    return 0 if all(r.get("status") == "ok" for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())

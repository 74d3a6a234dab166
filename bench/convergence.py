"""Fast and right: the trainer's fast configurations learn as well as a plain reference, over hundreds of steps.

    python bench/convergence.py run --out $OUT [--configs reference,default,fast,fp8] [--seeds 1,2] [--steps 300]
    python bench/convergence.py analyze DIR [DIR ...] [--report bench/reports/<name>.md]

Every run trains the same Llama-shaped model (``--shape``: ``llama-1b`` is Llama-3.2-1B's decoder, hidden 2048, 16
layers, 32 query and 8 key/value heads, FFN 8192, untied embeddings over the tokenizer's vocabulary: 1.1B parameters)
from the same initial weights, on the same text, tokens and order, with the same sequence length, batch, learning-rate
schedule and AdamW hyperparameters. What a call prepares once, under ``--work``, and every run reads:

- the text: Python's documentation topics (``pydoc_data``) and the standard library's sources, one document per topic
  or file, in sorted order (JSON lines; the interpreter's own files, so nothing is downloaded);
- a byte-level BPE tokenizer of ``--vocab`` tokens trained on that text (Hugging Face format);
- the initial weights, drawn once from ``--init-seed`` (normal, std 0.02; norms 1) and saved in Hugging Face format
  (fp32 safetensors), loaded by every run.

Their SHA-256 digests go into every run's record, so runs made in different calls (or on different machines) are
only compared when they started from the same files; ``analyze`` checks it.

Configurations (``--configs``; each runs once per data-order seed in ``--seeds``):

1. ``reference``: Hugging Face ``LlamaForCausalLM`` (SDPA attention) under FSDP2 with bf16 compute and fp32 gradient
   reduction, fp32 parameters stepped by ``torch.optim.AdamW``, ``nn.utils.clip_grad_norm_``, the full logits'
   cross-entropy. Nothing else (``python bench/convergence.py reference ...``, this file).
2. ``default``: the trainer with its default configuration.
3. ``fast``: the trainer's fastest bf16 configuration: ``--auto`` (compiled blocks and loss), bf16 gradient reduction,
   the lean compile memory budget and flat shards, on top of the defaults (fused loss, fused kernels, cuDNN attention,
   the Triton AdamW with master weights as 16-bit remainders). One GPU has no collectives to place, so NCCL symmetric
   memory (which moves bits, not values) is left out.
4. ``fp8``: ``fast`` with float8 linears (tensorwise scaling, float8 all-gathers) and the default memory budget, the
   fastest FP8 configuration measured.

Ablations for finding the component behind a failed check, each ``fast`` (or ``fp8``) with one option turned off or
changed, run when named: ``fast-fp32-reduce``, ``fast-params`` (fp32 parameters, no masters), ``fast-fused-adamw``,
``fast-unfused-loss``, ``fast-eager`` (no compile), ``fast-no-flat-shards``, ``fp8-rowwise``.

``analyze`` reads the runs' records (``runs/<config>-seed<seed>.json``: every step's loss, gradient norm and learning
rate, the command, versions and throughput), checks the pass conditions and writes a report with a plot of the curves
(matplotlib) and a CSV of every step's losses:

- the mean loss over the last ``--window`` (50) steps of ``default`` and of ``fast``, averaged over the seeds, within
  the reference's own spread between its seeds (relative) or 0.5% of the reference's mean, whichever is larger;
- ``fp8`` within 1.5%;
- no step after the learning-rate warm-up where ``fast``'s gradient norm departs from the reference's of the same seed
  (same data, same order) by more than 10%.

On one H200 (``--device cuda``, the default) the GPU call is, in two calls of at most 9 minutes each::

    python bench/convergence.py run --out $OUT --configs reference,default --deadline 480
    python bench/convergence.py run --out $OUT --configs fast,fp8 --deadline 480

``--device cpu`` is the CPU check (``tests/trainer/test_convergence.py``): the ``tiny`` shape, fp32 everywhere, 20
steps, and in ``fast`` every option that runs on CPU (compiled blocks and loss under the lean budget, flat shards, the
Triton AdamW in Triton's interpreter); there the losses must match the reference's to 1e-5.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import sysconfig
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TRAINER_SRC = ROOT / "packages" / "trainer" / "src"
if str(TRAINER_SRC) not in sys.path:
    sys.path.insert(0, str(TRAINER_SRC))

#: Decoder shapes (``LlamaConfig`` fields; the vocabulary is the tokenizer's).
SHAPES: dict[str, dict[str, Any]] = {
    "llama-1b": dict(  # Llama-3.2-1B's decoder
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=16,
        num_attention_heads=32,
        num_key_value_heads=8,
        max_position_embeddings=8192,
        rope_theta=500000.0,
        rope_scaling=dict(
            rope_type="llama3",
            factor=32.0,
            low_freq_factor=1.0,
            high_freq_factor=4.0,
            original_max_position_embeddings=8192,
        ),
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
    ),
    "tiny": dict(
        hidden_size=64,
        intermediate_size=172,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        rope_theta=10000.0,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
    ),
}

#: Defaults per device: the GPU comparison, and the CPU check of the numerics.
DEFAULTS: dict[str, dict[str, Any]] = {
    "cuda": dict(
        shape="llama-1b",
        vocab=32768,
        corpus_mb=16.0,
        seq_len=1024,
        micro_batch=8,
        steps=300,
        warmup=30,
        lr=3e-4,
        dtype="bf16",
        timeout=420,
    ),
    "cpu": dict(
        shape="tiny",
        vocab=512,
        corpus_mb=0.5,
        seq_len=64,
        micro_batch=4,
        steps=20,
        warmup=2,
        lr=3e-3,
        dtype="fp32",
        timeout=300,
    ),
}
MIN_LR_RATIO, WEIGHT_DECAY, MAX_GRAD_NORM, INIT_STD = 0.1, 0.1, 1.0, 0.02
CONFIGS = ("reference", "default", "fast", "fp8")
FAST = [
    "--auto",
    "--precision.reduce_dtype",
    "bf16",
    "--compile.memory_budget",
    "0.7",
    "--experimental.flat_shards",
    "true",
]
FP8 = ["--auto", "--precision.reduce_dtype", "bf16", "--fp8.enabled", "true", "--fp8.all_gather", "true"]
#: Trainer flags of each configuration on GPUs (``reference`` is not the trainer).
GPU_FLAGS: dict[str, list[str]] = {
    "default": [],
    "fast": FAST,
    "fp8": FP8,
    "fast-fp32-reduce": [*FAST, "--precision.reduce_dtype", "fp32"],
    "fast-params": [*FAST, "--precision.master_weights", "params"],
    "fast-fused-adamw": [*FAST, "--train.adamw", "fused", "--precision.master_weights", "params"],
    "fast-unfused-loss": [*FAST, "--train.fused_loss", "false"],
    "fast-eager": [
        *FAST[:3],
        "--compile.enabled",
        "false",
        "--compile.loss",
        "false",
        "--experimental.flat_shards",
        "true",
    ],
    "fast-no-flat-shards": FAST[:5],
    "fp8-rowwise": ["--auto", "--precision.reduce_dtype", "bf16", "--fp8.enabled", "true", "--fp8.recipe", "rowwise"],
}
#: On CPU, in fp32: every option of ``fast`` that runs there, given explicitly (``--auto`` leaves compile off on CPU).
CPU_FLAGS: dict[str, list[str]] = {
    "default": [],
    "fast": [
        "--compile.enabled",
        "true",
        "--compile.loss",
        "true",
        "--compile.memory_budget",
        "0.7",
        "--experimental.flat_shards",
        "true",
        "--train.adamw",
        "triton",
    ],
}


def trainer_flags(config: str, device: str) -> list[str]:
    """The trainer flags of ``config`` on ``device`` (beyond the ones every run shares)."""
    table = GPU_FLAGS if device == "cuda" else CPU_FLAGS
    if config not in table:
        raise SystemExit(f"--configs: {config!r} does not run on {device}; choose from reference, {', '.join(table)}")
    return list(table[config])


# ---------------------------------------------------------------------------------------------------------------------
# What every run shares: text, tokenizer, initial weights
# ---------------------------------------------------------------------------------------------------------------------


def sha256(path: Path) -> str:
    """The SHA-256 of a file, or of a directory's files (names and contents, in sorted order)."""
    digest = hashlib.sha256()
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for f in files:
        digest.update(str(f.relative_to(path) if path.is_dir() else f.name).encode())
        with f.open("rb") as fh:
            while chunk := fh.read(1 << 24):
                digest.update(chunk)
    return digest.hexdigest()


def corpus_documents(max_bytes: int) -> list[str]:
    """Python's documentation topics, then the standard library's sources (not its tests), in sorted order, up to
    ``max_bytes``."""
    from pydoc_data.topics import topics

    docs = [text for _, text in sorted(topics.items())]
    size = sum(len(d.encode()) for d in docs)
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for source in sorted(stdlib.glob("*.py")) + sorted(stdlib.glob("*/*.py")):
        if size >= max_bytes:
            break
        if "test" in source.parent.name or source.name.startswith("test"):
            continue
        text = source.read_text(encoding="utf-8", errors="replace").strip()
        if text:
            docs.append(text)
            size += len(text.encode())
    return docs


def prepare(work: Path, shape: str, vocab: int, corpus_mb: float, init_seed: int) -> dict[str, Any]:
    """Write the text, the tokenizer and the initial weights under ``work`` (once: an existing set is reused);
    returns their paths and digests."""
    setup_file = work / "setup.json"
    wanted = {"shape": shape, "vocab": vocab, "corpus_mb": corpus_mb, "init_seed": init_seed}
    if setup_file.is_file():
        setup = json.loads(setup_file.read_text())
        if {k: setup.get(k) for k in wanted} == wanted:
            return setup
    work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    corpus = work / "corpus.jsonl"
    docs = corpus_documents(int(corpus_mb * 1e6))
    corpus.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs), encoding="utf-8")

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<s>", "</s>", "<pad>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(
        docs,
        trainers.BpeTrainer(
            vocab_size=vocab, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        ),
    )
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    tokenizer_dir = work / "tokenizer"
    fast.save_pretrained(tokenizer_dir)

    import torch
    from transformers import LlamaConfig

    from fsdp_trainer.model import init_weights_, meta_model, reset_rotary_

    vocab_size = -(-len(fast) // 64) * 64  # the embedding rounded up to a multiple of 64 rows
    config = LlamaConfig(
        **SHAPES[shape],
        vocab_size=vocab_size,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
        initializer_range=INIT_STD,
    )
    lm = meta_model(config)
    lm.to_empty(device="cpu")
    init_weights_(lm, INIT_STD, init_seed)
    reset_rotary_(lm, "cpu")
    weights_dir = work / "weights"
    lm.save_pretrained(weights_dir)
    params = sum(p.numel() for p in lm.parameters())
    del lm
    setup = {
        **wanted,
        "corpus": str(corpus),
        "tokenizer": str(tokenizer_dir),
        "weights": str(weights_dir),
        "documents": len(docs),
        "corpus_bytes": corpus.stat().st_size,
        "vocab_size": vocab_size,
        "parameters": params,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "digests": {
            "corpus": sha256(corpus),
            "tokenizer": sha256(tokenizer_dir / "tokenizer.json"),
            "weights": sha256(weights_dir),
        },
        "prepare_s": round(time.perf_counter() - started, 1),
    }
    setup_file.write_text(json.dumps(setup, indent=1))
    return setup


# ---------------------------------------------------------------------------------------------------------------------
# The plain reference
# ---------------------------------------------------------------------------------------------------------------------


def train_reference(args: argparse.Namespace) -> None:
    """Hugging Face ``LlamaForCausalLM`` + ``torch.optim.AdamW`` (fp32 parameters) under FSDP2 with ``--dtype``
    compute; writes ``metrics.jsonl`` (the trainer's step records: step, loss, lr, grad_norm) and ``summary.json``."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from transformers import LlamaForCausalLM

    from fsdp_trainer.config import DataConfig, TrainConfig
    from fsdp_trainer.data import build_dataloader
    from fsdp_trainer.optim import lr_multiplier
    from fsdp_trainer.tokenizer import load_tokenizer

    device = torch.device(args.device)
    if device.type == "cuda":
        torch.cuda.set_device(0)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", store=dist.HashStore(), rank=0, world_size=1)
    torch.manual_seed(0)
    compute = {"bf16": torch.bfloat16, "fp32": torch.float32}[args.dtype]
    model = LlamaForCausalLM.from_pretrained(args.model, dtype=torch.float32, attn_implementation="sdpa").to(device)
    model.config.use_cache = False
    mesh = init_device_mesh(device.type, (1,))
    policy = MixedPrecisionPolicy(param_dtype=compute, reduce_dtype=torch.float32)
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    decay = [p for n, p in model.named_parameters() if "norm" not in n]
    no_decay = [p for n, p in model.named_parameters() if "norm" in n]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": WEIGHT_DECAY}, {"params": no_decay, "weight_decay": 0.0}],
        lr=args.lr,
        betas=(0.9, 0.95),
        eps=1e-8,
    )
    schedule = TrainConfig(steps=args.steps, lr=args.lr, warmup_steps=args.warmup, min_lr_ratio=MIN_LR_RATIO)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_multiplier(schedule))
    data = build_dataloader(
        DataConfig(source="jsonl", path=args.data, seq_len=args.seq_len, seed=args.seed),
        load_tokenizer(args.tokenizer),
        model.config.vocab_size,
        args.micro_batch,
        dp_rank=0,
        dp_size=1,
        device=device,
    )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    times = []
    with (out / "metrics.jsonl").open("w") as metrics:
        for step in range(1, args.steps + 1):
            start = time.perf_counter()
            batch = data.next_batch()
            lr = optimizer.param_groups[0]["lr"]
            logits = model(input_ids=batch.input_ids).logits
            loss = F.cross_entropy(
                logits.float().reshape(-1, logits.shape[-1]), batch.labels.reshape(-1), ignore_index=-100
            )
            loss.backward()
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_GRAD_NORM)
            norm = norm.full_tensor() if hasattr(norm, "full_tensor") else norm
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            record = {"step": step, "loss": loss.item(), "lr": lr, "grad_norm": norm.item()}
            times.append(time.perf_counter() - start)  # .item() above waited for the step
            metrics.write(json.dumps(record) + "\n")
            metrics.flush()
    measured = times[min(5, len(times) - 1) :]
    tokens = args.micro_batch * args.seq_len
    summary = {
        "tokens_per_s_per_gpu": tokens * len(measured) / sum(measured),
        "device": device.type,
        "gpu_name": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "torch_version": torch.__version__,
        "adamw": "foreach",
        "master_weights": "params",
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    dist.destroy_process_group()


# ---------------------------------------------------------------------------------------------------------------------
# Running the configurations
# ---------------------------------------------------------------------------------------------------------------------


def child_env(device: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(TRAINER_SRC), os.environ.get("PYTHONPATH")]))}
    # NVLink multicast stays off on the lent machines; expandable segments as in every GPU benchmark here.
    env.update({"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"})
    env.update({"TOKENIZERS_PARALLELISM": "true", "OMP_NUM_THREADS": env.get("OMP_NUM_THREADS", "4")})
    if device == "cuda":
        env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    else:
        env["TRITON_INTERPRET"] = "1"  # the Triton AdamW runs in Triton's interpreter on CPU
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)  # a world of one, whatever launched this script
    return env


def command(config: str, seed: int, setup: dict[str, Any], args: argparse.Namespace, out: Path) -> list[str]:
    """The process one run is: the reference (this file) or the trainer (``python -m fsdp_trainer``)."""
    if config == "reference":
        return [
            sys.executable,
            str(Path(__file__).resolve()),
            "reference",
            "--model",
            setup["weights"],
            "--tokenizer",
            setup["tokenizer"],
            "--data",
            setup["corpus"],
            "--seq-len",
            str(args.seq_len),
            "--micro-batch",
            str(args.micro_batch),
            "--steps",
            str(args.steps),
            "--warmup",
            str(args.warmup),
            "--lr",
            str(args.lr),
            "--seed",
            str(seed),
            "--dtype",
            args.dtype,
            "--device",
            args.device,
            "--out",
            str(out),
        ]
    # fp32 everywhere (the CPU check): given last, these override a configuration's bf16 reduction
    precision = ["--precision.mode", "fp32", "--precision.reduce_dtype", "fp32"] if args.dtype == "fp32" else []
    return [
        sys.executable,
        "-m",
        "fsdp_trainer",
        "--model.name_or_path",
        setup["weights"],
        "--model.init",
        "pretrained",
        "--model.tokenizer",
        setup["tokenizer"],
        "--data.source",
        "jsonl",
        "--data.path",
        setup["corpus"],
        "--data.seq_len",
        str(args.seq_len),
        "--data.seed",
        str(seed),
        "--train.steps",
        str(args.steps),
        "--train.micro_batch_size",
        str(args.micro_batch),
        "--train.lr",
        str(args.lr),
        "--train.warmup_steps",
        str(args.warmup),
        "--train.min_lr_ratio",
        str(MIN_LR_RATIO),
        "--train.weight_decay",
        str(WEIGHT_DECAY),
        "--train.max_grad_norm",
        str(MAX_GRAD_NORM),
        "--train.log_every",
        "50",
        "--checkpoint.enabled",
        "false",
        "--metrics.warmup_steps",
        "5",
        "--runtime.device",
        args.device,
        *trainer_flags(config, args.device),
        *precision,
        "--train.output_dir",
        str(out),
    ]


def run_one(config: str, seed: int, setup: dict[str, Any], args: argparse.Namespace, runs: Path) -> dict[str, Any]:
    """Run one configuration with one data-order seed; returns its record (also written to ``runs/``)."""
    import torch
    import transformers

    name = f"{config}-seed{seed}"
    out = Path(args.work) / "out" / name
    cmd = command(config, seed, setup, args, out)
    print(f"== {name}: {' '.join(cmd[1:])}", file=sys.stderr, flush=True)
    started = time.perf_counter()
    try:
        proc = subprocess.run(
            cmd, env=child_env(args.device), capture_output=True, text=True, timeout=args.timeout, cwd=ROOT
        )
        rc, log = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as e:
        rc, log = -1, f"timed out after {args.timeout}s\n{e.stdout or ''}{e.stderr or ''}"
    (runs / f"{name}.log").write_text(log if isinstance(log, str) else log.decode(errors="replace"))
    record: dict[str, Any] = {
        "config": config,
        "seed": seed,
        "command": " ".join(["python", *cmd[1:]]),
        "invocation": " ".join(["python", "bench/convergence.py", *sys.argv[1:]]),
        "wall_s": round(time.perf_counter() - started, 1),
        "setup": {k: setup[k] for k in ("shape", "vocab_size", "parameters", "digests", "python")},
        "hyperparameters": {
            "seq_len": args.seq_len,
            "micro_batch": args.micro_batch,
            "steps": args.steps,
            "warmup_steps": args.warmup,
            "lr": args.lr,
            "min_lr_ratio": MIN_LR_RATIO,
            "weight_decay": WEIGHT_DECAY,
            "max_grad_norm": MAX_GRAD_NORM,
            "betas": [0.9, 0.95],
            "dtype": args.dtype,
        },
        "versions": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "python": platform.python_version(),
            "cuda": torch.version.cuda,
            "gpu": torch.cuda.get_device_name() if args.device == "cuda" and torch.cuda.is_available() else None,
        },
        "date": time.strftime("%Y-%m-%d"),
    }
    metrics, summary_file = out / "metrics.jsonl", out / "summary.json"
    steps = [json.loads(line) for line in metrics.read_text().splitlines()] if metrics.is_file() else []
    record["steps"] = [{k: s[k] for k in ("step", "loss", "grad_norm", "lr")} for s in steps]
    ok = rc == 0 and len(steps) == args.steps and summary_file.is_file()
    record["ok"] = ok
    if ok:
        summary = json.loads(summary_file.read_text())
        keep = ("tokens_per_s_per_gpu", "adamw", "master_weights", "converters", "auto", "gpu_name", "peak_mem_gib")
        record["summary"] = {k: summary[k] for k in keep if k in summary}
    else:
        lines = [line for line in log.splitlines() if "Error" in line or "error:" in line] or log.splitlines()[-3:]
        record["error"] = f"rc={rc}: " + " | ".join(lines[-2:])[:400]
    (runs / f"{name}.json").write_text(json.dumps(record, indent=1))
    status = "ok" if ok else "FAILED " + record["error"]
    print(f"   {name}: {status} ({record['wall_s']} s)", file=sys.stderr, flush=True)
    return record


def cmd_run(args: argparse.Namespace) -> int:
    defaults = DEFAULTS[args.device]
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    configs = [c for c in args.configs.split(",") if c]
    for config in configs:
        if config != "reference":
            trainer_flags(config, args.device)  # refuses a configuration that does not run on this device
    seeds = [int(s) for s in args.seeds.split(",") if s]
    out = Path(args.out)
    runs = out / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    setup = prepare(Path(args.work), args.shape, args.vocab, args.corpus_mb, args.init_seed)
    print(f"setup: {json.dumps(setup)}", file=sys.stderr, flush=True)
    failed = 0
    for config in configs:
        for seed in seeds:
            if args.deadline and time.perf_counter() - started > args.deadline:
                print(f"   {config}-seed{seed}: skipped, past --deadline {args.deadline}s", file=sys.stderr)
                failed += 1
                continue
            failed += not run_one(config, seed, setup, args, runs)["ok"]
    return 1 if failed else 0


# ---------------------------------------------------------------------------------------------------------------------
# Analysis: pass conditions, plot, report
# ---------------------------------------------------------------------------------------------------------------------

LOSS_TOLERANCE = {"default": 0.005, "fast": 0.005, "fp8": 0.015}  # relative, of the reference's mean
SPREAD_COUNTS = ("default", "fast")  # the reference's own seed spread widens these tolerances, not FP8's
GRAD_NORM_TOLERANCE = 0.10
#: Steps averaged for the gradient-norm comparison that run-to-run noise cannot fail on its own.
ROLLING = 10


def load_runs(dirs: list[Path]) -> list[dict[str, Any]]:
    records = []
    for d in dirs:
        for f in sorted((d / "runs").glob("*.json")) if (d / "runs").is_dir() else sorted(d.glob("*.json")):
            record = json.loads(f.read_text())
            if "config" in record and "steps" in record:
                record["_file"] = f
                records.append(record)
    return records


def tail_mean(record: dict[str, Any], window: int) -> float:
    losses = [s["loss"] for s in record["steps"]]
    return statistics.fmean(losses[-window:])


def grad_norm_departures(mine: dict[str, Any], theirs: dict[str, Any], warmup: int) -> tuple[list[float], list[float]]:
    """Relative gradient-norm departures of ``mine`` from ``theirs`` after the warm-up: step by step, and of
    ``ROLLING``-step means."""
    pairs = [
        (a["grad_norm"], b["grad_norm"])
        for a, b in zip(mine["steps"], theirs["steps"], strict=False)
        if a["step"] > warmup and b["grad_norm"] > 0
    ]
    steps = [abs(a / b - 1) for a, b in pairs]
    rolling = [
        abs(sum(a for a, _ in pairs[i : i + ROLLING]) / sum(b for _, b in pairs[i : i + ROLLING]) - 1)
        for i in range(len(pairs) - ROLLING + 1)
    ]
    return steps, rolling


def rerun_noise(
    records: list[dict[str, Any]], reruns: list[dict[str, Any]], warmup: int
) -> dict[str, dict[str, float | int]]:
    """How far a same-seed rerun of a configuration departs from its first run: the GPU's run-to-run noise.

    Kernels that accumulate in a different order each time (attention's backward, atomics) make two runs from
    the same weights on the same data part ways within steps; the departure of a rerun from its own first run is
    what no configuration can be asked to beat.
    """
    first = {(r["config"], r["seed"]): r for r in records if r.get("ok")}
    noise: dict[str, dict[str, float | int]] = {}
    for rerun in (r for r in reruns if r.get("ok")):
        base = first.get((rerun["config"], rerun["seed"]))
        if base is None:
            continue
        noise[f"{rerun['config']}-seed{rerun['seed']}"] = departure_stats(rerun, base, warmup)
    return noise


def departure_stats(mine: dict[str, Any], theirs: dict[str, Any], warmup: int) -> dict[str, float | int]:
    """How far ``mine``'s gradient norms depart from ``theirs`` after the warm-up: the largest and median step
    departures, the steps over the tolerance, and the largest departure of ``ROLLING``-step means."""
    steps, rolling = grad_norm_departures(mine, theirs, warmup)
    return {
        "max_step_departure": max(steps, default=0.0),
        "steps_over_tolerance": sum(1 for d in steps if d > GRAD_NORM_TOLERANCE),
        "median_step_departure": statistics.median(steps) if steps else 0.0,
        "max_rolling_departure": max(rolling, default=0.0),
    }


def analyze(records: list[dict[str, Any]], window: int, reruns: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The pass conditions over ``records`` (see the module docstring); ``reruns``: same-seed reruns whose departure
    from the first runs measures the run-to-run noise (reported, and the bound of the noise-aware gradient check)."""
    ok = [r for r in records if r.get("ok")]
    digests = {json.dumps(r["setup"]["digests"], sort_keys=True) for r in ok}
    hyper = {json.dumps(r["hyperparameters"], sort_keys=True) for r in ok}
    by_config: dict[str, dict[int, dict[str, Any]]] = {}
    for r in ok:
        by_config.setdefault(r["config"], {})[r["seed"]] = r
    result: dict[str, Any] = {
        "window": window,
        "same_start": len(digests) == 1,
        "same_hyperparameters": len(hyper) == 1,
        "failed_runs": sorted(f"{r['config']}-seed{r['seed']}" for r in records if not r.get("ok")),
        "configs": {},
        "checks": [],
    }
    ref = by_config.get("reference", {})
    if not ref:
        result["checks"].append({"check": "a reference run", "passed": False, "detail": "no reference run finished"})
        return result
    ref_means = {seed: tail_mean(r, window) for seed, r in ref.items()}
    ref_mean = statistics.fmean(ref_means.values())
    spread = (max(ref_means.values()) - min(ref_means.values())) / ref_mean if len(ref_means) > 1 else 0.0
    warmup = next(iter(ref.values()))["hyperparameters"]["warmup_steps"]
    for config, seeds in sorted(by_config.items()):
        means = {seed: tail_mean(r, window) for seed, r in seeds.items()}
        mean = statistics.fmean(means.values())
        departures = []
        for seed, r in seeds.items():
            if seed not in ref or config == "reference":
                continue
            for mine, theirs in zip(r["steps"], ref[seed]["steps"], strict=False):
                if mine["step"] > warmup and theirs["grad_norm"] > 0:
                    departures.append((abs(mine["grad_norm"] / theirs["grad_norm"] - 1), mine["step"], seed))
        worst = max(departures, default=None)
        result["configs"][config] = {
            "seeds": sorted(seeds),
            "last_window_means": {str(s): m for s, m in sorted(means.items())},
            "mean": mean,
            "relative_to_reference": mean / ref_mean - 1,
            "tokens_per_s": statistics.fmean(
                r.get("summary", {}).get("tokens_per_s_per_gpu", math.nan) for r in seeds.values()
            ),
            "grad_norm_max_departure": None
            if worst is None
            else {"departure": worst[0], "step": worst[1], "seed": worst[2]},
        }
    result["reference"] = {"mean": ref_mean, "seed_spread": spread, "warmup_steps": warmup}
    # every run against the reference of its seed, by the measures of the rerun noise: the ablations' rows show
    # whether turning one option off brings the step-by-step departure down to the reference's own
    result["departures"] = {
        f"{config}-seed{seed}": departure_stats(r, ref[seed], warmup)
        for config, seeds in sorted(by_config.items())
        if config != "reference"
        for seed, r in sorted(seeds.items())
        if seed in ref
    }
    result["checks"].append(
        {
            "check": "every run started from the same text, tokenizer and weights, with the same hyperparameters",
            "passed": result["same_start"] and result["same_hyperparameters"],
            "detail": f"{len(digests)} set(s) of digests, {len(hyper)} set(s) of hyperparameters",
        }
    )
    for config, base in LOSS_TOLERANCE.items():
        if config not in result["configs"]:
            continue
        tolerance = max(base, spread) if config in SPREAD_COUNTS else base
        diff = result["configs"][config]["relative_to_reference"]
        result["checks"].append(
            {
                "check": f"{config}: last-{window}-step mean loss within {tolerance:.2%} of the reference's",
                "passed": abs(diff) <= tolerance,
                "detail": f"{diff:+.3%} ({result['configs'][config]['mean']:.4f} against {ref_mean:.4f})",
            }
        )
    if "fast" in result["configs"]:
        worst = result["configs"]["fast"]["grad_norm_max_departure"]
        result["checks"].append(
            {
                "check": f"fast: gradient norm within {GRAD_NORM_TOLERANCE:.0%} of the reference's at every step after "
                f"the {warmup}-step warm-up (same seed)",
                "passed": worst is not None and worst["departure"] <= GRAD_NORM_TOLERANCE,
                "detail": "no step compared"
                if worst is None
                else f"largest departure {worst['departure']:.2%} at step {worst['step']} (seed {worst['seed']})",
            }
        )
    noise = rerun_noise(records, reruns or [], warmup)
    if noise:
        result["rerun_noise"] = noise
        ref_noise = [v["max_rolling_departure"] for k, v in noise.items() if k.startswith("reference-seed")]
        bound = max([GRAD_NORM_TOLERANCE, *ref_noise])
        for config in ("default", "fast"):
            worst = 0.0
            for seed, r in by_config.get(config, {}).items():
                if seed in ref:
                    worst = max([worst, *grad_norm_departures(r, ref[seed], warmup)[1]])
            if config in by_config:
                result["checks"].append(
                    {
                        "check": f"{config}: gradient norm, {ROLLING}-step means, within the reference's own rerun "
                        f"departure or {GRAD_NORM_TOLERANCE:.0%}, whichever is larger ({bound:.1%})",
                        "passed": worst <= bound,
                        "detail": f"largest departure {worst:.2%}",
                        "noise_aware": True,
                    }
                )
    result["passed"] = all(c["passed"] for c in result["checks"]) and not result["failed_runs"]
    return result


def plot(records: list[dict[str, Any]], result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in records if r.get("ok")]
    colors = {"reference": "black", "default": "tab:blue", "fast": "tab:green", "fp8": "tab:red"}
    styles = ["-", "--", ":", "-."]
    ref = {r["seed"]: r for r in ok if r["config"] == "reference"}
    warmup = result.get("reference", {}).get("warmup_steps", 0)
    fig, (full, tail, norms) = plt.subplots(3, 1, figsize=(10, 12))
    for r in sorted(ok, key=lambda r: (r["config"], r["seed"])):
        steps = [s["step"] for s in r["steps"]]
        losses = [s["loss"] for s in r["steps"]]
        seeds = sorted({x["seed"] for x in ok})
        style = styles[seeds.index(r["seed"]) % len(styles)]
        color = colors.get(r["config"])
        label = f"{r['config']}, seed {r['seed']}"
        full.plot(steps, losses, style, color=color, label=label, linewidth=0.8)
        window = max(1, min(10, len(losses) // 10))
        smooth = [statistics.fmean(losses[max(0, i - window + 1) : i + 1]) for i in range(len(losses))]
        cut = len(steps) // 3
        tail.plot(steps[cut:], smooth[cut:], style, color=color, label=label, linewidth=1.0)
        if r["config"] != "reference" and r["seed"] in ref:
            pairs = [
                (a["step"], a["grad_norm"] / b["grad_norm"])
                for a, b in zip(r["steps"], ref[r["seed"]]["steps"], strict=False)
                if b["grad_norm"] > 0
            ]
            norms.plot(*zip(*pairs, strict=True), style, color=color, label=label, linewidth=0.8)
    full.set(title="loss per step", xlabel="step", ylabel="loss")
    tail.set(title="loss, moving mean over 10 steps, last two thirds", xlabel="step", ylabel="loss")
    norms.axhspan(1 - GRAD_NORM_TOLERANCE, 1 + GRAD_NORM_TOLERANCE, color="0.9")
    norms.axvline(warmup, color="0.6", linewidth=0.8)
    norms.set(title="gradient norm / the reference's (same seed)", xlabel="step", ylabel="ratio")
    for ax in (full, tail, norms):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_csv(records: list[dict[str, Any]], path: Path) -> None:
    ok = sorted((r for r in records if r.get("ok")), key=lambda r: (r["config"], r["seed"]))
    names = [f"{r['config']}-seed{r['seed']}" for r in ok]
    header = ["step", *(f"{n} loss" for n in names), *(f"{n} grad_norm" for n in names)]
    lines = [",".join(header)]
    for i in range(max((len(r["steps"]) for r in ok), default=0)):
        row = [str(i + 1)]
        row += [f"{r['steps'][i]['loss']:.6f}" if i < len(r["steps"]) else "" for r in ok]
        row += [f"{r['steps'][i]['grad_norm']:.6f}" if i < len(r["steps"]) else "" for r in ok]
        lines.append(",".join(row))
    path.write_text("\n".join(lines) + "\n")


def report(records: list[dict[str, Any]], result: dict[str, Any], report_path: Path, figure: Path, csv: Path) -> str:
    """The report's markdown: setup, commands, checks, per-run table, links to the raw records."""
    ok = [r for r in records if r.get("ok")]
    first = ok[0] if ok else (records[0] if records else {})
    setup, hyper, versions = first.get("setup", {}), first.get("hyperparameters", {}), first.get("versions", {})

    def link(path: Path) -> str:
        return os.path.relpath(path.resolve(), report_path.resolve().parent)

    failed = [c["check"] for c in result["checks"] if not c["passed"]] + [
        f"{n} did not finish" for n in result.get("failed_runs", [])
    ]
    verdict = "**PASSED**" if result.get("passed") else "**FAILED**: " + "; ".join(failed)
    invocations = sorted({r["invocation"] for r in records if r.get("invocation")})
    lines = [
        f"# Convergence: the trainer's fast configurations against a plain reference ({setup.get('shape', '?')}, "
        f"{versions.get('gpu') or 'CPU'})",
        "",
        f"**Claim.** From the same weights, on the same data in the same order, the trainer's configurations learn as well "
        f"as a plain Hugging Face + `torch.optim.AdamW` + FSDP2 reference over {hyper.get('steps')} steps, by the checks "
        f"below (loss over the last {result['window']} steps, gradient norms step by step). {verdict}",
        "",
        f"- Model: {setup.get('shape')} ({setup.get('parameters', 0) / 1e6:,.1f}M parameters, vocabulary "
        f"{setup.get('vocab_size')}), the same initial weights for every run.",
        f"- Hardware: {versions.get('gpu') or 'CPU'}; one process, FSDP2 over a world of one.",
        f"- Date: {first.get('date')}.",
        f"- Versions: torch {versions.get('torch')}, transformers {versions.get('transformers')}, CUDA "
        f"{versions.get('cuda')}, Python {versions.get('python')}.",
        f"- Training: {hyper.get('steps')} steps of {hyper.get('micro_batch')} x {hyper.get('seq_len')} tokens, "
        f"AdamW (betas {hyper.get('betas')}, weight decay {hyper.get('weight_decay')}), lr {hyper.get('lr')} with "
        f"{hyper.get('warmup_steps')} warm-up steps and a cosine decay to {hyper.get('min_lr_ratio')} of it, "
        f"clipping at {hyper.get('max_grad_norm')}, {hyper.get('dtype')} compute.",
        f"- Inputs (SHA-256): {json.dumps(setup.get('digests'))}.",
        "- Command: "
        + (", ".join(f"`{i}`" for i in invocations) or "`python bench/convergence.py run`")
        + ", then `python bench/convergence.py analyze` (each run's own command below).",
        "",
        "## Checks",
        "",
        "| check | passed | detail |",
        "|---|---|---|",
    ]
    lines += [f"| {c['check']} | {'yes' if c['passed'] else '**no**'} | {c['detail']} |" for c in result["checks"]]
    if result.get("failed_runs"):
        lines += ["", f"Runs that did not finish: {', '.join(result['failed_runs'])}."]
    ref = result.get("reference")
    if ref:
        lines += [
            "",
            f"The reference's last-{result['window']}-step mean over its seeds is {ref['mean']:.4f}; its seeds differ by "
            f"{ref['seed_spread']:.3%} of it (the run-to-run spread the default and fast configurations are allowed, "
            "when above 0.5%).",
        ]
    noise = result.get("rerun_noise")
    if noise:
        lines += [
            "",
            "## Run-to-run noise",
            "",
            "Each run below was made twice with the same weights, data, order and settings. The rerun's gradient "
            "norms against the first run's (after the warm-up) are what nondeterministic GPU kernels alone produce:",
            "",
            "| rerun | largest step departure | steps over 10% | median step departure | largest 10-step-mean departure |",
            "|---|---:|---:|---:|---:|",
        ]
        lines += [
            f"| {name} | {n['max_step_departure']:.1%} | {n['steps_over_tolerance']} | "
            f"{n['median_step_departure']:.1%} | {n['max_rolling_departure']:.1%} |"
            for name, n in sorted(noise.items())
        ]
        lines += [
            "",
            "The step-by-step gradient-norm check cannot be met by the reference against itself when the rerun's "
            "largest step departure is over 10%; the noise-aware checks above compare 10-step means, bounded by the "
            "reference rerun's own departure.",
        ]
    departures = result.get("departures")
    if departures:
        lines += [
            "",
            "## Gradient norms against the reference, run by run",
            "",
            "Each run against the reference run of its seed, by the same measures (the ablations are `fast` with one "
            "option turned off; a component behind the step-by-step departures would show as an ablation that "
            "departs much less than `fast`):",
            "",
            "| run | largest step departure | steps over 10% | median step departure | largest 10-step-mean departure |",
            "|---|---:|---:|---:|---:|",
        ]
        lines += [
            f"| {name} | {n['max_step_departure']:.1%} | {n['steps_over_tolerance']} | "
            f"{n['median_step_departure']:.1%} | {n['max_rolling_departure']:.1%} |"
            for name, n in departures.items()
        ]
    lines += [
        "",
        "## Runs",
        "",
        f"| run | last-{result['window']}-step mean loss | final loss | tokens/s | AdamW | master weights | raw record |",
        "|---|---:|---:|---:|---|---|---|",
    ]
    for r in sorted(
        records, key=lambda r: (CONFIGS.index(r["config"]) if r["config"] in CONFIGS else 9, r["config"], r["seed"])
    ):
        name = f"{r['config']}-seed{r['seed']}"
        if not r.get("ok"):
            lines.append(f"| {name} | failed: {r.get('error', '')[:120]} | | | | | [json]({link(r['_file'])}) |")
            continue
        s = r.get("summary", {})
        lines.append(
            f"| {name} | {tail_mean(r, result['window']):.4f} | {r['steps'][-1]['loss']:.4f} | "
            f"{s.get('tokens_per_s_per_gpu', math.nan):,.0f} | {s.get('adamw', '')} | {s.get('master_weights', '')} | "
            f"[json]({link(r['_file'])}) |"
        )
    lines += [
        "",
        f"![loss curves and gradient-norm ratios]({link(figure)})",
        "",
        f"Every step's loss and gradient norm: [{csv.name}]({link(csv)}).",
        "",
        "## Commands",
        "",
    ]
    for r in sorted(ok, key=lambda r: (r["config"], r["seed"])):
        lines += [f"- `{r['config']}-seed{r['seed']}`: `{r['command']}`"]
    return "\n".join(lines) + "\n"


def cmd_analyze(args: argparse.Namespace) -> int:
    dirs = [Path(d) for d in args.dirs]
    records = load_runs(dirs)
    if not records:
        raise SystemExit(f"analyze: no run records under {', '.join(map(str, dirs))}")
    reruns = load_runs([Path(d) for d in args.reruns]) if args.reruns else []
    result = analyze(records, args.window, reruns)
    report_path = Path(args.report) if args.report else dirs[0] / "convergence.md"
    report_path.parent.mkdir(parents=True, exist_ok=True)
    figure = report_path.with_suffix(".png")
    csv = report_path.with_name(report_path.stem + "-losses.csv")
    plot(records, result, figure)
    write_csv(records, csv)
    report_path.write_text(report(records, result, report_path, figure, csv))
    (report_path.with_name(report_path.stem + "-checks.json")).write_text(json.dumps(result, indent=1))
    for c in result["checks"]:
        print(f"{'PASS' if c['passed'] else 'FAIL'}  {c['check']}: {c['detail']}")
    print(f"report: {report_path}")
    return 0 if result.get("passed") else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="prepare the inputs once, then train each configuration with each seed")
    run.add_argument("--out", default=os.environ.get("OUT", ".bench/convergence"), help="where runs/ go ($OUT)")
    run.add_argument("--work", default="/tmp/fsdp-convergence", help="inputs and the runs' own output folders")
    run.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated configurations (module docstring)")
    run.add_argument("--seeds", default="1,2", help="comma-separated data-order seeds")
    run.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    run.add_argument("--shape", choices=tuple(SHAPES), help="model shape (default: llama-1b on cuda, tiny on cpu)")
    run.add_argument("--vocab", type=int, help="BPE vocabulary to train (default: 32768 on cuda, 512 on cpu)")
    run.add_argument("--corpus-mb", type=float, help="megabytes of text (default: 16 on cuda, 0.5 on cpu)")
    run.add_argument("--seq-len", type=int, help="tokens per sequence (default: 1024 on cuda, 64 on cpu)")
    run.add_argument("--micro-batch", type=int, help="sequences per step (default: 8 on cuda, 4 on cpu)")
    run.add_argument("--steps", type=int, help="optimizer steps (default: 300 on cuda, 20 on cpu)")
    run.add_argument("--warmup", type=int, help="learning-rate warm-up steps (default: 30 on cuda, 2 on cpu)")
    run.add_argument("--lr", type=float, help="peak learning rate (default: 3e-4 on cuda, 3e-3 on cpu)")
    run.add_argument("--dtype", choices=("bf16", "fp32"), help="compute dtype (default: bf16 on cuda, fp32 on cpu)")
    run.add_argument("--init-seed", type=int, default=1234, help="seed of the initial weights")
    run.add_argument("--timeout", type=int, help="seconds per run (default: 420 on cuda, 300 on cpu)")
    run.add_argument("--deadline", type=int, default=0, help="start no run after this many seconds (0: no limit)")
    run.set_defaults(func=cmd_run)

    ref = sub.add_parser("reference", help="one run of the plain reference (what `run` starts for it)")
    for flag in ("--model", "--tokenizer", "--data", "--out"):
        ref.add_argument(flag, required=True)
    for flag in ("--seq-len", "--micro-batch", "--steps", "--warmup", "--seed"):
        ref.add_argument(flag, type=int, required=True)
    ref.add_argument("--lr", type=float, required=True)
    ref.add_argument("--dtype", choices=("bf16", "fp32"), default="bf16")
    ref.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ref.set_defaults(func=lambda a: train_reference(a) or 0)

    ana = sub.add_parser("analyze", help="pass conditions, plot and report from the runs' records (CPU)")
    ana.add_argument("dirs", nargs="+", help="output folders of `run` (their runs/ are read)")
    ana.add_argument(
        "--report",
        help="the report's path (default: <first dir>/convergence.md); the plot, CSV and checks go beside it",
    )
    ana.add_argument("--window", type=int, default=50, help="last steps averaged for the loss checks")
    ana.add_argument(
        "--reruns",
        nargs="+",
        default=[],
        help="folders of same-seed reruns of some runs (their records are compared with the first runs' to measure "
        "the GPU's run-to-run noise)",
    )
    ana.set_defaults(func=cmd_analyze)

    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())

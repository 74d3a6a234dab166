"""Reference peer: torchtitan (0.2.2, the release that runs on torch 2.11) on the same GPUs.

`bench/gpu_compare.py` calls :func:`run_torchtitan` for each configuration. The machine has no
network, so the assets torchtitan would download are made here: a small byte-level BPE tokenizer
(torchtitan's Llama-3 model keeps its own 128,256-token vocabulary whatever the tokenizer says,
so the model shape is the real one) and a JSON-lines text file read through its `c4_test` loader.

Figures come from torchtitan's own per-step log line (`tps`, `tflops`, `mfu`, `memory`); the
first steps (compile and warm-up) are dropped and the median of the rest is reported.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

STEP_LINE = re.compile(
    r"step:\s*(?P<step>\d+)\s+loss:\s*(?P<loss>[-\d.naif]+).*?memory:\s*(?P<mem>[\d.]+)GiB.*?"
    r"tps:\s*(?P<tps>[\d,]+).*?tflops:\s*(?P<tflops>[\d,.]+).*?mfu:\s*(?P<mfu>[\d.]+)%"
)
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def prepare_assets(root: Path) -> tuple[Path, Path]:
    """Write a local tokenizer directory and a JSON-lines dataset directory under `root`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok_dir, data_dir = root / "tokenizer", root / "data"
    tok_dir.mkdir(parents=True, exist_ok=True)
    data_dir.mkdir(parents=True, exist_ok=True)
    texts = _corpus()
    with open(data_dir / "train.jsonl", "w") as f:
        for text in texts:
            f.write(json.dumps({"text": text}) + "\n")
    specials = ["<|begin_of_text|>", "<|end_of_text|>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(
        texts,
        trainers.BpeTrainer(
            vocab_size=2048, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        ),
    )
    tok.save(str(tok_dir / "tokenizer.json"))
    (tok_dir / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "bos_token": specials[0],
                "eos_token": specials[1],
                "add_bos_token": True,
                "add_eos_token": False,
                "tokenizer_class": "PreTrainedTokenizerFast",
            }
        )
    )
    return tok_dir, data_dir


def _corpus() -> list[str]:
    """Real English text with no network: docstrings of the standard library's modules."""
    import importlib
    import inspect

    texts = []
    for name in sorted(sys.stdlib_module_names):
        if name.startswith("_") or name in {"antigravity", "this", "idlelib", "tkinter", "turtle"}:
            continue
        try:
            mod = importlib.import_module(name)
        except Exception:  # platform-specific modules may not import
            continue
        for _, obj in inspect.getmembers(mod):
            doc = inspect.getdoc(obj) if callable(obj) else None
            if doc and len(doc) > 200:
                texts.append(doc)
    return texts * 4


def run_torchtitan(
    *,
    nproc: int,
    flavor: str,
    seq_len: int,
    batch: int,
    ac: str,
    compile_: bool,
    steps: int,
    assets: Path,
    out_dir: Path,
    env: dict[str, str],
    timeout: int,
) -> dict:
    tok_dir, data_dir = assets / "tokenizer", assets / "data"
    name = f"torchtitan-{flavor}-mb{batch}-ac_{ac}" + ("-compile" if compile_ else "")
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={nproc}",
        "-m",
        "torchtitan.train",
        "--model.name",
        "llama3",
        "--model.flavor",
        flavor,
        "--model.hf_assets_path",
        str(tok_dir),
        "--training.dataset",
        "c4_test",
        "--training.dataset_path",
        str(data_dir),
        "--training.seq_len",
        str(seq_len),
        "--training.local_batch_size",
        str(batch),
        "--training.steps",
        str(steps),
        "--lr_scheduler.warmup_steps",
        "2",
        "--activation_checkpoint.mode",
        ac,
        "--parallelism.data_parallel_shard_degree",
        str(nproc),
        "--metrics.log_freq",
        "1",
        "--job.dump_folder",
        str(out_dir / name),
    ]
    if compile_:
        cmd.append("--compile.enable")
    child_env = {**os.environ, **env, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=child_env, timeout=timeout)
    log = ANSI.sub("", proc.stdout + proc.stderr)
    (out_dir / f"{name}.log").write_text(log)
    rows = [m.groupdict() for m in STEP_LINE.finditer(log)]
    if proc.returncode != 0 or len(rows) < 4:
        tail = log.strip().splitlines()[-3:]
        return {"variant": name, "error": f"rc={proc.returncode}: " + " | ".join(tail)[:400]}
    rows = rows[len(rows) // 3 :]  # drop compile / warm-up steps
    return {
        "variant": name,
        "world_size": nproc,
        "micro_batch_size": batch,
        "tokens_per_s_per_gpu": statistics.median(float(r["tps"].replace(",", "")) for r in rows),
        "tflops_per_gpu": statistics.median(float(r["tflops"].replace(",", "")) for r in rows),
        "mfu": statistics.median(float(r["mfu"]) for r in rows) / 100,
        "peak_mem_gib": max(float(r["mem"]) for r in rows),
        "final_loss": float(rows[-1]["loss"]),
        "memory_note": "torchtitan reports max reserved memory",
    }

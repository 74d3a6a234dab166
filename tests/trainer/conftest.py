"""Shared fixtures for the trainer tests: a locally trained BPE tokenizer, a text corpus, and a torchrun helper.

Everything runs on CPU with gloo and tiny models; nothing is downloaded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

TRAINER_SRC = Path(__file__).resolve().parents[2] / "packages" / "trainer" / "src"
if str(TRAINER_SRC) not in sys.path:  # run from a checkout even when the package is not installed
    sys.path.insert(0, str(TRAINER_SRC))

# A tiny Llama, fp32 so that sharded and single-process runs agree to float rounding.
TINY = [
    "--model.preset",
    "tiny",
    "--data.seq_len",
    "64",
    "--precision.mode",
    "fp32",
    "--train.warmup_steps",
    "2",
    "--train.lr",
    "3e-3",
]


@dataclass
class Run:
    """A finished trainer process: exit status, output, and its per-step records."""

    returncode: int
    stdout: str
    stderr: str
    output_dir: Path

    @property
    def records(self) -> list[dict]:
        """Step records of the metrics file (appended across resumed runs)."""
        path = self.output_dir / "metrics.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    @property
    def summary(self) -> dict:
        """The JSON object on the last stdout line."""
        return json.loads(self.stdout.strip().splitlines()[-1])

    def losses(self) -> dict[int, float]:
        return {r["step"]: r["loss"] for r in self.records}


def trainer_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(TRAINER_SRC)})
    for key in (
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "MASTER_ADDR",
        "MASTER_PORT",
        "FSDP_TRAINER_FAULT_AFTER_STEP",
        "FSDP_TRAINER_FAULT_DURING_SAVE",
    ):
        env.pop(key, None)
    env.update(extra or {})
    return env


def run_trainer(
    args: list[str], output_dir: Path, nproc: int = 0, env: dict[str, str] | None = None, timeout: int = 150
) -> Run:
    """Run ``python -m fsdp_trainer`` (nproc=0) or ``torchrun --standalone --nproc-per-node N -m fsdp_trainer``."""
    launcher = (
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc)]
        if nproc
        else [sys.executable]
    )
    cmd = [*launcher, "-m", "fsdp_trainer", *args, "--train.output_dir", str(output_dir)]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, env=trainer_env(env), timeout=timeout, cwd=output_dir.parent
    )
    return Run(proc.returncode, proc.stdout, proc.stderr, output_dir)


def assert_ok(run: Run) -> None:
    assert run.returncode == 0, f"trainer failed (rc={run.returncode}):\n{run.stderr[-4000:]}"


@pytest.fixture(scope="session")
def corpus_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A .txt file of real documents (standard-library docstrings) separated by blank lines."""
    from fsdp_trainer.corpus import builtin_documents

    path = tmp_path_factory.mktemp("corpus") / "docs.txt"
    docs = [d.replace("\n\n", "\n") for d in builtin_documents()[:400]]
    path.write_text("\n\n".join(docs), encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def bpe_tokenizer_dir(tmp_path_factory: pytest.TempPathFactory, corpus_file: Path) -> Path:
    """A real Hugging Face tokenizer directory: a 400-token byte-level BPE trained here on the corpus."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<s>", "</s>", "<pad>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train([str(corpus_file)], trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    path = tmp_path_factory.mktemp("tokenizer")
    fast.save_pretrained(path)
    return path

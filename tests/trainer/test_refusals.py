"""Settings that do not fit the machine are refused at start-up with one line naming the flag (exit 2)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from conftest import trainer_env

from fsdp_trainer.config import load_config
from fsdp_trainer.train import main_with_config

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(
        __import__("torch").cuda.is_available(), reason="checks the refusals of a machine without a GPU"
    ),
]


@pytest.mark.parametrize(
    "flags, message",
    [
        (
            ["--fp8.enabled", "true"],
            "error: --fp8.enabled: float8 training needs a Hopper-class GPU (sm_89+); this run is on cpu",
        ),
        (
            ["--parallel.cpu_offload", "true"],
            "error: --parallel.cpu_offload: offloading to CPU needs CUDA; this run is on cpu",
        ),
        (
            ["--model.attn_implementation", "flash_attention_2"],
            "error: --model.attn_implementation: flash_attention_2 needs CUDA; this run is on cpu (use sdpa or eager)",
        ),
        (
            ["--runtime.device", "cuda"],
            "error: --runtime.device: 'cuda' requested but no GPU is visible (use auto or cpu)",
        ),
        (["--runtime.backend", "nccl"], "error: --runtime.backend: nccl needs CUDA; use gloo (or auto) on CPU"),
        (
            ["--experimental.symmetric_memory", "true"],
            "error: --experimental.symmetric_memory: needs NCCL on GPUs; this run is on cpu (set it to false)",
        ),
        (
            ["--ac.offload_layers", "2"],
            "error: --ac.offload_layers: needs CUDA GPUs (pinned host memory, copy engines); this run is on cpu (set it to 0)",
        ),
        (
            ["--train.adamw", "triton"],
            "error: --train.adamw: triton needs CUDA; this run is on cpu (use foreach or auto)",
        ),
        (
            ["--parallel.sharding", "hybrid_shard", "--parallel.shard_size", "3"],
            "error: --parallel.shard_size: shard_size 3 x replicate_size 1 must equal the world size 1",
        ),
    ],
)
def test_refused_with_one_line(flags, message, tmp_path, capsys):
    cfg = load_config(None, [*flags, "--train.output_dir", str(tmp_path), "--train.steps", "1"])
    assert main_with_config(cfg) == 2
    assert capsys.readouterr().err.strip().splitlines() == [message]


def test_cli_refuses_fp8_on_cpu(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "fsdp_trainer", "--fp8.enabled", "true", "--train.output_dir", str(tmp_path)],
        capture_output=True,
        text=True,
        env=trainer_env(),
        timeout=100,
    )
    assert proc.returncode == 2
    assert (
        proc.stderr.strip().splitlines()[-1]
        == "error: --fp8.enabled: float8 training needs a Hopper-class GPU (sm_89+); this run is on cpu"
    )
    assert "Traceback" not in proc.stderr


def test_mesh_shapes():
    from fsdp_trainer.config import ParallelConfig
    from fsdp_trainer.distributed import mesh_shape
    from fsdp_trainer.errors import ConfigError

    assert mesh_shape(ParallelConfig(sharding="full_shard"), 16, 8) == (1, 16)
    assert mesh_shape(ParallelConfig(sharding="no_shard"), 16, 8) == (16, 1)
    assert mesh_shape(ParallelConfig(sharding="hybrid_shard"), 16, 8) == (2, 8)  # shard within a node
    assert mesh_shape(ParallelConfig(sharding="hybrid_shard", replicate_size=4), 16, 8) == (4, 4)
    assert mesh_shape(ParallelConfig(sharding="hybrid_shard", shard_size=2, replicate_size=8), 16, 8) == (8, 2)
    with pytest.raises(
        ConfigError,
        match=re.escape("--parallel.shard_size: shard_size 4 x replicate_size 3 must equal the world size 16"),
    ):
        mesh_shape(ParallelConfig(sharding="hybrid_shard", shard_size=4, replicate_size=3), 16, 8)


def test_leader_log_names_master_addr_then_host(caplog, monkeypatch):
    import logging
    import socket

    import torch

    from fsdp_trainer.config import RuntimeConfig
    from fsdp_trainer.distributed import destroy_distributed, init_distributed

    monkeypatch.setenv("MASTER_ADDR", "localhost")  # what torchrun --standalone sets
    for key in ("RANK", "WORLD_SIZE"):
        monkeypatch.delenv(key, raising=False)
    with caplog.at_level(logging.INFO, logger="fsdp_trainer"):
        init_distributed(RuntimeConfig(device="cpu"), torch.device("cpu"))
        destroy_distributed()
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("master_addr=")]
    assert lines == [f"master_addr=localhost host={socket.getfqdn()}"]


CONFIG_ONLY = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "vocab_size": 512,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 256,
    "tie_word_embeddings": False,
}


@pytest.fixture
def config_only_model(tmp_path):
    """A model directory as a user trying a custom shape writes it: a config.json and nothing else."""
    import json

    directory = tmp_path / "shape"
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps(CONFIG_ONLY))
    return directory


def test_real_models_never_train_on_fake_data_without_being_asked(config_only_model, tmp_path):
    from fsdp_trainer.errors import ConfigError

    with pytest.raises(
        ConfigError, match=r"^--data\.source: the pretrained weights of --model\.name_or_path would train"
    ):
        load_config(None, ["--model.name_or_path", str(config_only_model)])
    asked = load_config(None, ["--model.name_or_path", str(config_only_model), "--data.source", "synthetic"])
    assert asked.model.init == "pretrained" and asked.data.source == "synthetic"


def test_a_config_only_directory_trains_on_synthetic_tokens_without_a_tokenizer(config_only_model, tmp_path):
    cfg = load_config(
        None,
        ["--model.name_or_path", str(config_only_model), "--model.init", "random", "--data.seq_len", "32",
         "--train.steps", "1", "--train.output_dir", str(tmp_path / "out"), "--checkpoint.enabled", "false"],
    )  # fmt: skip
    assert cfg.data.source == "synthetic" and cfg.model.tokenizer is None
    assert main_with_config(cfg) == 0


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--data.source", "jsonl", "--data.path", "/no/such/file.jsonl"],
            "error: --data.path: /no/such/file.jsonl does not exist",
        ),
        (["--model.tokenizer", "{shape}"], "error: --model.tokenizer: cannot load a tokenizer from {shape}"),
    ],
)
def test_data_and_tokenizer_are_checked_before_anything_is_built(flags, message, config_only_model, tmp_path, capsys):
    flags = [f.format(shape=config_only_model) for f in flags]
    cfg = load_config(
        None, ["--model.preset", "tiny", *flags, "--train.output_dir", str(tmp_path), "--train.steps", "1"]
    )
    assert main_with_config(cfg) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(message.format(shape=config_only_model)), err

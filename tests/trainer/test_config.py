"""Config loading and validation: typed sections, file + CLI overrides, one-line errors naming the flag."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import trainer_env

from fsdp_trainer import options
from fsdp_trainer.config import TrainerConfig, flag_prefix, help_text, known_flags, load_config
from fsdp_trainer.errors import ConfigError
from fsdp_trainer.presets import PRESETS, num_params

pytestmark = pytest.mark.timeout(60)


def test_config_module_imports_without_torch():
    code = "import sys, fsdp_trainer.config as c; c.TrainerConfig.from_dict({}); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=trainer_env(), check=True)
    assert out.stdout.strip() == "False"


def test_the_memory_model_imports_without_torch():
    """``fsdp-sdk estimate`` imports the memory and speed model lazily, without torch."""
    code = (
        "import sys\n"
        "from fsdp_trainer import autotune, presets\n"
        "shape = autotune.Shape.from_config(presets.PRESETS['llama3.1-8b']())\n"
        "peak = autotune.estimate_peak_bytes(shape, 4096, 2, shard_degree=8, compiled=True, ac_mode='none')\n"
        "best, _ = autotune.choose(shape, 4096, device_bytes=80 * 2**30, memory_fraction=0.85, shard_degree=8,\n"
        "    compiled=True, fixed_batch=None, fixed_micro_batch=None, ac_fixed=None, loss_chunk_tokens=4096,\n"
        "    fused_loss=True, cpu_offload=False)\n"
        "assert peak > 0 and best is not None and autotune.relative_speed(0.0, 2, True) > 0\n"
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=trainer_env(), check=True)
    assert out.stdout.strip() == "False"


def test_every_field_has_a_docstring():
    for name, section in options.sections(TrainerConfig):
        assert options.field_docs(TrainerConfig)[name], name
        for f in dataclasses.fields(section):
            assert options.field_docs(section)[f.name], f"{name}.{f.name} has no docstring"


def test_required_flags_exist():
    required = [
        "model.preset",
        "model.name_or_path",
        "model.init",
        "model.attn_implementation",
        "model.tokenizer",
        "data.source",
        "data.path",
        "data.dataset",
        "data.split",
        "data.text_field",
        "data.seq_len",
        "data.seed",
        "train.steps",
        "train.micro_batch_size",
        "train.grad_accum_steps",
        "train.lr",
        "train.min_lr_ratio",
        "train.warmup_steps",
        "train.schedule",
        "train.weight_decay",
        "train.max_grad_norm",
        "train.seed",
        "train.output_dir",
        "train.log_every",
        "parallel.api",
        "parallel.sharding",
        "parallel.shard_size",
        "parallel.replicate_size",
        "parallel.reshard_after_forward",
        "parallel.cpu_offload",
        "parallel.forward_prefetch",
        "parallel.backward_prefetch",
        "parallel.limit_all_gathers",
        "precision.mode",
        "precision.param_dtype",
        "precision.reduce_dtype",
        "ac.mode",
        "ac.every",
        "compile.enabled",
        "compile.loss",
        "fp8.enabled",
        "checkpoint.dir",
        "checkpoint.every_steps",
        "checkpoint.keep",
        "checkpoint.resume",
        "checkpoint.export_hf",
        "metrics.file",
        "metrics.peak_tflops",
        "runtime.device",
        "runtime.backend",
        "runtime.seed",
    ]
    missing = {f"--{r}" for r in required} - set(known_flags())
    assert not missing


def test_file_then_overrides(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(
        "train:\n  steps: 7\n  lr: 1e-3\nactivation_checkpointing:\n  mode: full\nparallel:\n  sharding: hybrid_shard\n"
    )
    cfg = load_config(str(path), ["--train.steps", "9", "--ac.every=3", "--parallel.reshard_after_forward", "false"])
    assert cfg.train.steps == 9 and cfg.train.lr == 1e-3
    assert cfg.activation_checkpointing.mode == "full" and cfg.activation_checkpointing.every == 3
    assert cfg.parallel.sharding == "hybrid_shard" and cfg.parallel.reshard_after_forward is False


def test_json_file(tmp_path):
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"model": {"preset": "llama3.1-8b"}, "data": {"seq_len": 4096}}))
    cfg = load_config(str(path), [])
    assert cfg.model.preset == "llama3.1-8b" and cfg.data.seq_len == 4096


def test_derived_defaults():
    tiny = load_config(None, [])
    assert tiny.data.source == "text" and tiny.model.tokenizer == "bytes" and tiny.model.init == "random"
    assert tiny.checkpoint.dir.endswith("checkpoints") and tiny.metrics.file.endswith("metrics.jsonl")
    assert tiny.precision.param_dtype == "bf16" and tiny.precision.reduce_dtype == "fp32"
    big = load_config(
        None, ["--model.preset", "llama2-7b", "--train.output_dir", "/x", "--parallel.sharding", "shard_grad_op"]
    )
    assert big.data.source == "synthetic" and big.model.tokenizer is None
    assert big.checkpoint.dir == "/x/checkpoints" and big.parallel.reshard_after_forward is False
    hf = load_config(
        None,
        [
            *("--model.name_or_path", "/models/llama", "--data.path", "d/x.jsonl"),
            *("--precision.mode", "fp16", "--precision.reduce_dtype", "fp16"),
        ],
    )
    assert hf.model.init == "pretrained" and hf.model.tokenizer == "/models/llama" and hf.data.source == "jsonl"
    bench = load_config(None, ["--model.name_or_path", "/models/llama", "--data.source", "synthetic"])
    assert bench.model.init == "pretrained" and bench.model.tokenizer is None
    assert hf.precision.param_dtype == "fp16" and hf.precision.reduce_dtype == "fp16"
    assert (
        load_config(
            None, ["--model.preset", "llama2-7b", "--model.tokenizer", "t", "--data.path", "d/x.jsonl"]
        ).data.source
        == "jsonl"
    )
    assert load_config(None, ["--model.name_or_path", "m", "--data.path", "corpus/"]).data.source == "text"


def test_round_trip_through_dict():
    cfg = load_config(None, ["--parallel.api", "fsdp1", "--ac.mode", "selective", "--checkpoint.export_hf", "/out/hf"])
    d = cfg.to_dict()
    assert "ac" in d and d["ac"]["mode"] == "selective"
    assert TrainerConfig.from_dict(json.loads(json.dumps(d))) == cfg


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            ["--parallel.sharding", "full"],
            "--parallel.sharding: 'full' is not one of full_shard, hybrid_shard, shard_grad_op, no_shard",
        ),
        (
            ["--parallel.shardin", "full_shard"],
            "--parallel.shardin: unknown option (did you mean --parallel.sharding?)",
        ),
        (["--train.steps", "ten"], "--train.steps: 'ten' is not an integer"),
        (["--train.steps", "0"], "--train.steps: must be positive"),
        (["--train.lr", "fast"], "--train.lr: 'fast' is not a number"),
        (["--model.preset", "llama9"], "--model.preset: 'llama9' is not one of tiny,"),
        (["--model.init", "pretrained"], "--model.init: 'pretrained' needs --model.name_or_path"),
        (["--parallel.api", "fsdp2", "--parallel.backward_prefetch", "post"], "--parallel.backward_prefetch:"),
        (["--parallel.shard_size", "2"], "--parallel.shard_size: only used with --parallel.sharding hybrid_shard"),
        (["--fp8.all_gather", "true", "--fp8.recipe", "rowwise"], "--fp8.all_gather:"),
        (
            ["--parallel.api", "fsdp1", "--experimental.symmetric_memory", "true"],
            "--experimental.symmetric_memory: needs --parallel.api fsdp2",
        ),
        (
            ["--parallel.api", "none", "--experimental.flat_shards", "true"],
            "--experimental.flat_shards: needs --parallel.api fsdp2",
        ),
        (
            ["--experimental.symmetric_memory", "true", "--parallel.cpu_offload", "true"],
            "--experimental.symmetric_memory: cannot be combined with --parallel.cpu_offload true",
        ),
        (
            ["--train.adamw", "triton", "--parallel.cpu_offload", "true"],
            "--train.adamw: triton runs on the GPU and cannot step parameters offloaded to CPU; use foreach or auto",
        ),
        (["--train.adamw", "apex"], "--train.adamw: 'apex' is not one of auto, fused, foreach, triton"),
        (["--fp8.recipe", "mxfp8"], "--fp8.recipe: 'mxfp8' is not one of tensorwise, rowwise"),
        (["--checkpoint.resume", "latest"], "--checkpoint.resume:"),
        (["--model.preset", "llama2-7b", "--data.source", "hf"], "--model.tokenizer: data.source=hf needs a tokenizer"),
        (["--train.steps"], "--train.steps: missing value"),
        (
            ["--compile.memory_budget", "1.5", "--compile.enabled", "true"],
            "--compile.memory_budget: must be between 0 and 1 (got 1.5)",
        ),
        (["--compile.memory_budget", "0.7"], "--compile.memory_budget: 0.7 needs --compile.enabled true"),
        (["--metrics.profile_steps", "3..4"], "--metrics.profile_steps: expected 'A-B' or 'A'"),
        (["--metrics.profile_steps", "4-3"], "--metrics.profile_steps: steps count from 1 and A <= B"),
        (["--metrics.profile_steps", "0"], "--metrics.profile_steps: steps count from 1"),
        (
            ["--train.steps", "5", "--metrics.profile_steps", "5-6"],
            "--metrics.profile_steps: step 6 is after the last step (5)",
        ),
        (["--ac.offload_layers", "-1"], "--ac.offload_layers: must be zero or positive (got -1)"),
        (["train.steps", "3"], "expected an option like --section.field VALUE"),
    ],
)
def test_errors_name_the_option(overrides, message):
    with pytest.raises(ConfigError) as err:
        load_config(None, overrides)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


REMOVED = {
    "--parallel.comm_buffers": "--parallel.comm_buffers: removed; NCCL symmetric memory for FSDP2's collectives is "
    "--experimental.symmetric_memory true, and PyTorch's own buffers need no flag",
    "--parallel.flat_shards": "--parallel.flat_shards: moved to --experimental.flat_shards (off by default)",
    "--compile.mode": "--compile.mode: removed; compiled blocks use torch.compile's default mode",
    "--model.sdpa_gqa": "--model.sdpa_gqa: removed; grouped key/value heads go to the attention kernel as they are",
}


@pytest.mark.parametrize("flag", list(REMOVED))
def test_removed_options_are_refused_naming_the_replacement(flag, tmp_path):
    """On the command line and in a config file, with any value: one line that says what to use instead."""
    section, field = flag.removeprefix("--").split(".")
    file = tmp_path / "run.yaml"
    file.write_text(f"{'activation_checkpointing' if section == 'ac' else section}:\n  {field}: some\n")
    for args in ((None, [flag, "some"]), (str(file), [])):
        with pytest.raises(ConfigError) as err:
            load_config(*args)
        assert str(err.value).startswith(REMOVED[flag]) and "\n" not in str(err.value)
    assert flag not in known_flags() and flag not in help_text()


def test_a_removed_choice_is_refused_naming_the_ones_left():
    with pytest.raises(ConfigError) as err:
        load_config(None, ["--fp8.recipe", "rowwise_with_gw_hp"])
    assert str(err.value).startswith("--fp8.recipe: rowwise_with_gw_hp was removed") and str(err.value).endswith(
        "use tensorwise or rowwise"
    )


def test_experiments_are_off_by_default():
    cfg = load_config(None, [])
    assert dataclasses.asdict(cfg.experimental) == {
        "symmetric_memory": False,
        "stage_on_device": False,
        "flat_shards": False,
    }


def test_file_errors(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("parallel:\n  sharding: fully\n")
    with pytest.raises(ConfigError, match=r"^--parallel.sharding: 'fully' is not one of"):
        load_config(str(bad), [])
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text("trainer:\n  steps: 3\n")
    with pytest.raises(ConfigError, match=r"^--trainer: unknown option"):
        load_config(str(unknown), [])
    with pytest.raises(ConfigError, match=r"^--config: .* is not a file"):
        load_config(str(tmp_path / "missing.yaml"), [])


def test_from_dict_rejects_wrong_types():
    with pytest.raises(ConfigError, match=re.escape("--train.micro_batch_size: 'x' is not an integer")):
        TrainerConfig.from_dict({"train": {"micro_batch_size": "x"}})
    with pytest.raises(ConfigError, match=re.escape("--ac.mode: 'some' is not one of none, full, selective")):
        TrainerConfig.from_dict({"ac": {"mode": "some"}})


def test_help_lists_every_flag_with_its_doc():
    text = help_text()
    for flag in known_flags():
        assert flag in text
    assert "Checkpoint directory. Default: <train.output_dir>/checkpoints." in text


def test_cli_exits_2_with_one_line(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "fsdp_trainer", "--parallel.sharding", "full"],
        capture_output=True,
        text=True,
        env=trainer_env(),
        cwd=tmp_path,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: --parallel.sharding: 'full' is not one of full_shard, hybrid_shard, shard_grad_op, no_shard"
    ]


def test_preset_shapes():
    assert PRESETS["llama2-7b"]()["intermediate_size"] == 11008
    assert 6.7e9 < num_params(PRESETS["llama2-7b"]()) < 6.8e9
    assert 12.9e9 < num_params(PRESETS["llama2-13b"]()) < 13.1e9
    assert 68.9e9 < num_params(PRESETS["llama2-70b"]()) < 69.1e9
    assert 8.0e9 < num_params(PRESETS["llama3.1-8b"]()) < 8.1e9
    assert 70.5e9 < num_params(PRESETS["llama3.1-70b"]()) < 70.7e9
    l3 = PRESETS["llama3.1-70b"]()
    assert (l3["hidden_size"], l3["num_hidden_layers"], l3["num_attention_heads"], l3["num_key_value_heads"]) == (
        8192,
        80,
        64,
        8,
    )
    assert l3["vocab_size"] == 128256 and l3["rope_theta"] == 500000.0


def test_readme_documents_every_flag():
    readme = (Path(__file__).resolve().parents[2] / "packages" / "trainer" / "README.md").read_text()
    for name, section in options.sections(TrainerConfig):
        for f in dataclasses.fields(section):
            flag = f"`--{flag_prefix(name)}.{f.name}`"
            assert flag in readme, f"README lacks {flag}"
            assert options.field_docs(section)[f.name].replace("|", "\\|") in readme, (
                f"README's text for {flag} is stale"
            )


@pytest.mark.parametrize(
    ("old", "mode"), [("true", "async"), ("false", "disabled"), ("none", "auto")], ids=["true", "false", "none"]
)
def test_the_old_async_save_flag_maps_to_async_mode_with_a_warning(old, mode, caplog):
    cfg = load_config(None, ["--checkpoint.async_save", old])
    assert cfg.checkpoint.async_mode == mode
    assert "checkpoint.async_mode" in cfg.explicit  # as if given under its new name
    assert f"--checkpoint.async_save is deprecated: it now means --checkpoint.async_mode {mode}" in caplog.text


def test_the_old_stage_on_device_flag_moves_behind_the_experimental_fence(tmp_path, caplog):
    (tmp_path / "c.yaml").write_text("checkpoint:\n  stage_on_device: true\n")
    cfg = load_config(str(tmp_path / "c.yaml"), [])
    assert cfg.experimental.stage_on_device is True and "experimental.stage_on_device true" in caplog.text
    assert load_config(None, ["--checkpoint.stage_on_device", "auto"]).experimental.stage_on_device is True
    assert load_config(None, ["--checkpoint.stage_on_device", "false"]).experimental.stage_on_device is False
    assert TrainerConfig().experimental.stage_on_device is False and TrainerConfig().checkpoint.async_mode == "auto"


def test_an_old_flag_beside_its_replacement_or_with_a_bad_value_is_refused():
    with pytest.raises(
        ConfigError, match=r"^--checkpoint.async_save: deprecated, and --checkpoint.async_mode is given"
    ):
        load_config(None, ["--checkpoint.async_save", "true", "--checkpoint.async_mode", "disabled"])
    with pytest.raises(ConfigError, match=r"^--checkpoint.async_save: 'maybe' is not a boolean"):
        load_config(None, ["--checkpoint.async_save", "maybe"])
    with pytest.raises(ConfigError, match=r"^--checkpoint.async_mode: 'pinned' is not one of auto, disabled, async"):
        load_config(None, ["--checkpoint.async_mode", "pinned"])
    assert "--checkpoint.async_save" not in known_flags() and "--checkpoint.stage_on_device" not in help_text()

"""The model converters: which ones a config turns on, in which order, and that experiments stay unimported when off."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from conftest import trainer_env

from fsdp_trainer.config import load_config
from fsdp_trainer.converters import CONVERTERS, ModelConverter, ModelConverters, build_converters, enabled
from fsdp_trainer.optim import triton_adamw

pytestmark = pytest.mark.timeout(60)


def test_the_config_turns_converters_on_in_registry_order(monkeypatch):
    monkeypatch.setattr(triton_adamw, "available", lambda: True)
    assert enabled(load_config(None, []), "cpu") == ["fused_kernels"]
    assert enabled(load_config(None, []), "cuda") == ["fused_kernels", "master_weights"]
    everything = load_config(
        None,
        [
            "--ac.offload_layers",
            "1",
            "--experimental.flat_shards",
            "true",
            "--experimental.symmetric_memory",
            "true",
        ],
    )
    assert enabled(everything, "cuda") == [
        "fused_kernels",
        "master_weights",
        "experimental.symmetric_memory",
        "experimental.flat_shards",
        "activation_offload",
    ]
    fp8 = load_config(None, ["--fp8.enabled", "true", "--model.fused_kernels", "false"])
    assert enabled(fp8, "cuda") == ["float8"], "FP8 keeps fp32 parameters: no masters"
    assert list(CONVERTERS) == [
        "fused_kernels",
        "float8",
        "master_weights",
        "experimental.symmetric_memory",
        "experimental.flat_shards",
        "activation_offload",
    ]


def test_hooks_run_every_converter_in_order_and_stages_apart():
    calls = []

    class Recording(ModelConverter):
        def convert(self, model):
            calls.append(("convert", self.name))

        def attach_optimizer(self, model, optimizer):
            calls.append(("attach", self.name))

        def post_optimizer_hook(self, model):
            calls.append(("post", self.name))

        def summary(self):
            return {f"{self.name}_seen": True}

    class Build(Recording):
        name, stage = "a", "build"

    class Sharded(Recording):
        name, stage = "b", "sharded"

    converters = ModelConverters([Build(None, torch.device("cpu"), None), Sharded(None, torch.device("cpu"), None)])
    converters.convert(None, "build")
    converters.convert(None, "sharded")
    converters.attach_optimizer(None, None)
    converters.post_optimizer_hook(None)
    assert calls == [("convert", "a"), ("convert", "b"), ("attach", "a"), ("attach", "b"), ("post", "a"), ("post", "b")]
    assert converters.summary() == {"converters": ["a", "b"], "a_seen": True, "b_seen": True}


def test_a_converter_that_cannot_run_here_is_refused_when_built():
    from fsdp_trainer.errors import ConfigError

    cfg = load_config(None, ["--fp8.enabled", "true"])
    with pytest.raises(ConfigError, match=r"^--fp8.enabled: float8 training needs a Hopper-class GPU"):
        build_converters(cfg, torch.device("cpu"), None)


def test_experiments_are_not_imported_unless_on():
    code = (
        "import sys, torch\n"
        "from fsdp_trainer.config import load_config\n"
        "from fsdp_trainer.converters import build_converters\n"
        "import fsdp_trainer.trainer\n"
        "build_converters(load_config(None, []), torch.device('cpu'), None)\n"
        "print(sorted(m for m in sys.modules if m.startswith('fsdp_trainer.experimental')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=trainer_env(), check=True)
    assert out.stdout.strip() == "[]"

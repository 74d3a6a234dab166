"""Model building in one process: where shards are materialised, tied embeddings."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from fsdp_trainer.config import TrainerConfig
from fsdp_trainer.materialize import build_model, materialize_device

pytestmark = pytest.mark.timeout(120)


def _cfg(**sections) -> TrainerConfig:
    d = {
        "model": {"preset": "tiny"},
        "data": {"seq_len": 16},
        "precision": {"mode": "fp32"},
        "runtime": {"device": "cpu"},
    }
    for k, v in sections.items():
        d.setdefault(k, {}).update(v)
    return TrainerConfig.from_dict(d)


def test_cpu_offload_materialises_shards_on_cpu():
    cuda = torch.device("cuda", 3)
    assert materialize_device(_cfg(parallel={"cpu_offload": True}), cuda) == torch.device("cpu")
    assert materialize_device(_cfg(), cuda) == cuda
    assert materialize_device(_cfg(), torch.device("cpu")) == torch.device("cpu")


@pytest.fixture
def world_of_one():
    """A one-process gloo group (what ``init_distributed`` makes without torchrun), torn down after the test."""
    from fsdp_trainer.distributed import destroy_distributed, init_distributed

    assert not dist.is_initialized()
    env = init_distributed(_cfg().runtime, torch.device("cpu"))
    yield env
    destroy_distributed()


@pytest.mark.parametrize("init", ["sharded", "pretrained"])
def test_fsdp2_init_with_cpu_offload_builds(init, world_of_one, monkeypatch, tmp_path):
    """The offload path (to_empty on CPU, init / broadcast of the shards) runs end to end on a CPU mesh.

    CPU runs refuse parallel.cpu_offload (run()); this calls build_model directly, without
    pinned memory (no accelerator here). The CUDA side (rotary buffers on the GPU) is not run here.
    """
    import functools

    import torch.distributed.fsdp as fsdp

    from fsdp_trainer.distributed import build_mesh

    monkeypatch.setattr(fsdp, "CPUOffloadPolicy", functools.partial(fsdp.CPUOffloadPolicy, pin_memory=False))
    model_flags = {"random_init": "sharded"}
    if init == "pretrained":
        from transformers import LlamaConfig, LlamaForCausalLM

        from fsdp_trainer.presets import PRESETS

        torch.manual_seed(0)
        LlamaForCausalLM(LlamaConfig(**PRESETS["tiny"]())).save_pretrained(tmp_path / "hf")
        model_flags = {"name_or_path": str(tmp_path / "hf"), "tokenizer": "bytes"}

    cfg = _cfg(parallel={"api": "fsdp2", "cpu_offload": True}, model=model_flags, data={"source": "synthetic"})
    built = build_model(cfg, world_of_one, build_mesh(cfg.parallel, world_of_one))
    params = list(built.model.parameters())
    assert all(p.device.type == "cpu" and torch.isfinite(p.full_tensor()).all() for p in params)
    if init == "pretrained":
        ref = LlamaForCausalLM.from_pretrained(tmp_path / "hf").state_dict()
        got = {k.removeprefix("lm."): v.full_tensor() for k, v in built.model.state_dict().items()}
        for k, v in ref.items():
            torch.testing.assert_close(got[k], v)
    ids = torch.randint(0, built.hf_config.vocab_size, (1, 16))
    loss, count = built.model(ids, ids)
    assert torch.isfinite(loss) and int(count) == 16


@pytest.mark.parametrize(
    "api,random_init", [("none", "replicated"), ("fsdp2", "replicated"), ("fsdp2", "sharded"), ("fsdp1", "sharded")]
)
def test_tied_embeddings_stay_tied(api, random_init, world_of_one, monkeypatch):
    """to_empty allocates each parameter on its own; the build re-ties lm_head to the input embeddings."""
    import fsdp_trainer.materialize as materialize
    from fsdp_trainer.distributed import build_mesh

    real = materialize.build_hf_config

    def tied_config(model_cfg):
        hf = real(model_cfg)
        hf.tie_word_embeddings = True
        return hf

    monkeypatch.setattr(materialize, "build_hf_config", tied_config)
    cfg = _cfg(parallel={"api": api}, model={"random_init": random_init})
    built = build_model(cfg, world_of_one, build_mesh(cfg.parallel, world_of_one))
    lm = built.model.lm if api != "fsdp1" else built.model.module.lm
    assert lm.lm_head.weight is lm.model.embed_tokens.weight
    ids = torch.randint(0, built.hf_config.vocab_size, (1, 16))
    loss, _ = built.model(ids, ids)
    assert torch.isfinite(loss)
    loss.backward()  # the tied weight gets one gradient (and FSDP1 releases the hooks its forward put on the graph)
    assert lm.lm_head.weight.grad is not None

"""Model pieces in one process: chunked loss, initialisation, presets, FLOPs, schedule."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from fsdp_trainer.config import CheckpointConfig, ModelConfig, TrainConfig, TrainerConfig
from fsdp_trainer.flops import flops_per_token, peak_tflops
from fsdp_trainer.model import (
    CausalLMWithLoss,
    build_hf_config,
    chunked_cross_entropy,
    count_params,
    init_weights_,
    linear_cross_entropy,
    meta_model,
    reset_rotary_,
)
from fsdp_trainer.optim import lr_multiplier
from fsdp_trainer.presets import PRESETS, num_params

pytestmark = pytest.mark.timeout(60)


def test_chunked_loss_and_grads_equal_full_cross_entropy():
    torch.manual_seed(0)
    hidden = torch.randn(2, 37, 16, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(50, 16, dtype=torch.float64, requires_grad=True)
    labels = torch.randint(0, 50, (2, 37))
    labels[0, :5] = -100
    loss, count = chunked_cross_entropy(hidden, weight, labels, chunk_tokens=8)
    loss.backward()
    g_hidden, g_weight = hidden.grad.clone(), weight.grad.clone()
    hidden.grad = weight.grad = None
    full = F.cross_entropy((hidden @ weight.T).flatten(0, 1), labels.flatten(), ignore_index=-100, reduction="sum")
    full.backward()
    assert int(count) == 2 * 37 - 5
    torch.testing.assert_close(loss.double(), full, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(g_hidden, hidden.grad)
    torch.testing.assert_close(g_weight, weight.grad)


@pytest.mark.parametrize(
    "chunk_tokens", [8, 74, 200]
)  # several chunks with a short last one, exactly one, one larger than the input
def test_fused_loss_gradients_made_in_forward_equal_autograd(chunk_tokens):
    torch.manual_seed(0)
    hidden = torch.randn(2, 37, 16, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(50, 16, dtype=torch.float64, requires_grad=True)
    labels = torch.randint(0, 50, (2, 37))
    labels[0, :5] = -100
    labels[1, -1] = -100
    loss, count = linear_cross_entropy(hidden, weight, labels, chunk_tokens)
    (loss * 0.25).backward()  # backward scales the kept gradients by the incoming one
    g_hidden, g_weight = hidden.grad.clone(), weight.grad.clone()
    hidden.grad = weight.grad = None
    full = F.cross_entropy((hidden @ weight.T).flatten(0, 1), labels.flatten(), ignore_index=-100, reduction="sum")
    (full * 0.25).backward()
    assert int(count) == 2 * 37 - 6
    torch.testing.assert_close(loss.double(), full, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(g_hidden, hidden.grad)
    torch.testing.assert_close(g_weight, weight.grad)
    assert torch.count_nonzero(g_hidden[0, :5]) == 0  # rows whose label is ignored take no gradient


@pytest.mark.skipif(
    not torch.cuda.is_available(), reason="CUDA: the chunks' weight gradients add up in the matmuls' fp32 output"
)
def test_fused_loss_weight_gradient_adds_up_in_fp32_on_cuda():
    from fsdp_trainer.model import _fp32_output_matmul

    assert _fp32_output_matmul(torch.device("cuda"))
    torch.manual_seed(0)
    hidden = torch.randn(2, 300, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    weight = (torch.randn(1000, 64, device="cuda") * 0.1).bfloat16().requires_grad_()
    labels = torch.randint(0, 1000, (2, 300), device="cuda")
    loss, _ = linear_cross_entropy(hidden, weight, labels, 128)  # five chunks
    loss.backward()
    h, w = hidden.detach().double().requires_grad_(), weight.detach().double().requires_grad_()
    F.cross_entropy((h @ w.T).flatten(0, 1), labels.flatten(), reduction="sum").backward()
    assert weight.grad.dtype == torch.bfloat16
    torch.testing.assert_close(weight.grad.double(), w.grad, rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(hidden.grad.double(), h.grad, rtol=2e-2, atol=2e-2)


def test_fused_and_checkpointed_loss_give_the_same_wrapper_gradients():
    hf_config = build_hf_config(ModelConfig(preset="tiny-gqa"))
    ids = torch.randint(0, 512, (2, 33), generator=torch.Generator().manual_seed(2))
    grads = []
    for fused in (True, False):
        lm = meta_model(hf_config)
        lm.to_empty(device="cpu")
        init_weights_(lm, 0.02, seed=1)
        reset_rotary_(lm, "cpu")
        wrapper = CausalLMWithLoss(lm, loss_chunk_tokens=24, fused_loss=fused)
        loss_sum, _ = wrapper(ids[:, :-1], ids[:, 1:])
        loss_sum.backward()
        grads.append((loss_sum.detach(), {n: p.grad for n, p in wrapper.named_parameters()}))
    (loss_a, grads_a), (loss_b, grads_b) = grads
    torch.testing.assert_close(loss_a, loss_b, rtol=1e-6, atol=0)
    assert grads_a.keys() == grads_b.keys()
    for name in grads_a:
        torch.testing.assert_close(
            grads_a[name], grads_b[name], rtol=1e-4, atol=1e-6 * float(grads_b[name].abs().max()), msg=name
        )


def test_wrapper_loss_equals_hf_model_loss():
    hf_config = build_hf_config(ModelConfig(preset="tiny-gqa"))
    lm = meta_model(hf_config)
    lm.to_empty(device="cpu")
    init_weights_(lm, 0.02, seed=1)
    reset_rotary_(lm, "cpu")
    wrapper = CausalLMWithLoss(lm, loss_chunk_tokens=24)
    ids = torch.randint(0, 512, (2, 33), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        loss_sum, count = wrapper(ids[:, :-1], ids[:, 1:])
        reference = lm(ids, labels=ids).loss  # HF shifts the labels itself
    assert (loss_sum / count).item() == pytest.approx(reference.item(), rel=1e-5)


def test_random_init_is_deterministic_per_seed():
    hf_config = build_hf_config(ModelConfig(preset="tiny"))
    weights = []
    for seed in (5, 5, 6):
        lm = meta_model(hf_config)
        lm.to_empty(device="cpu")
        init_weights_(lm, hf_config.initializer_range, seed)
        weights.append(lm.model.layers[1].mlp.up_proj.weight.clone())
        assert torch.equal(lm.model.norm.weight, torch.ones(64))
    assert torch.equal(weights[0], weights[1]) and not torch.equal(weights[0], weights[2])
    assert weights[0].std().item() == pytest.approx(0.02, rel=0.1)


def test_random_init_leaves_the_global_generator_alone():
    """init draws from a private generator: runtime.seed's global stream is not reset to train.seed."""
    hf_config = build_hf_config(ModelConfig(preset="tiny"))
    torch.manual_seed(123)
    expected = torch.rand(4)
    torch.manual_seed(123)
    lm = meta_model(hf_config)
    lm.to_empty(device="cpu")
    init_weights_(lm, hf_config.initializer_range, seed=7)
    assert torch.equal(torch.rand(4), expected)
    torch.manual_seed(7)  # same numbers as seeding the global generator (replicated weights are unchanged)
    assert torch.equal(
        lm.model.embed_tokens.weight,
        torch.empty_like(lm.model.embed_tokens.weight).normal_(0.0, hf_config.initializer_range),
    )


@pytest.mark.parametrize("name", list(PRESETS))
def test_preset_parameter_count_matches_transformers(name):
    lm = meta_model(build_hf_config(ModelConfig(preset=name)))
    total, embedding = count_params(lm)
    assert total == num_params(PRESETS[name]())
    assert embedding == PRESETS[name]()["vocab_size"] * PRESETS[name]()["hidden_size"]


def test_llama3_rope_scaling_survives_into_the_model():
    hf_config = build_hf_config(ModelConfig(preset="llama3.1-8b"))
    assert hf_config.rope_parameters["rope_type"] == "llama3" and hf_config.rope_parameters["rope_theta"] == 500000.0
    assert hf_config.num_key_value_heads == 8 and hf_config.intermediate_size == 14336


def test_flops_per_token_and_peaks():
    spec = PRESETS["llama2-7b"]()
    n = num_params(spec)
    fpt = flops_per_token(n, 32000 * 4096, 32, 32, 128, 4096)
    assert fpt == 6 * (n - 32000 * 4096) + 12 * 32 * 32 * 128 * 4096
    assert 4.60e10 < fpt < 4.62e10  # 6 x 6.6B non-embedding parameters + attention over 4096 tokens
    assert peak_tflops("NVIDIA H100 80GB HBM3") == 989.0
    assert peak_tflops("NVIDIA H200") == 989.0 and peak_tflops("NVIDIA H200", fp8=True) == 1978.0
    assert peak_tflops("NVIDIA H100 PCIe") == 756.0
    assert peak_tflops("NVIDIA A100-SXM4-80GB") == 312.0 and peak_tflops("NVIDIA A100-SXM4-80GB", fp8=True) == 312.0
    assert (
        peak_tflops("NVIDIA A10G") == 125.0
        and peak_tflops("NVIDIA L40S") == 362.0
        and peak_tflops("NVIDIA L4") == 121.0
    )
    assert peak_tflops("x86_64") is None


@pytest.mark.parametrize("schedule", ["cosine", "linear", "constant"])
def test_lr_schedule(schedule):
    f = lr_multiplier(TrainConfig(steps=110, warmup_steps=10, schedule=schedule, min_lr_ratio=0.1))
    assert f(0) == pytest.approx(0.1) and f(9) == pytest.approx(1.0) and f(10) == pytest.approx(1.0)
    end = {"cosine": 0.1, "linear": 0.1, "constant": 1.0}[schedule]
    assert f(110) == pytest.approx(end)
    if schedule == "cosine":
        assert f(60) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5)))


def test_fp16_skipped_step_does_not_advance_the_schedule():
    """When the scaler finds inf gradients it skips the optimizer step; the LR schedule and the converters' hooks stay
    put too."""

    from fsdp_trainer.converters import ModelConverter, ModelConverters
    from fsdp_trainer.optim import build_scheduler
    from fsdp_trainer.trainer import Trainer

    class Counting(ModelConverter):
        name = "counting"
        hooks = 0

        def post_optimizer_hook(self, model):
            Counting.hooks += 1

    model = torch.nn.Linear(4, 4)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1.0)
    t = Trainer.__new__(Trainer)
    t.cfg = TrainerConfig(checkpoint=CheckpointConfig(enabled=False))  # no save to wait for before the update
    t.converters = ModelConverters([Counting(None, torch.device("cpu"), None)])
    t.model, t.optimizer, t.step = model, optimizer, 0
    t.scheduler = build_scheduler(optimizer, TrainConfig(steps=10, warmup_steps=5))
    t.scaler = torch.amp.GradScaler("cpu", init_scale=2.0**8)

    def backward(bad: bool):
        loss = t.scaler.scale(model(torch.ones(1, 4)).sum())
        loss.backward()
        if bad:
            model.weight.grad[0, 0] = float("inf")
        t.scaler.unscale_(optimizer)

    backward(bad=False)
    assert t._optimizer_step() is True
    lr, weight = optimizer.param_groups[0]["lr"], model.weight.detach().clone()
    assert t.scheduler.last_epoch == 1
    backward(bad=True)
    assert t._optimizer_step() is False
    assert t.scheduler.last_epoch == 1 and optimizer.param_groups[0]["lr"] == lr
    assert Counting.hooks == 1, "the converters' post-optimizer hooks run after steps that updated the weights only"
    assert torch.equal(model.weight, weight) and t.scaler.get_scale() == 2.0**7
    backward(bad=False)
    assert t._optimizer_step() is True and t.scheduler.last_epoch == 2 and Counting.hooks == 2


def test_fp16_keeps_the_checkpointed_loss(monkeypatch):
    """The fused loss would cast unscaled gradients to fp16; fp16 runs take the checkpointed chunks instead."""
    from fsdp_trainer import model as model_module

    head = model_module.LossHead(16, 50, bias=False).configure(8, compile_loss=False, fused=True)
    monkeypatch.setattr(model_module, "linear_cross_entropy", lambda *a, **k: pytest.fail("fused loss used for fp16"))
    labels = torch.randint(0, 50, (2, 5))
    head.half().loss(torch.randn(2, 5, 16, dtype=torch.float16, requires_grad=True), labels)  # checkpointed: no failure
    head.float()
    with torch.autocast("cpu", dtype=torch.float16):  # parallel.api none: fp32 hidden states under fp16 autocast
        head.loss(torch.randn(2, 5, 16, requires_grad=True), labels)
    with pytest.raises(pytest.fail.Exception):  # fp32 with grad: the fused path
        head.loss(torch.randn(2, 5, 16, requires_grad=True), labels)


def test_every_block_is_compiled_with_the_memory_budget(monkeypatch):
    from fsdp_trainer import parallelize

    seen = []
    monkeypatch.setattr(parallelize.torch, "compile", lambda module, **kw: seen.append(kw) or module)
    blocks = torch.nn.ModuleList([torch.nn.Linear(2, 2) for _ in range(3)])
    import torch._functorch.config as functorch_config

    with functorch_config.patch(activation_memory_budget=1.0):  # restored after (a config module, not monkeypatch's)
        parallelize.apply_compile(blocks, 0.7)
        assert functorch_config.activation_memory_budget == 0.7, "the compiler's budget, read when the blocks compile"
    assert seen == [{}] * 3, "torch.compile's default mode, block by block"

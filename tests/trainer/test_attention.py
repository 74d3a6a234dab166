"""The trainer's SDPA function: same numbers as transformers' own, and the kernel order it asks for."""

from __future__ import annotations

import pytest
import torch

from fsdp_trainer import attention
from fsdp_trainer.config import ModelConfig
from fsdp_trainer.model import build_hf_config, init_weights_, meta_model, reset_rotary_

pytestmark = pytest.mark.timeout(60)


def test_kernel_choice():
    cpu = torch.device("cpu")
    assert attention.kernel_choice("auto", cpu) is None  # torch's own choice off Hopper
    assert attention.kernel_choice("default", cpu) is None
    assert attention.kernel_choice("cudnn", cpu) == "cudnn"


def test_probe_asks_the_dispatcher():
    cpu = torch.device("cpu")
    assert attention.probe("flash", cpu, torch.float32, 4, 16, 64) is None  # torch's CPU flash kernel
    assert attention.probe("flash", cpu, torch.float32, 4, 16, 64, kv_heads=2) is None  # grouped heads as they are
    assert attention.probe("cudnn", cpu, torch.float32, 4, 16, 64)  # no cuDNN attention on CPU: a reason


def _lm(hf_config):
    lm = meta_model(hf_config)
    lm.to_empty(device="cpu")
    init_weights_(lm, 0.02, seed=3)
    reset_rotary_(lm, "cpu")
    return lm


@pytest.mark.parametrize("kernel", ["flash", "math"])
@pytest.mark.parametrize("preset", ["tiny", "tiny-gqa"])  # tiny-gqa: grouped key/value heads
def test_trainer_sdpa_matches_transformers_sdpa(preset, kernel):
    ids = torch.randint(0, 512, (2, 40), generator=torch.Generator().manual_seed(0))
    stock = build_hf_config(ModelConfig(preset=preset))
    ref_lm = _lm(stock)
    ref = ref_lm(input_ids=ids).logits
    ref.sum().backward()

    ours = build_hf_config(ModelConfig(preset=preset))
    heads = ", grouped key/value heads as they are" if preset == "tiny-gqa" else ""
    used = attention.configure_attention(ours, kernel, torch.device("cpu"), torch.float32, 40)
    assert used == f"sdpa, {kernel} kernel (math as fallback){heads}"
    assert attention._gqa_native is (preset == "tiny-gqa")
    assert ours._attn_implementation == attention.ATTENTION_NAME
    lm = _lm(ours)
    out = lm(input_ids=ids).logits
    out.sum().backward()
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    q_proj = "model.layers.0.self_attn.q_proj.weight"
    torch.testing.assert_close(
        dict(lm.named_parameters())[q_proj].grad, dict(ref_lm.named_parameters())[q_proj].grad, rtol=1e-4, atol=1e-6
    )


@pytest.mark.parametrize("native", [True, False])  # enable_gqa, or repeated heads (memory-efficient kernel)
def test_grouped_heads_either_way_match_plain_attention(native, monkeypatch):
    import torch.nn.functional as F

    monkeypatch.setattr(attention, "_enabled", [torch.nn.attention.SDPBackend.MATH])
    monkeypatch.setattr(attention, "_gqa_native", native)
    module = torch.nn.Module()
    module.num_key_value_groups, module.is_causal = 2, True
    g = torch.Generator().manual_seed(0)
    q, k, v = (
        torch.randn(2, 4, 9, 8, generator=g),
        torch.randn(2, 2, 9, 8, generator=g),
        torch.randn(2, 2, 9, 8, generator=g),
    )
    out, _ = attention.sdpa_attention(module, q, k, v, None)
    expected = F.scaled_dot_product_attention(
        q, k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1), is_causal=True
    )
    torch.testing.assert_close(out, expected.transpose(1, 2))


def test_a_kernel_that_refuses_the_shapes_leaves_the_default(caplog):
    hf_config = build_hf_config(ModelConfig(preset="tiny"))
    with caplog.at_level("WARNING"):
        used = attention.configure_attention(hf_config, "cudnn", torch.device("cpu"), torch.float32, 64)
    assert used == "sdpa, torch's default kernel order" and hf_config._attn_implementation == "sdpa"
    assert "model.sdpa_backend=cudnn: the cudnn kernel does not take this run's attention" in caplog.text


def test_non_sdpa_implementations_are_left_alone():
    hf_config = build_hf_config(ModelConfig(preset="tiny", attn_implementation="eager"))
    assert attention.configure_attention(hf_config, "cudnn", torch.device("cpu"), torch.float32, 64) == "eager"
    assert hf_config._attn_implementation == "eager"


@pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability() < (9, 0), reason="cuDNN attention on sm_90+"
)
def test_cudnn_takes_grouped_heads_as_they_are_with_the_repeated_heads_results_on_cuda(monkeypatch):
    """Llama-3's attention shape (32 query heads, 8 key/value heads) in bf16: cuDNN with ``enable_gqa`` against cuDNN on
    repeated heads, forward and every gradient. Run on the GPU machine
    (bench/reports/2026-11-30-llama3.1-8b-h200x2-grouped-heads-cudnn.md)."""
    assert attention.probe("cudnn", torch.device("cuda"), torch.bfloat16, 32, 128, 4096, kv_heads=8) is None
    module = torch.nn.Module()
    module.num_key_value_groups, module.is_causal = 4, True
    g = torch.Generator(device="cuda").manual_seed(0)
    shapes = [(2, 32, 4096, 128), (2, 8, 4096, 128), (2, 8, 4096, 128)]
    inputs = [torch.randn(s, device="cuda", dtype=torch.bfloat16, generator=g) for s in shapes]
    grad_out = torch.randn(2, 4096, 32, 128, device="cuda", dtype=torch.bfloat16, generator=g)
    results = {}
    for native in (True, False):
        monkeypatch.setattr(attention, "_enabled", [torch.nn.attention.SDPBackend.CUDNN_ATTENTION])
        monkeypatch.setattr(attention, "_gqa_native", native)
        q, k, v = (t.clone().requires_grad_() for t in inputs)
        out, _ = attention.sdpa_attention(module, q, k, v, None)
        out.backward(grad_out)
        results[native] = (out, q.grad, k.grad, v.grad)
    for name, ours, repeated in zip(("out", "dq", "dk", "dv"), results[True], results[False], strict=True):
        assert ours.shape == repeated.shape, name
        error = (ours.float() - repeated.float()).abs().max() / repeated.float().abs().max()
        assert error < 1e-2, (
            f"{name}: largest difference {error:.2e} of the largest value"
        )  # bf16 rounding, summed in another order

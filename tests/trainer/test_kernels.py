"""The fused RMSNorm and rotary attention (``model.fused_kernels``) compute what Hugging Face's modules compute."""

from __future__ import annotations

import copy

import pytest
import torch

from fsdp_trainer.converters.fused_kernels import apply_rotary, use_fused_kernels

pytestmark = pytest.mark.timeout(120)


def _cos_sin(b: int, s: int, d: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    # Unequal halves on purpose: the rotation must not assume cos/sin repeat across the two halves.
    angles = torch.rand(b, s, d, generator=generator) * 6.0
    return angles.cos(), angles.sin()


@pytest.mark.parametrize("compiling", [False, True])
def test_rotary_matches_hugging_face(compiling, monkeypatch):
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    g = torch.Generator().manual_seed(0)
    b, s, h, d = 2, 7, 3, 8
    cos, sin = _cos_sin(b, s, d, g)
    x = torch.randn(b, s, h, d, generator=g, requires_grad=True)
    x_hf = x.detach().transpose(1, 2).clone().requires_grad_()  # Hugging Face's [b, h, s, d]
    if compiling:  # the functional code the compiler sees
        monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    ours = apply_rotary(x, cos, sin)
    ref, _ = apply_rotary_pos_emb(x_hf, x_hf, cos, sin)
    torch.testing.assert_close(ours, ref.transpose(1, 2), rtol=1e-6, atol=1e-6)
    upstream = torch.randn(b, s, h, d, generator=g)
    ours.backward(upstream)
    ref.backward(upstream.transpose(1, 2))
    torch.testing.assert_close(x.grad, x_hf.grad.transpose(1, 2), rtol=1e-6, atol=1e-6)


def test_rotary_bf16_is_no_worse_than_hugging_face():
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    g = torch.Generator().manual_seed(1)
    cos, sin = _cos_sin(1, 64, 128, g)
    x = torch.randn(1, 64, 4, 128, generator=g)
    exact, _ = apply_rotary_pos_emb(x.transpose(1, 2).double(), x.transpose(1, 2).double(), cos.double(), sin.double())
    exact = exact.transpose(1, 2)
    ours = apply_rotary(x.bfloat16(), cos.bfloat16(), sin.bfloat16()).double()
    ref, _ = apply_rotary_pos_emb(
        x.transpose(1, 2).bfloat16(), x.transpose(1, 2).bfloat16(), cos.bfloat16(), sin.bfloat16()
    )
    assert (ours - exact).abs().max() <= (ref.transpose(1, 2).double() - exact).abs().max() * 1.01


@pytest.mark.parametrize("backend", ["auto", "math"])
@pytest.mark.parametrize("preset", ["tiny", "tiny-gqa"])
def test_swapped_model_equals_hugging_face(preset, backend, monkeypatch):
    """A whole Llama (grouped heads too), fp32: the same loss and the same gradients with and without the swap.

    ``math`` routes attention through the trainer's own SDPA function (as on GPUs), which then takes the
    transposed ``[b, s, h, d]`` views; ``auto`` on CPU keeps Hugging Face's ``sdpa``.
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    from fsdp_trainer.attention import configure_attention
    from fsdp_trainer.converters import fused_kernels as kernels
    from fsdp_trainer.presets import PRESETS

    rotations = []
    rotate = kernels._rotate_halves
    monkeypatch.setattr(kernels, "_rotate_halves", lambda *a, **k: rotations.append(1) or rotate(*a, **k))
    config = LlamaConfig(**PRESETS[preset](), attn_implementation="sdpa", use_cache=False)  # as the trainer builds it
    configure_attention(config, backend, torch.device("cpu"), torch.float32, 32)
    assert (config._attn_implementation == "sdpa") == (backend == "auto")
    torch.manual_seed(0)
    ref = LlamaForCausalLM(config)
    fused = copy.deepcopy(ref)
    assert use_fused_kernels(fused) == 2 * config.num_hidden_layers + 1 + config.num_hidden_layers
    assert fused.state_dict().keys() == ref.state_dict().keys()
    ids = torch.randint(0, config.vocab_size, (2, 32), generator=torch.Generator().manual_seed(3))
    losses = []
    for model in (ref, fused):
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        losses.append(loss)
    torch.testing.assert_close(losses[1], losses[0], rtol=1e-6, atol=1e-6)
    assert len(rotations) == 4 * config.num_hidden_layers, (
        "the swapped attention rotated query and key itself, forward and backward"
    )
    for (name, a), b in zip(ref.named_parameters(), fused.parameters(), strict=True):
        torch.testing.assert_close(b.grad, a.grad, rtol=1e-5, atol=1e-6, msg=name)


def test_eager_attention_is_left_alone():
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.models.llama.modeling_llama import LlamaAttention

    from fsdp_trainer.presets import PRESETS

    model = LlamaForCausalLM(LlamaConfig(**PRESETS["tiny"](), attn_implementation="eager"))
    use_fused_kernels(model)
    assert all(type(layer.self_attn) is LlamaAttention for layer in model.model.layers)
    assert type(model.model.norm).__name__ == "FusedRMSNorm"


def test_autocast_keeps_hugging_face_type_promotion():
    """fp32 weights under bf16 autocast (parallel.api none): the norm's and the rotary's results follow Hugging Face's dtypes and values."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from fsdp_trainer.presets import PRESETS

    config = LlamaConfig(**PRESETS["tiny-gqa"](), attn_implementation="sdpa", use_cache=False)
    torch.manual_seed(0)
    ref = LlamaForCausalLM(config)
    fused = copy.deepcopy(ref)
    use_fused_kernels(fused)
    ids = torch.randint(0, config.vocab_size, (2, 16), generator=torch.Generator().manual_seed(5))
    losses = []
    for model in (ref, fused):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        losses.append(loss)
    assert losses[1].dtype == losses[0].dtype
    torch.testing.assert_close(losses[1], losses[0], rtol=2e-3, atol=2e-3)
    for (name, a), b in zip(ref.named_parameters(), fused.parameters(), strict=True):
        torch.testing.assert_close(b.grad, a.grad, rtol=5e-2, atol=5e-3, msg=name)


def test_norm_with_weights_in_another_dtype_matches_hugging_face():
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    from fsdp_trainer.converters import fused_kernels as kernels

    ref = LlamaRMSNorm(64, eps=1e-5)
    with torch.no_grad():
        ref.weight.uniform_(0.5, 1.5)
    fused = copy.deepcopy(ref)
    fused.__class__ = kernels.FusedRMSNorm
    x = torch.randn(3, 5, 64).bfloat16()  # fp32 weight, bf16 activations: Hugging Face's result is fp32
    torch.testing.assert_close(fused(x), ref(x), rtol=1e-6, atol=1e-6)
    assert fused(x).dtype == ref(x).dtype == torch.float32


def test_rotary_backward_is_once_differentiable():
    g = torch.Generator().manual_seed(2)
    cos, sin = _cos_sin(1, 4, 8, g)
    x = torch.randn(1, 4, 2, 8, generator=g, requires_grad=True)
    (grad,) = torch.autograd.grad(apply_rotary(x, cos, sin).square().sum(), x, create_graph=True)
    with pytest.raises(RuntimeError):
        grad.sum().backward()  # double backward is refused, not silently wrong


def test_swapped_model_pickles():
    import pickle

    from transformers import LlamaConfig, LlamaForCausalLM

    from fsdp_trainer.presets import PRESETS

    model = LlamaForCausalLM(LlamaConfig(**PRESETS["tiny"](), attn_implementation="sdpa"))
    use_fused_kernels(model)
    copy_ = pickle.loads(pickle.dumps(model))
    assert type(copy_.model.layers[0].self_attn) is type(model.model.layers[0].self_attn)
    assert type(copy_.model.norm).__name__ == "FusedRMSNorm"


def test_memory_budget_makes_compiled_blocks_keep_less_for_backward():
    """``compile.memory_budget`` 0.7: the compiled Llama block recomputes its cheap element-wise work in backward,
    keeps a good part less for it, and gives the same gradients."""
    import torch._dynamo
    import torch._functorch.config as functorch_config
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

    cfg = LlamaConfig(
        hidden_size=64,
        intermediate_size=224,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_hidden_layers=1,
        vocab_size=32,
        max_position_embeddings=64,
    )
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    holder = torch.nn.Module()
    holder.config = cfg
    holder.layers = torch.nn.ModuleList([LlamaDecoderLayer(cfg, 0)])
    assert use_fused_kernels(holder) == 3
    x = torch.randn(2, 32, 64)
    cos, sin = LlamaRotaryEmbedding(cfg)(x, torch.arange(32).unsqueeze(0))
    kept, grads = {}, {}
    with functorch_config.patch(activation_memory_budget=1.0):  # restored after: apply_compile sets it process-wide
        for budget in (1.0, 0.7):
            kept[budget], grads[budget] = _kept_for_backward(holder.layers[0], x, cos, sin, budget)
    torch._dynamo.reset()
    assert kept[0.7] < 0.8 * kept[1.0], kept
    for a, b in zip(grads[1.0], grads[0.7], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def _kept_for_backward(layer, x, cos, sin, budget):
    """Bytes a compiled copy of ``layer`` keeps for backward (its weights left out), and the gradients it gives."""
    import torch._dynamo

    from fsdp_trainer import parallelize

    torch._dynamo.reset()
    blocks = torch.nn.ModuleList([copy.deepcopy(layer)])
    parallelize.apply_compile(blocks, budget)
    inp = x.clone().requires_grad_()
    sizes = []

    def pack(t):
        sizes.append(t.numel() * t.element_size())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = blocks[0](inp, position_embeddings=(cos, sin))
    out = out[0] if isinstance(out, tuple) else out
    out.square().sum().backward()
    weights = sum(p.numel() * p.element_size() for p in blocks[0].parameters())  # kept either way
    return sum(sizes) - weights, [inp.grad, *(p.grad for p in blocks[0].parameters())]

"""Model presets: plain functions returning the keyword arguments of a transformers ``LlamaConfig``.

Kept free of torch and transformers imports so that ``fsdp_trainer.config`` can
validate ``--model.preset`` offline. ``model.build_hf_config`` turns a spec into a
``LlamaConfig``. Shapes of the published models are copied from their
``config.json`` files on the Hugging Face Hub.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Spec = dict[str, Any]


def tiny() -> Spec:
    """A 2-layer toy (about 0.1M parameters) that trains in seconds on CPU; byte-level vocabulary."""
    return dict(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=172,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=2048,
        rope_theta=10000.0,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        bos_token_id=256,
        eos_token_id=257,
        pad_token_id=258,
    )


def tiny_gqa() -> Spec:
    """``tiny`` with grouped-query attention (2 key/value heads for 4 query heads), like Llama 3."""
    return {**tiny(), "num_key_value_heads": 2}


def _llama2(hidden: int, layers: int, heads: int, kv_heads: int, ffn: int) -> Spec:
    return dict(
        vocab_size=32000,
        hidden_size=hidden,
        intermediate_size=ffn,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=4096,
        rope_theta=10000.0,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        bos_token_id=1,
        eos_token_id=2,
    )


def llama2_7b() -> Spec:
    """Llama-2-7B: hidden 4096, 32 layers, 32 heads, FFN 11008, vocabulary 32000."""
    return _llama2(4096, 32, 32, 32, 11008)


def llama2_13b() -> Spec:
    """Llama-2-13B: hidden 5120, 40 layers, 40 heads, FFN 13824, vocabulary 32000."""
    return _llama2(5120, 40, 40, 40, 13824)


def llama2_70b() -> Spec:
    """Llama-2-70B: hidden 8192, 80 layers, 64 heads, 8 key/value heads, FFN 28672."""
    return _llama2(8192, 80, 64, 8, 28672)


def _llama31(hidden: int, layers: int, heads: int, kv_heads: int, ffn: int) -> Spec:
    return dict(
        vocab_size=128256,
        hidden_size=hidden,
        intermediate_size=ffn,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=131072,
        rope_theta=500000.0,
        rope_scaling=dict(
            rope_type="llama3",
            factor=8.0,
            low_freq_factor=1.0,
            high_freq_factor=4.0,
            original_max_position_embeddings=8192,
        ),
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        bos_token_id=128000,
        eos_token_id=128001,
    )


def llama31_8b() -> Spec:
    """Llama-3.1-8B: hidden 4096, 32 layers, 32 heads, 8 key/value heads, FFN 14336, vocabulary 128256."""
    return _llama31(4096, 32, 32, 8, 14336)


def llama31_70b() -> Spec:
    """Llama-3.1-70B: hidden 8192, 80 layers, 64 heads, 8 key/value heads, FFN 28672, vocabulary 128256."""
    return _llama31(8192, 80, 64, 8, 28672)


PRESETS: dict[str, Callable[[], Spec]] = {
    "tiny": tiny,
    "tiny-gqa": tiny_gqa,
    "llama2-7b": llama2_7b,
    "llama2-13b": llama2_13b,
    "llama2-70b": llama2_70b,
    "llama3.1-8b": llama31_8b,
    "llama3.1-70b": llama31_70b,
}


def is_tiny(name: str) -> bool:
    """True for the toy presets, which default to the builtin corpus and byte-level tokenizer."""
    return name.startswith("tiny")


def kv_dim(spec: Spec) -> int:
    """Width of one token's keys (or values): key/value heads x head dim."""
    head_dim = spec.get("head_dim") or spec["hidden_size"] // spec["num_attention_heads"]
    return (spec.get("num_key_value_heads") or spec["num_attention_heads"]) * head_dim


def block_params(spec: Spec) -> int:
    """Parameters of one decoder block: attention projections, the gated MLP, two norms."""
    h, f = spec["hidden_size"], spec["intermediate_size"]
    head_dim = spec.get("head_dim") or h // spec["num_attention_heads"]
    attn = h * spec["num_attention_heads"] * head_dim * 2 + h * kv_dim(spec) * 2
    return attn + 3 * h * f + 2 * h


def num_params(spec: Spec) -> int:
    """Parameter count of a spec, computed from its shapes (no model needed)."""
    h, v = spec["hidden_size"], spec["vocab_size"]
    lm_head = 0 if spec.get("tie_word_embeddings") else v * h
    return v * h + spec["num_hidden_layers"] * block_params(spec) + h + lm_head

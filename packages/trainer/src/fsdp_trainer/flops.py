"""Model FLOPs per token and accelerator peak throughput, for MFU.

FLOPs per token follow the PaLM appendix / torchtitan convention:
``6 * (N - N_embedding) + 12 * L * H * d_head * T`` — 6 FLOPs per non-embedding
parameter per token (forward 2, backward 4) plus the attention score and value
matmuls over a sequence of T tokens. N counts every parameter (lm_head included);
N_embedding is the input embedding table (a lookup, no matmul). Recomputation from
activation checkpointing is not counted (this is model FLOPs, not hardware FLOPs).
Torch-free.
"""

from __future__ import annotations

# Dense bf16/fp16 tensor-core peaks in TFLOP/s (no sparsity), from vendor data sheets.
# Matched by substring of torch.cuda.get_device_name(), most specific first.
PEAK_BF16_TFLOPS: tuple[tuple[str, float], ...] = (
    ("GH200", 989.0),
    ("H200", 989.0),
    ("H100 PCIe", 756.0),
    ("H100 NVL", 835.0),
    ("H100", 989.0),  # SXM
    ("H800", 989.0),
    ("H20", 148.0),
    ("B200", 2250.0),
    ("A100", 312.0),
    ("A800", 312.0),
    ("L40S", 362.0),
    ("L40", 181.0),
    ("A10G", 125.0),  # AWS g5
    ("A10", 125.0),
    ("L4", 121.0),
    ("A6000", 155.0),
    ("V100", 125.0),
    ("T4", 65.0),
)
# Hopper-class parts run float8 at twice their bf16 peak.
FP8_DOUBLES = ("GH200", "H200", "H100", "H800", "H20", "B200", "L40S", "L4")


def flops_per_token(
    num_params: int, num_embedding_params: int, num_layers: int, num_heads: int, head_dim: int, seq_len: int
) -> int:
    """Training FLOPs (forward + backward) per token; see the module docstring."""
    return 6 * (num_params - num_embedding_params) + 12 * num_layers * num_heads * head_dim * seq_len


def peak_tflops(device_name: str, fp8: bool = False) -> float | None:
    """Dense peak TFLOP/s of one accelerator by name (None when unknown, e.g. a CPU)."""
    for key, peak in PEAK_BF16_TFLOPS:
        if key in device_name:
            return peak * 2 if fp8 and any(k in device_name for k in FP8_DOUBLES) else peak
    return None

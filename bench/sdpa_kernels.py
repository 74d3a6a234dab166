"""SDPA kernels on this GPU: forward + backward time and agreement, one kernel at a time.

    python bench/sdpa_kernels.py [--out DIR]

For the training shapes of the Llama presets (batch 2, 32 heads of 128, sequence 4096,
causal, bf16) each of cuDNN, flash and memory-efficient attention runs alone
(``sdpa_kernel([k])``); a kernel that refuses the shapes is reported as such. Agreement is
checked against the math kernel in fp32 on a shorter sequence. This is the measurement
behind ``model.sdpa_backend=auto`` (cuDNN first on sm_90+).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

KERNELS = {
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
}


def fwd_bwd(q, k, v, kernel, grad):
    with sdpa_kernel([kernel]):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    out.backward(grad)
    return out


def time_kernel(kernel, b, h, s, d, iters=20):
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    grad = torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        fwd_bwd(q, k, v, kernel, grad)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fwd_bwd(q, k, v, kernel, grad)
    end.record()
    torch.cuda.synchronize()
    ms = start.elapsed_time(end) / iters
    flops = 4 * b * h * s * s * d / 2 * 3.5  # causal: half the scores; backward is 2.5x forward
    return ms, flops / ms / 1e9


def agreement(kernel, b=1, h=8, s=512, d=128):
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(b, h, s, d, device="cuda", generator=g) for _ in range(3))
    grad = torch.randn(b, h, s, d, device="cuda", generator=g)
    ref = [t.clone().requires_grad_() for t in (q, k, v)]
    out_ref = fwd_bwd(*ref, SDPBackend.MATH, grad)
    low = [t.to(torch.bfloat16).requires_grad_() for t in (q, k, v)]
    out = fwd_bwd(*low, kernel, grad.to(torch.bfloat16))
    err = [(out.float() - out_ref).abs().max().item()] + [
        (a.grad.float() - r.grad).abs().max().item() for a, r in zip(low, ref, strict=True)
    ]
    return dict(zip(["out", "dq", "dk", "dv"], err, strict=True))


def trainer_path(choice: str, compiled: bool, priority_only: bool = False) -> dict:
    """The attention kernels the GPU runs inside the trainer's model (2 blocks of the Llama-3.1-8B shape, batch 1, seq 4096).

    ``priority_only``: instead of the trainer's function, SDPA inside ``sdpa_kernel([cudnn, flash, efficient, math],
    set_priority=True)`` (a priority order, as torchtitan 0.2.2 does), to see what that selects.
    """
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "packages" / "trainer" / "src"))
    from transformers import AttentionInterface

    from fsdp_trainer import attention
    from fsdp_trainer.config import ModelConfig
    from fsdp_trainer.model import build_hf_config, init_weights_, meta_model, reset_rotary_

    torch._dynamo.reset()
    hf = build_hf_config(ModelConfig(preset="llama3.1-8b"))
    hf.num_hidden_layers = 2
    used = attention.configure_attention(hf, choice, torch.device("cuda"), torch.bfloat16, 4096)
    if priority_only:
        order = [
            SDPBackend.CUDNN_ATTENTION,
            SDPBackend.FLASH_ATTENTION,
            SDPBackend.EFFICIENT_ATTENTION,
            SDPBackend.MATH,
        ]

        def by_priority(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **kwargs):
            groups = getattr(module, "num_key_value_groups", 1)
            key, value = attention.repeat_kv(key, groups), attention.repeat_kv(value, groups)
            with sdpa_kernel(order, set_priority=True):
                out = F.scaled_dot_product_attention(query, key, value, scale=scaling, is_causal=True)
            return out.transpose(1, 2).contiguous(), None

        AttentionInterface.register("bench_priority_sdpa", by_priority)
        from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

        AttentionMaskInterface.register("bench_priority_sdpa", ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])
        hf._attn_implementation = "bench_priority_sdpa"
        used = "priority order cudnn, flash, efficient, math"
    lm = meta_model(hf)
    lm.to_empty(device="cuda")
    init_weights_(lm, 0.02, 0)
    reset_rotary_(lm, "cuda")
    lm.to(torch.bfloat16)
    if compiled:
        for i, layer in enumerate(lm.model.layers):
            lm.model.layers[i] = torch.compile(layer)
    ids = torch.randint(0, hf.vocab_size, (1, 4096), device="cuda")
    from torch.profiler import ProfilerActivity, profile

    def step():
        lm.model(input_ids=ids).last_hidden_state.float().pow(2).mean().backward()

    step()  # compile / warm up
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    names = sorted(
        {
            e.key
            for e in prof.key_averages()
            if any(w in e.key.lower() for w in ("fmha", "flash", "cudnn", "attention", "sdpa", "sm90_"))
        }
    )
    return {
        "attention": used,
        "implementation": lm.config._attn_implementation,
        "compiled": compiled,
        "kernels": [n[:100] for n in names if "gemm" not in n.lower()],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.environ.get("OUT", ".bench"))
    args = parser.parse_args()
    results = {
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version(),
        "kernels": {},
    }
    print(f"{results['gpu']}  torch {results['torch']}  cuDNN {results['cudnn']}")
    print("| kernel | fwd+bwd ms (2x32x4096x128, causal) | TFLOP/s | max error vs fp32 math (out, dq, dk, dv) |")
    print("|---|---:|---:|---|")
    for name, kernel in KERNELS.items():
        try:
            ms, tflops = time_kernel(kernel, 2, 32, 4096, 128)
            err = agreement(kernel)
            results["kernels"][name] = {"ms": ms, "tflops": tflops, "max_error": err}
            print(f"| {name} | {ms:.2f} | {tflops:.0f} | {', '.join(f'{e:.3g}' for e in err.values())} |")
        except RuntimeError as e:
            results["kernels"][name] = {"error": str(e).splitlines()[0][:200]}
            print(f"| {name} | refused: {str(e).splitlines()[0][:100]} | | |")
    for name, (choice, compiled, priority_only) in {
        "auto-eager": ("auto", False, False),
        "auto-compiled": ("auto", True, False),
        "priority-compiled": ("auto", True, True),
    }.items():
        try:
            results[f"trainer_{name}"] = trainer_path(choice, compiled, priority_only)
        except Exception as e:  # a diagnosis: report, don't stop
            results[f"trainer_{name}"] = {"error": f"{type(e).__name__}: {e}"[:300]}
        print(f"trainer model, {name}: {json.dumps(results[f'trainer_{name}'])}")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "sdpa_kernels.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

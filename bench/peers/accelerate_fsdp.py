"""Reference peer: the Hugging Face `accelerate` FSDP path, as many users run it today.

Launched by `bench/gpu_compare.py` under torchrun (one process per GPU):

    torchrun --standalone --nproc-per-node 2 bench/peers/accelerate_fsdp.py \
        --hidden 4096 --layers 32 --heads 32 --kv-heads 32 --ffn 11008 --vocab 32000 \
        --seq-len 4096 --micro-batch 2 --steps 12 --out result.json

It builds a randomly initialised transformers `LlamaForCausalLM`, lets `accelerate` wrap it with
FSDP2 (transformer-based auto wrap on `LlamaDecoderLayer`, bf16 mixed precision), trains on
random tokens with the model's own loss (`labels=`), and writes tokens/s/GPU measured with
CUDA synchronisation around the timed steps. FLOPs follow the same convention as the trainer
(6 * (N - N_embedding) + 12 * L * H * d_head * T per token) so MFU is comparable.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch
from accelerate import Accelerator
from accelerate.utils import FullyShardedDataParallelPlugin
from transformers import LlamaConfig, LlamaForCausalLM


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, default in (
        ("hidden", 4096),
        ("layers", 32),
        ("heads", 32),
        ("kv-heads", 32),
        ("ffn", 11008),
        ("vocab", 32000),
        ("seq-len", 4096),
        ("micro-batch", 1),
        ("steps", 12),
        ("warmup", 3),
    ):
        p.add_argument(f"--{name}", type=int, default=default)
    p.add_argument("--rope-theta", type=float, default=10000.0)
    p.add_argument("--activation-checkpointing", action="store_true")
    p.add_argument("--peak-tflops", type=float, default=989.0)
    p.add_argument("--out", required=True)
    return p.parse_args()


def main() -> None:
    args = parse_args()
    plugin = FullyShardedDataParallelPlugin(
        fsdp_version=2,
        auto_wrap_policy="transformer_based_wrap",
        transformer_cls_names_to_wrap=["LlamaDecoderLayer"],
        reshard_after_forward=True,
        activation_checkpointing=args.activation_checkpointing,
        state_dict_type="SHARDED_STATE_DICT",
    )
    acc = Accelerator(mixed_precision="bf16", fsdp_plugin=plugin)
    cfg = LlamaConfig(
        hidden_size=args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads,
        intermediate_size=args.ffn,
        vocab_size=args.vocab,
        max_position_embeddings=args.seq_len,
        rope_theta=args.rope_theta,
        attn_implementation="sdpa",
        use_cache=False,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg)
    n_params = sum(p.numel() for p in model.parameters())
    n_embed = model.get_input_embeddings().weight.numel()
    optim = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)
    model, optim = acc.prepare(model, optim)
    model.train()

    gen = torch.Generator(device="cpu").manual_seed(1234 + acc.process_index)
    times: list[float] = []
    losses: list[float] = []
    for _ in range(args.steps):
        ids = torch.randint(0, args.vocab, (args.micro_batch, args.seq_len), generator=gen).to(acc.device)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = model(input_ids=ids, labels=ids)
        acc.backward(out.loss)
        acc.clip_grad_norm_(model.parameters(), 1.0)
        optim.step()
        optim.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        losses.append(out.loss.item())
    timed = times[args.warmup :]
    tokens_per_step = args.micro_batch * args.seq_len
    tps = tokens_per_step * len(timed) / sum(timed)
    head_dim = args.hidden // args.heads
    flops_per_token = 6 * (n_params - n_embed) + 12 * args.layers * args.heads * head_dim * args.seq_len
    tflops = flops_per_token * tps / 1e12
    result = {
        "variant": "accelerate-fsdp2" + ("-ac" if args.activation_checkpointing else ""),
        "world_size": acc.num_processes,
        "micro_batch_size": args.micro_batch,
        "tokens_per_s_per_gpu": tps,
        "tflops_per_gpu": tflops,
        "mfu": tflops / args.peak_tflops,
        "peak_mem_gib": torch.cuda.max_memory_allocated() / 2**30,
        "final_loss": losses[-1],
        "steps": args.steps,
        "torch_version": torch.__version__,
        "gpu_name": torch.cuda.get_device_name(),
    }
    if acc.is_main_process:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)
        print(json.dumps(result))
    acc.end_training()


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()

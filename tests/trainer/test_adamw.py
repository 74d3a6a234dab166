"""``TritonAdamW`` (``--train.adamw triton``) steps exactly like ``torch.optim.AdamW``.

The kernel runs in Triton's interpreter on CPU (``TRITON_INTERPRET=1``, set before Triton is imported, so each check
runs in a fresh interpreter). On GPUs ``bench/adamw_step.py`` checks it against torch's fused kernel and times both.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("triton")
pytestmark = pytest.mark.timeout(240)

TRAINER_SRC = Path(__file__).resolve().parents[2] / "packages" / "trainer" / "src"

COMMON = """
import torch
from fsdp_trainer.optim.triton_adamw import BLOCK, TritonAdamW

def params(seed):
    g = torch.Generator().manual_seed(seed)
    # sizes around the block size, a tiny one, and one spanning several blocks with a ragged end
    return [torch.nn.Parameter(torch.randn(n, generator=g)) for n in (BLOCK, BLOCK + 1, 3, 3 * BLOCK + 17)]

def groups(ps):
    return [{"params": ps[:2], "weight_decay": 0.1}, {"params": ps[2:], "weight_decay": 0.0}]

def grads(ps, seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(p.shape, generator=g) * 3 for p in ps]

def set_grads(a, b, gs):
    for p, q, g in zip(a, b, gs):
        p.grad, q.grad = g.clone(), g.clone()

def close(a, b, what):
    for x, y in zip(a, b):
        err = (x - y).abs().max().item()
        assert torch.allclose(x, y, rtol=2e-6, atol=1e-7), f"{what}: max difference {err}"
"""


def _run(body: str) -> None:
    env = {
        **os.environ,
        "TRITON_INTERPRET": "1",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(TRAINER_SRC), os.environ.get("PYTHONPATH")])),
    }
    code = COMMON + textwrap.dedent(body) + "\nprint('OK')\n"
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=200)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("OK"), proc.stderr[-3000:]


def test_steps_match_torch_adamw_with_schedule_and_weight_decay():
    _run("""
    mine, ref = params(0), params(0)
    opt = TritonAdamW(groups(mine), lr=1e-2, betas=(0.9, 0.95), eps=1e-8)
    torch_opt = torch.optim.AdamW(groups(ref), lr=1e-2, betas=(0.9, 0.95), eps=1e-8, foreach=False)
    for step in range(6):
        for o in (opt, torch_opt):
            for group in o.param_groups:
                group["lr"] = 1e-2 * (step + 1) / 6  # a schedule changes lr between steps
        for ps in (mine, ref):
            for p, g in zip(ps, grads(ps, 100 + step)):
                p.grad = g.clone()
        opt.step()
        torch_opt.step()
        close(mine, ref, f"parameters after step {step + 1}")
        for p, q in zip(mine, ref):
            for key in ("exp_avg", "exp_avg_sq"):
                close([opt.state[p][key]], [torch_opt.state[q][key]], key)
            assert opt.state[p]["step"].device.type == "cpu" and float(opt.state[p]["step"]) == step + 1
    """)


def test_parameters_without_gradients_are_left_alone():
    _run("""
    mine, ref = params(2), params(2)
    opt = TritonAdamW(groups(mine), lr=1e-3)
    torch_opt = torch.optim.AdamW(groups(ref), lr=1e-3, foreach=False)
    set_grads(mine, ref, grads(mine, 7))
    mine[2].grad = ref[2].grad = None
    untouched = mine[2].detach().clone()
    opt.step()
    torch_opt.step()
    close(mine, ref, "with one parameter lacking a gradient")
    assert mine[2] not in opt.state and torch.equal(mine[2], untouched)
    """)


def test_state_dict_moves_between_triton_and_torch():
    _run("""
    a, b = params(3), params(3)
    opt = TritonAdamW(groups(a), lr=1e-2)
    torch_opt = torch.optim.AdamW(groups(b), lr=1e-2, foreach=True)
    set_grads(a, b, grads(a, 0))
    opt.step(); torch_opt.step()
    # swap: each continues from the other's state
    c, d = [torch.nn.Parameter(p.detach().clone()) for p in a], [torch.nn.Parameter(q.detach().clone()) for q in b]
    torch_from_triton = torch.optim.AdamW(groups(c), lr=1e-2, foreach=True)
    torch_from_triton.load_state_dict(opt.state_dict())
    triton_from_torch = TritonAdamW(groups(d), lr=1e-2)
    triton_from_torch.load_state_dict(torch_opt.state_dict())
    set_grads(c, d, grads(c, 1))
    torch_from_triton.step(); triton_from_torch.step()
    close(c, d, "after swapping state")
    assert float(triton_from_torch.state[d[0]]["step"]) == 2
    """)


def test_fsdp2_dtensor_shards_are_stepped_in_place():
    # FSDP2's parameters and gradients are DTensors; the kernel steps their local shards.
    _run("""
    import os, tempfile
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard
    dist.init_process_group("gloo", init_method="file://" + tempfile.mktemp(), rank=0, world_size=1)
    models = []
    for impl in ("triton", "torch"):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 40), torch.nn.Linear(40, 8))
        for layer in model:
            fully_shard(layer)
        fully_shard(model)
        if impl == "triton":
            opt = TritonAdamW(model.parameters(), lr=1e-2)
        else:
            opt = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=True)
        for step in range(3):
            torch.manual_seed(10 + step)
            model(torch.randn(4, 16)).square().mean().backward()
            opt.step()
            opt.zero_grad()
        models.append([p.full_tensor() for p in model.parameters()])
    close(models[0], models[1], "FSDP2 model")
    dist.destroy_process_group()
    """)


def test_float8_all_gather_weights_are_stepped_through_their_inner_tensor():
    # --fp8.all_gather: torchao wraps each weight in WeightWithDynamicFloat8CastTensor; its fp32 values are stepped in place.
    _run("""
    from torchao.float8.float8_training_tensor import LinearMMConfig
    from torchao.float8.fsdp_utils import WeightWithDynamicFloat8CastTensor
    mine, ref = params(4), params(4)
    wrapped = [torch.nn.Parameter(WeightWithDynamicFloat8CastTensor(p.detach(), LinearMMConfig(), torch.float8_e4m3fn))
               for p in mine]
    for w in wrapped:  # the scale the trainer precomputes after each step (fp8.precompute_scales): a second inner tensor
        w._precomputed_scale = torch.tensor(1.0)
    assert len(wrapped[0].__tensor_flatten__()[0]) == 2
    opt = TritonAdamW(groups(wrapped), lr=1e-2)
    torch_opt = torch.optim.AdamW(groups(ref), lr=1e-2, foreach=False)
    for step in range(2):
        set_grads(wrapped, ref, grads(ref, step))
        opt.step(); torch_opt.step()
    close([w._tensor for w in wrapped], ref, "float8-wrapped weights")
    """)


def test_non_fp32_parameters_are_refused_in_one_line():
    _run("""
    p = torch.nn.Parameter(torch.randn(10).bfloat16())
    p.grad = torch.randn(10).bfloat16()
    opt = TritonAdamW([p])
    try:
        opt.step()
    except RuntimeError as e:
        assert "must be fp32" in str(e) and "--train.adamw fused" in str(e) and "\\n" not in str(e), e
    else:
        raise AssertionError("bf16 parameters were stepped")
    """)


def test_auto_picks_triton_on_gpus_only_where_it_applies(monkeypatch):
    from fsdp_trainer.config import load_config
    from fsdp_trainer.optim import choose_adamw, triton_adamw

    def pick(flags, device, installed=True):
        monkeypatch.setattr(triton_adamw, "available", lambda: installed)
        return choose_adamw(load_config(None, flags), device)

    assert pick([], "cuda") == "triton"
    assert pick([], "cuda", installed=False) == "fused"
    assert pick(["--fp8.enabled", "true"], "cuda") == "fused"
    assert pick(["--parallel.cpu_offload", "true"], "cuda") == "foreach"
    assert pick([], "cpu") == "foreach"
    assert pick(["--train.adamw", "fused"], "cpu") == "fused"  # an explicit choice is kept

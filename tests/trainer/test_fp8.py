"""Float8 conversion (``--fp8.enabled``): which layers are converted, how each recipe configures torchao, and that a
float8 step computes what the full-precision step computes, to float8's accuracy. torchao's float8 matmuls run on
CPU (emulated), so this runs here; speed and the loss over hundreds of steps are checked on GPUs (bench/fp8_loss.py, bench/convergence.py)."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
from torchao.float8 import Float8LinearConfig  # the dev dependency group pins torchao
from torchao.float8.config import ScalingGranularity, ScalingType
from torchao.float8.float8_linear import Float8Linear

from fsdp_trainer.config import Fp8Config, ModelConfig
from fsdp_trainer.converters.float8 import convert_to_fp8
from fsdp_trainer.model import CausalLMWithLoss, LossHead, build_hf_config, init_weights_, meta_model, reset_rotary_

pytestmark = pytest.mark.timeout(120)


def _wrapper(seed: int = 1) -> CausalLMWithLoss:
    lm = meta_model(build_hf_config(ModelConfig(preset="tiny-gqa")))
    lm.to_empty(device="cpu")
    init_weights_(lm, 0.02, seed=seed)
    reset_rotary_(lm, "cpu")
    return CausalLMWithLoss(lm, loss_chunk_tokens=24)


def _torchao_config(wrapper: CausalLMWithLoss) -> Float8LinearConfig:
    configs = {id(m.config): m.config for m in wrapper.modules() if isinstance(m, Float8Linear)}
    assert len(configs) == 1, "every converted layer shares the run's one config"
    return next(iter(configs.values()))


@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise"])
def test_converts_the_decoders_eligible_linears_and_keeps_the_head(recipe):
    wrapper = _wrapper()
    keys = list(wrapper.state_dict())
    convert_to_fp8(wrapper, Fp8Config(enabled=True, recipe=recipe))
    converted = sorted(n for n, m in wrapper.named_modules() if isinstance(m, Float8Linear))
    # tiny-gqa: the attention projections (64 -> 64, 64 -> 32) qualify; the MLP's 172-wide layers do not (float8
    # matmuls need both dimensions divisible by 16) and stay nn.Linear, as does the loss head.
    assert converted == sorted(f"lm.model.layers.{i}.self_attn.{p}_proj" for i in range(2) for p in "qkvo")
    mlp = wrapper.lm.model.layers[0].mlp
    assert type(mlp.gate_proj) is nn.Linear and type(mlp.down_proj) is nn.Linear
    assert type(wrapper.lm.lm_head) is LossHead
    assert list(wrapper.state_dict()) == keys, "checkpoints and Hugging Face exports keep their keys"


def test_each_recipe_configures_torchao_as_named():
    tensorwise = _wrapper()
    convert_to_fp8(tensorwise, Fp8Config(enabled=True, all_gather=True))
    config = _torchao_config(tensorwise)
    assert config.enable_fsdp_float8_all_gather
    assert config.cast_config_weight.scaling_granularity is ScalingGranularity.TENSORWISE

    rowwise = _wrapper()
    convert_to_fp8(rowwise, Fp8Config(enabled=True, recipe="rowwise"))
    config = _torchao_config(rowwise)
    assert config.cast_config_input.scaling_granularity is ScalingGranularity.AXISWISE
    assert config.cast_config_input_for_grad_weight.scaling_type is ScalingType.DYNAMIC


def _step(wrapper: CausalLMWithLoss, ids: torch.Tensor) -> tuple[float, dict[str, torch.Tensor]]:
    loss_sum, count = wrapper(ids[:, :-1], ids[:, 1:])
    (loss_sum / count).backward()
    return (loss_sum / count).item(), {n: p.grad.clone() for n, p in wrapper.named_parameters()}


@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise"])
def test_a_float8_step_tracks_the_full_precision_step(recipe):
    ids = torch.randint(0, 512, (2, 65), generator=torch.Generator().manual_seed(3))
    loss_ref, grads_ref = _step(_wrapper(), ids)
    fp8 = _wrapper()
    convert_to_fp8(fp8, Fp8Config(enabled=True, recipe=recipe))
    loss, grads = _step(fp8, ids)
    assert loss == pytest.approx(loss_ref, rel=2e-3)
    assert grads.keys() == grads_ref.keys()
    for name, ref in grads_ref.items():
        cosine = torch.nn.functional.cosine_similarity(grads[name].flatten(), ref.flatten(), dim=0).item()
        assert cosine > 0.98, f"{name}: gradient direction off by float8 more than expected (cosine {cosine:.4f})"
    # Rounding happened: the converted projections' gradients are not bit-equal to full precision.
    q = "lm.model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(grads[q], grads_ref[q])

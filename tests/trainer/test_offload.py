"""ac.offload_layers (converters/activation_offload.py): saved activations of the first blocks held on the host, fetched back ahead."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from fsdp_trainer.config import ModelConfig, load_config
from fsdp_trainer.converters import enabled
from fsdp_trainer.converters.activation_offload import ActivationOffload, ActivationOffloadConverter
from fsdp_trainer.errors import ConfigError
from fsdp_trainer.model import CausalLMWithLoss, build_hf_config, init_weights_, meta_model, reset_rotary_

pytestmark = pytest.mark.timeout(240)


def _tiny(device: torch.device, dtype: torch.dtype = torch.float32, layers: int = 6) -> CausalLMWithLoss:
    hf_config = build_hf_config(ModelConfig(preset="tiny"))
    hf_config.num_hidden_layers = layers
    lm = meta_model(hf_config)
    lm.to_empty(device=device)
    reset_rotary_(lm, device)
    model = CausalLMWithLoss(lm, loss_chunk_tokens=64)
    init_weights_(model, 0.02, seed=0)
    return model.to(dtype)


def _grads(model: nn.Module, ids: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    loss, _ = model(ids[:, :-1], ids[:, 1:])
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


def _check_same_gradients(
    device: torch.device, compile_blocks: bool = False, dtype: torch.dtype = torch.float32
) -> ActivationOffload:
    model = _tiny(device, dtype)
    blocks = model.lm.model.layers
    if compile_blocks:
        for i, block in enumerate(blocks):
            blocks[i] = torch.compile(block)
    ids = torch.randint(0, model.lm.config.vocab_size, (2, 65), generator=torch.Generator().manual_seed(1)).to(device)
    loss0, grads0 = _grads(model, ids)
    offload = ActivationOffload(2, len(blocks), min_bytes=0)
    offload.install(blocks)
    for _ in range(2):  # the second step reuses the host buffers
        loss1, grads1 = _grads(model, ids)
        assert torch.equal(loss0, loss1)
        for name, g in grads0.items():
            assert torch.equal(g, grads1[name]), name
    return offload


def test_offloaded_blocks_give_the_same_gradients_bit_for_bit():
    offload = _check_same_gradients(torch.device("cpu"))
    assert offload.offloaded_bytes > 0
    assert set(offload.blocks) == {0, 1}
    for state in offload.blocks.values():
        assert state.saved and state.fetched
        assert all(s.host.device.type == "cpu" and s.gpu is not None for s in state.saved)


def test_parameters_and_small_tensors_stay_where_they_are():
    model = _tiny(torch.device("cpu"))
    blocks = model.lm.model.layers
    offload = ActivationOffload(1, len(blocks), min_bytes=0)
    offload.install(blocks)
    shapes = {tuple(p.shape) for p in blocks[0].parameters()}
    model(torch.zeros(1, 33, dtype=torch.long), torch.zeros(1, 33, dtype=torch.long))
    offloaded = [tuple(s.host.shape) for s in offload.blocks[0].saved]
    assert offloaded and not shapes & set(offloaded)  # weights are saved for backward too, but kept
    assert offload.kept > 0
    big = ActivationOffload(1, len(blocks), min_bytes=1 << 40)
    model2 = _tiny(torch.device("cpu"))
    big.install(model2.lm.model.layers)
    model2(torch.zeros(1, 33, dtype=torch.long), torch.zeros(1, 33, dtype=torch.long))
    assert big.blocks[0].saved == [] and big.offloaded_bytes == 0


def test_blocks_come_back_ahead_of_their_backward():
    """Blocks 0-1 offloaded of 6: D = 2, so block 3's backward fetches block 1 and block 2's fetches block 0."""
    model = _tiny(torch.device("cpu"))
    blocks = model.lm.model.layers
    offload = ActivationOffload(2, len(blocks), min_bytes=0)
    assert offload.distance == 2
    events: list[tuple[str, int]] = []
    fetch, prefetch = offload._fetch, offload._prefetch
    offload._fetch = lambda saved: (events.append(("fetch", saved.block)), fetch(saved))[1]
    offload._prefetch = lambda block: (events.append(("backward", block)), prefetch(block))[1]
    offload.install(blocks)
    ids = torch.randint(0, 100, (1, 33))
    loss, _ = model(ids, ids)
    loss.backward()
    order = [e for i, e in enumerate(events) if i == 0 or e != events[i - 1]]
    first_fetch = {b: order.index(("fetch", b)) for b in (0, 1)}
    first_backward = {b: order.index(("backward", b)) for b in range(4)}
    assert first_backward[3] < first_fetch[1] < first_backward[2] < first_fetch[0] < first_backward[1]


def test_compiled_blocks_offload_what_their_compiled_backward_keeps():
    offload = _check_same_gradients(torch.device("cpu"), compile_blocks=True)
    assert offload.offloaded_bytes > 0


def test_offload_counts_are_checked():
    with pytest.raises(ValueError, match="offload at least one and leave at least one"):
        ActivationOffload(4, 4)
    cfg = load_config(None, ["--ac.offload_layers", "9"])
    with pytest.raises(
        ConfigError, match=r"--ac.offload_layers: 9 is not below the model's \d+ decoder blocks; use 1 to"
    ):
        ActivationOffloadConverter(cfg, torch.device("cuda"), None).convert(_tiny(torch.device("cpu")))
    assert "activation_offload" not in enabled(load_config(None, []), "cuda"), "off unless asked for"
    assert "activation_offload" in enabled(cfg, "cuda")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="pinned host memory and a side stream need CUDA")
def test_offload_on_cuda_gives_the_same_gradients_bit_for_bit():
    offload = _check_same_gradients(torch.device("cuda"), dtype=torch.bfloat16)
    assert all(s.host.is_pinned() and s.ready is not None for st in offload.blocks.values() for s in st.saved)

"""The trainer's estimate model beyond ``--auto``: where memory goes, the speed model against measured MFUs, FSDP's
collectives and a step's time; and that all of it imports without torch (``fsdp-sdk estimate`` runs without it)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fsdp_trainer import autotune
from fsdp_trainer.autotune import (
    GiB,
    Links,
    Shape,
    collective_seconds,
    collectives,
    estimate_peak_bytes,
    measured_mfu,
    memory_breakdown,
    modelled_mfu,
    step_time,
)
from fsdp_trainer.presets import PRESETS

L7, L8 = Shape.from_config(PRESETS["llama2-7b"]()), Shape.from_config(PRESETS["llama3.1-8b"]())
L70 = Shape.from_config(PRESETS["llama2-70b"]())


def test_the_model_imports_without_torch():
    code = (
        "import sys, fsdp_trainer, fsdp_trainer.autotune, fsdp_trainer.presets, fsdp_trainer.flops;"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers', 'numpy', 'yaml')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"ac_mode": "full"},
        {"grad_accum_steps": 2},
        {"master_weights": True, "master_bytes": 4},
        {"reshard_after_forward": False},
        {"cpu_offload": True},
        {"param_bytes": 4},
    ],
)
def test_the_breakdown_is_the_peak(kw):
    args = {"shard_degree": 8, "compiled": True, "ac_mode": "none", **kw}
    b = memory_breakdown(L8, 4096, 2, **args)
    assert b.peak == estimate_peak_bytes(L8, 4096, 2, **args) == int(max(b.forward_peak, b.step_peak))
    sharded = b.parameters + b.gradients + b.optimizer
    assert sharded == (0 if kw.get("cpu_offload") else pytest.approx(16 * L8.params / 8))
    assert b.peak_phase == ("forward/backward" if b.forward_peak >= b.step_peak else "optimizer step")


def test_fp32_compute_keeps_fp32_activations():
    bf16 = memory_breakdown(L7, 4096, 1, shard_degree=8, compiled=False, ac_mode="none")
    fp32 = memory_breakdown(L7, 4096, 1, shard_degree=8, compiled=False, ac_mode="none", param_bytes=4)
    assert fp32.activations == pytest.approx(2 * bf16.activations)
    assert fp32.gathered > bf16.gathered


# MFU measured on 2 x H200 by the trainer at its current defaults (FSDP2, seq 4096, bf16): (shape, micro batch,
# compiled, ac recompute share, compile.memory_budget, measured MFU, record under bench/results/).
MEASURED_MFU = [
    (L8, 5, True, 0.0, 0.7, 0.594, "2026-12-01-s13-callA-h200x2.json 8b-auto"),
    (L8, 6, True, 0.0, 0.7, 0.609, "2026-11-30-s10-callD-h200x2.json 8b-...-mb6-...-budget7"),
    (L7, 6, True, 0.0, 0.7, 0.608, "2026-12-01-s13-callA-h200x2.json fsdp2-noac-mb6-...-budget7"),
    (L7, 3, True, 0.0, 1.0, 0.573, "2026-11-30-s5-callE-h200x2.json fsdp2-noac-mb3-compile"),
    (L7, 4, True, 0.0, 1.0, 0.595, "2026-11-30-s7-callC-h200x2.json fsdp2-noac-mb4-compile"),
    (L8, 3, True, 0.0, 0.7, 0.581, "2026-11-30-s7-callB-h200x2.json 8b-...-mb3-...-budget7"),
]
# Eager runs (fused kernels) and activation checkpointing, measured before the Triton AdamW and master weights.
MEASURED_MFU_OLDER = [
    (L7, 1, False, 0.0, 1.0, 0.424, "2026-11-30-s3-callC-h200x2.json fsdp2-noac-mb1"),
    (L7, 2, False, 0.0, 1.0, 0.495, "2026-11-30-s3-callC-h200x2.json fsdp2-noac-mb2"),
    (L7, 1, False, 1.0, 1.0, 0.350, "2026-11-30-s3-callC-h200x2.json fsdp2-ac-mb1"),
    (L7, 2, False, 1.0, 1.0, 0.403, "2026-11-30-s3-callC-h200x2.json fsdp2-ac-mb2"),
]


@pytest.mark.parametrize(
    "table, tolerance", [(MEASURED_MFU, 0.03), (MEASURED_MFU_OLDER, 0.08)], ids=["current", "older"]
)
def test_the_speed_model_reproduces_measured_mfu(table, tolerance):
    reference, exact = measured_mfu("H200")
    assert exact and reference.mfu == 0.594
    for _shape, mb, compiled, recompute, budget, measured, record in table:
        model = modelled_mfu(reference, ac_recompute=recompute, micro_batch=mb, compiled=compiled, memory_budget=budget)
        assert model == pytest.approx(measured, rel=tolerance), record
    # the checkpointing penalty: full checkpointing ran at 0.813-0.825 of the speed without (eager, micro batch 1-2)
    for mb in (1, 2):
        full = modelled_mfu(reference, ac_recompute=1.0, micro_batch=mb, compiled=False)
        none = modelled_mfu(reference, ac_recompute=0.0, micro_batch=mb, compiled=False)
        assert 0.80 < full / none < 0.84


def test_gpu_models_without_a_measurement_borrow_one():
    borrowed, exact = measured_mfu("A100")
    assert not exact and borrowed.gpu_model == "H200" and not borrowed.fp8
    fp8, exact = measured_mfu("H200", fp8=True)
    assert exact and fp8.fp8 and fp8.mfu == 0.414


def _by(comms, kind, phase=None):
    found = [c for c in comms if c.kind == kind and (phase is None or c.phase == phase)]
    assert len(found) <= 1
    return found[0] if found else None


def test_collective_volumes_of_each_strategy():
    p = L70.params
    full = collectives(L70, sharding="full_shard", nodes=2, gpus_per_node=8, shard_degree=16)
    ag = _by(full, "all-gather", "forward")
    assert (ag.ranks, ag.nodes, ag.ranks_per_node) == (16, 2, 8)
    assert ag.bytes == pytest.approx(15 / 16 * 2 * p) and ag.calls == L70.layers + 2
    assert _by(full, "all-gather", "backward").bytes == ag.bytes
    assert _by(full, "reduce-scatter").bytes == pytest.approx(15 / 16 * 4 * p)
    assert _by(full, "all-reduce") is None
    # accumulation gathers per micro-batch and reduces once
    accum = collectives(L70, sharding="full_shard", nodes=2, gpus_per_node=8, shard_degree=16, micro_batches=4)
    assert _by(accum, "all-gather", "forward").bytes == pytest.approx(4 * ag.bytes)
    assert _by(accum, "reduce-scatter").bytes == _by(full, "reduce-scatter").bytes
    # shard_grad_op keeps the forward's gather for the backward; bf16 reduction halves the reduce-scatter
    sgo = collectives(
        L70, sharding="shard_grad_op", nodes=2, gpus_per_node=8, shard_degree=16, reshard_after_forward=False
    )
    assert _by(sgo, "all-gather", "backward") is None
    bf16 = collectives(L70, sharding="full_shard", nodes=2, gpus_per_node=8, shard_degree=16, reduce_bytes=2)
    assert _by(bf16, "reduce-scatter").bytes == pytest.approx(_by(full, "reduce-scatter").bytes / 2)
    # hybrid: shards within a node, then an all-reduce of each shard across the replicas (one GPU per node)
    hybrid = collectives(L70, sharding="hybrid_shard", nodes=4, gpus_per_node=8, shard_degree=8)
    assert _by(hybrid, "all-gather", "forward").nodes == 1
    ar = _by(hybrid, "all-reduce")
    assert (ar.ranks, ar.nodes, ar.ranks_per_node) == (4, 4, 1)
    assert ar.bytes == pytest.approx(2 * 3 / 4 * p / 8 * 4)
    # no_shard: whole gradients all-reduced, nothing gathered
    ddp = collectives(L7, sharding="no_shard", nodes=2, gpus_per_node=8, shard_degree=1)
    assert [c.kind for c in ddp] == ["all-reduce"] and ddp[0].bytes == pytest.approx(2 * 15 / 16 * L7.params * 4)
    # float8 all-gathers send the blocks' weights in one byte
    fp8 = collectives(L7, sharding="full_shard", nodes=1, gpus_per_node=8, shard_degree=8, fp8_all_gather=True)
    plain = collectives(L7, sharding="full_shard", nodes=1, gpus_per_node=8, shard_degree=8)
    assert _by(fp8, "all-gather", "forward").bytes < 0.6 * _by(plain, "all-gather", "forward").bytes
    assert collectives(L7, sharding="full_shard", nodes=1, gpus_per_node=1, shard_degree=1) == []


def test_collectives_run_at_their_slowest_link():
    p4de, p5 = Links.nominal(300, 400, 8), Links.nominal(450, 3200, 8)
    one_node = _by(
        collectives(L70, sharding="full_shard", nodes=1, gpus_per_node=8, shard_degree=8), "all-gather", "forward"
    )
    two_nodes = _by(
        collectives(L70, sharding="full_shard", nodes=2, gpus_per_node=8, shard_degree=16), "all-gather", "forward"
    )
    # within a node: NVLink at 80%; across p4de nodes, the node's 400 Gbit/s at 80% (a sixth of NVLink 3)
    assert collective_seconds(one_node, p4de) == pytest.approx(one_node.bytes / 240e9, rel=0.01)
    assert collective_seconds(two_nodes, p4de) == pytest.approx(two_nodes.bytes / 40e9, rel=0.01)
    # p5's 3200 Gbit/s per node is close to NVLink 4: crossing nodes costs little more
    assert collective_seconds(two_nodes, p5) < 1.2 * two_nodes.bytes / 360e9
    # hybrid's all-reduce: every GPU of a node runs its own, sharing the node's network
    ar = _by(collectives(L70, sharding="hybrid_shard", nodes=4, gpus_per_node=8, shard_degree=8), "all-reduce")
    assert collective_seconds(ar, p4de) == pytest.approx(ar.bytes / (40e9 / 8), rel=0.01)


def _step(shape, nodes, links, mb=1, ac=1.0, accum=1):
    comms = collectives(
        shape, sharding="full_shard", nodes=nodes, gpus_per_node=8, shard_degree=8 * nodes, micro_batches=accum
    )
    mfu = modelled_mfu(measured_mfu("H200")[0], ac_recompute=ac, micro_batch=mb, compiled=True)
    return step_time(
        shape, 4096, mb, grad_accum_steps=accum, peak_tflops=989, mfu=mfu, ac_recompute=ac, comms=comms, links=links
    )


def test_a_step_is_compute_plus_what_it_does_not_hide():
    p4de, p5 = Links.nominal(300, 400, 8), Links.nominal(450, 3200, 8)
    # on one node the 70B's collectives hide behind its compute: only the first and last units show
    one = _step(L70, 1, p5)
    assert one.communication < one.compute and one.exposed < 0.05 * one.seconds
    assert one.exposed == pytest.approx(one.communication / (L70.layers + 2), rel=0.05)
    # compute time is the FLOPs at the MFU (no tied lm_head here)
    tokens = 4096
    mfu = modelled_mfu(measured_mfu("H200")[0], ac_recompute=1.0, micro_batch=1, compiled=True)
    assert one.compute == pytest.approx(tokens * L70.flops_per_token(4096) / (989e12 * mfu))
    # over p4de's network the collectives outlast the backward: what exceeds it is exposed
    slow = _step(L70, 16, p4de)
    assert slow.communication > slow.forward + slow.backward and slow.exposed > 0.5 * (
        slow.communication - slow.forward - slow.backward
    )
    # weak scaling: per-GPU speed falls with nodes, faster on p5's network than on p4de's
    per_gpu = {
        name: [1 / _step(L70, n, links).seconds for n in (1, 2, 4, 16)] for name, links in (("p4de", p4de), ("p5", p5))
    }
    for values in per_gpu.values():
        assert values == sorted(values, reverse=True)
    assert per_gpu["p5"][-1] / per_gpu["p5"][0] > per_gpu["p4de"][-1] / per_gpu["p4de"][0]
    # larger micro-batches give the communication more compute to hide behind
    assert _step(L70, 16, p4de, mb=4).exposed / _step(L70, 16, p4de, mb=4).seconds < slow.exposed / slow.seconds


def test_a_tied_lm_head_is_work_the_mfu_does_not_count():
    spec = {**PRESETS["llama3.1-8b"](), "tie_word_embeddings": True}
    tied = Shape.from_config(spec)
    assert tied.work_flops_per_token(4096) - tied.flops_per_token(4096) == 6 * tied.vocab * tied.hidden
    assert L8.work_flops_per_token(4096) == L8.flops_per_token(4096)
    assert tied.params == L8.params - L8.vocab * L8.hidden
    assert autotune.GiB == GiB

"""``--auto``: the memory model against peaks measured on H200s, the choices it makes, and a CPU run."""

from __future__ import annotations

import pytest
from conftest import TINY, assert_ok, run_trainer

from fsdp_trainer.autotune import GiB, Shape, apply_auto, choose, estimate_peak_bytes
from fsdp_trainer.config import load_config
from fsdp_trainer.errors import ConfigError
from fsdp_trainer.presets import PRESETS

pytestmark = pytest.mark.timeout(120)

H200 = 143_771 * 2**20  # torch.cuda.get_device_properties(...).total_memory on the lent H200s
L7, L8 = Shape.from_config(PRESETS["llama2-7b"]()), Shape.from_config(PRESETS["llama3.1-8b"]())

# Peaks (torch.cuda.max_memory_allocated, GiB) measured on 2 x H200 with FSDP2, seq 4096, bf16, the
# checkpointed (non-fused) loss: bench/results/2026-11-30-h200x2-reference-settings-{1,2-and-peers}.json,
# -compiled-micro-batches-and-fp8.json and -scaling-1-to-2-gpus.json.
MEASURED = [
    (L7, 2, 2, True, "none", 2, 71.8),
    (L7, 2, 3, True, "none", 2, 88.2),
    (L7, 2, 1, False, "none", 2, 62.9),
    (L7, 2, 2, False, "none", 2, 86.1),
    (L7, 2, 1, False, "full", 2, 52.3),
    (L7, 2, 2, False, "full", 2, 53.3),
    (L8, 2, 2, True, "none", 2, 84.6),
    (L8, 2, 3, True, "none", 2, 101.7),
    (L8, 2, 4, True, "selective", 2, 88.2),
    (L7, 1, 3, True, "none", 2, 125.8),
]


# The same with the fused loss (train.fused_loss, the default): bench/results/2026-11-30-h200x2-fused-loss-micro-batches.json,
# -lm-head-unit-fsdp1-compile-cpu-offload.json and -reference-settings-3.json.
MEASURED_FUSED = [
    (L8, 2, 3, True, "none", 2, 110.2),
    (L8, 2, 4, True, "none", 2, 128.3),
    (L7, 2, 2, True, "none", 2, 72.9),
    (L7, 2, 3, True, "none", 2, 89.1),
    (L7, 2, 4, True, "none", 2, 105.4),
    (L7, 2, 1, False, "none", 2, 63.5),
    (L7, 2, 2, False, "none", 2, 87.1),
    (L7, 2, 1, False, "full", 2, 52.1),
    (L7, 2, 2, False, "full", 2, 53.1),
]


# Fused loss and fused kernels (model.fused_kernels, the default): bench/results/2026-11-30-h200x2-fused-kernels.json and
# -triton-adamw-default.json.
MEASURED_FUSED_KERNELS = [
    (L7, 2, 1, False, "none", 2, 58.7),
    (L7, 2, 2, False, "none", 2, 78.3),
    (L7, 2, 1, False, "full", 2, 51.9),
    (L7, 2, 2, False, "full", 2, 52.7),
    (L7, 2, 3, True, "none", 2, 88.8),
    (L8, 2, 3, True, "none", 2, 110.0),
]


@pytest.mark.parametrize(
    "measured, fused_loss, fused_kernels",
    [(MEASURED, False, False), (MEASURED_FUSED, True, False), (MEASURED_FUSED_KERNELS, True, True)],
)
def test_memory_model_within_6_percent_of_measured_peaks(measured, fused_loss, fused_kernels):
    for shape, gpus, mb, compiled, ac, every, measured_gib in measured:
        est = (
            estimate_peak_bytes(
                shape,
                4096,
                mb,
                shard_degree=gpus,
                compiled=compiled,
                ac_mode=ac,
                ac_every=every,
                fused_loss=fused_loss,
                fused_kernels=fused_kernels,
            )
            / GiB
        )
        assert est == pytest.approx(measured_gib, rel=0.06), (shape, gpus, mb, compiled, ac)


def test_memory_model_with_master_weights():
    """bf16 parameters beside whole fp32 masters (how precision.master_weights optimizer first kept them): 2 more bytes
    per sharded parameter while activations peak. Compiled, no AC, micro batch 3, 2 x H200:
    bench/results/2026-11-30-h200x2-8b-master-weights.json."""
    for shape, measured_gib, params_mode_gib in ((L7, 95.1, 88.8), (L8, 117.5, 110.0)):
        est = (
            estimate_peak_bytes(
                shape, 4096, 3, shard_degree=2, compiled=True, ac_mode="none", master_weights=True, master_bytes=4
            )
            / GiB
        )
        assert est == pytest.approx(measured_gib, rel=0.06), shape
        plain = estimate_peak_bytes(shape, 4096, 3, shard_degree=2, compiled=True, ac_mode="none") / GiB
        assert est - plain == pytest.approx(measured_gib - params_mode_gib, rel=0.2)
    # 16-bit remainders instead: bf16 parameter + remainder take what an fp32 parameter took. The 8B at micro batch 5,
    # budget 0.7, bf16 reduction: 118.8 GiB with fp32 masters, 111.3 with remainders
    # (bench/results/2026-11-30-h200x2-8b-16-bit-remainders.json)
    for master_bytes, measured_gib in ((4, 118.8), (2, 111.3)):
        est = (
            estimate_peak_bytes(
                L8,
                4096,
                5,
                shard_degree=2,
                compiled=True,
                ac_mode="none",
                master_weights=True,
                memory_budget=0.7,
                reduce_bytes=2,
                master_bytes=master_bytes,
            )
            / GiB
        )
        assert est == pytest.approx(measured_gib, rel=0.03), master_bytes
    assert estimate_peak_bytes(
        L8, 4096, 3, shard_degree=2, compiled=True, ac_mode="none", master_weights=True
    ) == estimate_peak_bytes(L8, 4096, 3, shard_degree=2, compiled=True, ac_mode="none")
    # no masters when gradients accumulate (they would add up in bf16): the estimate does not charge for them
    assert estimate_peak_bytes(
        L8, 4096, 2, shard_degree=2, compiled=True, ac_mode="none", grad_accum_steps=2, master_weights=True
    ) == estimate_peak_bytes(L8, 4096, 2, shard_degree=2, compiled=True, ac_mode="none", grad_accum_steps=2)


def test_memory_model_with_a_memory_budget():
    """compile.memory_budget 0.7 (norms and SiLU(gate)*up recomputed in backward), master weights (whole fp32 copies
    then), 2 x H200: bench/results/2026-11-30-h200x2-8b-memory-budget-{1,2}.json."""
    for shape, mb, measured_gib in ((L8, 3, 96.5), (L8, 4, 108.1), (L8, 5, 119.7), (L7, 6, 116.2), (L7, 7, 127.9)):
        est = (
            estimate_peak_bytes(
                shape,
                4096,
                mb,
                shard_degree=2,
                compiled=True,
                ac_mode="none",
                master_weights=True,
                memory_budget=0.7,
                master_bytes=4,
            )
            / GiB
        )
        assert est == pytest.approx(measured_gib, rel=0.06), (shape, mb)
    # bf16 gradient reduction and symmetric buffers (reduce_bytes 2), and --auto's own run of the 8B (fp32 reduction):
    # bench/results/2026-11-30-h200x2-7b-bf16-and-fp8-micro-batches.json and -speed-suite-1.json; with 16-bit master
    # remainders, the 8B at micro batch 6 (-8b-16-bit-remainders.json)
    for shape, mb, reduce_bytes, master_bytes, measured_gib in (
        (L8, 5, 2, 4, 118.8),
        (L7, 5, 2, 4, 104.2),
        (L7, 6, 2, 4, 115.9),
        (L7, 7, 2, 4, 127.7),
        (L8, 4, 4, 4, 107.1),
        (L8, 6, 2, 2, 122.9),
    ):
        est = (
            estimate_peak_bytes(
                shape,
                4096,
                mb,
                shard_degree=2,
                compiled=True,
                ac_mode="none",
                master_weights=True,
                memory_budget=0.7,
                reduce_bytes=reduce_bytes,
                master_bytes=master_bytes,
            )
            / GiB
        )
        assert est == pytest.approx(measured_gib, rel=0.06), (shape, mb, reduce_bytes)
    # FP8 (fp32 parameters, FP8 all-gather), Llama-2-7B: default budget with bf16 reduction and symmetric buffers
    # and fp32 reduction (bench/results/2026-11-30-h200x2-7b-bf16-and-fp8-micro-batches.json), and the lean budget
    # (-7b-memory-budget-bf16-and-fp8.json)
    for mb, budget, reduce_bytes, measured_gib in (
        (4, 1.0, 2, 90.3),
        (5, 1.0, 2, 102.0),
        (6, 1.0, 2, 113.7),
        (7, 1.0, 2, 125.4),
        (4, 1.0, 4, 90.5),
        (6, 0.7, 4, 90.9),
        (8, 0.7, 4, 107.1),
    ):
        est = (
            estimate_peak_bytes(
                L7,
                4096,
                mb,
                shard_degree=2,
                compiled=True,
                ac_mode="none",
                memory_budget=budget,
                reduce_bytes=reduce_bytes,
                fp8=True,
            )
            / GiB
        )
        assert est == pytest.approx(measured_gib, rel=0.06), (mb, budget)
    # a budget below 1 changes nothing without compile (eager keeps what autograd saves)
    assert estimate_peak_bytes(
        L8, 4096, 2, shard_degree=2, compiled=False, ac_mode="none", memory_budget=0.7
    ) == estimate_peak_bytes(L8, 4096, 2, shard_degree=2, compiled=False, ac_mode="none")


def test_memory_model_without_resharding():
    """Blocks kept gathered from forward to backward (parallel.reshard_after_forward false), Llama-3.1-8B compiled, 2 x H200."""
    for mb, measured_gib in (
        (2, 104.1),
        (3, 122.8),
    ):  # bench/results/2026-11-30-h200x2-8b-nccl-ctas-and-resharding.json, -reference-settings-4.json
        est = (
            estimate_peak_bytes(
                L8, 4096, mb, shard_degree=2, compiled=True, ac_mode="none", reshard_after_forward=False
            )
            / GiB
        )
        assert est == pytest.approx(measured_gib, rel=0.06), mb


@pytest.mark.parametrize("preset", ["llama3.1-8b", "tiny-gqa"])
def test_shape_matches_the_built_model(preset):
    from fsdp_trainer.config import ModelConfig
    from fsdp_trainer.model import build_hf_config, meta_model

    hf = build_hf_config(ModelConfig(preset=preset))
    lm = meta_model(hf)
    shape = Shape.from_config(hf)
    assert shape.params == sum(p.numel() for p in lm.parameters())
    assert shape.block_params == sum(p.numel() for p in lm.model.layers[0].parameters())
    assert shape.kv_dim == lm.model.layers[0].self_attn.k_proj.out_features


def _choose(shape, gpus, **kw):
    args = dict(
        device_bytes=H200,
        memory_fraction=0.85,
        shard_degree=gpus,
        compiled=True,
        fixed_batch=None,
        fixed_micro_batch=None,
        ac_fixed=None,
        loss_chunk_tokens=4096,
        fused_loss=True,
        cpu_offload=False,
    )
    args.update(kw)
    return choose(shape, 4096, **args)


def test_choices_on_h200s():
    best, considered = _choose(L8, 2)
    # Measured fastest on 2 x H200: no AC, micro batch 3 (110 GiB); micro batch 4 (128 GiB) was 18% slower.
    assert (best.ac_mode, best.micro_batch_size) == ("none", 3)
    assert _choose(L7, 2)[0].micro_batch_size == 4  # measured fastest for Llama-2-7B (105 GiB)
    # with master weights (auto on GPUs) the same settings still fit
    assert (
        _choose(L8, 2, master_weights=True)[0].micro_batch_size,
        _choose(L7, 2, master_weights=True)[0].micro_batch_size,
    ) == (3, 4)
    assert best.peak_bytes <= 0.85 * H200
    assert all(c.speed <= considered[0].speed for c in considered)
    # 70B: the fp32 state alone (16 bytes x 70.6B / 8) fills 8 H200s; 16 fit with full checkpointing.
    assert _choose(Shape.from_config(PRESETS["llama3.1-70b"]()), 8)[0] is None
    big = _choose(Shape.from_config(PRESETS["llama3.1-70b"]()), 16)[0]
    assert big is not None and big.ac_mode != "none"
    # With the lean memory budget as a candidate (what --auto offers compiled runs): the 8B takes micro batch 5 at
    # 0.7 (114 GiB estimated, 111.3 measured), measured 1.45% faster than 4 (11,509 against 11,344,
    # bench/reports/2026-11-30-llama3.1-8b-h200x2-memory-budget.md);
    # 6 (125.6 GiB estimated) is over the 85% line;
    # the 7B a micro batch of 5 or 6 at 0.7 (micro batch 6: 13,127 against 12,772 at 4 with the default budget).
    lean8 = _choose(L8, 2, master_weights=True, memory_budgets=(1.0, 0.7))[0]
    assert (lean8.micro_batch_size, lean8.memory_budget, lean8.ac_mode) == (5, 0.7, "none")
    assert "memory_budget=0.7" in lean8.describe()
    lean7 = _choose(L7, 2, master_weights=True, memory_budgets=(1.0, 0.7))[0]
    assert lean7.micro_batch_size in (5, 6) and lean7.memory_budget == 0.7
    # the budget applies to compiled blocks without checkpointing only
    assert all(c.memory_budget == 1.0 for c in _choose(L8, 2, memory_budgets=(1.0, 0.7))[1] if c.ac_mode != "none")
    assert all(c.memory_budget == 1.0 for c in _choose(L8, 2, compiled=False, memory_budgets=(1.0, 0.7))[1])


def test_a_fixed_batch_is_split_not_changed():
    best, _ = _choose(L8, 2, fixed_batch=8)
    assert best.micro_batch_size * best.grad_accum_steps == 8 and best.micro_batch_size in (1, 2, 4, 8)
    best, _ = _choose(L8, 2, fixed_micro_batch=1, ac_fixed=("full", 1))
    assert (best.micro_batch_size, best.ac_mode) == (1, "full")


def test_accumulation_and_resharding_cost_memory():
    base = estimate_peak_bytes(L8, 4096, 2, shard_degree=8, compiled=True, ac_mode="none")
    accum = estimate_peak_bytes(L8, 4096, 2, shard_degree=8, compiled=True, ac_mode="none", grad_accum_steps=2)
    assert accum - base == 4 * L8.params  # unsharded fp32 gradients kept between micro-steps
    kept = estimate_peak_bytes(L8, 4096, 2, shard_degree=8, compiled=True, ac_mode="none", reshard_after_forward=False)
    assert kept - base == 2 * (L8.layers - 3) * L8.block_params  # every block stays gathered (shard_grad_op)


def test_shard_degree_follows_the_mesh():
    from fsdp_trainer.autotune import shard_degree

    def degree(*flags, world=16, local=8):
        return shard_degree(load_config(None, list(flags)), world, local)

    assert degree() == 16
    assert degree("--parallel.sharding", "hybrid_shard") == 8  # one node's GPUs, the default shard group
    assert degree("--parallel.sharding", "hybrid_shard", "--parallel.replicate_size", "4") == 4
    assert degree("--parallel.sharding", "no_shard") == 1


def test_apply_auto_keeps_explicit_settings_and_refuses_what_cannot_fit():
    from fsdp_trainer.model import build_hf_config

    cfg = load_config(
        None,
        [
            "--model.preset",
            "llama3.1-8b",
            "--data.seq_len",
            "4096",
            "--ac.mode",
            "full",
            "--train.grad_accum_steps",
            "4",
        ],
    )
    record = apply_auto(
        cfg, build_hf_config(cfg.model), world_size=2, local_world_size=2, device_bytes=H200, on_gpu=True
    )
    assert cfg.activation_checkpointing.mode == "full"
    assert cfg.train.micro_batch_size * cfg.train.grad_accum_steps == 4
    assert cfg.compile.enabled and cfg.compile.loss
    assert record["kept"] == ["ac.mode", "per-rank batch 4 (micro_batch_size x grad_accum_steps)"]
    assert record["global_batch_sequences"] == 8

    cfg = load_config(
        None,
        ["--model.preset", "llama3.1-8b", "--data.seq_len", "4096", "--ac.every", "3", "--compile.memory_budget", "1"],
    )
    # 4 x 54 GiB (85%: 45.9 GiB): no checkpointing (49 GiB at micro batch 1) does not fit; the given ac.every stays.
    record = apply_auto(
        cfg, build_hf_config(cfg.model), world_size=4, local_world_size=4, device_bytes=54 * GiB, on_gpu=True
    )
    assert cfg.activation_checkpointing.mode in ("selective", "full") and cfg.activation_checkpointing.every == 3
    assert record["kept"] == ["ac.every", "compile.memory_budget"]

    # masters as 16-bit remainders cost what fp32 parameters cost: where micro batch 3 just fits without them, it
    # fits with them; as whole fp32 copies apply_auto had to step down to 2
    def chosen(master):
        cfg = load_config(
            None, ["--model.preset", "llama3.1-8b", "--data.seq_len", "4096", "--compile.memory_budget", "1"]
        )
        apply_auto(
            cfg,
            build_hf_config(cfg.model),
            world_size=2,
            local_world_size=2,
            device_bytes=int(110 * GiB / 0.85),
            on_gpu=True,
            master_weights=master,
        )
        return cfg.train.micro_batch_size

    assert (chosen(False), chosen(True)) == (3, 3)

    # --auto picks the memory budget with the micro batch, and keeps one given
    cfg = load_config(None, ["--model.preset", "llama3.1-8b", "--data.seq_len", "4096"])
    record = apply_auto(
        cfg,
        build_hf_config(cfg.model),
        world_size=2,
        local_world_size=2,
        device_bytes=H200,
        on_gpu=True,
        master_weights=True,
    )
    assert (cfg.train.micro_batch_size, cfg.compile.memory_budget) == (5, 0.7) and record["chosen"].endswith(
        "memory_budget=0.7"
    )
    assert "comm_buffers" not in record and cfg.experimental.symmetric_memory is False, "experiments are not chosen"
    cfg = load_config(None, ["--model.preset", "llama3.1-8b", "--data.seq_len", "4096", "--compile.memory_budget", "1"])
    record = apply_auto(
        cfg,
        build_hf_config(cfg.model),
        world_size=2,
        local_world_size=2,
        device_bytes=H200,
        on_gpu=True,
        master_weights=True,
    )
    assert (cfg.train.micro_batch_size, cfg.compile.memory_budget) == (3, 1.0) and "compile.memory_budget" in record[
        "kept"
    ]

    # FP8 (fp32 parameters, no masters): the default budget only, and the largest micro batch under the 85% line, 6:
    # measured fastest (18,079 tokens/s/GPU at 113.7 GiB; micro batch 7 at 125.4 GiB fell to 12,867)
    cfg = load_config(
        None,
        ["--model.preset", "llama2-7b", "--data.seq_len", "4096", "--fp8.enabled", "true", "--fp8.all_gather", "true"],
    )
    record = apply_auto(
        cfg, build_hf_config(cfg.model), world_size=2, local_world_size=2, device_bytes=H200, on_gpu=True
    )
    assert (cfg.train.micro_batch_size, cfg.compile.memory_budget, cfg.activation_checkpointing.mode) == (
        6,
        1.0,
        "none",
    ), record

    cfg = load_config(None, ["--model.preset", "llama3.1-70b", "--data.seq_len", "4096"])
    with pytest.raises(ConfigError) as err:
        apply_auto(cfg, build_hf_config(cfg.model), world_size=8, local_world_size=8, device_bytes=H200, on_gpu=True)
    message = str(err.value)
    assert (
        message.startswith("--auto: nothing fits on 8 x 140.4 GiB (GPUs)") and "--parallel.cpu_offload true" in message
    )
    assert "\n" not in message


def test_auto_run_on_cpu(tmp_path):
    run = run_trainer(
        [*TINY, "--auto", "--train.steps", "3", "--checkpoint.enabled", "false"], tmp_path / "out", nproc=2
    )
    assert_ok(run)
    summary = run.summary
    assert summary["auto"]["chosen"].startswith("micro_batch_size=") and "compile=off" in summary["auto"]["chosen"]
    assert summary["config"]["compile"]["enabled"] is False
    mb = summary["config"]["train"]["micro_batch_size"]
    assert summary["tokens_processed"] == 3 * 2 * mb * 64
    assert "auto: micro_batch_size=" in run.stderr

"""Loss parity: sharded runs on 2 (or 4) processes match one process on the same global batch.

Every run trains the same tiny fp32 Llama for 5 steps on the same 4-sequence global
batches (2 ranks x micro batch 2, 2 ranks x 1 x 2 accumulation steps, or 4 ranks x 1),
so FSDP1 and FSDP2 under every sharding strategy must reproduce the single-process
reference (``parallel.api=none``, micro batch 4) to float rounding: the loss and the
gradient norm of every step. Clipping is effectively off (``max_grad_norm`` 1e9; the tiny
model's norm is about 1.7): a clipped update has the same size whatever the gradient's
scale, so a wrongly scaled gradient would show in neither losses nor updates.
"""

from __future__ import annotations

import json

import pytest
from conftest import TINY, assert_ok, run_trainer

pytestmark = pytest.mark.timeout(240)

STEPS = 5
SEQ = 64


@pytest.fixture(scope="module")
def common(bpe_tokenizer_dir, corpus_file) -> list[str]:
    return [
        *TINY,
        "--model.tokenizer",
        str(bpe_tokenizer_dir),
        "--data.path",
        str(corpus_file),
        "--train.steps",
        str(STEPS),
        "--checkpoint.enabled",
        "false",
        "--train.max_grad_norm",
        "1e9",
    ]


@pytest.fixture(scope="module")
def reference_run(common, tmp_path_factory):
    run = run_trainer(
        [*common, "--parallel.api", "none", "--train.micro_batch_size", "4"], tmp_path_factory.mktemp("ref") / "out"
    )
    assert_ok(run)
    losses = run.losses()
    assert sorted(losses) == list(range(1, STEPS + 1))
    assert losses[STEPS] < losses[1], "the reference did not learn"
    assert any(r["grad_norm"] > 1.0 for r in run.records), "max_grad_norm 1.0 would have clipped some of these steps"
    return run


@pytest.fixture(scope="module")
def reference(reference_run) -> dict[int, float]:
    return reference_run.losses()


@pytest.fixture(scope="module")
def reference_grad_norms(reference_run) -> dict[int, float]:
    return {r["step"]: r["grad_norm"] for r in reference_run.records}


CASES = {
    # name: (processes, flags)
    "fsdp2-full_shard": (2, ["--parallel.api", "fsdp2", "--parallel.sharding", "full_shard"]),
    "fsdp2-shard_grad_op": (2, ["--parallel.api", "fsdp2", "--parallel.sharding", "shard_grad_op"]),
    "fsdp2-no_shard": (2, ["--parallel.api", "fsdp2", "--parallel.sharding", "no_shard"]),
    "fsdp2-hybrid_2x1": (
        2,
        ["--parallel.api", "fsdp2", "--parallel.sharding", "hybrid_shard", "--parallel.shard_size", "1"],
    ),
    "fsdp1-full_shard": (2, ["--parallel.api", "fsdp1", "--parallel.sharding", "full_shard"]),
    "fsdp1-shard_grad_op": (2, ["--parallel.api", "fsdp1", "--parallel.sharding", "shard_grad_op"]),
    "fsdp1-no_shard": (2, ["--parallel.api", "fsdp1", "--parallel.sharding", "no_shard"]),
    "fsdp1-hybrid_2x1": (
        2,
        ["--parallel.api", "fsdp1", "--parallel.sharding", "hybrid_shard", "--parallel.replicate_size", "2"],
    ),
    # Gradient accumulation (set_requires_gradient_sync / no_sync) with activation checkpointing.
    "fsdp2-accum-ac_full": (
        2,
        [
            "--parallel.api",
            "fsdp2",
            "--train.grad_accum_steps",
            "2",
            "--ac.mode",
            "full",
            "--parallel.forward_prefetch",
            "true",
        ],
    ),
    "fsdp1-accum-ac_selective": (
        2,
        ["--parallel.api", "fsdp1", "--train.grad_accum_steps", "2", "--ac.mode", "selective", "--ac.every", "2"],
    ),
    # Real HSDP: 2 replicas x 2 shards.
    "fsdp2-hybrid_2x2": (
        4,
        ["--parallel.api", "fsdp2", "--parallel.sharding", "hybrid_shard", "--parallel.shard_size", "2"],
    ),
    "fsdp1-hybrid_2x2": (
        4,
        ["--parallel.api", "fsdp1", "--parallel.sharding", "hybrid_shard", "--parallel.shard_size", "2"],
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_loss_matches_single_process(name, common, reference, reference_grad_norms, tmp_path):
    nproc, flags = CASES[name]
    accum = int(flags[flags.index("--train.grad_accum_steps") + 1]) if "--train.grad_accum_steps" in flags else 1
    micro = 4 // (nproc * accum)
    run = run_trainer([*common, *flags, "--train.micro_batch_size", str(micro)], tmp_path / "out", nproc=nproc)
    assert_ok(run)
    losses = run.losses()
    assert sorted(losses) == list(range(1, STEPS + 1))
    for step, ref in reference.items():
        assert losses[step] == pytest.approx(ref, rel=1e-4), (
            f"{name}: step {step} loss {losses[step]} vs reference {ref}"
        )
    norms = {r["step"]: r["grad_norm"] for r in run.records}
    for step, ref in reference_grad_norms.items():
        assert norms[step] == pytest.approx(ref, rel=1e-4), (
            f"{name}: step {step} grad norm {norms[step]} vs reference {ref}"
        )
    summary = run.summary
    assert summary["world_size"] == nproc and summary["steps"] == STEPS
    assert summary["tokens_processed"] == STEPS * 4 * SEQ
    assert summary["final_loss"] == losses[STEPS]
    assert (
        summary["config"]["parallel"]["api"] == flags[flags.index("--parallel.api") + 1] and summary["device"] == "cpu"
    )


LOW_PRECISION = {
    "fsdp2-bf16": ["--parallel.api", "fsdp2", "--precision.mode", "bf16"],
    "fsdp1-fp16-scaler": ["--parallel.api", "fsdp1", "--precision.mode", "fp16"],
    "fsdp2-fp16-scaler": ["--parallel.api", "fsdp2", "--precision.mode", "fp16", "--ac.mode", "full"],
}


@pytest.mark.parametrize("name", list(LOW_PRECISION))
def test_mixed_precision_tracks_fp32(name, common, reference, tmp_path):
    """bf16 / fp16 (with ShardedGradScaler) parameters and fp32 reduction stay within 1% of the fp32 losses."""
    fp16 = "fp16" in LOW_PRECISION[name]
    ckpt = ["--checkpoint.enabled", "true"] if fp16 else []
    run = run_trainer(
        [*common, *LOW_PRECISION[name], *ckpt, "--train.micro_batch_size", "2"], tmp_path / "out", nproc=2
    )
    assert_ok(run)
    for step, ref in reference.items():
        assert run.losses()[step] == pytest.approx(ref, rel=1e-2), f"{name}: step {step}"
    assert run.summary["config"]["precision"]["reduce_dtype"] == "fp32"
    assert run.summary["adamw"] == "foreach", "train.adamw auto resolves to foreach on CPU, and the summary says so"
    if fp16:  # the grad scaler's state is part of the checkpoint's train state
        train_state = json.loads(
            (tmp_path / "out" / "checkpoints" / f"step_{STEPS:08d}" / "train_state.json").read_text()
        )
        assert train_state["scaler"]["scale"] > 0 and "_growth_tracker" in train_state["scaler"], train_state.get(
            "scaler"
        )


@pytest.mark.parametrize("api", ["fsdp2", "fsdp1"])
def test_sharded_random_init_trains(api, common, reference, tmp_path):
    """Per-shard init on the device (the path big models take) gives a Llama-scaled start and learns."""
    run = run_trainer(
        [*common, "--parallel.api", api, "--model.random_init", "sharded", "--train.micro_batch_size", "2"],
        tmp_path / "out",
        nproc=2,
    )
    assert_ok(run)
    losses = run.losses()
    assert losses[1] == pytest.approx(reference[1], rel=0.02)  # near ln(vocab): std-0.02 weights
    assert losses[STEPS] < losses[1] - 0.1


@pytest.mark.parametrize("api", ["fsdp2", "fsdp1"])
def test_compiled_blocks_and_loss_match(api, common, reference, reference_grad_norms, tmp_path):
    """Per-block torch.compile inside FSDP (with activation checkpointing and a compiled loss) changes no numbers.

    FSDP2 on one process; FSDP1 on two (FULL_SHARD), where the compiled blocks see use_orig_params views.
    """
    nproc, mb = (0, "4") if api == "fsdp2" else (2, "2")
    flags = [
        "--parallel.api",
        api,
        "--compile.enabled",
        "true",
        "--compile.loss",
        "true",
        "--ac.mode",
        "full",
        "--train.micro_batch_size",
        mb,
    ]
    run = run_trainer([*common, *flags], tmp_path / "out", nproc=nproc)
    assert_ok(run)
    for step, ref in reference.items():
        assert run.losses()[step] == pytest.approx(ref, rel=1e-4), f"step {step}"
    for r in run.records:
        assert r["grad_norm"] == pytest.approx(reference_grad_norms[r["step"]], rel=1e-4), f"step {r['step']} grad norm"

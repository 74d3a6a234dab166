"""``experimental.flat_shards``: FSDP2 units' shards in one buffer each, sent by the all-gather without a copy-in."""

from __future__ import annotations

import pytest
import torch
from conftest import TINY, assert_ok, run_trainer

pytestmark = pytest.mark.timeout(300)

FSDP2 = [
    *TINY,
    "--parallel.api",
    "fsdp2",
    "--train.micro_batch_size",
    "2",
    "--train.steps",
    "4",
    "--checkpoint.enabled",
    "false",
]


def test_consecutive_views_of_a_registered_buffer_are_sent_as_the_buffer():
    from fsdp_trainer.experimental.flat_shards import _BUFFERS, _copy_in, _flat_input

    flat = torch.arange(10, dtype=torch.float32)
    _BUFFERS[flat.untyped_storage().data_ptr()] = flat
    try:
        views = [flat[0:4], flat[4:6], flat[6:10]]
        assert _flat_input(views, torch.float32, 10) is flat
        assert _flat_input(views[:2], torch.float32, 6) is None, "not the whole buffer"
        assert _flat_input([views[1], views[0], views[2]], torch.float32, 10) is None, "out of order"
        assert _flat_input(views, torch.bfloat16, 10) is None, "gathered in another dtype"
        assert _flat_input([flat.clone()[0:4], *views[1:]], torch.float32, 10) is None, "another storage"

        output = torch.zeros(20)
        sent, out = _copy_in(views, output, [4, 2, 4], 10, 1)
        assert sent is flat and out is output and not output.any(), "nothing copied: the all-gather sends the buffer"
        loose = [t.clone() for t in views]
        sent, out = _copy_in(loose, output, [4, 2, 4], 10, 1)
        assert sent.data_ptr() == output[10:].data_ptr(), (
            "any other input: copied into this rank's slice, as FSDP2 does"
        )
        assert torch.equal(output[10:], flat) and not output[:10].any()
    finally:
        del _BUFFERS[flat.untyped_storage().data_ptr()]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = {}
    for flat in ("true", "false"):
        root = tmp_path_factory.mktemp(f"flat-{flat}")
        run = run_trainer([*FSDP2, "--experimental.flat_shards", flat], root / "out", nproc=2)
        assert_ok(run)
        out[flat] = run
    return out


def test_flat_shards_train_exactly_like_copied_shards(runs):
    on, off = runs["true"].summary, runs["false"].summary
    # tiny: two blocks, the lm_head and the root (embeddings, final norm): every unit is flattened, and every
    # all-gather of 4 steps (forward and backward) sent its buffer as is
    assert on["flat_shard_units"] == 4 and on["all_gathers_sent_as_is"] > 4 * 4 and on["all_gathers_copied_in"] == 0
    assert on["converters"] == ["fused_kernels", "experimental.flat_shards"]
    # off (the default): FSDP2's own copy-in runs, and the experiment is not even imported
    assert off["converters"] == ["fused_kernels"] and "flat_shard_units" not in off
    for field in ("loss", "grad_norm"):
        a = [r[field] for r in runs["false"].records]
        b = [r[field] for r in runs["true"].records]
        assert len(a) == len(b) == 4 and a == b, field


def test_cast_parameters_keep_the_copy(tmp_path):
    # bf16 compute over fp32 parameters: FSDP2 casts each shard into a temporary before the all-gather, so there is
    # nothing to flatten
    run = run_trainer(
        [
            *FSDP2,
            "--precision.mode",
            "bf16",
            "--precision.master_weights",
            "params",
            "--train.steps",
            "2",
            "--experimental.flat_shards",
            "true",
        ],
        tmp_path / "out",
        nproc=2,
    )
    assert_ok(run)
    assert run.summary["flat_shard_units"] == 0 and run.summary["all_gathers_sent_as_is"] == 0


def test_unevenly_sharded_units_are_left_alone_on_every_rank(tmp_path):
    # Over 3 ranks the tiny model's dims (64, 172, 512) do not split evenly: the last rank's shards are padded, the
    # first's are not. Flattening must be decided the same on every rank (under symmetric memory each buffer is
    # registered collectively), so no unit is flattened and every all-gather copies as FSDP2 does.
    run = run_trainer(
        [*FSDP2, "--train.steps", "2", "--train.micro_batch_size", "1", "--experimental.flat_shards", "true"],
        tmp_path / "out",
        nproc=3,
    )
    assert_ok(run)
    assert run.summary["flat_shard_units"] == 0 and run.summary["all_gathers_sent_as_is"] == 0
    assert run.summary["all_gathers_copied_in"] > 0

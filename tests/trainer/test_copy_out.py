"""``parallel.copy_out``: FSDP2's copy-out on the all-gather stream, into storage allocated a unit early."""

from __future__ import annotations

import pytest
import torch
from conftest import TINY, assert_ok, run_trainer

pytestmark = pytest.mark.timeout(300)

FSDP2 = [*TINY, "--parallel.api", "fsdp2", "--train.micro_batch_size", "2", "--train.steps", "4", "--checkpoint.enabled", "false"]


def test_an_armed_copy_out_is_skipped_once_and_any_other_is_made():
    from fsdp_trainer import copyout

    assert copyout._install_op()
    buffer = torch.arange(8, dtype=torch.float32).view(2, 4)
    out = [torch.zeros(2, 1), torch.zeros(2, 3)]
    copyout._armed.append((buffer.data_ptr(), buffer.numel()))
    torch.ops.fsdp.split_with_sizes_copy(buffer, [1, 3], dim=1, out=out)
    assert not copyout._armed and not any(t.any() for t in out), "armed: the all-gather stream copied it already"
    before = copyout.on_compute
    torch.ops.fsdp.split_with_sizes_copy(buffer, [1, 3], dim=1, out=out)
    assert copyout.on_compute == before + 1
    assert torch.equal(out[0], buffer[:, :1]) and torch.equal(out[1], buffer[:, 1:]), "not armed: FSDP2's copy"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = {}
    for where in ("compute", "copy_engine", "all_gather_stream"):
        root = tmp_path_factory.mktemp(f"copy-out-{where}")
        run = run_trainer([*FSDP2, "--parallel.copy_out", where], root / "out", nproc=2)
        assert_ok(run)
        out[where] = run
    return out


@pytest.mark.parametrize("where", ["copy_engine", "all_gather_stream"])
def test_early_copy_out_trains_exactly_like_fsdp2s(runs, where):
    early, base = runs[where].summary, runs["compute"].summary
    # tiny: the root (embeddings, final norm), two blocks and the lm_head, all copied out early. Each of the 4 steps
    # gathers all four in forward, and the first block and the root again in backward (the last block and the
    # lm_head stay gathered from forward to backward)
    assert early["copy_out_units"] == 4 and base["copy_out_units"] == 0
    assert early["copy_outs_early"] == 4 * 6 and early["copy_outs_on_compute"] == 0
    for field in ("loss", "grad_norm"):
        a = [r[field] for r in runs["compute"].records]
        b = [r[field] for r in runs[where].records]
        assert len(a) == len(b) == 4 and a == b, field


def test_copy_out_needs_fsdp2(tmp_path):
    run = run_trainer([*TINY, "--parallel.api", "fsdp1", "--parallel.copy_out", "copy_engine"], tmp_path / "out", nproc=1)
    assert run.returncode != 0
    assert "--parallel.copy_out: copy_engine needs --parallel.api fsdp2" in run.stderr

"""The metrics file across a resume."""

from __future__ import annotations

import json

import pytest
import torch

from fsdp_trainer.metrics import Metrics

pytestmark = pytest.mark.timeout(60)


def _metrics(path) -> Metrics:
    return Metrics(str(path), True, 1, 1000, torch.device("cpu"), None, False)


def test_resume_skips_a_truncated_last_line_and_later_steps(tmp_path):
    path = tmp_path / "metrics.jsonl"
    lines = [json.dumps({"step": s, "loss": 1.0 / s}) for s in (1, 2, 3, 4)]
    # A SIGKILL in the middle of step 5's write: a truncated last line (and some junk before it).
    path.write_text("\n".join(lines[:2]) + "\nnot json\n" + "\n".join(lines[2:]) + '\n{"step": 5, "lo')
    m = _metrics(path)
    m.open(3)
    m.end_step(4, 0.5, 1e-3, 1.0, 10, 0.1)
    m.close()
    steps = [json.loads(line)["step"] for line in path.read_text().splitlines()]
    assert steps == [1, 2, 3, 4]
    assert not list(tmp_path.glob("metrics.jsonl.tmp*")), "the temporary file is renamed into place"
    m = _metrics(path)
    m.open(4)  # and a second resume reads the rewritten file
    m.close()
    assert [json.loads(line)["step"] for line in path.read_text().splitlines()] == [1, 2, 3, 4]


def test_fresh_run_truncates(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\n')
    m = _metrics(path)
    m.open(0)
    m.close()
    assert path.read_text() == ""


@pytest.mark.timeout(240)  # two torchrun ranks under the profiler: about 25 s on an idle 2-core machine
def test_profile_steps_trace_every_rank(tmp_path):
    """Two gloo ranks trace steps 2-3: a trace per rank holding the traced steps' work, the kernel table on the leader."""
    import gzip

    from conftest import TINY, assert_ok, run_trainer

    out = tmp_path / "run"
    run = run_trainer([*TINY, "--train.steps", "4", "--metrics.profile_steps", "2-3"], out, nproc=2)
    assert_ok(run)
    assert [r["step"] for r in run.records] == [1, 2, 3, 4]
    assert [r.get("profiled", False) for r in run.records] == [False, True, True, False]
    assert run.summary["measured_steps"] == 1, (
        "traced steps stay out of the averages (steps 3-4 after warm-up, 3 traced)"
    )
    for rank in (0, 1):
        trace = json.loads(gzip.decompress((out / "profile" / f"trace-rank{rank}.json.gz").read_bytes()))
        names = {e.get("name", "") for e in trace["traceEvents"]}
        assert any("AdamW" in n or "adam" in n.lower() for n in names), (
            "the optimizer step of a traced step is in the trace"
        )
        assert any("gloo:all_reduce" in n or "all_reduce" in n for n in names)
    table = (out / "profile" / "kernels.txt").read_text()
    assert "Self CPU" in table and "aten::mm" in table


def test_profiler_starts_inside_its_range_after_a_resume(tmp_path):
    """A run resumed at step 3 of a 2-4 range traces steps 3-4."""
    import gzip
    import types

    from fsdp_trainer.trainer import StepProfiler

    env = types.SimpleNamespace(device=torch.device("cpu"), rank=0, is_leader=True)
    profiler = StepProfiler((2, 4), tmp_path, env)
    profiler.before(3)
    assert profiler.prof is not None
    torch.ones(8).sum()
    profiler.before(4)  # already tracing: nothing restarts
    profiler.after(3)
    assert profiler.prof is not None
    profiler.after(4)
    assert profiler.prof is None
    assert json.loads(gzip.decompress((tmp_path / "trace-rank0.json.gz").read_bytes()))["traceEvents"]
    profiler.before(5)  # past the range
    assert profiler.prof is None

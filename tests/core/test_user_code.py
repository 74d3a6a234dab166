"""Your own code on the trainer's rails, locally: a plain DDP script (torch only) through ``run --script``, killed
and resumed from FSDP_SDK_CHECKPOINT_DIR; a module reporting with ``fsdp_sdk.report`` seen by ``runs`` and
``job report``; a function through ``Client.train`` on 2 ranks; and the inputs refused before anything starts.

The runs start real processes (etcd, torchrun agents, gloo ranks): a few seconds each.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from fsdp_sdk import Client, etcd
from fsdp_sdk.errors import ConfigError

from .conftest import etcd_or_skip, run_cli

pytest.importorskip("torch")

#: A DDP script as a team would have it: torch only, no fsdp-sdk import. It saves a checkpoint every step in
#: FSDP_SDK_CHECKPOINT_DIR and resumes from it; with --kill-at N, rank 1 kills itself (SIGKILL) once after step N.
DDP_SCRIPT = """
import argparse, json, os, signal
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, required=True)
parser.add_argument("--kill-at", type=int, default=0)
args = parser.parse_args()
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Linear(4, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
checkpoints = os.environ["FSDP_SDK_CHECKPOINT_DIR"]
path = os.path.join(checkpoints, "last.pt")
start = 0
if os.path.exists(path):
    state = torch.load(path)
    model.module.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    start = state["step"]
    if rank == 0:
        print(f"resumed from step {start}", flush=True)
for step in range(start + 1, args.steps + 1):
    loss = model(torch.randn(8, 4)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if rank == 0:
        os.makedirs(checkpoints, exist_ok=True)
        torch.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict(), "step": step}, path + ".tmp")
        os.replace(path + ".tmp", path)
        print(json.dumps({"step": step, "loss": loss.item()}), flush=True)
    dist.barrier()
    marker = os.path.join(checkpoints, "killed-once")
    if step == args.kill_at and rank == 1 and not os.path.exists(marker):
        open(marker, "w").close()
        os.kill(os.getpid(), signal.SIGKILL)
dist.destroy_process_group()
"""

#: A module that reports its steps with the helper.
REPORTING_MODULE = """
import sys
import torch.distributed as dist
import fsdp_sdk

dist.init_process_group("gloo")
steps = int(sys.argv[sys.argv.index("--steps") + 1])
for step in range(1, steps + 1):
    fsdp_sdk.report(step=step, loss=1.0 / step, tokens=64, lr=0.01)
dist.destroy_process_group()
"""


def train_on_every_rank(scale):
    """What Client.train sends: this source alone; everything it uses is imported inside."""
    import torch
    import torch.distributed as dist

    import fsdp_sdk

    dist.init_process_group("gloo")
    total = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(total)
    fsdp_sdk.report(step=1, loss=float(total.item()), tokens=8)
    world = dist.get_world_size()
    dist.destroy_process_group()
    return {"sum": total.item() * scale, "world": world}


@pytest.fixture
def local_cluster(state_dir: Path) -> Iterator[None]:
    """``fsdp-sdk up --backend local`` (a real etcd), stopped by ``fsdp-sdk down`` afterwards."""
    etcd_or_skip()
    up = run_cli("up", "--backend", "local", "--json")
    assert up.returncode == 0, up.stderr
    pid = json.loads(up.stdout)["details"]["etcd_pid"]
    try:
        yield
    finally:
        down = run_cli("down", "--backend", "local")
        assert down.returncode == 0, down.stderr
        assert not etcd.pid_alive(pid)


def _runs(name: str) -> dict:
    listed = run_cli("runs", "--backend", "local", "--json")
    assert listed.returncode == 0, listed.stderr
    return next(r for r in json.loads(listed.stdout) if r["run_id"] == name)


def test_a_plain_ddp_script_is_killed_and_resumes_from_its_checkpoint_dir(
    local_cluster: None, work_dir: Path, state_dir: Path
) -> None:
    (work_dir / "train_ddp.py").write_text(DDP_SCRIPT)
    run = run_cli(
        "run", "--backend", "local", "--nodes", "2", "--nproc-per-node", "1", "--name", "ddp",
        "--script", "train_ddp.py", "--", "--steps", "4", "--kill-at", "2",
        timeout=180,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    run_dir = state_dir / "local" / "runs" / "ddp"
    assert "was killed by SIGKILL" in run.stderr and "launching the run again" in run.stderr
    assert "resumed from step 2" in run.stderr  # the leader's log, streamed
    steps = [json.loads(line)["step"] for line in run.stdout.splitlines() if line.startswith("{")]
    assert steps == [1, 2, 3, 4]  # piped, stdout holds the step lines: 3 and 4 after the resume, none twice
    assert (run_dir / "checkpoints" / "last.pt").is_file()  # FSDP_SDK_CHECKPOINT_DIR: the run's, on every launch
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == 4 and summary["steps_run"] == 2
    record = _runs("ddp")
    assert record["state"] == "succeeded" and record["steps"] == 4 and record["attempts"] == 1


def test_a_module_reporting_its_steps_shows_in_runs_and_job_report(local_cluster: None, work_dir: Path) -> None:
    (work_dir / "mytrain").mkdir()
    (work_dir / "mytrain" / "__init__.py").write_text("")
    (work_dir / "mytrain" / "loop.py").write_text(REPORTING_MODULE)
    run = run_cli(
        "run", "--backend", "local", "--nodes", "1", "--nproc-per-node", "2", "--name", "reported",
        "--module", "mytrain.loop", "--json", "--", "--steps", "3",
        timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout)
    assert summary["steps"] == 3 and summary["final_loss"] == pytest.approx(1 / 3)
    assert summary["tokens_per_s_per_gpu"] > 0
    record = _runs("reported")
    assert (record["steps"], record["final_loss"]) == (3, pytest.approx(1 / 3))
    lines = (Path(record["output_dir"]) / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1, 2, 3]  # rank 0's alone, once each

    resumed = run_cli("run", "--backend", "local", "--resume", "reported", "--dry-run", "--json")
    assert resumed.returncode == 0, resumed.stderr
    command = json.loads(resumed.stdout)["commands"][0]  # --resume runs the run's own code again
    assert command[command.index("fsdp_sdk.code_entry") :][-5:] == ["--module", "mytrain.loop", "--", "--steps", "3"]

    pytest.importorskip("matplotlib", reason="job report's plots need fsdp-sdk[report]")
    report = run_cli("job", "report", "--backend", "local", "reported", "-o", str(work_dir / "report"), "--json")
    assert report.returncode == 0, report.stderr
    training = json.loads(report.stdout)["summary"]["training"]
    assert training["steps"] == 3 and training["final_loss"] == pytest.approx(1 / 3)


def test_client_train_runs_a_function_on_two_ranks_and_returns_its_result(local_cluster: None, state_dir: Path) -> None:
    client = Client.from_sources(overrides={"cluster.backend": "local"})
    handle = client.train(train_on_every_rank, nodes=2, nproc_per_node=1, kwargs={"scale": 10})
    assert handle.result() == {"sum": 30.0, "world": 2}  # rank 0's: 1 + 2 over the gloo group, times 10
    assert handle.job.backend == "local" and handle.summary is not None and handle.summary["steps"] == 1
    (sent,) = (state_dir / "functions").glob("train_on_every_rank-*/train_on_every_rank.py")
    assert sent.read_text() == textwrap.dedent(
        __import__("inspect").getsource(train_on_every_rank)
    )  # its source, and nothing else of this module


# --------------------------------------------------------------------------- refused before anything starts


def _one_line_error(result) -> str:
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_bad_inputs_are_one_line_and_start_nothing(work_dir: Path, state_dir: Path) -> None:
    missing = _one_line_error(run_cli("run", "--backend", "local", "--script", "nowhere.py"))
    assert "--script" in missing and "nowhere.py does not exist" in missing
    (work_dir / "train.py").write_text("print('hi')\n")
    trainer_only = _one_line_error(run_cli("run", "--backend", "local", "--script", "train.py", "--steps", "3"))
    assert "--steps" in trainer_only and "option of the built-in trainer" in trainer_only
    preset = _one_line_error(run_cli("run", "--backend", "local", "--script", "train.py", "--model", "tiny"))
    assert "--model" in preset and "pass your code's own options after --" in preset
    both = _one_line_error(run_cli("run", "--backend", "local", "--script", "train.py", "--module", "a.b"))
    assert "--module" in both
    command = run_cli("run", "--backend", "local", "--script", "train.py", "--set", "job.command=python x.py")
    assert "both say what the workers run" in _one_line_error(command)
    assert not (state_dir / "local").exists()  # no etcd started, no run recorded


def test_functions_that_cannot_travel_are_refused_with_the_reason(state_dir: Path) -> None:
    client = Client.from_dict({"cluster": {"backend": "local", "state_dir": str(state_dir)}})
    offset = 3

    def closure(x):
        return x + offset

    with pytest.raises(ConfigError, match="a lambda cannot travel"):
        client.train(lambda: 1)
    with pytest.raises(ConfigError, match=r"closure over local variables \(offset\)"):
        client.train(closure)
    with pytest.raises(ConfigError, match="uses DDP_SCRIPT from outside itself"):
        client.train(_reads_a_global)
    with pytest.raises(ConfigError, match="kwargs: cannot travel as JSON"):
        client.train(train_on_every_rank, kwargs={"scale": object()})
    assert not (state_dir / "local").exists()


def _reads_a_global():
    return len(DDP_SCRIPT)

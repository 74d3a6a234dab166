"""Checkpoints on S3 (moto's server on loopback), on the local backend (real etcd, torchrun, gloo, 2 ranks).

A run saving to ``s3://`` is SIGKILLed mid-run and ``fsdp-sdk run --resume`` continues it from the last
complete S3 checkpoint, ending with the uninterrupted run's per-step losses; a save killed after its shards
and metadata, before its ``COMPLETE`` object, leaves the previous checkpoint as the one resumed, and the
resumed run deletes that debris and the checkpoints ``keep`` no longer holds, by prefix.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from .conftest import Outcome, Run, cli, last_line, need_etcd_and_trainer, processes_of, rank_process, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

TINY = ("--backend", "local", "--nodes", "2", "--nproc-per-node", "1", "--preset", "tiny")
STEPS = 8
BUCKET = "fsdp-ckpt"


@pytest.fixture
def s3(aws: str):
    """The moto bucket, and the environment every process of the run inherits (endpoint, fake credentials); after
    the test, ``fsdp-sdk down`` stops the etcd its runs started (a run that succeeds leaves the cluster up)."""
    import boto3

    client = boto3.client("s3")
    client.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    yield client
    down = cli("down", "--backend", "local")
    assert down.returncode == 0, down.stderr


def _objects(s3, prefix: str) -> list[str]:
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    return sorted(o["Key"] for page in pages for o in page.get("Contents", []))


def _checkpoints(s3, prefix: str) -> dict[str, bool]:
    """step directory -> has its COMPLETE marker."""
    found: dict[str, bool] = {}
    for key in _objects(s3, prefix):
        if "/" not in key[len(prefix) :]:  # OWNER.json: the run that owns the prefix
            continue
        step, name = key[len(prefix) :].split("/", 1)[0], key.rsplit("/", 1)[-1]
        found[step] = found.get(step, False) or name == "COMPLETE"
    return found


def _losses(run_id: str, state: Path | None = None) -> dict[int, float]:
    """The per-step losses of a local run (its metrics file, appended across resumes)."""
    state = state or Path(os.environ["FSDP_SDK_STATE_DIR"])
    (path,) = (state / "local" / "runs" / run_id).rglob("metrics.jsonl")
    return {r["step"]: r["loss"] for r in map(json.loads, path.read_text().splitlines())}


def _ckpt_args(prefix: str, *extra: str) -> tuple[str, ...]:
    return ("--", "--checkpoint.every_steps", "2", "--checkpoint.dir", f"s3://{BUCKET}/{prefix}", *extra)


@pytest.fixture(scope="module")
def straight(tmp_path_factory: pytest.TempPathFactory) -> dict[int, float]:
    """The uninterrupted run, once for the module (its checkpoints on the local disk: where they are stored does not
    change the losses): the per-step losses the interrupted runs must end with."""
    from .conftest import FSDP_SDK

    need_etcd_and_trainer()
    state = tmp_path_factory.mktemp("straight")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FSDP_SDK_")}
    env["FSDP_SDK_STATE_DIR"] = str(state)
    args = [FSDP_SDK, "run", *TINY, "--steps", str(STEPS), "--name", "straight", "--json"]
    done = subprocess.run(
        [*args, "--", "--checkpoint.every_steps", "2"], capture_output=True, text=True, timeout=300, env=env
    )
    subprocess.run([FSDP_SDK, "down"], capture_output=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]
    losses = _losses("straight", state)
    assert sorted(losses) == list(range(1, STEPS + 1))
    return losses


def test_s3_run_sigkilled_mid_run_resumes_with_the_same_losses(
    s3, straight: dict[int, float], outcome: Outcome
) -> None:
    """A rank SIGKILLed mid-run (asynchronous saves, no restart budget), and its newest checkpoint's shard then
    changed by a byte; ``run --resume`` names it broken, takes the one before and ends with the same losses."""
    prefix = "killed/"
    run = Run(*TINY, "--steps", str(STEPS), "--name", "s3-killed", "--set", "job.max_restarts=0", *_ckpt_args("killed"))
    try:
        run.wait_for(r'^\{"step": 5,')
        rank_process("s3-killed", 1).kill()
        code, _, err = run.finish()
    finally:
        run.kill()
    assert code == 1, err[-3000:]
    outcome.saw(last_line(err))
    complete = sorted(step for step, done in _checkpoints(s3, prefix).items() if done)
    assert len(complete) == 2 and complete[-1] >= "step_00000004", complete
    shard = f"{prefix}{complete[-1]}/__0_0.distcp"  # a flipped byte (issue 44: 'run --resume' failed the same way)
    data = bytearray(s3.get_object(Bucket=BUCKET, Key=shard)["Body"].read())
    data[len(data) // 3] ^= 0x01
    s3.put_object(Bucket=BUCKET, Key=shard, Body=bytes(data))
    resumed = cli("run", "--resume", "s3-killed", "--json")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    broken = (
        f"checkpoint: s3://{BUCKET}/{prefix}{complete[-1]} is broken: __0_0.distcp does not match the CRC32 recorded "
        f"at save (its bytes changed); marked BROKEN; resuming from the previous complete checkpoint, "
        f"s3://{BUCKET}/{prefix}{complete[-2]}"
    )
    assert broken in resumed.stderr, resumed.stderr[-3000:]
    outcome.saw(broken)
    match = re.search(r"resumed from s3://fsdp-ckpt/killed/(step_\d{8}) \(step (\d+)\)", resumed.stderr)
    assert match and match.group(1) == complete[-2], resumed.stderr[-3000:]
    summary = json.loads(resumed.stdout)
    assert summary["steps"] == STEPS and summary["steps_run"] == STEPS - int(match.group(2))
    assert summary["checkpoint"]["async"] is True
    assert _checkpoints(s3, prefix) == {"step_00000006": True, "step_00000008": True}, "keep 2"
    losses = _losses("s3-killed")
    assert sorted(losses) == list(range(1, STEPS + 1))
    for step in range(1, STEPS + 1):
        assert losses[step] == pytest.approx(straight[step], abs=1e-6), f"step {step}"
    outcome.note(
        f"{complete[-1]} broken (a flipped byte): resumed from {match.group(1)} on S3; all {STEPS} steps' losses "
        "equal the uninterrupted run's"
    )
    wait_until(lambda: not processes_of("s3-killed"), 20, "processes of the run are gone")


def test_s3_save_killed_before_its_marker_leaves_the_previous_one(
    s3, straight: dict[int, float], monkeypatch, outcome: Outcome
) -> None:
    """Every rank SIGKILLed after the shards and metadata of step 4, before its COMPLETE (synchronous saves)."""
    prefix = "midsave/"
    args = _ckpt_args("midsave", "--checkpoint.async_save", "false")
    monkeypatch.setenv("FSDP_TRAINER_FAULT_DURING_SAVE", "4")
    failed = cli("run", *TINY, "--steps", str(STEPS), "--name", "s3-midsave", "--set", "job.max_restarts=0", *args)
    assert failed.returncode == 1, failed.stderr[-3000:]
    assert _checkpoints(s3, prefix) == {"step_00000002": True, "step_00000004": False}
    debris = _objects(s3, prefix + "step_00000004/")
    assert any(k.endswith(".metadata") for k in debris) and any(k.endswith(".distcp") for k in debris), debris
    monkeypatch.delenv("FSDP_TRAINER_FAULT_DURING_SAVE")

    again = cli("run", "--resume", "s3-midsave", "--json")
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"resumed from s3://{BUCKET}/{prefix}step_00000002 (step 2)" in again.stderr
    assert f"removed incomplete s3://{BUCKET}/{prefix}step_00000004" in again.stderr
    assert _checkpoints(s3, prefix) == {"step_00000006": True, "step_00000008": True}, "debris and old ones gone"
    losses = _losses("s3-midsave")
    for step in range(3, STEPS + 1):
        assert losses[step] == pytest.approx(straight[step], abs=1e-6), f"step {step}"
    outcome.note("resumed from step 2; step 4's debris and the checkpoints past keep=2 were deleted by prefix")


def test_s3_named_run_stopped_and_continued_by_its_name_alone(s3, straight: dict[int, float], outcome: Outcome) -> None:
    """A named run checkpointing to S3 stopped by ``job stop``, then ``run --name NAME`` with no other option."""
    prefix = "named/"
    try:
        _stopped_and_continued(s3, straight, outcome, prefix)
    finally:
        cli("down")  # the etcd the continued run started stays up after a success: stopped here


def _stopped_and_continued(s3, straight: dict[int, float], outcome: Outcome, prefix: str) -> None:
    run = Run(*TINY, "--steps", str(STEPS), "--name", "s3-named", *_ckpt_args("named"))
    try:
        run.wait_for(r'^\{"step": 5,')
        stop = cli("job", "stop", "s3-named")
        code, _, err = run.finish()
    finally:
        run.kill()
    assert stop.returncode == 0 and code == 130, stop.stderr + err[-3000:]
    said = re.search(
        r"stopped at step (\d+); the last checkpoint is step (\d+) \((s3://\S+)\): a resume continues from step (\d+)",
        stop.stdout,
    )
    assert said, stop.stdout
    saved, where = int(said.group(2)), said.group(3)
    assert where == f"s3://{BUCKET}/{prefix}step_{saved:08d}" and int(said.group(4)) == saved + 1
    assert _checkpoints(s3, prefix).get(f"step_{saved:08d}") is True, "the checkpoint it names is complete"
    assert f"Run s3-named interrupted: {said.group(0)}" in err, "the run's own terminal says the same"
    outcome.saw(stop.stdout.strip().splitlines()[-1])

    again = cli("run", "--name", "s3-named", "--json")  # the name alone: every other setting is the run's
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"resumed from {where} (step {saved})" in again.stderr, again.stderr[-3000:]
    summary = json.loads(again.stdout)
    assert summary["steps"] == STEPS and summary["steps_run"] == STEPS - saved, "from the next step"
    losses = _losses("s3-named")
    assert sorted(losses) == list(range(1, STEPS + 1))
    for step in range(1, STEPS + 1):
        assert losses[step] == pytest.approx(straight[step], abs=1e-6), f"step {step}"
    outcome.note(
        f"'run --name s3-named' resumed at step {saved + 1} from S3; all {STEPS} losses equal the uninterrupted run's"
    )
    wait_until(lambda: not processes_of("s3-named"), 20, "processes of the run are gone")


def test_a_run_trains_from_the_s3_export_of_another(s3, outcome: Outcome) -> None:
    """A run trains from another run's S3 export, both through the CLI; a cut-short export is refused naming it.

    The first run's --checkpoint.export_hf s3:// prefix is the next run's --model.name_or_path; the same prefix with
    its weights cut short is refused naming the prefix and what is missing."""
    export = f"s3://{BUCKET}/export/exp"
    one = ("--backend", "local", "--nodes", "1", "--nproc-per-node", "1")
    first = cli(
        "run", *one, "--preset", "tiny", "--steps", "2", "--name", "exporter", "--", "--checkpoint.export_hf", export
    )
    assert first.returncode == 0, first.stderr[-3000:]
    assert {"config.json", "model.safetensors"} <= {k.rsplit("/", 1)[-1] for k in _objects(s3, "export/exp/")}
    args = ("--steps", "2", "--", "--model.name_or_path", export, "--data.source", "text")
    second = cli("run", *one, "--name", "from-export", "--json", *args)
    assert second.returncode == 0, second.stderr[-3000:]
    assert json.loads(second.stdout)["steps_run"] == 2
    outcome.note("trained 2 steps from the first run's S3 export, named as --model.name_or_path through the CLI")

    weights = s3.get_object(Bucket=BUCKET, Key="export/exp/model.safetensors")["Body"].read()
    s3.put_object(Bucket=BUCKET, Key="export/exp/model.safetensors", Body=weights[: len(weights) // 2])
    partial = cli("run", *one, "--name", "from-partial", *args)
    assert partial.returncode == 1, partial.stderr[-3000:]  # the trainer refused it (exit 2): not restarted
    line = (
        f"--model.name_or_path: {export} is not a whole model export: model.safetensors is truncated "
        f"({len(weights) // 2} of {len(weights)} bytes)"
    )
    assert f"Error: run from-partial failed: agent 0: error: {line}; logs in " in partial.stderr, partial.stderr[-3000:]
    outcome.saw(line)

    # no config.json (an export cut short: it is uploaded last): refused by the SDK's estimate, before anything starts
    s3.put_object(Bucket=BUCKET, Key="export/exp/model.safetensors", Body=weights)
    config = s3.get_object(Bucket=BUCKET, Key="export/exp/config.json")["Body"].read()
    s3.delete_object(Bucket=BUCKET, Key="export/exp/config.json")
    no_config = cli("run", *one, "--name", "from-no-config", *args)
    assert no_config.returncode == 2, no_config.stderr[-3000:]
    assert last_line(no_config.stderr) == (
        f"Error: model: {export} holds no config.json (not a Hugging Face model directory, or an export that did not "
        "finish); pass the s3:// prefix a finished --checkpoint.export_hf wrote, or a preset"
    ), no_config.stderr[-3000:]
    # no weights: refused by the trainer, naming what it found
    s3.put_object(Bucket=BUCKET, Key="export/exp/config.json", Body=config)
    s3.delete_object(Bucket=BUCKET, Key="export/exp/model.safetensors")
    found = ", ".join(k.rsplit("/", 1)[-1] for k in _objects(s3, "export/exp/"))
    no_weights = cli("run", *one, "--name", "from-no-weights", *args)
    assert no_weights.returncode == 1, no_weights.stderr[-3000:]
    line = f"--model.name_or_path: {export} is not a whole model export: no *.safetensors weights (found: {found})"
    assert f"Error: run from-no-weights failed: agent 0: error: {line}; logs in " in no_weights.stderr, (
        no_weights.stderr[-3000:]
    )
    outcome.saw(line)


def test_a_second_run_on_a_runs_prefix_is_refused(s3, monkeypatch, tmp_path: Path, outcome: Outcome) -> None:
    """Another run on a finished run's S3 prefix: another name, or the same name from another state directory.

    Each is refused in one line naming the owner, and nothing of it is written there."""
    one = ("--backend", "local", "--nodes", "1", "--nproc-per-node", "1", "--preset", "tiny", "--steps", "2")
    args = ("--", "--checkpoint.dir", f"s3://{BUCKET}/shared")
    first = cli("run", *one, "--name", "owner", *args)
    assert first.returncode == 0, first.stderr[-3000:]
    before = _objects(s3, "shared/")
    other = cli("run", *one, "--name", "other", *args)
    state = os.environ["FSDP_SDK_STATE_DIR"]
    monkeypatch.setenv("FSDP_SDK_STATE_DIR", str(tmp_path / "another-state"))
    twin = cli("run", *one, "--name", "owner", *args)
    assert cli("down", "--backend", "local").returncode == 0  # the other state directory's etcd
    monkeypatch.setenv("FSDP_SDK_STATE_DIR", state)  # the fixture's 'down' stops the first one's
    for refused, name in ((other, "other"), (twin, "owner")):
        assert refused.returncode == 1, refused.stderr[-3000:]  # the trainer refused it (exit 2): not restarted
        line = last_line(refused.stderr)
        assert line.startswith(
            f"Error: run {name} failed: agent 0: error: --checkpoint.dir: s3://{BUCKET}/shared holds the checkpoints "
            "of run 'owner' (id "
        ), line
        assert "use another --checkpoint.dir for this run, or continue that run (fsdp-sdk run --resume owner)" in line
        outcome.saw(line)
    assert _objects(s3, "shared/") == before, "nothing written by the refused runs"

"""S3 checkpoints under faults (moto's server on loopback): one owner per prefix, broken checkpoints named and
skipped, an emptied store said, a store that stops answering bounded, rejected credentials said as such.

Each run is the real trainer (``python -m fsdp_trainer``, one CPU process, the tiny preset); the faults are done to
the objects with boto3, or by :class:`FrozenProxy`, a loopback TCP proxy in front of moto that, once frozen, accepts
connections and never answers (what a stalled endpoint looks like to a client).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading

import boto3
import pytest
from conftest import TINY, assert_ok, run_trainer, trainer_env

pytestmark = pytest.mark.timeout(240)

BUCKET = "ckpt"
ARGS = [*TINY, "--data.seq_len", "32", "--parallel.api", "none", "--checkpoint.every_steps", "2"]


@pytest.fixture
def s3(aws):
    client = boto3.client("s3")
    client.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    return client


def _keys(s3, prefix: str) -> list[str]:
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    return sorted(o["Key"] for page in pages for o in page.get("Contents", []))


def _errors(run) -> list[str]:
    return [line for line in run.stderr.splitlines() if line.startswith("error: ")]


def _warnings(run) -> list[str]:
    return [
        line.split(" WARNING fsdp_trainer.checkpoint: ", 1)[1]
        for line in run.stderr.splitlines()
        if " WARNING fsdp_trainer.checkpoint: " in line
    ]


# ---------------------------------------------------------------------------------------------- one owner per prefix


def test_a_second_run_on_a_prefix_is_refused_naming_its_owner(s3, tmp_path):
    """A finished run's prefix: a new run of another name, and one of the same name from another state directory,
    are refused in one line; an explicit --checkpoint.resume takes it over, saying whose it takes."""
    prefix = f"s3://{BUCKET}/shared"
    first = run_trainer([*ARGS, "--train.steps", "2", "--checkpoint.dir", prefix], tmp_path / "a")
    assert_ok(first)
    owner = json.loads(s3.get_object(Bucket=BUCKET, Key="shared/OWNER.json")["Body"].read())
    assert owner["name"] == "a"
    refusal = (
        f"error: --checkpoint.dir: {prefix} holds the checkpoints of run 'a' (id {owner['run_id'][:12]}, settings "
        f"{owner['config_digest'][:8]}, started {owner['started'].replace('T', ' ')} UTC); use another "
        "--checkpoint.dir for this run, or continue that run (fsdp-sdk run --resume a); to start from one of its "
        "checkpoints instead, name it with --checkpoint.resume"
    )
    other = run_trainer([*ARGS, "--train.steps", "4", "--checkpoint.dir", prefix], tmp_path / "b")
    assert other.returncode == 2 and _errors(other) == [refusal], other.stderr[-3000:]
    # the same name from another state directory: another run (its own identity), refused alike
    (tmp_path / "elsewhere").mkdir()
    twin = run_trainer([*ARGS, "--train.steps", "4", "--checkpoint.dir", prefix], tmp_path / "elsewhere" / "a")
    assert twin.returncode == 2 and _errors(twin) == [refusal], twin.stderr[-3000:]
    assert "resumed from" not in other.stderr + twin.stderr
    assert _keys(s3, "shared/") == sorted(
        ["shared/OWNER.json", *(f"shared/step_00000002/{n}" for n in _files_of_one_save())]
    ), "nothing written by the refused runs"

    taken = run_trainer(
        [*ARGS, "--train.steps", "4", "--checkpoint.dir", prefix, "--checkpoint.resume", f"{prefix}/step_00000002"],
        tmp_path / "b",
    )
    assert_ok(taken)
    assert _warnings(taken)[0] == (
        f"checkpoint: {prefix} held the checkpoints of run 'a' (id {owner['run_id'][:12]}, settings "
        f"{owner['config_digest'][:8]}, started {owner['started'].replace('T', ' ')} UTC); this run takes it over "
        f"from {prefix}/step_00000002 (--checkpoint.resume), and its checkpoints after that one are deleted"
    )
    assert json.loads(s3.get_object(Bucket=BUCKET, Key="shared/OWNER.json")["Body"].read())["name"] == "b"


def _files_of_one_save() -> list[str]:
    return [
        ".metadata",
        "COMPLETE",
        "__0_0.distcp",
        "digests/metadata.json",
        "digests/rank_00000.json",
        "rng/rank_00000.pt",
        "train_state.json",
    ]


@pytest.mark.parametrize(
    "dirs", [("a", "b"), ("x/a", "y/a")], ids=["different-names", "one-name-from-two-state-directories"]
)
def test_two_runs_started_together_on_one_prefix_leave_one_runs_checkpoints(s3, tmp_path, dirs):
    """Two runs started at the same moment on one prefix (different names and seeds; or the same name typed twice,
    from two state directories): one is refused in one line naming the other, before it commits a checkpoint; every
    complete checkpoint left holds only the other's files (their digests match)."""
    from fsdp_trainer.digests import check_files, expected_files
    from fsdp_trainer.storage import S3Store

    prefix = f"s3://{BUCKET}/together"
    procs = {}
    for where, seed in zip(dirs, ("1", "2"), strict=True):
        out = tmp_path / where
        out.mkdir(parents=True)
        cmd = [sys.executable, "-m", "fsdp_trainer", *ARGS, "--train.steps", "6", "--train.seed", seed]
        cmd += ["--checkpoint.dir", prefix, "--checkpoint.async_save", "false", "--train.output_dir", str(out)]
        procs[where] = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env=trainer_env(), cwd=tmp_path)
    results = {where: (p.wait(timeout=200), p.stderr.read()) for where, p in procs.items()}
    for p in procs.values():
        p.stderr.close()
    refused = [w for w, (code, _) in results.items() if code == 2]
    assert len(refused) == 1, {w: (c, e[-1500:]) for w, (c, e) in results.items()}
    (winner,) = set(dirs) - set(refused)
    assert results[winner][0] == 0, results[winner][1][-3000:]
    owner = json.loads(s3.get_object(Bucket=BUCKET, Key="together/OWNER.json")["Body"].read())
    identity = json.loads((tmp_path / winner / "run_identity.json").read_text())
    assert owner["run_id"] == identity["run_id"], "the prefix is the winner's"
    assert [line for line in results[refused[0]][1].splitlines() if line.startswith("error: ")] == [
        f"error: --checkpoint.dir: {prefix} holds the checkpoints of run '{owner['name']}' (id "
        f"{owner['run_id'][:12]}, settings {owner['config_digest'][:8]}, started "
        f"{owner['started'].replace('T', ' ')} UTC); use another --checkpoint.dir for this run, or continue that "
        f"run (fsdp-sdk run --resume {owner['name']}); to start from one of its checkpoints instead, name it with "
        "--checkpoint.resume"
    ]
    store = S3Store(prefix)
    complete = store.complete()
    assert [c.step for c in complete] == [4, 6]
    for c in complete:
        files = expected_files(store, c.id)
        assert isinstance(files, dict) and check_files(store, c.id, files) is None, c.id


def test_a_local_directory_has_one_owner_too(tmp_path):
    """The same rule for a directory (a shared filesystem)."""
    shared = tmp_path / "shared"
    assert_ok(run_trainer([*ARGS, "--train.steps", "2", "--checkpoint.dir", str(shared)], tmp_path / "a"))
    other = run_trainer([*ARGS, "--train.steps", "2", "--checkpoint.dir", str(shared)], tmp_path / "b")
    assert other.returncode == 2
    owner = json.loads((shared / "OWNER.json").read_text())
    assert _errors(other) == [
        f"error: --checkpoint.dir: {shared} holds the checkpoints of run 'a' (id {owner['run_id'][:12]}, settings "
        f"{owner['config_digest'][:8]}, started {owner['started'].replace('T', ' ')} UTC); use another "
        "--checkpoint.dir for this run, or continue that run (fsdp-sdk run --resume a); to start from one of its "
        "checkpoints instead, name it with --checkpoint.resume"
    ]
    assert sorted(p.name for p in shared.iterdir()) == ["OWNER.json", "step_00000002"], "nothing of b's written"


# ---------------------------------------------------------------------------------------------- broken checkpoints


def test_a_truncated_and_a_bit_flipped_shard_are_named_and_skipped(s3, tmp_path):
    """The newest checkpoint's shard truncated, the one before it with a flipped byte: both are named, marked
    BROKEN, and the run resumes from the previous complete checkpoint."""
    prefix = f"s3://{BUCKET}/broken"
    args = [*ARGS, "--checkpoint.dir", prefix, "--checkpoint.keep", "3", "--checkpoint.async_save", "false"]
    assert_ok(run_trainer([*args, "--train.steps", "6"], tmp_path / "r1"))
    shard6, shard4 = "broken/step_00000006/__0_0.distcp", "broken/step_00000004/__0_0.distcp"
    data6 = s3.get_object(Bucket=BUCKET, Key=shard6)["Body"].read()
    s3.put_object(Bucket=BUCKET, Key=shard6, Body=data6[: len(data6) // 2])
    data4 = bytearray(s3.get_object(Bucket=BUCKET, Key=shard4)["Body"].read())
    data4[len(data4) // 3] ^= 0x01
    s3.put_object(Bucket=BUCKET, Key=shard4, Body=bytes(data4))

    resumed = run_trainer([*args, "--train.steps", "8"], tmp_path / "r1")
    assert_ok(resumed)
    assert _warnings(resumed)[:2] == [
        f"checkpoint: {prefix}/step_00000006 is broken: __0_0.distcp is {len(data6) // 2} bytes, {len(data6)} were "
        f"written; marked BROKEN; resuming from the previous complete checkpoint, {prefix}/step_00000004",
        f"checkpoint: {prefix}/step_00000004 is broken: __0_0.distcp does not match the CRC32 recorded at save "
        f"(its bytes changed); marked BROKEN; resuming from the previous complete checkpoint, {prefix}/step_00000002",
    ]
    assert f"checkpoint: resumed from {prefix}/step_00000002 (step 2)" in resumed.stderr
    assert resumed.summary["steps_run"] == 6


def test_a_checkpoint_found_broken_is_never_loaded_again(s3, tmp_path):
    """Every complete checkpoint broken: the run is refused (exit 2: no restart) naming it; a later start, restart or
    `run --resume` does not try it again, and naming it explicitly says why."""
    prefix = f"s3://{BUCKET}/allbroken"
    args = [*ARGS, "--checkpoint.dir", prefix, "--checkpoint.async_save", "false"]
    assert_ok(run_trainer([*args, "--train.steps", "2"], tmp_path / "r1"))
    key = "allbroken/step_00000002/rng/rank_00000.pt"
    s3.put_object(Bucket=BUCKET, Key=key, Body=b"")
    failed = run_trainer([*args, "--train.steps", "4"], tmp_path / "r1")
    assert failed.returncode == 2, failed.stderr[-3000:]
    assert _errors(failed) == [
        f"error: --checkpoint.resume: no checkpoint in {prefix} loads: {prefix}/step_00000002 and every earlier one "
        "are broken (see the warnings above; each is marked BROKEN); restore them, or start over with "
        "--checkpoint.resume never or another --checkpoint.dir"
    ]
    why = s3.get_object(Bucket=BUCKET, Key="allbroken/step_00000002/BROKEN")["Body"].read().decode()
    assert why.startswith("rng/rank_00000.pt is 0 bytes, ") and why.endswith(" were written\n"), why
    explicit = run_trainer(
        [*args, "--train.steps", "4", "--checkpoint.resume", f"{prefix}/step_00000002"], tmp_path / "r1"
    )
    assert explicit.returncode == 2
    assert _errors(explicit)[0].startswith(
        f"error: --checkpoint.resume: {prefix}/step_00000002 is broken (rng/rank_00000.pt is 0 bytes, "
    )


# ---------------------------------------------------------------------------------------------- an emptied store


def test_a_rerun_whose_last_checkpoint_is_gone_says_so_before_step_1(s3, tmp_path):
    """The prefix emptied (a lifecycle rule, a deleted prefix): the re-run says its last checkpoint is gone."""
    prefix = f"s3://{BUCKET}/emptied"
    args = [*ARGS, "--checkpoint.dir", prefix]
    assert_ok(run_trainer([*args, "--train.steps", "4"], tmp_path / "r1"))
    for key in _keys(s3, "emptied/"):  # everything, the owner's record too (a lifecycle rule expires it alike)
        s3.delete_object(Bucket=BUCKET, Key=key)
    again = run_trainer([*args, "--train.steps", "6"], tmp_path / "r1")
    assert_ok(again)
    line = (
        f"checkpoint: this run's last checkpoint, {prefix}/step_00000004 (step 4), is gone from {prefix} (a lifecycle "
        "rule, a deleted prefix or a restored account?); no complete checkpoint is left there, so training starts "
        "again at step 1"
    )
    first, *rest = _warnings(again)
    assert first == line  # logged while choosing the checkpoint to resume, before the first step
    assert all(w.startswith("checkpoint: a save every ") for w in rest), rest  # only the store's advice after it
    assert again.summary["steps_run"] == 6 and [r["step"] for r in again.records][-6:] == [1, 2, 3, 4, 5, 6]


# ---------------------------------------------------------------------------------------------- a stalled store


class FrozenProxy:
    """A TCP proxy on loopback in front of ``target``; once :attr:`frozen` is set (by hand, or at the first request
    naming ``freeze_on``), it forwards nothing more and accepts new connections without ever answering. With
    ``slow_on``: from the first request naming it, every chunk either way is held ``SLOW_S`` first (a store that
    answers, slowly)."""

    SLOW_S = 0.25

    def __init__(
        self, target: str, freeze_on: bytes | None = None, occurrence: int = 1, slow_on: bytes | None = None
    ) -> None:
        host, port = target.removeprefix("http://").split(":")
        self.target = (host, int(port))
        self.freeze_on, self.left = freeze_on, occurrence
        self.slow_on, self.slow = slow_on, threading.Event()
        self.frozen = threading.Event()
        self.server = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.server.getsockname()[1]}"
        self._held: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            self._held.append(client)
            if self.frozen.is_set():
                continue  # accepted, never answered
            upstream = socket.create_connection(self.target)
            self._held.append(upstream)
            threading.Thread(target=self._pipe, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, False), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, from_client: bool) -> None:
        try:
            while data := src.recv(65536):
                if from_client and self.freeze_on is not None and self.freeze_on in data:
                    self.left -= 1  # the occurrence-th request naming freeze_on freezes it
                    if self.left <= 0:
                        self.frozen.set()
                if from_client and self.slow_on is not None and self.slow_on in data:
                    self.slow.set()
                if self.frozen.is_set():
                    return  # hold the connection open, answer nothing
                if self.slow.wait(0) and not self._closed:
                    threading.Event().wait(self.SLOW_S)
                dst.sendall(data)
        except OSError:
            return

    def close(self) -> None:
        self._closed = True
        self.server.close()
        for sock in self._held:
            sock.close()


@pytest.fixture
def proxy(s3, aws):
    made: list[FrozenProxy] = []

    def make(freeze_on: bytes | None = None, occurrence: int = 1, slow_on: bytes | None = None) -> FrozenProxy:
        made.append(FrozenProxy(aws, freeze_on, occurrence, slow_on))
        return made[-1]

    yield make
    for p in made:
        p.close()


#: (steps between saves, the step whose save freezes) per mode. Asynchronous: far enough apart that the 2 s bound
#: passes long before the next save (600 tiny steps: about 7 s on 2 cores, 11 ms a step), so what sees the stall
#: is a step's check, not the next save waiting for the previous one (at 200 steps it was either).
FREEZE = {"sync": (4, 4), "async": (600, 600)}


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_frozen_endpoint_fails_the_save_within_its_bound(proxy, tmp_path, mode):
    """The endpoint freezes (accepts, never answers) while a save's shards are uploaded: the run fails with the
    cause within checkpoint.s3_timeout_s; an asynchronous save's stall is seen by the next steps' check, while
    training goes on, before the next save."""
    every, step = FREEZE[mode]
    frozen = proxy(freeze_on=f"step_{step:08d}/__0_0.distcp".encode())
    prefix = f"s3://{BUCKET}/frozen-{mode}"
    args = [*ARGS, "--train.steps", "10000", "--checkpoint.every_steps", str(every), "--checkpoint.dir", prefix]
    args += ["--checkpoint.s3_timeout_s", "2", "--checkpoint.async_save", "true" if mode == "async" else "false"]
    run = run_trainer(args, tmp_path / "r1", env={"AWS_ENDPOINT_URL": frozen.url}, timeout=90)
    assert frozen.frozen.is_set()
    assert run.returncode == 1, run.stderr[-3000:]
    what = "the background save" if mode == "async" else "the save"
    assert _errors(run) == [
        f"error: checkpoint: {what} of step {step} failed: {prefix}/step_{step:08d}: no answer from the endpoint "
        "for 2 s (--checkpoint.s3_timeout_s)"
    ], run.stderr[-3000:]
    last = max(r["step"] for r in run.records)
    if mode == "async":
        assert step < last < step + every, f"seen at step {last}: a step's check saw it, not the next save's wait"
    else:
        assert last == step, "training waited for the save"


def test_a_save_that_answers_too_slowly_fails_within_the_whole_save_bound(proxy, tmp_path):
    """Every answer comes, slowly (0.25 s a chunk from the save of step 2 on): no single operation stalls, but the
    whole save passes checkpoint.save_timeout_s, and the run fails saying so."""
    slow = proxy(slow_on=b"step_00000002/")
    prefix = f"s3://{BUCKET}/slow"
    args = [*ARGS, "--train.steps", "4", "--checkpoint.dir", prefix, "--checkpoint.async_save", "false"]
    args += ["--checkpoint.save_timeout_s", "1"]
    run = run_trainer(args, tmp_path / "r1", env={"AWS_ENDPOINT_URL": slow.url}, timeout=90)
    assert slow.slow.is_set() and run.returncode == 1, run.stderr[-3000:]
    assert _errors(run) == [
        f"error: checkpoint: the save of step 2 failed: {prefix}/step_00000002: the save did not finish within 1 s "
        "(--checkpoint.save_timeout_s)"
    ], run.stderr[-3000:]


def test_a_frozen_endpoint_while_a_checkpoint_loads_fails_within_its_bound(proxy, tmp_path):
    """Frozen while the resumed checkpoint's shard is read (after its checksums were checked): bounded too."""
    prefix = f"s3://{BUCKET}/frozen-load"
    args = [*ARGS, "--checkpoint.dir", prefix, "--checkpoint.s3_timeout_s", "2"]
    assert_ok(run_trainer([*args, "--train.steps", "2"], tmp_path / "r1"))
    # the shard's first GET is the checksum's, the second the load's
    frozen = proxy(freeze_on=b"GET /ckpt/frozen-load/step_00000002/__0_0.distcp", occurrence=2)
    run = run_trainer([*args, "--train.steps", "4"], tmp_path / "r1", env={"AWS_ENDPOINT_URL": frozen.url}, timeout=90)
    assert frozen.frozen.is_set() and run.returncode == 1, run.stderr[-3000:]
    assert _errors(run) == [
        f"error: checkpoint: loading {prefix}/step_00000002 failed: {prefix}/step_00000002: no answer from the "
        "endpoint for 2 s (--checkpoint.s3_timeout_s)"
    ], run.stderr[-3000:]


def test_a_frozen_endpoint_at_start_is_refused_within_the_connect_bound(proxy, tmp_path):
    """Frozen before the run starts: the first contact gives up after checkpoint.s3_connect_timeout_s."""
    frozen = proxy()
    frozen.frozen.set()
    args = [*ARGS, "--train.steps", "2", "--checkpoint.dir", f"s3://{BUCKET}/cold"]
    run = run_trainer(
        [*args, "--checkpoint.s3_connect_timeout_s", "1"], tmp_path / "r1", env={"AWS_ENDPOINT_URL": frozen.url}
    )
    assert run.returncode == 1
    assert _errors(run) == [
        f"error: s3://{BUCKET}/cold: no answer from the endpoint for 1 s (--checkpoint.s3_connect_timeout_s)"
    ]


# ---------------------------------------------------------------------------------------------- credentials


@pytest.fixture
def authenticated(s3, moto_auth):
    """moto checking every request's signature from here on; an IAM user with a key and no policy."""
    iam = boto3.client("iam")
    iam.create_user(UserName="trainer")
    key = iam.create_access_key(UserName="trainer")["AccessKey"]
    moto_auth()
    return key


@pytest.mark.parametrize(
    "key_id, secret, said",
    [
        ("AKIAWRONGWRONGWRONG0", None, "InvalidAccessKeyId: the access key id is not known to S3"),
        (None, "not-the-secret", "SignatureDoesNotMatch: the secret access key does not match the access key id"),
    ],
    ids=["wrong-key-id", "wrong-secret"],
)
def test_rejected_credentials_are_said_with_where_they_came_from(authenticated, monkeypatch, key_id, secret, said):
    """A wrong access key id or secret: 'S3 rejected the credentials', naming where they came from (the
    environment), not a missing permission; a key that S3 accepts but no policy allows is said as a denial."""
    from fsdp_trainer.config import TrainerConfig
    from fsdp_trainer.errors import ConfigError
    from fsdp_trainer.storage import check_s3_locations

    key_id = key_id or authenticated["AccessKeyId"]
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret or authenticated["SecretAccessKey"])
    cfg = TrainerConfig.from_dict({"checkpoint": {"dir": f"s3://{BUCKET}/run"}})
    with pytest.raises(ConfigError) as e:
        check_s3_locations(cfg)
    endpoint = __import__("os").environ["AWS_ENDPOINT_URL"]
    assert str(e.value) == (
        f"--checkpoint.dir: cannot use s3://{BUCKET}/run ({endpoint}): S3 rejected the credentials ({said}); they "
        "came from the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN); access key id "
        f"{key_id[:4]}...{key_id[-4:]}; fix or replace them (or unset them to use another source)"
    )


def test_a_key_that_no_policy_allows_is_said_as_a_denial(authenticated, monkeypatch):
    """Credentials S3 accepts, for a user no policy allows: a denial by policy, said apart from rejected
    credentials."""
    from fsdp_trainer.config import TrainerConfig
    from fsdp_trainer.errors import ConfigError
    from fsdp_trainer.storage import check_s3_locations

    key_id = authenticated["AccessKeyId"]
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", authenticated["SecretAccessKey"])
    with pytest.raises(ConfigError) as e:
        check_s3_locations(TrainerConfig.from_dict({"checkpoint": {"dir": f"s3://{BUCKET}/run"}}))
    assert str(e.value).endswith(
        f"S3 accepted the credentials (from the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, "
        f"AWS_SESSION_TOKEN); access key id {key_id[:4]}...{key_id[-4:]}) but a policy denies access to bucket "
        f"{BUCKET}; allow s3:ListBucket on it and s3:GetObject, s3:PutObject, s3:DeleteObject on its objects"
    ), str(e.value)


def test_an_expired_session_token_is_said_with_the_profile_it_came_from(s3, expired_token_s3, tmp_path, monkeypatch):
    """A session token S3 says has expired (a stand-in endpoint giving S3's ExpiredToken answer), from a profile."""
    from fsdp_trainer.config import TrainerConfig
    from fsdp_trainer.errors import ConfigError
    from fsdp_trainer.storage import check_s3_locations

    credentials = tmp_path / "credentials"
    credentials.write_text(
        "[trainer]\naws_access_key_id = ASIAEXPIREDEXPIRED01\naws_secret_access_key = s\naws_session_token = t\n"
    )
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    monkeypatch.setenv("AWS_PROFILE", "trainer")
    monkeypatch.setenv("AWS_ENDPOINT_URL", expired_token_s3)
    with pytest.raises(ConfigError) as e:
        check_s3_locations(TrainerConfig.from_dict({"checkpoint": {"dir": f"s3://{BUCKET}/run"}}))
    assert str(e.value).endswith(
        "S3 rejected the credentials (ExpiredToken: the session token has expired); they came from the shared "
        "credentials file (AWS_SHARED_CREDENTIALS_FILE, ~/.aws/credentials), profile trainer; access key id "
        "ASIA...ED01; fix or replace them (or unset them to use another source)"
    ), str(e.value)


POD_IDENTITY = "the container credentials endpoint (EKS Pod Identity or ECS)"


def test_a_pods_role_credentials_are_said_with_the_role_they_came_from(s3, role_credentials, moto_auth, monkeypatch):
    """In the pod, the credentials come from the role of its Pod Identity association (the agent's endpoint, read by
    the CRT as by botocore). A role S3 accepts but no policy allows is a denial; a session token S3 does not take is
    rejected; both name the role's source. (The node's instance role is tested at the SDK's check: the CRT reads
    instance metadata at 169.254.169.254 only, which a stand-in on loopback cannot be.)"""
    from fsdp_trainer.config import TrainerConfig
    from fsdp_trainer.errors import ConfigError
    from fsdp_trainer.storage import check_s3_locations

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    for name, value in role_credentials.pod_identity_environment().items():
        monkeypatch.setenv(name, value)
    moto_auth()
    key_id = role_credentials.credentials["AccessKeyId"]
    cfg = TrainerConfig.from_dict({"checkpoint": {"dir": f"s3://{BUCKET}/run"}})
    with pytest.raises(ConfigError) as e:
        check_s3_locations(cfg)
    assert str(e.value).endswith(
        f"S3 accepted the credentials (from {POD_IDENTITY}; access key id {key_id[:4]}...{key_id[-4:]}) but a policy denies "
        f"access to bucket {BUCKET}; allow s3:ListBucket on it and s3:GetObject, s3:PutObject, s3:DeleteObject on its "
        "objects"
    ), str(e.value)

    role_credentials.credentials["Token"] = "not-the-session-token"
    with pytest.raises(ConfigError) as e:
        check_s3_locations(cfg)
    assert str(e.value).endswith(
        f"S3 rejected the credentials (InvalidToken: the session token is not valid); they came from {POD_IDENTITY}; "
        f"access key id {key_id[:4]}...{key_id[-4:]}; fix or replace them (or unset them to use another source)"
    ), str(e.value)
    assert ("GET", "/v1/credentials") in role_credentials.requests


# ---------------------------------------------------------------------------------------------- partial exports


def test_a_partial_export_is_refused_naming_the_prefix_and_what_is_missing(s3):
    """An export without its config, without weights, or missing a shard its index lists."""
    from fsdp_trainer.errors import ConfigError
    from fsdp_trainer.storage import check_s3_model

    uri = f"s3://{BUCKET}/export/part"
    s3.put_object(Bucket=BUCKET, Key="export/part/tokenizer.json", Body=b"{}")
    with pytest.raises(ConfigError) as e:
        check_s3_model(uri)
    assert (
        str(e.value)
        == f"--model.name_or_path: {uri} is not a whole model export: no config.json (found: tokenizer.json)"
    )
    s3.put_object(Bucket=BUCKET, Key="export/part/config.json", Body=b"{}")
    with pytest.raises(ConfigError) as e:
        check_s3_model(uri)
    assert str(e.value) == (
        f"--model.name_or_path: {uri} is not a whole model export: no *.safetensors weights "
        "(found: config.json, tokenizer.json)"
    )
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    s3.put_object(Bucket=BUCKET, Key="export/part/model.safetensors.index.json", Body=json.dumps(index).encode())
    s3.put_object(Bucket=BUCKET, Key="export/part/model-00001-of-00002.safetensors", Body=b"")
    with pytest.raises(ConfigError) as e:
        check_s3_model(uri)
    assert str(e.value) == (
        f"--model.name_or_path: {uri} is not a whole model export: model-00002-of-00002.safetensors (listed in "
        "model.safetensors.index.json) is missing"
    )


def test_a_checkpoint_that_fails_to_load_is_marked_and_not_loaded_again(s3, tmp_path):
    """A checkpoint saved without digests (an older trainer) whose shard is cut short: the load's failure names it,
    marks it BROKEN, and the next start resumes from the one before."""
    prefix = f"s3://{BUCKET}/legacy"
    args = [*ARGS, "--checkpoint.dir", prefix, "--checkpoint.async_save", "false"]
    assert_ok(run_trainer([*args, "--train.steps", "4"], tmp_path / "r1"))
    for key in _keys(s3, "legacy/step_00000004/digests/"):
        s3.delete_object(Bucket=BUCKET, Key=key)
    shard = "legacy/step_00000004/__0_0.distcp"
    data = s3.get_object(Bucket=BUCKET, Key=shard)["Body"].read()
    s3.put_object(Bucket=BUCKET, Key=shard, Body=data[: len(data) // 2])
    failed = run_trainer([*args, "--train.steps", "6"], tmp_path / "r1")
    assert failed.returncode == 1, failed.stderr[-3000:]
    (error,) = _errors(failed)
    assert error.startswith(f"error: checkpoint: loading {prefix}/step_00000004 failed (") and error.endswith(
        "); marked it BROKEN, so the next start or restart resumes from the previous complete checkpoint"
    ), error
    again = run_trainer([*args, "--train.steps", "6"], tmp_path / "r1")
    assert_ok(again)
    assert f"checkpoint: resumed from {prefix}/step_00000002 (step 2)" in again.stderr


def test_a_broken_checkpoint_named_by_resume_is_refused_not_replaced(tmp_path):
    """--checkpoint.resume naming a checkpoint whose shard changed: refused naming it and the object (a directory)."""
    out = tmp_path / "r1"
    args = [*ARGS, "--checkpoint.async_save", "false"]
    assert_ok(run_trainer([*args, "--train.steps", "4"], out))
    ckpt = out / "checkpoints" / "step_00000002"
    shard = ckpt / "__0_0.distcp"
    data = bytearray(shard.read_bytes())
    data[100] ^= 0x10
    shard.write_bytes(bytes(data))
    run = run_trainer([*args, "--train.steps", "6", "--checkpoint.resume", str(ckpt)], out)
    assert run.returncode == 2, run.stderr[-3000:]
    assert _errors(run) == [
        f"error: --checkpoint.resume: {ckpt} is broken: __0_0.distcp does not match the CRC32 recorded at save "
        "(its bytes changed); name another checkpoint"
    ]
    assert (ckpt / "BROKEN").is_file() and (out / "checkpoints" / "step_00000004" / "COMPLETE").is_file()

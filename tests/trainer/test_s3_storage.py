"""Checkpoint stores (``fsdp_trainer.storage``): S3 semantics through s3torchconnector against moto's server.

What the kill/resume runs (tests/reliability/test_s3_checkpoints.py) rely on, checked object by object: a
checkpoint counts only once its ``COMPLETE`` object exists, removal takes the marker first, the debris of an
interrupted save is found and deleted by prefix, and DCP's shards go through s3torchconnector's storage
writer/reader (CRT client, custom endpoint, path-style addressing) and torch's fsspec storage over s3fs.
"""

from __future__ import annotations

import boto3
import pytest
import torch
import torch.distributed.checkpoint as dcp

from fsdp_trainer.errors import ConfigError
from fsdp_trainer.storage import MARKER, LocalStore, S3Store, parse_s3, store_for

BUCKET = "ckpt-bucket"


@pytest.fixture
def bucket(aws):
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    return s3


def _keys(s3, prefix: str = "") -> list[str]:
    return sorted(o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", []))


def test_parse_s3_refuses_a_uri_without_a_bucket():
    assert parse_s3("s3://my-bucket/runs/a/") == ("my-bucket", "runs/a")
    for bad in ("s3://", "s3:///prefix", "s3://Bad_Bucket/x"):
        with pytest.raises(ConfigError, match=r"^--checkpoint.dir: .* names no valid bucket; expected s3://BUCKET/"):
            parse_s3(bad)
    assert isinstance(store_for("s3://b-1/x"), S3Store) and isinstance(store_for("/tmp/x"), LocalStore)


@pytest.mark.parametrize("client", ["s3torchconnector", "fsspec"])
def test_s3_store_save_commit_list_prune(bucket, client):
    if client == "fsspec":
        # not in the dev group: s3fs's aiobotocore pins botocore below the boto3 the SDK installs
        pytest.importorskip("s3fs", reason="the fsspec fallback needs s3fs (pip install 'fsdp-trainer[s3fs]')")
    store = S3Store(f"s3://{BUCKET}/run/checkpoints", client)
    state = {"w": torch.arange(12, dtype=torch.float32).reshape(3, 4), "b": torch.ones(5)}
    for step in (2, 4):
        store.prepare(step)
        ckpt = store.staging_id(step)
        assert ckpt == f"s3://{BUCKET}/run/checkpoints/step_{step:08d}"
        dcp.save({k: v * step for k, v in state.items()}, storage_writer=store.writer(ckpt))
        store.write(store.join(ckpt, "train_state.json"), b'{"step": %d}' % step)
        assert not store.is_complete(ckpt), "no marker before commit"
        assert [c.complete for c in store.listing()][-1] is False
        assert store.commit(step) == ckpt and store.is_complete(ckpt)
    assert [(c.step, c.complete) for c in store.listing()] == [(2, True), (4, True)]
    assert ".metadata" in " ".join(_keys(bucket, "run/checkpoints/step_00000004/"))

    loaded = {k: torch.zeros_like(v) for k, v in state.items()}
    dcp.load(loaded, storage_reader=store.reader(store.final_id(4)))
    torch.testing.assert_close(loaded["w"], state["w"] * 4)
    assert store.read(store.join(store.final_id(2), "train_state.json")) == b'{"step": 2}'
    assert store.read(store.join(store.final_id(2), "missing.json")) is None

    # an interrupted save: shards and metadata, no marker
    store.prepare(6)
    dcp.save(state, storage_writer=store.writer(store.staging_id(6)))
    assert [c.step for c in store.complete()] == [2, 4]
    assert store.clean_partial() == [store.final_id(6)]
    assert _keys(bucket, "run/checkpoints/step_00000006/") == []

    store.remove(store.final_id(2))
    assert [c.step for c in store.listing()] == [4]
    assert _keys(bucket, "run/checkpoints/step_00000002/") == []


def test_s3_store_removes_the_marker_first(bucket):
    """A deletion cut short must not leave a complete-looking checkpoint: the marker goes before the shards."""
    store = S3Store(f"s3://{BUCKET}/c")
    store.write(store.join(store.final_id(1), "__0_0.distcp"), b"x")
    store.write(store.join(store.final_id(1), MARKER), b"1\n")
    deleted: list[str] = []
    client = store._s3()
    original = client.delete_object

    def record(bucket_name, key):
        deleted.append(key)
        return original(bucket_name, key)

    client.delete_object = record
    store.remove(store.final_id(1))
    assert deleted[0] == f"c/step_00000001/{MARKER}"
    assert _keys(bucket) == []


def test_the_trainer_refuses_an_unusable_s3_location_in_one_line(bucket, monkeypatch):
    """Before the process group starts (train.py): a missing bucket, an endpoint nothing answers on."""
    import socket

    from fsdp_trainer.config import TrainerConfig
    from fsdp_trainer.storage import check_s3_locations

    check_s3_locations(TrainerConfig.from_dict({"checkpoint": {"dir": f"s3://{BUCKET}/run"}}))
    with pytest.raises(ConfigError, match=r"^--checkpoint.dir: cannot use s3://nope/run .*bucket does not exist"):
        check_s3_locations(TrainerConfig.from_dict({"checkpoint": {"dir": "s3://nope/run"}}))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{closed}")
    export = TrainerConfig.from_dict({"checkpoint": {"export_hf": f"s3://{BUCKET}/hf"}})
    with pytest.raises(ConfigError, match=r"^--checkpoint.export_hf: cannot use .*connection refused") as e:
        check_s3_locations(export)
    assert "\n" not in str(e.value)

"""State in S3, locked with DynamoDB: terraform's own S3 backend (built into the binary, no provider) against
moto, through the backend's code path: the preflight checks, up, a lock held in DynamoDB by another
terraform, status and down from a machine without the working directory."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import boto3
import pytest

from fsdp_sdk.config import Config
from fsdp_sdk.plugins import Plugins
from fsdp_sdk_terraform.backend import TerraformBackend
from fsdp_sdk_terraform.preflight import state_backend_checks
from fsdp_sdk_terraform.tool import StateLockedError
from fsdp_sdk_terraform.workdir import Workdir

from .conftest import eks_clusters, make_config, resolve

BUCKET, TABLE, KEY = "team-tf-state", "terraform-locks", "fsdp-sdk/fsdp-sdk/terraform.tfstate"


def _s3_config(plugins: Plugins, tmp_path: Path, **more: str) -> Config:
    return make_config(
        plugins,
        tmp_path / "state",
        **{
            "terraform.state_bucket": BUCKET,
            "terraform.lock_table": TABLE,
            "terraform.s3_use_path_style": "true",  # moto serves buckets in the path
            "terraform.lock_timeout_s": 2,
            **more,
        },
    )


def _create(bucket: bool = True, table: bool = True, key: str = "LockID") -> None:
    if bucket:
        boto3.client("s3", region_name="us-west-2").create_bucket(
            Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": "us-west-2"}
        )
    if table:
        boto3.client("dynamodb", region_name="us-west-2").create_table(
            TableName=TABLE,
            KeySchema=[{"AttributeName": key, "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": key, "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )


def _remote_state() -> dict:
    body = boto3.client("s3", region_name="us-west-2").get_object(Bucket=BUCKET, Key=KEY)["Body"].read()
    return json.loads(body)


def test_the_preflight_checks_find_the_bucket_and_the_lock_table(aws: str, plugins: Plugins, tmp_path: Path) -> None:
    config = _s3_config(plugins, tmp_path)
    (missing,) = state_backend_checks(config)
    assert not missing.ok and missing.line() == (
        f"[error] terraform-state: S3 bucket {BUCKET} does not exist in us-west-2; create it "
        f"('aws s3 mb s3://{BUCKET} --region us-west-2') or fix terraform.state_bucket"
    )
    _create(table=False)
    (no_table,) = state_backend_checks(config)
    assert not no_table.ok and no_table.message == f"DynamoDB table {TABLE} does not exist in us-west-2"
    _create(bucket=False, key="id")
    (wrong_key,) = state_backend_checks(config)
    assert wrong_key.message == f"DynamoDB table {TABLE} has the partition key id, not LockID"
    local = make_config(plugins, tmp_path / "state")
    assert state_backend_checks(local) == []


def test_up_status_lock_and_down_with_the_state_in_s3(
    terraform_env: str, plugins: Plugins, local_configuration: Path, tmp_path: Path
) -> None:
    _create()
    config = _s3_config(plugins, tmp_path, **{"terraform.configuration": str(local_configuration)})
    (ready,) = state_backend_checks(config)
    assert ready.ok and ready.message == f"state in s3://{BUCKET}, locked with DynamoDB table {TABLE}"
    backend = TerraformBackend()
    lines: list[str] = []
    status = backend.apply(config, backend.plan(resolve(config)), progress=lines.append)
    assert status.state == "ready" and status.nodes == 2
    workdir = Workdir.of(config).path
    assert not (workdir / "terraform.tfstate").exists(), "the state lives in S3 only"
    assert sorted(r["name"] for r in _remote_state()["resources"]) == ["cluster", "gpu_nodes", "system_nodes"]
    assert status.details["state"] == (f"s3://{BUCKET}/{KEY} (us-west-2, locked with DynamoDB table {TABLE})")

    # another terraform holds the lock in DynamoDB
    console = subprocess.Popen(
        ["terraform", "console"],
        cwd=workdir,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        table = boto3.client("dynamodb", region_name="us-west-2")
        deadline = time.monotonic() + 30
        while not any("Info" in item for item in table.scan(TableName=TABLE)["Items"]):
            assert console.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        (item,) = [i for i in table.scan(TableName=TABLE)["Items"] if "Info" in i]
        holder = json.loads(item["Info"]["S"])
        with pytest.raises(StateLockedError) as locked:
            backend.scale(config, 1)
        assert f"the state is locked by {holder['Who']}" in str(locked.value)
        assert f"force-unlock {holder['ID']}'" in str(locked.value)
    finally:
        assert console.stdin is not None
        console.stdin.close()
        console.wait(timeout=30)

    # from a machine without the working directory: status asks EKS, down destroys what the S3 state records
    Workdir.of(config).remove()
    assert backend.status(config).state == "ready"
    assert backend.down(config).state == "absent"
    assert _remote_state()["resources"] == [] and eks_clusters() == []
    assert backend.status(config).state == "absent"

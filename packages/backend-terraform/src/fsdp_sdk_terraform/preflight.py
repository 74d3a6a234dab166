"""The Terraform backend's preflight checks: the terraform binary, AWS, and the S3 state backend (reads only)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fsdp_sdk.errors import ConfigError, FsdpSdkError
from fsdp_sdk.preflight import PreflightResult

if TYPE_CHECKING:
    from fsdp_sdk.config import Config
    from fsdp_sdk.instance_types import InstanceType

__all__ = ["state_backend_checks", "terraform_binary_check", "terraform_preflight"]


def terraform_binary_check(config: Config) -> PreflightResult:
    """``terraform``: the binary is installed, runs, and is 1.5 or newer (or the exact ``terraform.version``)."""
    from fsdp_sdk_terraform.tool import TerraformTool

    settings = config.section("terraform")
    try:
        tf = TerraformTool(config.cluster.state_dir, binary=settings.binary, lock_timeout_s=settings.lock_timeout_s)
        version = tf.check_version(settings.version)
    except ConfigError as error:
        problem = error.problem if error.field == "terraform" else f"{error.field} {error.problem}"
        return PreflightResult("terraform", False, problem, error.fix)
    except FsdpSdkError as error:
        return PreflightResult("terraform", False, str(error))
    return PreflightResult("terraform", True, f"Terraform {version} at {tf.binary}")


def state_backend_checks(config: Config, clients: dict[str, Any] | None = None) -> list[PreflightResult]:
    """``terraform-state``: the S3 bucket (and the DynamoDB lock table) exist; nothing for local state."""
    from fsdp_sdk.aws.session import aws_client, aws_errors, error_code

    settings = config.section("terraform")
    if not settings.remote_state:
        return []
    region = settings.state_region or config.cluster.region

    def client(service: str) -> Any:
        return (clients or {}).get(service) or aws_client(service, region)

    bucket = settings.state_bucket
    try:
        with aws_errors("s3", f"find the state bucket {bucket}"):
            try:
                client("s3").head_bucket(Bucket=bucket)
            except Exception as error:
                if error_code(error) not in ("404", "NoSuchBucket", "NotFound"):
                    raise
                return [
                    PreflightResult(
                        "terraform-state",
                        False,
                        f"S3 bucket {bucket} does not exist in {region}",
                        f"create it ('aws s3 mb s3://{bucket} --region {region}') or fix terraform.state_bucket",
                    )
                ]
        message = f"state in s3://{bucket}"
        if settings.lock_table:
            with aws_errors("dynamodb", f"find the lock table {settings.lock_table}"):
                try:
                    table = client("dynamodb").describe_table(TableName=settings.lock_table)["Table"]
                except Exception as error:
                    if error_code(error) != "ResourceNotFoundException":
                        raise
                    return [
                        PreflightResult(
                            "terraform-state",
                            False,
                            f"DynamoDB table {settings.lock_table} does not exist in {region}",
                            f"create it with the string partition key LockID ('aws dynamodb create-table --table-name "
                            f"{settings.lock_table} --attribute-definitions AttributeName=LockID,AttributeType=S "
                            "--key-schema AttributeName=LockID,KeyType=HASH --billing-mode PAY_PER_REQUEST')",
                        )
                    ]
            keys = [k.get("AttributeName") for k in table.get("KeySchema") or [] if k.get("KeyType") == "HASH"]
            if keys != ["LockID"]:
                return [
                    PreflightResult(
                        "terraform-state",
                        False,
                        f"DynamoDB table {settings.lock_table} has the partition key {keys[0] if keys else 'none'}, not LockID",
                        "use a table whose partition key is the string LockID",
                    )
                ]
            message += f", locked with DynamoDB table {settings.lock_table}"
    except FsdpSdkError as error:
        return [PreflightResult("terraform-state", False, str(error))]
    return [PreflightResult("terraform-state", True, message)]


def terraform_preflight(config: Config, instance: InstanceType) -> list[PreflightResult]:
    """Every check of the Terraform backend, in order: binary, kubectl/git/aws, AWS (credentials, zones, quota,
    reservation), state.

    :param config: the resolved configuration.
    :param instance: its GPU instance type, as resolving found it (``resolved.instance``).
    """
    from fsdp_sdk.aws.preflight import aws_preflight, cluster_tool_checks

    results = [terraform_binary_check(config), *cluster_tool_checks()]
    aws = aws_preflight(config, instance)
    results += aws
    if all(r.ok for r in aws if r.check == "aws-credentials"):
        results += state_backend_checks(config)
    return results

"""The ``terraform`` settings section: the terraform binary, the configuration, where the state lives.

Read like the core's sections: ``terraform:`` in the YAML file, ``FSDP_SDK_TERRAFORM__<FIELD>`` in
``.env`` or the environment, ``--set terraform.<field>=VALUE``; shown by ``fsdp-sdk config show``.
Read it with ``config.section("terraform")``.

The state is local by default (``<cluster.state_dir>/terraform/<cluster>/terraform.tfstate``); set
``state_bucket`` to keep it in S3, with a DynamoDB table (``lock_table``) or S3's own lock file
(``s3_lockfile``, Terraform 1.10 or newer) to lock it::

    terraform:
      state_bucket: my-tf-state
      lock_table: terraform-locks
      lock_timeout_s: 120
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from fsdp_sdk.errors import ConfigError

if TYPE_CHECKING:
    from fsdp_sdk.config import Config

__all__ = ["MIN_TERRAFORM_VERSION", "SECTION", "TerraformSettings"]

#: The section's name.
SECTION = "terraform"
#: The oldest Terraform the shipped configuration supports (its ``required_version``).
MIN_TERRAFORM_VERSION = (1, 5, 0)

_VERSION = re.compile(r"^\d+\.\d+\.\d+$")
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_TABLE = re.compile(r"^[a-zA-Z0-9_.-]{3,255}$")
_REGION = re.compile(r"^[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-\d+$")


def _check(predicate: object, problem: str, fix: str) -> dict[str, object]:
    return {"check": (predicate, problem, fix)}


@dataclass
class TerraformSettings:
    """Settings of the Terraform backend (``fsdp-sdk up --backend terraform``)."""

    binary: str = "terraform"
    """The terraform executable: a name looked up on PATH, or a path."""
    version: str | None = field(
        default=None,
        metadata=_check(
            lambda v: bool(_VERSION.match(v)), "is not a Terraform version", "use a version like 1.11.4, or unset it"
        ),
    )
    """The exact Terraform version the binary must be (e.g. 1.11.4); unset: any 1.5 or newer."""
    configuration: Path | None = None
    """Directory of the Terraform configuration to apply; unset: the EKS configuration shipped with the package.
    A configuration of your own takes the same variables and gives the same outputs, and declares no backend
    (the SDK writes ``backend.tf.json``)."""
    state_bucket: str | None = field(
        default=None,
        metadata=_check(
            lambda v: bool(_BUCKET.match(v)),
            "is not an S3 bucket name",
            "use 3-63 lower-case letters, digits, '.', '-'",
        ),
    )
    """S3 bucket for the state (an S3 backend); unset: local state in the cluster's working directory."""
    state_key: str | None = None
    """Key of the state object in the bucket; default ``fsdp-sdk/<cluster>/terraform.tfstate``."""
    state_region: str | None = field(
        default=None,
        metadata=_check(lambda v: bool(_REGION.match(v)), "is not an AWS region name", "use a region like us-west-2"),
    )
    """Region of the state bucket; default ``cluster.region``."""
    lock_table: str | None = field(
        default=None,
        metadata=_check(
            lambda v: bool(_TABLE.match(v)), "is not a DynamoDB table name", "use 3-255 letters, digits, '_', '.', '-'"
        ),
    )
    """DynamoDB table that locks the S3 state (its partition key is the string ``LockID``)."""
    s3_lockfile: bool = False
    """Lock the S3 state with a lock file next to it (Terraform 1.10 or newer) instead of, or besides, DynamoDB."""
    s3_use_path_style: bool = False
    """Address the state bucket in the URL path (S3-compatible stores; AWS S3 itself needs no change)."""
    lock_timeout_s: int = field(
        default=60,
        metadata=_check(lambda v: 0 <= v <= 3600, "is not between 0 and 3600", "set it to seconds, like 60"),
    )
    """How long a command waits for a state lock another run holds before it fails (``-lock-timeout``)."""
    parallelism: int = field(
        default=10,
        metadata=_check(lambda v: 1 <= v <= 256, "is not between 1 and 256", "set it to a number like 10"),
    )
    """Resources Terraform creates or deletes at once (``-parallelism``)."""
    plugin_cache_dir: Path | None = None
    """Where downloaded providers are kept and shared by every cluster; default
    ``$TF_PLUGIN_CACHE_DIR``, else ``<cluster.state_dir>/terraform/plugin-cache``."""
    vpc_cidr: str = "10.0.0.0/16"
    """IPv4 range of the cluster's VPC (/20 or larger): a private and a public subnet per zone."""
    endpoint_public_access: bool = True
    """Whether the Kubernetes API server is reachable from the internet (from ``public_access_cidrs``)."""
    public_access_cidrs: list[str] = field(default_factory=lambda: ["0.0.0.0/0"])
    """IPv4 ranges allowed to reach the public API server endpoint."""
    gpu_ami_type: str | None = None
    """EKS AMI type of the GPU nodes; default: ``AL2023_x86_64_NEURON`` for Neuron devices, else
    ``AL2023_x86_64_NVIDIA``."""
    device_plugins: bool = True
    """Apply the NVIDIA and EFA device plugins (DaemonSets in kube-system) once the cluster is up."""
    nvidia_device_plugin_image: str | None = None
    """Image of the NVIDIA device plugin DaemonSet; default: the pinned one (``fsdp-sdk versions``)."""
    efa_device_plugin_image: str | None = None
    """Image of the EFA device plugin DaemonSet; default: the pinned one, from the EKS registry of ``cluster.region``."""
    tags: dict[str, str] = field(default_factory=dict)
    """Tags added to every AWS resource (``KEY=VALUE,...``)."""

    @property
    def gpu_ami_family(self) -> str:
        """The GPU nodes' AMI family (``Bottlerocket`` or ``AmazonLinux2023``), for the core's EKS layer."""
        return "Bottlerocket" if (self.gpu_ami_type or "").startswith("BOTTLEROCKET") else "AmazonLinux2023"

    @property
    def remote_state(self) -> bool:
        """Whether the state lives in S3."""
        return self.state_bucket is not None

    def validate(self, config: Config) -> None:
        """Refuse contradictions between fields (called when the configuration is resolved).

        :raises ConfigError: a lock or key without a bucket, a VPC range that is not one, a bad CIDR.
        """
        for name in ("state_key", "state_region", "lock_table"):
            if getattr(self, name) is not None and not self.remote_state:
                raise ConfigError(
                    f"terraform.{name}",
                    "is set but terraform.state_bucket is not",
                    "set terraform.state_bucket to keep the state in S3, or unset it",
                )
        for name in ("s3_lockfile", "s3_use_path_style"):
            if getattr(self, name) and not self.remote_state:
                raise ConfigError(
                    f"terraform.{name}",
                    "is on but terraform.state_bucket is not set",
                    "set terraform.state_bucket, or turn it off",
                )
        try:
            network = ipaddress.IPv4Network(self.vpc_cidr)
        except ValueError:
            raise ConfigError(
                "terraform.vpc_cidr", f"{self.vpc_cidr!r} is not an IPv4 CIDR block", "use a range like 10.0.0.0/16"
            ) from None
        if network.prefixlen > 20:
            raise ConfigError(
                "terraform.vpc_cidr",
                f"{self.vpc_cidr} is smaller than /20",
                "use a /20 or larger range like 10.0.0.0/16 (each zone gets a private /23 at least)",
            )
        if not self.public_access_cidrs:
            raise ConfigError(
                "terraform.public_access_cidrs", "is empty", "list the ranges allowed to reach the API, or 0.0.0.0/0"
            )
        for cidr in self.public_access_cidrs:
            try:
                ipaddress.IPv4Network(cidr)
            except ValueError:
                raise ConfigError(
                    "terraform.public_access_cidrs",
                    f"{cidr!r} is not an IPv4 CIDR block",
                    "use ranges like 203.0.113.0/24",
                ) from None
        if self.configuration is not None and not Path(self.configuration).is_dir():
            raise ConfigError(
                "terraform.configuration",
                f"{str(self.configuration)!r} is not a directory",
                "point it at a directory of .tf files, or unset it to use the shipped EKS configuration",
            )
